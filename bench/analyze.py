"""Benchmark: `analyze` on a paper-shaped synthetic sweep against its floor, and its growth with runs.

The sweep (video and text models × budgets × layers, random embeddings with shared structure) is
written straight through the store writer. Printed, each measured in this one run:

- analyze time (bootstrap off) / floor, where the floor is loading every run and preparing each
  run's layers once: what the issue calls each run's per-layer prepared state, "k-NN lists, Gram
  pieces, RankMe spectrum" (k-NN lists once for mutual k-NN and CKNNA, which prepare the same
  state; centred layers once for CKA; the eigenvalues of each layer's smaller Gram, which RankMe and
  the layer status read): the least any analysis that shows these grids and RankMe must do, on
  the one BLAS thread ``analyze`` holds. Target ≤ 3×. The ratio against the floor without the spectrum is printed beside it.
- where analyze's time goes, per study (profiles, grids, scaling, ...), and the share of it that is
  per-pair work (grid cells scored from prepared states, without the per-layer terms a kernel
  computes on a state's first use, the best cells' shuffled-pairing nulls, plus the scaling fits,
  one per model pair and metric): the part
  that grows with pairs when the text models double. With a pair share s, time grows about
  ×(1.40 + 0.6 s) for runs ×1.40, so the growth target holds only as s → 0.

Embedding maps are off (``maps=0``): they are per-model UMAP pictures, not the grid work this
measures (``layerscope analyze --maps`` sets how many a dataset gets; about a second each).
A tiny analysis runs first, untimed, so imports and lazy initialisation are paid by neither side.
- the same sweep with twice the text models: analyze time grows by a factor ≤ the growth in runs
  (not the growth in pairs). Target: time ratio ≤ runs ratio. Printed beside it, from the same
  run: the floor's growth (work per run by construction, so it shows how much the VM moves a
  ratio of two times) and the growth of analyze less its timed per-pair work.

Each measure is the best of ``--repeat`` rounds (analyze from a fresh copy of the sweep each time),
the floors and analyses of both sweeps interleaved within a round: on a shared 2-core VM single
runs of either side swung by 1.5x within minutes, in spells of seconds. Each round's floor and
analyze time (quiet, then busy) are printed and flushed as soon as they are measured, so a run cut
short by a timeout still leaves its figures; the tables of the best rounds follow at the end.

Shapes (``--shape``): ``paper`` (the default: N = 1024 items as in the papers, 13 layers of width
768 as a ViT-B or BERT-base, the smallest encoders they sweep) and ``small`` (N = 512, 9 layers of
width 128: the sweep of the issue's first measurement). Per-run work grows with the width d, the
per-pair work (grid cells, N² each for CKA; the scaling fits, independent of N and d) does not, so
the small shape weighs pairs about six times more against runs than the papers' encoders do.
``--items``, ``--layers``, ``--dim`` override the shape's values.

``--busy N`` measures every floor and analysis twice in the same run, quiet and with N spinning
processes beside (``bench/busy.py``), and prints both tables and the ratios side by side (targets:
<= 3x quiet, <= 3.5x busy).

Usage: python bench/analyze.py [--shape paper|small] [--items N] [--layers L] [--dim D] [--video 3] [--text 2]
       [--jobs 1] [--repeat 2] [--busy 1] [--no-growth]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import busy  # noqa: E402

METRICS = ("mutual_knn", "cka", "cknna")


def build(path, n_video, n_text, args):
    from precompute.synthetic.store import write_sweep

    return write_sweep(path, video=[f"video{i}" for i in range(n_video)], text=[f"text{i}" for i in range(n_text)],
                       frames=(1, 2, 4), captions=(1, 2, 4), n_items=args.items, n_layers=args.layers, dim=args.dim)


SHAPES = {"paper": {"items": 1024, "layers": 13, "dim": 768}, "small": {"items": 512, "layers": 9, "dim": 128}}


def floor(path) -> tuple[float, float]:
    """Load every run and prepare each of its layers once per distinct preparation (k = 10), then
    the RankMe spectrum of each layer (:func:`analysis.metrics.degenerate.gram_spectrum`), all on one
    BLAS thread: ``analyze_store`` holds one for the whole analysis (its numbers must not depend on
    ``--jobs``), so a floor given the whole pool (its spectra, and since layers are prepared several
    at a time on threads of our own, its preparations) measured a second core against an analysis
    that may not use it. Returns ``(seconds, of which spectrum)``."""
    import numpy as np

    from analysis.metrics.degenerate import gram_spectrum
    from analysis.grid import prepare_layers
    from analysis.registry import get_metric
    from analysis.storage.store import connect
    from analysis.studies.engine import Engine
    from analysis.metrics.base import one_blas_thread

    distinct = {}
    for m in METRICS:  # metrics whose kernels share one prepare share one state
        distinct.setdefault(type(get_metric(m).kernel).prepare, m)
    con = connect(path)
    runs = [r[0] for r in con.execute("SELECT run_id FROM runs").fetchall()]
    t0 = time.perf_counter()
    eng = Engine(con)
    spectrum = 0.0
    with one_blas_thread(openmp=True):
        for r in runs:
            E = eng.emb(r)
            for m in distinct.values():
                spec = get_metric(m)
                prepare_layers(spec, E, spec.resolve(**({"k": 10} if "k" in spec.params else {})))
            t1 = time.perf_counter()
            for X in E:
                gram_spectrum(np.asarray(X, dtype=np.float64))
            spectrum += time.perf_counter() - t1
    seconds = time.perf_counter() - t0
    con.close()
    return seconds, spectrum


STUDIES = ("profiles", "grids", "scaling", "model_map", "downstream", "temporal", "layer_choice")


def timed_studies() -> dict:
    """Wrap each study's ``run`` so its seconds are added up in the returned dict."""
    import importlib

    spent = dict.fromkeys(STUDIES, 0.0)
    for name in STUDIES:
        mod = importlib.import_module(f"analysis.studies.{name}")
        fn = mod.run

        def wrapped(*a, _fn=fn, _name=name, **kw):
            t0 = time.perf_counter()
            try:
                return _fn(*a, **kw)
            finally:
                spent[_name] += time.perf_counter() - t0

        mod.run = wrapped
    return spent


