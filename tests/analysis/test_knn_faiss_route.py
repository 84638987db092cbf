"""Issue #32: the exact k-NN search with faiss's exhaustive search as its float32 candidate route.

faiss only proposes candidates; the proof and the float64 re-rank of ``analysis.metrics.neighbors``
decide the lists. Expected lists come from ``tests.reference.ref_knn_lists`` (``math.fsum``
cosines, a stable sort: ties to the lower index), never from the code under test.
"""

import sys

import numpy as np
import pytest

from analysis.metrics import neighbors, neighbors_blocks, neighbors_faiss
from analysis.metrics.neighbors import knn_search, similarity_error_bound
from tests.helpers import near_ties
from tests.reference import ref_knn_lists

faiss = pytest.importorskip("faiss")  # the `ann` extra, part of `dev`


@pytest.fixture
def faiss_calls(monkeypatch):
    """Counts the rows faiss searched, so a test fails when the faiss route silently did not run."""
    calls = []
    real = neighbors_faiss.faiss_top

    def counting(A, rows, c, groups, extra):
        calls.append(len(rows))
        return real(A, rows, c, groups, extra)

    monkeypatch.setattr(neighbors, "faiss_top", counting)
    return calls


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_near_ties_below_float32_resolution_equal_the_float64_lists(faiss_calls, dtype):
    X = near_ties().astype(dtype)
    for k in (5, 20, 45):
        res = knn_search(X, k, device="faiss")
        np.testing.assert_array_equal(res.idx, ref_knn_lists(X, k))
    assert faiss_calls


def test_groups_and_duplicated_rows_go_to_the_lower_index(faiss_calls):
    rng = np.random.default_rng(3)
    base = rng.normal(size=(30, 16))
    # every row three times (exact ties at cosine 1), and a scaled copy (the same direction)
    X = np.concatenate([base, base, base, 2.5 * base[:10]]).astype(np.float32)
    groups = np.arange(len(X)) % 30  # a row's copies share its group: they must never be listed
    for g in (None, groups):
        for k in (1, 3, 7):
            np.testing.assert_array_equal(knn_search(X, k, g, device="faiss").idx, ref_knn_lists(X, k, g))
    assert faiss_calls


def test_the_proof_fails_and_the_row_falls_back_to_every_column(faiss_calls, monkeypatch):
    """No extra candidates: row 0's 50 near-tied neighbours cannot be settled from k + 0 columns,
    so its row is retried wider (8x) and, past N, exhaustively; the lists stay exact."""
    monkeypatch.setattr(neighbors, "EXTRA_CANDIDATES", 0)
    X = near_ties(n=200, ties=60).astype(np.float32)
    res = knn_search(X, 4, device="faiss")
    np.testing.assert_array_equal(res.idx, ref_knn_lists(X, 4))
    assert len(res.resolved) >= 2 and sum(res.resolved[1:]) >= 1  # the check fired
    assert res.resolved[0] < len(X)


def test_n_close_to_k_uses_the_numpy_candidates_and_stays_exact(faiss_calls):
    X = np.random.default_rng(4).normal(size=(9, 6)).astype(np.float32)
    for k in (1, 5, 8):  # c + 1 + 1 > N: faiss cannot return enough columns
        np.testing.assert_array_equal(knn_search(X, k, device="faiss").idx, ref_knn_lists(X, k))
    assert not faiss_calls


def test_faiss_candidates_bound_every_column_left_out():
    """``nxt`` (and every candidate value) is within E of the float64 cosine, and no column outside
    the candidates has a float64 cosine above ``nxt + E``: the premise of the proof."""
    rng = np.random.default_rng(7)
    X = (rng.normal(size=(300, 64)) + 0.5).astype(np.float32)
    sims = neighbors._Float32Sims(X, None, "faiss")
    rows, c = np.arange(300), 12
    cand, vals, nxt = neighbors_faiss.faiss_top(sims.A, rows, c, None, 1)
    U = X.astype(np.float64) / np.linalg.norm(X.astype(np.float64), axis=1, keepdims=True)
    S = U @ U.T
    np.fill_diagonal(S, -np.inf)
    E = similarity_error_bound(64, u_in=sims.u_in)
    assert np.all(np.abs(vals - np.take_along_axis(S, cand, axis=1)) <= E)
    outside = S.copy()
    np.put_along_axis(outside, cand, -np.inf, axis=1)
    assert np.all(outside.max(axis=1) <= nxt + E)
    assert not np.any(cand == rows[:, None])  # the row itself is never a candidate


def test_auto_does_not_take_faiss_on_a_cpu_machine_without_numba(faiss_calls, monkeypatch):
    """Where numba cannot run (the symmetric route's heaps), "auto" takes numpy, not faiss, at
    small and large sizes; asked for, faiss runs and gives the same lists."""
    monkeypatch.setattr(neighbors, "_nvidia_driver", lambda: False)
    monkeypatch.setattr(neighbors_blocks, "available", lambda: False)
    X = np.random.default_rng(8).normal(size=(80, 10)).astype(np.float32)
    a = knn_search(X, 3, device="auto")
    monkeypatch.setattr(neighbors, "SYMMETRIC_MIN_ROWS", 80)
    assert knn_search(X, 3, device="auto").idx.tolist() == a.idx.tolist()
    assert not faiss_calls
    b = knn_search(X, 3, device="faiss")
    assert faiss_calls
    np.testing.assert_array_equal(a.idx, b.idx)
    np.testing.assert_array_equal(a.idx, ref_knn_lists(X, 3))


def test_without_faiss_auto_runs_numpy_and_faiss_says_what_to_install(monkeypatch):
    monkeypatch.setattr(neighbors, "_nvidia_driver", lambda: False)
    monkeypatch.setitem(sys.modules, "faiss", None)  # import faiss now fails
    X = np.random.default_rng(9).normal(size=(40, 6))
    np.testing.assert_array_equal(knn_search(X, 3, device="auto").idx, ref_knn_lists(X, 3))
    with pytest.raises(ValueError, match="faiss-cpu"):
        knn_search(X, 3, device="faiss")


def test_device_check_compares_every_route_with_numpy(capsys):
    pytest.importorskip("torch")
    from bench.device_check import grid_check

    assert grid_check("cpu", [300], d=32, layers=2, k=5)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("grid N=")]
    assert len(lines) == 3 and "symmetric search" in lines[0] and "faiss search" in lines[1]
    assert "cpu search" in lines[2]
    assert all("neighbours identical: True" in line and "grids identical: True" in line for line in lines)
