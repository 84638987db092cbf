"""Benchmark: `analyze` end to end on a synthetic store with N = 100,000 items (issue #32).

Writes a store of ``--video`` video and ``--text`` text models (one budget each: one run per
model) of ``--layers`` layers of width ``--dim`` for ``--items`` items, the numbers of
:func:`precompute.synthetic.store.write_sweep` (a latent shared by every model, a per-model
projection, noise peaking at the first and last layers) written in item batches so the writer
never holds a whole run. Then runs ``analyze_store`` on it (bootstrap off, maps off, the default
metrics mutual_knn / cka / cknna and the default shuffled null unless ``--null-perms``) and prints:

- the time of each study as it finishes, with an ETA for the grid pairs left (tqdm bars with
  their own ETA with ``--progress``);
- the whole analysis' wall time and its peak memory: the process's peak resident set
  (``resource.getrusage`` ``ru_maxrss``, which sees DuckDB's and faiss's allocations too) and the
  peak of numpy's allocations (``tracemalloc``, with ``--tracemalloc``: it slows numpy down);
- the memory budget formula below, evaluated for this shape, beside the measured peak;
- CKA and CKNNA by the routes analyze takes at large N (CKA's float32 feature blocks above
  N = 8192; CKNNA on the ``--knn`` lists) against their exact float64 forms on a seeded subsample
  of the store's items (:func:`large_n_check`; ``--no-check`` skips it).

Memory budget of ``analyze`` at large N (float32 runs of ``L`` layers, ``N`` items, width ``d``;
``R = 4 L N d`` bytes a run, ``M`` runs): the engine's embedding cache holds runs up to its budget
(``EMB_BUDGET`` = 2 GiB, and always the last run, whatever its size), the pair being scored may
need one run more, and a run being read from DuckDB passes through an arrow column before its
numpy copy (about ``R``); on top, a float32 unit-row copy of the layer being searched (``4 N d``),
the prepared states (k-NN lists, cosines, reciprocal slots: ``24 L N k`` bytes a run, two runs;
and feature-space CKA's float64 ``d × d`` accumulators, one tile of ``T² = 64`` pairs at a time above
N = 8192: ``8 T² d²``) and a base of about 1 GiB (Python, numpy,
numba, faiss, DuckDB)::

    peak ≈ min(M R, max(EMB_BUDGET, R)) + 2 R + 4 N d + 2 · 24 L N k + 8 T² d² + 1 GiB

N = 100,000, L = 13, d = 768, k = 10, M = 4: R = 4.0 GB, peak ≈ 13.3 GiB (14.3 GB), inside 24 GB with
room to spare (the embedding cache does not grow with M once one run exceeds its budget). Measured
at N = 100,000, M = 2 (7330487): 16.66 GiB, so the formula misses about 3.4 GiB (the profiles'
float64 layer copies among them); read it as a lower bound until its terms are refined. The
bench prints the formula's figure beside the measured peak so its constants can be checked at
small N (where the caches' 2 GiB budgets, not R, set it).

Time at large N is the exact k-NN search: ``L`` searches a run, each ``2 N² d`` float32 flops
(faiss's exhaustive search when installed, the same proof after it), twice per layer (the grids'
cosine lists and LID's Euclidean distances, both exact). The rest is linear in N: CKA ``2 N d²``
float32 flops a layer pair (float64 sums of 512-row blocks), RankMe one ``d × d`` Gram a layer,
uniformity a fixed sample above N = 16,384 (exact below). ``--knn ann`` uses the
approximate search instead (recall measured and stored per layer).

Usage: python bench/large_n.py [--items 100000] [--video 2] [--text 2] [--layers 13] [--dim 768]
       [--knn exact|ann] [--null-perms N] [--progress] [--tracemalloc] [--keep DIR] [--no-check]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

#: items written per store transaction (bounds the writer's memory: ``4 L B d`` bytes a batch)
WRITE_BATCH = 8192


def write_store(path, *, n_items: int, video: int, text: int, layers: int, dim: int, seed: int = 0,
                log=print) -> list[str]:
    """A done run per model of :func:`precompute.synthetic.store.write_sweep`'s shape (budget 1),
    written ``WRITE_BATCH`` items at a time; returns the run ids."""
    from precompute.inputs.manifest import Item, Manifest
    from precompute.adapters.model_info import ModelInfo
    from precompute.batch.writer import StoreWriter

    latent_rng = np.random.default_rng(seed)
    latent = latent_rng.normal(size=(n_items, 8)).astype(np.float32)
    depth = np.abs(np.linspace(-1, 1, layers))
    w = StoreWriter(path)
    runs = []
    try:
        items = [Item(i, f"item{i}", f"/nonexistent/v{i}.mp4", [f"caption {i}"]) for i in range(n_items)]
        w.put_dataset("synthetic", Manifest("synthetic.jsonl", items))
        names = [(f"video{i}", "video") for i in range(video)] + [(f"text{i}", "text") for i in range(text)]
        for name, modality in names:
            t0 = time.perf_counter()
            rng = np.random.default_rng([seed, *name.encode()])
            w.put_model(name, ModelInfo(name, modality, modality, "mean", layers, dim, 1000, None, "r", True, {}))
            proj = rng.normal(size=(8, dim)).astype(np.float32)
            run = f"{name}-1"
            w.start_run(run, model=name, dataset="synthetic", modality=modality,
                        n_frames=1 if modality == "video" else None, n_captions=None if modality == "video" else 1,
                        variant="original", image_mode=None, pooling="mean", dtype="float32", device="cpu",
                        n_items=n_items, n_layers=layers, dim=dim, config={})
            for start in range(0, n_items, WRITE_BATCH):
                stop = min(n_items, start + WRITE_BATCH)
                base = latent[start:stop] @ proj
                X = np.stack([base + np.float32(0.5 + depth[l] + 1.0)
                              * rng.standard_normal(size=(stop - start, dim), dtype=np.float32)
                              for l in range(layers)])
                w.write_batch(run, start, X, n_done=stop, n_items=n_items)
            runs.append(run)
            log(f"  wrote {run}: {layers} x {n_items} x {dim} in {time.perf_counter() - t0:.1f} s")
    finally:
        w.close()
    return runs


def budget_bytes(n: int, layers: int, dim: int, runs: int, k: int = 10) -> float:
    """The module docstring's memory formula, in bytes (the 1 GiB base included)."""
    from analysis.metrics.kernel import FEATURE32_TILE
    from analysis.studies.engine import EMB_BUDGET

    run = 4 * layers * n * dim
    return (min(runs * run, max(EMB_BUDGET, run)) + 2 * run + 4 * n * dim
            + 2 * 24 * layers * n * k + 8 * FEATURE32_TILE**2 * dim * dim + 2**30)