def timed_pair_work() -> dict:
    """Wrap the kernels' pair scoring (every call the engine makes with two runs' prepared states)
    so its seconds are added up in the returned dict's ``"seconds"``. Per-layer terms the kernels
    compute on a state's first use (CKNNA's cosines, reciprocal slots and self term; CKA's self
    inner products, batched as the kernel batches them) are computed just before, outside the
    timer: they are per-run work, done once per layer whatever the number of partners.

    The shuffled-pairing null of each pair's best cell (``selection_null``: the pair's grid rescored
    under item shuffles) is per-pair work too: its seconds go to ``"null"``, and the grid scoring it
    does inside is not counted twice."""
    from analysis.metrics.kernel import CkaKernel, fill_packed_self
    from analysis.metrics.knn import Cknna, MutualKnn
    from analysis.studies import grids

    def knn_terms(states):
        for st in states:
            st.sim, st.recip, Cknna._self(st)

    spent = {"seconds": 0.0, "null": 0.0, "in_null": False}
    for cls, name, first_use in ((CkaKernel, "score_block", fill_packed_self), (MutualKnn, "score_block", None),
                                 (Cknna, "score_block_counts", knn_terms)):
        fn = getattr(cls, name)

        def wrapped(self, states_a, states_b, *a, _fn=fn, _first=first_use, **kw):
            if spent["in_null"]:  # timed as the null's
                return _fn(self, states_a, states_b, *a, **kw)
            if _first is not None:
                _first(list(states_a) + list(states_b))
            t0 = time.perf_counter()
            try:
                return _fn(self, states_a, states_b, *a, **kw)
            finally:
                spent["seconds"] += time.perf_counter() - t0

        setattr(cls, name, wrapped)
    null_fn = grids.selection_null

    def null_wrapped(*a, **kw):
        spent["in_null"] = True
        t0 = time.perf_counter()
        try:
            return null_fn(*a, **kw)
        finally:
            spent["in_null"] = False
            spent["null"] += time.perf_counter() - t0

    grids.selection_null = null_wrapped
    return spent


