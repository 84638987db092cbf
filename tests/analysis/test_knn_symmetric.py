"""Issue #32: the symmetric blocked self-search (``analysis.metrics.neighbors_blocks``) as the exact
k-NN search's whole-layer candidate route.

It only proposes candidates (each pair's float32 product once, compiled heaps); the proof and the
float64 re-rank of ``analysis.metrics.neighbors`` decide the lists. Expected lists come from
``tests.reference.ref_knn_lists`` (``math.fsum`` cosines, a stable sort: ties to the lower index),
never from the code under test. Blocks are shrunk so that small layers cross many block edges
(the column heaps, the diagonal blocks and the thread split all run).
"""

import numpy as np
import pytest

from analysis.metrics import neighbors, neighbors_blocks
from analysis.metrics.neighbors import knn_search, similarity_error_bound
from tests.helpers import near_ties
from tests.reference import ref_knn_lists

pytestmark = pytest.mark.skipif(not neighbors_blocks.available(), reason="numba switched off (LAYERSCOPE_NO_JIT)")


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 16 rows whatever N: a 100-row layer is 7 blocks."""
    monkeypatch.setattr(neighbors_blocks, "MIN_BLOCK_ROWS", 16)
    monkeypatch.setattr(neighbors_blocks, "BLOCK_ENTRIES", 16)


@pytest.fixture
def symmetric_calls(monkeypatch):
    """Counts whole-layer symmetric searches, so a test fails when the route silently did not run."""
    calls = []
    real = neighbors_blocks.symmetric_top

    def counting(A, c, groups=None, **kw):
        calls.append(len(A))
        return real(A, c, groups, **kw)

    monkeypatch.setattr(neighbors_blocks, "symmetric_top", counting)
    return calls


@pytest.mark.parametrize("blocks", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_near_ties_below_float32_resolution_equal_the_float64_lists(symmetric_calls, request, blocks, dtype):
    if blocks:
        request.getfixturevalue("small_blocks")
    X = near_ties().astype(dtype)
    for k in (5, 20, 45):
        np.testing.assert_array_equal(knn_search(X, k, device="symmetric").idx, ref_knn_lists(X, k))
    assert symmetric_calls


def test_groups_duplicates_and_scaled_copies_across_blocks(symmetric_calls, small_blocks):
    rng = np.random.default_rng(3)
    base = rng.normal(size=(30, 16))
    # every row three times (exact ties at cosine 1), and a scaled copy (the same direction)
    X = np.concatenate([base, base, base, 2.5 * base[:10]]).astype(np.float32)
    groups = np.arange(len(X)) % 30  # a row's copies share its group: they must never be listed
    for g in (None, groups):
        for k in (1, 3, 7):
            np.testing.assert_array_equal(knn_search(X, k, g, device="symmetric").idx, ref_knn_lists(X, k, g))
    assert symmetric_calls


def test_the_proof_fails_and_the_row_falls_back_to_every_column(symmetric_calls, small_blocks, monkeypatch):
    """No extra candidates: row 0's near-tied neighbours cannot be settled from the heap's k + 1, so the
    row is retried wider on another route and, past N, exhaustively; the lists stay exact."""
    monkeypatch.setattr(neighbors, "EXTRA_CANDIDATES", 0)
    X = near_ties(n=200, ties=60).astype(np.float32)
    res = knn_search(X, 4, device="symmetric")
    np.testing.assert_array_equal(res.idx, ref_knn_lists(X, 4))
    assert len(res.resolved) >= 2 and sum(res.resolved[1:]) >= 1 and res.resolved[0] < len(X)
    assert symmetric_calls == [200]


def test_n_close_to_k_takes_another_route_and_stays_exact(symmetric_calls):
    X = np.random.default_rng(4).normal(size=(9, 6)).astype(np.float32)
    for k in (1, 5, 8):  # c + 1 + 1 > N: the heaps could not fill
        np.testing.assert_array_equal(knn_search(X, k, device="symmetric").idx, ref_knn_lists(X, k))
    assert not symmetric_calls


def test_a_collapsed_layer_is_reported_not_ranked(symmetric_calls):
    X = np.tile(np.arange(1.0, 9.0, dtype=np.float32), (60, 1))
    res = knn_search(X, 5, device="symmetric")
    assert res.collapsed
    assert not symmetric_calls  # nothing to rank: the placeholder keeps the shapes


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_candidates_bound_every_column_left_out(small_blocks, threads):
    """The proof's premise on the raw route: every candidate value within E of the float64 cosine, no
    column outside the candidates above ``nxt + E``, never the row itself or its group; and the same
    heaps whatever the threads (each heap sees its entries in one order)."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(150, 24)).astype(np.float32)
    X[40] = X[41]
    groups = np.arange(150) // 2
    sims = neighbors._Float32Sims(X, groups, "symmetric")
    c = 12
    cand, vals, nxt = neighbors_blocks.symmetric_top(sims.A, c, groups, threads=threads)
    U = X.astype(np.float64) / np.linalg.norm(X.astype(np.float64), axis=1, keepdims=True)
    S = U @ U.T
    S[groups[:, None] == groups[None, :]] = -np.inf
    E = similarity_error_bound(24, u_in=sims.u_in)
    assert cand.shape == (150, c) and np.all(cand >= 0)
    assert np.all(np.abs(vals - np.take_along_axis(S, cand, axis=1)) <= E)
    assert not np.any(groups[cand] == groups[:, None])
    outside = S.copy()
    np.put_along_axis(outside, cand, -np.inf, axis=1)
    assert np.all(outside.max(axis=1) <= nxt + E)
    # the c candidates and nxt are the c + 1 largest float32 values: nothing outside beats nxt by more than E
    assert np.all(vals.min(axis=1) >= nxt)
    one = neighbors_blocks.symmetric_top(sims.A, c, groups, threads=1)
    for a, b in zip(one, (cand, vals, nxt)):
        np.testing.assert_array_equal(a, b)