def peak_rss_bytes() -> int:
    """Peak resident set of this process (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def study_clock(start: float, log=print):
    """Wrap each study's ``run`` to print its time and the elapsed total as it finishes."""
    import importlib

    from bench.analyze import STUDIES

    for name in STUDIES:
        mod = importlib.import_module(f"analysis.studies.{name}")
        fn = mod.run

        def wrapped(*a, _fn=fn, _name=name, **kw):
            t0 = time.perf_counter()
            log(f"  study {_name} ...")
            try:
                return _fn(*a, **kw)
            finally:
                now = time.perf_counter()
                log(f"  study {_name}: {now - t0:.1f} s (elapsed {now - start:.1f} s, "
                    f"peak RSS {peak_rss_bytes() / 2**30:.2f} GiB)")

        mod.run = wrapped


def search_clock(n_layers_total: int, log=print):
    """Print each k-NN layer search with an ETA for the ones left (the dominant cost at large N)."""
    from analysis.metrics import knn

    done = {"n": 0, "seconds": 0.0}
    for name in ("knn_search", "ann_search"):
        fn = getattr(knn, name)

        def wrapped(X, *a, _fn=fn, **kw):
            t0 = time.perf_counter()
            out = _fn(X, *a, **kw)
            done["n"] += 1
            done["seconds"] += time.perf_counter() - t0
            left = max(0, n_layers_total - done["n"])
            if X.shape[0] >= 4096:  # small layers: not worth a line
                log(f"    k-NN layer search {done['n']}/{n_layers_total}: {time.perf_counter() - t0:.1f} s; "
                    f"ETA for the other layers {left * done['seconds'] / done['n']:.0f} s")
            return out

        setattr(knn, name, wrapped)