def pair_seconds(spent: dict) -> float:
    """Per-pair seconds of one analysis: grid cells scored from prepared states and the best cells'
    shuffled-pairing nulls (``timed_pair_work``), plus the scaling fits (one per model pair and metric)."""
    return spent["pair"] + spent["null"] + spent["scaling"]


def warm_up(tmp) -> None:
    """A tiny sweep analysed once: imports and lazy initialisation are not part of either timing."""
    from analysis.studies import analyze_store
    from precompute.synthetic.store import write_sweep

    path = Path(tmp) / "warm.duckdb"
    write_sweep(path, video=["v0", "v1"], text=["t0"], frames=(1, 2, 4), captions=(1, 2, 4), n_items=40,
                n_layers=2, dim=8)
    analyze_store(path, metrics=METRICS, n_boot=0, maps=0, jobs=1, log=lambda m: None)


def analyze(path, jobs, n_null=None) -> tuple[float, dict]:
    from analysis.studies import analyze_store

    t0 = time.perf_counter()
    out = analyze_store(path, metrics=METRICS, n_boot=0, maps=0, jobs=jobs, n_null=n_null, log=lambda m: None)
    return time.perf_counter() - t0, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="paper")
    ap.add_argument("--items", type=int)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--dim", type=int)
    ap.add_argument("--video", type=int, default=3)
    ap.add_argument("--text", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=2, help="best of this many runs of each side")
    ap.add_argument("--null-perms", type=int, default=None, help="shuffles of the best cells' null (default: "
                    "analyze's, 200 on the mutual k-NN grids; 0: off, as the floor has no such work)")
    ap.add_argument("--no-growth", action="store_true", help="only the sweep of --text text models: no growth "
                    "figure (half the time)")
    busy.add_argument(ap)
    args = ap.parse_args(argv)
    for name, value in SHAPES[args.shape].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    conds = busy.conditions(args.busy)
    rounds = max(1, args.repeat)
    # said first and flushed, like every figure below: a run cut short (a timeout) still leaves its numbers
    print(f"sweep ({args.shape} shape): {args.video} video models, N={args.items}, L={args.layers}, d={args.dim}, "
          f"3 budgets each, metrics {', '.join(METRICS)}, bootstrap off, shuffled null "
          f"{'analyze default' if args.null_perms is None else args.null_perms}, jobs={args.jobs}, "
          f"best of {rounds} interleaved rounds; load average (1 min) {os.getloadavg()[0]:.2f} before", flush=True)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        warm_up(tmp)
        spent = timed_studies()
        pair = timed_pair_work()
        sides = []
        for n_text in (args.text,) if args.no_growth else (args.text, 2 * args.text):
            path = Path(tmp) / f"sweep{n_text}.duckdb"
            sides.append((n_text, path, len(build(path, args.video, n_text, args))))
        floors, best = {}, {}
        # rounds of (floor, analyze) for both sides, interleaved, the best of each: a slow spell of
        # the shared VM then hits every measure of a round, not one side of a ratio; with --busy
        # each side runs quiet, then with the spinning processes beside
        for r in range(rounds):
            for n_text, path, n_runs in sides:
                for cond, n_busy in conds:
                    key = (cond, n_text)
                    with busy.busy(n_busy):
                        f = floor(path)
                        floors[key] = min(floors.get(key, (float("inf"), 0.0)), f)
                        fresh = Path(tmp) / f"sweep{n_text}-{r}-{n_busy}.duckdb"
                        shutil.copy(path, fresh)  # nothing analysed yet: every round computes everything
                        for k in spent:
                            spent[k] = 0.0
                        pair["seconds"] = pair["null"] = 0.0
                        t, out = analyze(fresh, args.jobs, args.null_perms)
                    print(f"round {r + 1}/{rounds}, {cond}, {n_text} text models ({n_runs} runs): floor {f[0]:.2f} s, "
                          f"analyze {t:.2f} s, analyze/floor {t / f[0]:.2f}×", flush=True)
                    if key not in best or t < best[key][0]:
                        best[key] = (t, out, {**spent, "pair": pair["seconds"], "null": pair["null"]})
        for cond, _ in conds:
            results[cond] = [(n_text, runs, floors[cond, n_text], *best[cond, n_text]) for n_text, _, runs in sides]
    print(f"\nbest of {rounds} round(s); load average (1 min) {os.getloadavg()[0]:.2f} after")
    for cond, rows in results.items():
        print(f"\n{cond}" + (f" ({cond[5:]} spinning process(es) beside)" if cond != "quiet" else ""))
        report(rows)
    if len(results) > 1:
        print("\nanalyze / floor side by side (targets: <= 3x quiet, <= 3.5x busy)")
        print(f"{'text models':>11}" + "".join(f"{c:>12}" for c in results))
        for i, (n_text, _, _) in enumerate(sides):
            print(f"{n_text:>11}" + "".join(f"{rows[i][3] / rows[i][2][0]:>11.2f}×" for rows in results.values()))


