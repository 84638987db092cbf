"""Benchmark: the same-space study's per-layer cost, its bootstrap, and the Fréchet route.

Prints, measured in one run on the same float data (default N=1024, d=768):
- one layer pair's full score (:func:`analysis.methods.same_space.score_layer`: retrieval both ways,
  modality gap, alignment, MMD, Fréchet, degenerate checks);
- ``paired_resamples`` for ``--boot`` resamples (one N×N 0/1 matrix per direction, one product
  with the copy counts) against the naive route (the ranking metrics recomputed on each resampled
  set of rows, timed on a few resamples and scaled) — the ratio is what the interval costs;
- Fréchet through ``‖ABᵀ‖_*`` against scipy's ``sqrtm`` of the d×d product (and their agreement).
Numbers on a shared machine are noisy; ratios within one run are what count.

Usage: python bench/same_space.py [--n 1024] [--d 768] [--boot 200]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from scipy import linalg

from analysis.metrics import frechet
from analysis.metrics.retrieval import query_average_precision, query_ranks
from analysis.methods.same_space import paired_resamples, score_layer


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--boot", type=int, default=200)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    z = rng.normal(size=(args.n, 32))
    V = z @ rng.normal(size=(32, args.d)) + rng.normal(size=(args.n, args.d))
    T = z @ rng.normal(size=(32, args.d)) + rng.normal(size=(args.n, args.d))
    t_layer, _ = timed(lambda: score_layer(V, T))
    ix = rng.integers(0, args.n, (args.boot, args.n))
    W = np.stack([np.bincount(r, minlength=args.n) for r in ix]).astype(float)
    t_fast, _ = timed(lambda: paired_resamples(V, T, W))
    few = 3

    def naive():
        for r in ix[:few]:
            for Q, G in ((V[r], T[r]), (T[r], V[r])):
                query_ranks(Q, G, query_groups=r, gallery_groups=r)
                query_average_precision(Q, G, query_groups=r, gallery_groups=r)

    t_naive = timed(naive)[0] * args.boot / few
    print(f"N={args.n} d={args.d}: one layer's scores {t_layer:.2f} s; {args.boot} resamples {t_fast:.2f} s "
          f"({t_fast / t_layer:.2f}x a layer), naive resampling ~{t_naive:.1f} s ({t_naive / t_fast:.0f}x slower)")
    X, Y = V[: args.n // 2], T[: args.n // 2]
    t_new, new = timed(lambda: frechet(X, Y))

    def ref():
        cx, cy = np.cov(X, rowvar=False), np.cov(Y, rowvar=False)
        return np.sum((X.mean(0) - Y.mean(0)) ** 2) + np.trace(cx + cy - 2 * np.real(linalg.sqrtm(cx @ cy)))

    t_ref, old = timed(ref)
    print(f"Frechet N={len(X)} d={args.d}: nuclear-norm route {t_new:.2f} s, sqrtm route {t_ref:.2f} s "
          f"({t_ref / t_new:.1f}x), relative difference {abs(new - old) / abs(old):.1e}")


if __name__ == "__main__":
    main()