#: subsample rows of the large-N forms' check: CKA above ``FEATURE32_CKA_MIN_N`` (its float32 block
#: route, as analyze ran it at N) and CKNNA small enough for the dense N x N reference
CHECK_CKA_ROWS = 16384
CHECK_CKNNA_ROWS = 4096


def large_n_check(store, runs, *, layers: int, knn: str, seed: int = 0, log=print) -> dict:
    """CKA and CKNNA by the routes ``analyze`` takes at large N, against their exact forms, on a
    seeded subsample of items of the middle layer of the first and last run.

    CKA: ``analysis.metrics.cka`` on ``CHECK_CKA_ROWS`` rows (above ``FEATURE32_CKA_MIN_N``: float32
    blocks summed in float64) against biased linear CKA in float64, ``||Xcᵀ Yc||²_F /
    (||Xcᵀ Xc||_F ||Ycᵀ Yc||_F)`` (= the Gram form ``tr(K H L H)`` normalised, by ``tr(AᵀB) = tr(BAᵀ)``).
    CKNNA: ``analysis.metrics.cknna`` with ``knn`` (faiss candidates + float64 proof, or the
    approximate search) on ``CHECK_CKNNA_ROWS`` rows against ``tests/reference.ref_cknna``'s dense
    ``N x N`` matrices (float64, literal masks and unbiased HSIC of the paper's code).
    """
    from analysis.metrics import cka, cknna
    from analysis.metrics.kernel import FEATURE32_CKA_MIN_N
    from analysis.storage.store import connect, load_layer
    from tests.reference import ref_cknna

    con = connect(store)
    try:
        X = load_layer(con, runs[0], layers // 2)
        Y = load_layer(con, runs[-1], layers // 2)
    finally:
        con.close()
    n = X.shape[0]
    rng = np.random.default_rng(seed)
    out = {}
    m = min(n, CHECK_CKA_ROWS)
    rows = np.sort(rng.choice(n, size=m, replace=False))
    Xs, Ys = X[rows], Y[rows]
    t0 = time.perf_counter()
    fast = cka(Xs, Ys)
    Xc = Xs.astype(np.float64) - Xs.astype(np.float64).mean(axis=0)
    Yc = Ys.astype(np.float64) - Ys.astype(np.float64).mean(axis=0)
    ref = np.linalg.norm(Xc.T @ Yc) ** 2 / (np.linalg.norm(Xc.T @ Xc) * np.linalg.norm(Yc.T @ Yc))
    out["cka"] = (m, fast, ref)
    log(f"check CKA on {m} sampled items ({'float32 block route' if m > FEATURE32_CKA_MIN_N else 'Gram route'}) "
        f"{fast:.9f} vs float64 {ref:.9f}: |diff| {abs(fast - ref):.1e} ({time.perf_counter() - t0:.1f} s)")
    m = min(n, CHECK_CKNNA_ROWS)
    rows = np.sort(rng.choice(n, size=m, replace=False))
    t0 = time.perf_counter()
    fast = cknna(X[rows], Y[rows], knn=knn)
    ref = ref_cknna(X[rows].astype(np.float64), Y[rows].astype(np.float64), 10)
    out["cknna"] = (m, fast, ref)
    log(f"check CKNNA on {m} sampled items (knn={knn}) {fast:.9f} vs dense float64 reference {ref:.9f}: "
        f"|diff| {abs(fast - ref):.1e} ({time.perf_counter() - t0:.1f} s)")
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--items", type=int, default=100_000)
    p.add_argument("--video", type=int, default=2)
    p.add_argument("--text", type=int, default=2)
    p.add_argument("--layers", type=int, default=13)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--knn", choices=("exact", "ann"), default="exact")
    p.add_argument("--null-perms", type=int, default=None, help="shuffled pairings per best cell (default: analyze's)")
    p.add_argument("--progress", action="store_true", help="analyze's tqdm bars (with their ETA)")
    p.add_argument("--tracemalloc", action="store_true", help="also the peak of numpy allocations (slower)")
    p.add_argument("--no-check", action="store_true", help="skip the CKA/CKNNA subsample check")
    p.add_argument("--keep", default=None, help="write the store in this folder and keep it")
    p.add_argument("--write-only", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.write_only:
        write_store(args.write_only, n_items=args.items, video=args.video, text=args.text, layers=args.layers,
                    dim=args.dim, log=lambda m: print(m, flush=True))
        print(f"  writer's peak RSS {peak_rss_bytes() / 2**30:.2f} GiB", flush=True)
        return 0

    from analysis.studies import analyze_store

    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="large_n_"))
    folder.mkdir(parents=True, exist_ok=True)
    store = folder / "large.duckdb"
    try:
        print(f"store: {args.video} video + {args.text} text runs, {args.layers} layers x N={args.items} x "
              f"d={args.dim} ({4 * args.layers * args.items * args.dim / 2**30:.2f} GiB a run)", flush=True)
        t0 = time.perf_counter()
        # written by a child process: this process's peak RSS is then analyze's (and the imports')
        subprocess.run([sys.executable, __file__, "--write-only", str(store), "--items", str(args.items),
                        "--video", str(args.video), "--text", str(args.text), "--layers", str(args.layers),
                        "--dim", str(args.dim)], check=True)
        print(f"written in {time.perf_counter() - t0:.1f} s", flush=True)
        rss_before = peak_rss_bytes()
        if args.tracemalloc:
            import tracemalloc

            tracemalloc.start()
        start = time.perf_counter()
        study_clock(start, log=lambda m: print(m, flush=True))
        search_clock((args.video + args.text) * args.layers, log=lambda m: print(m, flush=True))
        extra = {} if args.null_perms is None else {"n_null": args.null_perms}
        out = analyze_store(store, n_boot=0, maps=0, jobs=1, knn=args.knn, progress=args.progress,
                            log=lambda m: print(f"  {m}", flush=True), **extra)
        seconds = time.perf_counter() - start
        traced = None
        if args.tracemalloc:
            traced = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        peak = peak_rss_bytes()
        runs = args.video + args.text
        formula = budget_bytes(args.items, args.layers, args.dim, runs)
        print(f"\nanalyze N={args.items}: {seconds:.1f} s; computed {out['computed']} result(s), "
              f"{out['grids_scored']} grid(s) scored", flush=True)
        print(f"peak RSS {peak / 2**30:.2f} GiB (before analyze, imports: {rss_before / 2**30:.2f} GiB)"
              + (f"; numpy peak (tracemalloc) {traced / 2**30:.2f} GiB" if traced is not None else ""))
        print(f"budget formula min(MR, max(2 GiB, R)) + 2R + 4Nd + 48LNk + 8T²d² + 1 GiB = "
              f"{formula / 2**30:.2f} GiB; at N=100,000 (same L, d, M): "
              f"{budget_bytes(100_000, args.layers, args.dim, runs) / 2**30:.2f} GiB", flush=True)
        if not args.no_check:
            run_ids = [f"video{i}-1" for i in range(args.video)] + [f"text{i}-1" for i in range(args.text)]
            large_n_check(store, run_ids, layers=args.layers, knn=args.knn, log=lambda m: print(m, flush=True))
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