def report(rows):
    """The per-condition table: analyze against its floor, where its time goes, growth with runs."""
    print(f"{'text models':>11} {'runs':>5} {'floor s':>8} {'analyze s':>10} {'analyze/floor':>14} "
          f"{'(w/o spectrum)':>15} {'prepared':>9}")
    for n_text, runs, (f, f_spec), t, out, spent in rows:
        print(f"{n_text:>11} {runs:>5} {f:>8.2f} {t:>10.2f} {t / f:>13.2f}× {t / (f - f_spec):>14.2f}× "
              f"{out['preparations']:>9}")
        print(f"{'':>11} floor: {f - f_spec:.2f} s preparing, {f_spec:.2f} s RankMe spectra")
        by = out["computed_by_study"]
        print(f"{'':>11} computed: " + ", ".join(f"{k} {v}" for k, v in sorted(by.items())))
        print(f"{'':>11} seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in spent.items()
                                               if v >= 0.005 and k not in ("pair", "null")))
        per_pair = pair_seconds(spent)
        print(f"{'':>11} per-pair work: {per_pair:.2f} s = {100 * per_pair / t:.0f} % (grid cells {spent['pair']:.2f} s, "
              f"shuffled nulls {spent['null']:.2f} s, scaling fits {spent['scaling']:.2f} s)")
    if len(rows) < 2:  # --no-growth
        return
    (_, r1, (f1, _), t1, _, s1), (_, r2, (f2, _), t2, _, s2) = rows
    print(f"doubling the text models: runs ×{r2 / r1:.2f}, analyze time ×{t2 / t1:.2f} "
          f"(target: time ratio ≤ runs ratio); analyze/floor target ≤ 3×")
    # the same growth for work that is per run by construction (the floor), and for analyze less its
    # timed per-pair work: how far this VM's spells move a ratio of two times, and what grows with runs
    lone = [t - pair_seconds(s) for t, s in ((t1, s1), (t2, s2))]
    print(f"{'':>11} for comparison, measured in this run: floor ×{f2 / f1:.2f}, "
          f"analyze less its per-pair work ×{lone[1] / lone[0]:.2f}")

if __name__ == "__main__":
    main()
