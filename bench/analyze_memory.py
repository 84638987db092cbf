"""Benchmark: what `analyze` keeps in memory per grid, as the number of grids grows.

A real study has hundreds of runs and ~450k grids (85 vision × 30 text models, 7 budgets each,
3 metrics); whatever an analysis keeps per grid is multiplied by that. Here one sweep of tiny runs
(N = 64 items, width 16) is analysed twice, from two copies: with one metric, then with three, so
the second analysis has three times the grids of the first and the same runs (what it keeps per
run, statuses and profiles, cancels out). Each analysis runs under
``tracemalloc`` (numpy reports its buffers to it), bootstrap off, maps off, and the memory the
analysis still holds when its last study ends is split into what sits in its two grid LRUs (the
engine's memo and the analysis's recent grids: each capped at 64 MB whatever the store's size)
and the rest, which grows with the analysis; the embedding and state caches (2 GiB each,
per-run data) get a 1-byte budget here so that they hold one run. A tiny analysis runs first,
so imports are not counted. Printed, measured in this one run, for each number of layers L:

- the rest's growth per added grid (second analysis less first, over the grids it adds), against
  the size of one grid's values (``L × L × 8`` bytes): a record per grid that does not hold the
  grid stays near a constant whatever ``L``;
- the grid LRUs' contents per grid (bounded: at this small scale they hold every grid).

Target: the growth per grid is the same at every ``L`` (its ratio between the largest and the
smallest ``L`` ≤ 1.2): no grid is held outside the LRUs, only a record per grid (the row without
its grid, its input key: ~2.5 KB measured here, LRU bookkeeping included). Before session 10 an
analysis kept every grid twice outside any bound (engine memo and decoded rows), so that ratio
was about (19 KB at L = 33) / (4.5 KB at L = 13) = 4.2 (deep sizes of the two, measured on the
old code).

Usage: python bench/analyze_memory.py [--layers 13 33] [--video 3] [--text 4]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

METRICS = ("mutual_knn", "cka", "cknna")


def measure(path, n_video: int, n_text: int, n_layers: int, metrics) -> tuple[int, int, dict]:
    """``(bytes held outside the grid LRUs, grids, {grid LRU: bytes held})`` when one analysis of a
    new sweep has run its last study. The embedding and state caches get a 1-byte budget (they
    keep their last entry: one run), so what is held is what grows with the analysis plus the
    grid LRUs, whose byte counts are exact."""
    from functools import partial

    import analysis.studies as S
    from analysis.studies import context
    from precompute.synthetic.store import write_sweep

    write_sweep(path, video=[f"v{i}" for i in range(n_video)], text=[f"t{i}" for i in range(n_text)],
                frames=(1, 2, 4), captions=(1, 2, 4), n_items=64, n_layers=n_layers, dim=16)
    seen = {}
    run_dataset, engine = S.run_dataset, context.Engine

    def held(ctx, d):
        run_dataset(ctx, d)
        ctx.flush()
        seen["current"] = tracemalloc.get_traced_memory()[0]
        seen["lru"] = {"grid memo": ctx.engine._grids.used, "recent grids": ctx._grids.used}

    S.run_dataset, context.Engine = held, partial(engine, state_budget=1, emb_budget=1)
    try:
        tracemalloc.start()
        out = S.analyze_store(path, metrics=metrics, n_boot=0, maps=0, jobs=1, log=lambda m: None)
        tracemalloc.stop()
    finally:
        S.run_dataset, context.Engine = run_dataset, engine
    return seen["current"] - sum(seen["lru"].values()), out["computed_by_study"]["grids"], seen["lru"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[13, 33])
    ap.add_argument("--video", type=int, default=3)
    ap.add_argument("--text", type=int, default=4)
    args = ap.parse_args(argv)
    print(f"sweep: {args.video} video × {args.text} text models, 3 budgets each, N = 64, width 16, bootstrap off; "
          f"analysed with {METRICS[0]}, then (a copy) with {', '.join(METRICS)}")
    print(f"{'L':>3} {'grids':>11} {'outside LRUs MB':>16} {'growth / grid':>14} {'one grid':>9}  in the LRUs, per grid")
    with tempfile.TemporaryDirectory() as tmp:
        measure(Path(tmp) / "warm.duckdb", 2, 1, 2, METRICS)  # imports, compiled kernels: paid by neither side
        growth = {}
        for n_layers in args.layers:
            (b1, g1, _), (b2, g2, lru) = [measure(Path(tmp) / f"s{n_layers}-{len(m)}.duckdb", args.video, args.text,
                                                  n_layers, m) for m in (METRICS[:1], METRICS)]
            growth[n_layers] = (b2 - b1) / (g2 - g1)
            print(f"{n_layers:>3} {g1:>5} → {g2:<5} {b1 / 2**20:>6.1f} → {b2 / 2**20:<6.1f} "
                  f"{growth[n_layers] / 1024:>11.2f} KB {n_layers * n_layers * 8 / 1024:>6.2f} KB  "
                  + ", ".join(f"{k} {v / g2 / 1024:.2f} KB" for k, v in lru.items()))
    lo, hi = min(growth), max(growth)
    print(f"growth per grid at L = {hi} / at L = {lo}: ×{growth[hi] / growth[lo]:.2f} "
          f"(grids held outside the LRUs would make it about ×{(hi / lo) ** 2:.1f} at most)")
    print("target: ×1.2 or less (no grid held outside the LRUs)")


if __name__ == "__main__":
    main()