def test_rows_that_cannot_fill_their_heap_are_sent_to_the_proof_as_unproven():
    A = np.random.default_rng(2).normal(size=(40, 8)).astype(np.float32)
    A[3] = np.nan  # its products are NaN: never enter any heap
    cand, vals, nxt = neighbors_blocks.symmetric_top(A, 5)
    assert nxt[3] == np.inf  # `nxt < s_k - 2E` fails: the row goes to a wider search
    assert np.all(np.isfinite(nxt[np.arange(40) != 3]))
    assert not np.any(cand[np.arange(40) != 3] == 3)


def test_auto_prefers_the_symmetric_route_on_a_cpu_from_its_size(symmetric_calls, monkeypatch):
    monkeypatch.setattr(neighbors, "_nvidia_driver", lambda: False)
    X = np.random.default_rng(8).normal(size=(80, 10)).astype(np.float32)
    knn_search(X, 3, device="auto")
    assert not symmetric_calls  # below SYMMETRIC_MIN_ROWS: numpy
    monkeypatch.setattr(neighbors, "SYMMETRIC_MIN_ROWS", 80)
    a = knn_search(X, 3, device="auto")
    assert symmetric_calls == [80]
    symmetric_calls.clear()
    b = knn_search(X, 3, device="numpy")
    assert not symmetric_calls
    np.testing.assert_array_equal(a.idx, b.idx)
    np.testing.assert_array_equal(a.idx, ref_knn_lists(X, 3))


def test_without_numba_auto_goes_on_and_symmetric_says_what_it_needs(monkeypatch):
    monkeypatch.setattr(neighbors, "_nvidia_driver", lambda: False)
    monkeypatch.setattr(neighbors_blocks, "available", lambda: False)
    X = np.random.default_rng(9).normal(size=(40, 6))
    assert neighbors._resolve_device("auto") != "symmetric"
    np.testing.assert_array_equal(knn_search(X, 3, device="auto").idx, ref_knn_lists(X, 3))
    with pytest.raises(ValueError, match="numba"):
        knn_search(X, 3, device="symmetric")


def test_every_cpu_route_gives_the_same_grids(small_blocks):
    """numpy, the symmetric blocks (across block edges) and faiss (where installed): one grid each."""
    from analysis.grid import layer_grid
    from analysis.metrics.neighbors_faiss import faiss_module

    rng = np.random.default_rng(10)
    A = np.stack([near_ties(n=150, seed=s) for s in range(3)]).astype(np.float32)
    A[2] += 0.3 * rng.normal(size=A[2].shape).astype(np.float32)
    grids = {}
    for dev in ("numpy", "symmetric") + (("faiss",) if faiss_module() is not None else ()):
        old = neighbors.DEVICE
        neighbors.DEVICE = dev
        try:
            grids[dev] = [layer_grid(A, metric=m, k=6) for m in ("mutual_knn", "cknna", "cycle_knn")]
        finally:
            neighbors.DEVICE = old
    for dev in grids:
        for a, b in zip(grids["numpy"], grids[dev]):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("threads", [1, 2])
def test_pair_values_are_within_the_bound_of_the_float64_cosines(threads):
    """The compiled listed-pair products (ann's re-rank values) against float64 unit-row dots: within
    E (any summation order), on one thread and split over two."""
    rng = np.random.default_rng(11)
    X = rng.normal(size=(5000, 48)).astype(np.float32)
    sims = neighbors._Float32Sims(X, None, None)
    rows = rng.permutation(5000)
    cand = rng.integers(0, 5000, size=(5000, 7))
    got = neighbors_blocks.pair_values(sims.A, rows, cand, threads=threads)
    U = X.astype(np.float64) / np.linalg.norm(X.astype(np.float64), axis=1, keepdims=True)
    ref = np.einsum("ij,ikj->ik", U[rows], U[cand])
    assert got.dtype == np.float32 and got.shape == (5000, 7)
    assert np.max(np.abs(got - ref)) <= similarity_error_bound(48, u_in=sims.u_in)
