"""Benchmark: layer×layer grids against their floor and against a naive per-pair loop.

Prints, measured in one run on the same data (default N=1024, d=768, 24×24 layers):
- the time of ``layer_grid`` for mutual_knn, cka and cknna;
- the floor: computing every layer's similarity matrix + top-k (kNN metrics) or centred Gram
  matrix (cka) once, which any grid must do;
- a naive per-pair mutual_knn loop that recomputes neighbours for every pair, as research code does;
- the ratios, and whether the values are identical.
Times are the best of two runs (the naive loop: one), all in one process on the same arrays.

Targets: each grid within 1.5× of its floor; the mutual_knn grid ≥ 18× faster than the loop.
Usage: python bench/grid.py [--n 1024] [--d 768] [--layers 24] [--no-naive]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from analysis.grid import layer_grid
from analysis.neighbors import cosine_topk, l2_normalize, row_chunks


REPEAT = 2


def timed(fn, repeat=None):
    """Best of ``repeat`` wall-clock runs (the first run of a process also pays one-off page faults)."""
    best, out = float("inf"), None
    for _ in range(repeat or REPEAT):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def knn_floor(A, B, k):
    for stack in (A, B):
        for layer in stack:
            cosine_topk(l2_normalize(layer), k)


def gram_floor(A, B):
    for stack in (A, B):
        for layer in stack:
            Xc = layer - layer.mean(axis=0)
            n = len(Xc)
            for start, stop in row_chunks(n, n):
                Xc[start:stop] @ Xc.T


def naive_mutual_knn(A, B, k):
    """Per-pair loop: both neighbour lists recomputed for every (a, b) — same BLAS, same top-k."""
    out = np.empty((len(A), len(B)))
    n = A.shape[1]
    for a in range(len(A)):
        for b in range(len(B)):
            ia, _ = cosine_topk(l2_normalize(A[a]), k)
            ib, _ = cosine_topk(l2_normalize(B[b]), k)
            out[a, b] = (ia[:, :, None] == ib[:, None, :]).any(axis=2).sum() / (k * n)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--no-naive", action="store_true", help="skip the slow per-pair loop")
    args = p.parse_args(argv)

    rng = np.random.default_rng(0)
    latent = rng.normal(size=(args.n, 32))
    def model(seed):
        r = np.random.default_rng(seed)
        return np.stack([latent @ r.normal(size=(32, args.d)) + (1 + l / 4) * r.normal(size=(args.n, args.d))
                         for l in range(args.layers)]).astype(np.float64)
    A, B = model(1), model(2)
    print(f"data: {args.layers}x{args.layers} layers, N={args.n}, d={args.d}, k={args.k}")

    t_knn_floor, _ = timed(lambda: knn_floor(A, B, args.k))
    t_gram_floor, _ = timed(lambda: gram_floor(A, B))
    rows = []
    for metric, floor in (("mutual_knn", t_knn_floor), ("cka", t_gram_floor), ("cknna", t_knn_floor)):
        t, grid = timed(lambda: layer_grid(A, B, metric=metric, k=args.k))
        rows.append((metric, t, floor, grid))
        print(f"{metric:>10}: grid {t:7.2f} s   floor {floor:6.2f} s   grid/floor {t / floor:5.2f}x (target <= 1.5x)")

    # spot-check identity with the one-pair functions on a few cells
    from analysis.registry import REGISTRY
    cells = [(0, 0), (args.layers // 2, args.layers - 1), (args.layers - 1, 3 % args.layers)]
    for metric, _, _, grid in rows:
        params = {} if metric == "cka" else {"k": args.k}
        same = all(grid[a, b] == REGISTRY[metric](A[a], B[b], **params) for a, b in cells)
        print(f"{metric:>10}: grid cells identical to one-pair function: {same}")

    if not args.no_naive:
        t_naive, naive = timed(lambda: naive_mutual_knn(A, B, args.k), repeat=1)
        t_grid = rows[0][1]
        print(f"naive per-pair mutual_knn loop: {t_naive:7.2f} s   speed-up of grid {t_naive / t_grid:5.1f}x "
              f"(target >= 18x); values identical: {np.array_equal(naive, rows[0][3])}")


if __name__ == "__main__":
    main()
