"""bench/grid.py's floors: the same per-layer work as before, scheduled as the grids schedule their
layers (``prepare_on_threads``), so the ratios compare work with work, not threading with threading."""

import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import grid  # noqa: E402


def blas_now() -> int:
    return min(lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas")


def stacks(layers=3, n=40, d=6, seed=0):
    r = np.random.default_rng(seed)
    return r.normal(size=(layers, n, d)).astype(np.float32), r.normal(size=(layers, n, d)).astype(np.float32)


def test_the_knn_floor_finds_each_layers_nearest_rows_in_order_a_then_b():
    A, B = stacks()
    k = 4
    got = grid.knn_floor(A, B, k, np.float64)
    assert len(got) == len(A) + len(B)
    for X, idx in zip(list(A) + list(B), got):
        # brute force in float64: cosine of every pair, the row itself excluded
        U = X.astype(np.float64) / np.linalg.norm(X.astype(np.float64), axis=1, keepdims=True)
        S = U @ U.T
        np.fill_diagonal(S, -np.inf)
        want = np.sort(np.argsort(-S, axis=1)[:, :k], axis=1)
        assert np.array_equal(np.sort(idx, axis=1), want)


def test_a_floor_runs_two_layers_at_once_on_one_blas_thread_each_when_the_pool_has_two():
    A, B = stacks(layers=2)
    seen = []
    # two layers must be inside the work together to pass the barrier: a floor run one layer at a
    # time breaks it (timeout) and the test fails
    meet = threading.Barrier(2, timeout=10)

    def work(X):
        seen.append((threading.get_ident(), blas_now()))
        meet.wait()
        return X.shape

    with threadpool_limits(limits=2, user_api="blas"):
        if blas_now() < 2:
            pytest.fail("this BLAS cannot hold two threads: the test would measure nothing")
        out = grid.on_grid_schedule(work, A, B)
        assert blas_now() == 2, "the pool was not restored after the floor"
    assert out == [X.shape for X in list(A) + list(B)]
    # A's two layers together, then B's: each pair on two threads at once (the threads themselves may
    # be new ones for B, so only the pairs are compared)
    assert len(seen) == 4 and seen[0][0] != seen[1][0] and seen[2][0] != seen[3][0]
    assert all(n == 1 for _, n in seen)


def test_a_floor_runs_one_layer_at_a_time_on_the_calling_thread_when_the_pool_has_one():
    A, B = stacks(layers=2)
    seen = []

    def work(X):
        seen.append(threading.get_ident())
        return float(X.sum())

    with threadpool_limits(limits=1, user_api="blas"):
        out = grid.on_grid_schedule(work, A, B)
    assert seen == [threading.get_ident()] * 4
    assert out == [float(X.sum()) for X in list(A) + list(B)]


def test_the_bench_prints_wall_and_one_thread_cpu_columns_and_its_checks_pass(capsys):
    grid.main(["--n", "48", "--d", "8", "--layers", "2", "--k", "3", "--no-naive"])
    text = capsys.readouterr().out
    header = next(line for line in text.splitlines() if "quiet" in line)
    assert grid.CPU in header
    ratio = next(line for line in text.splitlines() if "/ float32 floor" in line)
    figures = ratio.split(")", 1)[1].split()
    assert len(figures) == 2 and all(f.endswith("x") for f in figures), ratio  # quiet and CPU ratios
    assert "neighbour lists equal the all-float64 search on every layer: True" in text
    assert "grid cells identical to one-pair function: False" not in text
