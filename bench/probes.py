"""Benchmark: what the labelled probes (``analyze --labels``) cost beside the rest of the analysis.

A paper-shaped synthetic sweep (N = 1024 items, 13 layers of width 768; ``--video`` × 3 frame budgets
and ``--text`` × 3 caption budgets), its items given a 10-class field, is analysed with the CLI's
defaults (200 resamples, the shuffled null) three times from fresh copies, each timed per study:

- without labels: the analysis a probe adds to;
- ``--labels cls --probes knn``: the k-NN probe, which reads the k-NN lists the grids prepared (no
  second search). Target: its study ≤ 5% of the whole analysis;
- ``--labels cls --probes knn,kmeans`` (the default probes): k-means' share.

The linear probe (``--probes linear``: a logistic regression per fold and layer) is timed on one run's
13 layers and printed per run beside the analysis's time per probed run: it is asked for, not default.

Usage: python bench/probes.py [--items 1024] [--layers 13] [--dim 768] [--video 2] [--text 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def build(path, args) -> None:
    import duckdb
    import numpy as np

    from precompute.synthetic.store import write_sweep

    write_sweep(path, video=[f"video{i}" for i in range(args.video)], text=[f"text{i}" for i in range(args.text)],
                frames=(1, 2, 4), captions=(1, 2, 4), n_items=args.items, n_layers=args.layers, dim=args.dim)
    cls = np.random.default_rng(1).integers(0, 10, args.items)
    con = duckdb.connect(str(path))
    try:
        con.executemany("UPDATE items SET metadata = ? WHERE idx = ?",
                        [(json.dumps({"cls": f"c{c}"}), i) for i, c in enumerate(cls)])
    finally:
        con.close()


def timed(study: str) -> dict:
    """Wrap ``analysis.studies.<study>.run`` so its seconds add up in the returned dict."""
    import importlib

    mod = importlib.import_module(f"analysis.studies.{study}")
    spent = {"seconds": 0.0}
    fn = mod.run

    def wrapped(*a, **kw):
        t0 = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            spent["seconds"] += time.perf_counter() - t0

    mod.run = wrapped
    return spent


def analyze(src, tmp, name, **kw) -> tuple[float, float, int]:
    """``(analysis seconds, probes study seconds, probed runs)`` of a fresh copy of ``src``."""
    from analysis.storage import results as R
    from analysis.storage.store import connect
    from analysis.studies import analyze_store

    path = Path(tmp) / f"{name}.duckdb"
    shutil.copy(src, path)
    spent = timed("probes")
    t0 = time.perf_counter()
    analyze_store(path, maps=0, jobs=1, log=lambda m: None, **kw)
    total = time.perf_counter() - t0
    con = connect(path, read_only=True)
    try:
        runs = len({r["payload"]["run_id"] for r in R.read_studies(con, study="probes")})
    finally:
        con.close()
    return total, spent["seconds"], runs


def linear_per_run(src) -> float:
    """Seconds of the linear probe over one run's layers (the first text run)."""
    import numpy as np

    from analysis.methods.probes import label_codes, linear_probe
    from analysis.storage.store import connect, load_embeddings

    con = connect(src, read_only=True)
    try:
        md = [json.loads(m)["cls"] for (m,) in con.execute("SELECT metadata FROM items ORDER BY idx").fetchall()]
    finally:
        con.close()
    y, _ = label_codes(md, "cls")
    E = load_embeddings(src, model="text0", dataset="synthetic", n_captions=4)
    t0 = time.perf_counter()
    for layer in range(E.shape[0]):
        linear_probe(np.asarray(E[layer]), y)
    return time.perf_counter() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=13)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--video", type=int, default=2)
    ap.add_argument("--text", type=int, default=2)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "sweep.duckdb"
        build(src, args)
        print(f"sweep: {args.video} video × 3 frame budgets, {args.text} text × 3 caption budgets, N = {args.items}, "
              f"{args.layers} layers, d = {args.dim}; load {os.getloadavg()[0]:.2f}", flush=True)
        base, _, _ = analyze(src, tmp, "plain")
        knn, knn_s, runs = analyze(src, tmp, "knn", labels=("cls",), probes=("knn",))
        both, both_s, _ = analyze(src, tmp, "both", labels=("cls",), probes=("knn", "kmeans"))
        lin = linear_per_run(src)
        print(f"analysis without labels          {base:8.1f} s")
        print(f"with --probes knn                {knn:8.1f} s   probes study {knn_s:6.2f} s = "
              f"{knn_s / knn:6.1%} of the analysis ({runs} runs probed; target <= 5%)")
        print(f"with --probes knn,kmeans         {both:8.1f} s   probes study {both_s:6.2f} s = {both_s / both:6.1%}")
        print(f"linear probe, one run's {args.layers} layers {lin:8.1f} s   (the analysis: {both / runs:.1f} s per "
              f"probed run; --probes linear adds about {lin * runs:.0f} s here)")
        print(f"load at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
