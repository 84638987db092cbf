"""Issue #18: k-NN searched in float32 with answers exact in float64, collapsed layers, chunking.

References are independent of the code under test: cosines from ``math.fsum`` (correctly rounded
sums of the float64 products), neighbours by a full stable sort (ties to the lower index), and
the pre-#18 all-float64 algorithm re-implemented here.
"""

import math

import numpy as np
import pytest

from analysis.metrics import neighbors
from analysis.grid import layer_grid
from analysis.metrics import cknna, cycle_knn, mutual_knn
from analysis.metrics.knn import Cknna
from analysis.metrics.neighbors import knn_search, similarity_error_bound
from analysis.metrics.validation import as_stack


def unit64(X):
    X = np.asarray(X, dtype=np.float64)
    n = np.linalg.norm(X, axis=1, keepdims=True)
    return X / np.where(n == 0, 1.0, n)


def fsum_cosines(X):
    U = unit64(X)
    n = len(U)
    S = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            S[i, j] = math.fsum(U[i] * U[j])
    return S


def reference_knn(X, k, groups=None):
    """Top-k by fsum cosine over other rows (and other groups), ties to the lower index, rows sorted."""
    S = fsum_cosines(X)
    np.fill_diagonal(S, -np.inf)
    if groups is not None:
        S[np.asarray(groups)[:, None] == np.asarray(groups)[None, :]] = -np.inf
    order = np.argsort(-S, axis=1, kind="stable")  # stable: equal values keep index order
    return np.sort(order[:, :k], axis=1)


def near_tie_data(n=120, d=40, ties=50, gap=1e-10, seed=0):
    """Row 0 has ``ties`` neighbours whose cosines are 0.8 + j*gap: apart in float64, equal in float32.

    Higher index = slightly closer, so a float32 search breaking its ties by index gets it wrong.
    """
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    e = np.zeros(d)
    e[0] = 1.0
    X[0] = e
    for j in range(1, ties + 1):
        v = rng.normal(size=d)
        v[0] = 0.0
        v /= np.linalg.norm(v)
        c = 0.8 + j * gap
        X[j] = c * e + np.sqrt(1 - c * c) * v
    return X


def naive_float32_knn(X, k):
    A = unit64(X).astype(np.float32)
    S = A @ A.T
    np.fill_diagonal(S, -np.inf)
    return np.sort(np.argsort(-S, axis=1, kind="stable")[:, :k], axis=1)


@pytest.mark.slow  # float64 references of many grids
def test_error_bound_holds_and_is_of_the_documented_size():
    rng = np.random.default_rng(1)
    for d in (3, 64, 768):
        X = rng.normal(size=(150, d)) + 3.0  # a large mean: cosines near 1 where rounding is worst
        U = unit64(X)
        A = U.astype(np.float32)
        err = np.abs((A @ A.T).astype(np.float64) - fsum_cosines(X))
        E = similarity_error_bound(d)
        assert err.max() <= E
        # the search's own unit rows (a float32 multiply by the float32 reciprocal norm) and its bound
        from analysis.metrics.neighbors import U_IN, _Float32Sims

        for stored in (X.astype(np.float32), X):
            S = _Float32Sims(stored, None, None).A
            ref = fsum_cosines(stored.astype(np.float64))
            assert np.abs((S @ S.T).astype(np.float64) - ref).max() <= similarity_error_bound(d, u_in=U_IN)
            U64 = unit64(stored.astype(np.float64))
            assert np.all(np.abs(S - U64) <= U_IN * np.abs(U64))  # entry by entry, as U_IN says
        # gamma_d(u32) dominates: d * 2^-24 within a few per cent for d >= 64
        assert E == pytest.approx(d * 2.0**-24 + 2 * 2.0**-24, rel=0.05 if d >= 64 else 1.0)


def test_near_ties_below_float32_resolution_are_resolved_exactly_and_the_check_falls_back():
    X = near_tie_data()
    k = 5
    expected = reference_knn(X, k)
    np.testing.assert_array_equal(expected[0], [46, 47, 48, 49, 50])  # the planted order
    assert not np.array_equal(naive_float32_knn(X, k)[0], expected[0])  # float32 alone gets it wrong
    res = knn_search(X, k)
    np.testing.assert_array_equal(res.idx, expected)
    # row 0's band (50 near-ties) is wider than the first candidate list: the check fired, the
    # row was retried with wider lists
    assert len(res.resolved) >= 2 and res.resolved[0] < len(X) and sum(res.resolved) == len(X)
    assert res.reranked >= 50


def test_fallback_to_full_rows_when_candidates_are_minimal(monkeypatch):
    monkeypatch.setattr(neighbors, "EXTRA_CANDIDATES", 0)  # c = k: nearly every band escapes
    X = near_tie_data(n=70, ties=30)
    res = knn_search(X, 4)
    np.testing.assert_array_equal(res.idx, reference_knn(X, 4))
    assert res.resolved[0] < len(X) and len(res.resolved) >= 2


def test_a_few_near_ties_are_settled_by_the_float64_band_without_retry():
    X = near_tie_data(n=100, ties=7)  # row 0: 7 near-ties around k=5 fit in the candidates
    res = knn_search(X, 5)
    np.testing.assert_array_equal(res.idx, reference_knn(X, 5))
    assert res.resolved == (100,) and res.reranked >= 7


def test_exact_ties_go_to_the_lower_index():
    rng = np.random.default_rng(2)
    base = rng.normal(size=(12, 6))
    X = np.vstack([base, base[[3, 3, 5, 7]], 2.0 * base[[1]]])  # duplicates and a scaled copy
    for k in (1, 2, 4):
        np.testing.assert_array_equal(knn_search(X, k).idx, reference_knn(X, k))


def test_groups_are_excluded_exactly():
    X = near_tie_data(n=60, ties=20)
    groups = np.arange(60) // 3
    np.testing.assert_array_equal(knn_search(X, 4, groups).idx, reference_knn(X, 4, groups))


def old_float64_metrics(X, Y, k):
    """The pre-#18 algorithm: float64 gemm similarities, top-k, then the platonic-rep formulas."""
    def topk(Z):
        U = unit64(Z)
        S = U @ U.T
        np.fill_diagonal(S, -np.inf)
        idx = np.argsort(-S, axis=1, kind="stable")[:, :k]
        return idx, S

    ix, SX = topk(X)
    iy, SY = topk(Y)
    n = len(X)
    mutual = sum(len(set(ix[i]) & set(iy[i])) for i in range(n)) / (k * n)
    cycle = np.mean([i in ix[iy[i]] for i in range(n)])
    MX = np.zeros((n, n), bool)
    MY = np.zeros((n, n), bool)
    MX[np.arange(n)[:, None], ix] = True
    MY[np.arange(n)[:, None], iy] = True

    def hsic_u(K, L):
        K, L = K.copy(), L.copy()
        np.fill_diagonal(K, 0)
        np.fill_diagonal(L, 0)
        one = np.ones(n)
        return (np.trace(K @ L) + (one @ K @ one) * (one @ L @ one) / ((n - 1) * (n - 2))
                - 2 / (n - 2) * one @ K @ L @ one) / (n * (n - 3))

    both = MX & MY
    KX, KY = np.where(both, SX, 0), np.where(both, SY, 0)
    c = hsic_u(KX, KY) / np.sqrt(hsic_u(np.where(MX, SX, 0), np.where(MX, SX, 0))
                                 * hsic_u(np.where(MY, SY, 0), np.where(MY, SY, 0)))
    return mutual, cycle, c


@pytest.mark.parametrize("seed", [0, 1])
def test_metrics_equal_the_old_float64_algorithm(seed):
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(90, 5))
    X = Z @ rng.normal(size=(5, 30)) + 0.5 * rng.normal(size=(90, 30))
    Y = Z @ rng.normal(size=(5, 20)) + 0.5 * rng.normal(size=(90, 20))
    m, c, kn = old_float64_metrics(X, Y, 6)
    assert mutual_knn(X, Y, k=6) == m
    assert cycle_knn(X, Y, k=6) == c
    assert cknna(X, Y, k=6) == pytest.approx(kn, rel=1e-12, abs=1e-15)


def test_float32_stack_is_not_copied_and_gives_the_float64_cells():
    rng = np.random.default_rng(3)
    A = rng.normal(size=(3, 60, 12)).astype(np.float32)
    B = rng.normal(size=(2, 60, 9)).astype(np.float32)
    assert as_stack(A, "A", dtype=None) is A
    for metric in ("mutual_knn", "cycle_knn", "cknna", "cka"):
        np.testing.assert_array_equal(layer_grid(A, B, metric=metric, k=4),
                                      layer_grid(A.astype(np.float64), B.astype(np.float64), metric=metric, k=4))


def test_knn_grids_are_bitwise_equal_at_tiny_chunk_sizes(monkeypatch):
    rng = np.random.default_rng(4)
    A = rng.normal(size=(3, 70, 16)).astype(np.float32)
    A[1, :20] = near_tie_data(n=20, d=16, ties=12)  # some near-ties in one layer
    whole = {m: layer_grid(A, metric=m, k=5) for m in ("mutual_knn", "cycle_knn", "cknna")}
    search = knn_search(A[1], 5)
    for entries in (1, 7, 100):
        monkeypatch.setattr(neighbors, "CHUNK_ENTRIES", entries)  # 1 row per block, even 1 entry
        monkeypatch.setattr(neighbors, "ROW_PASS_ENTRIES", entries)  # norms and unit rows too
        np.testing.assert_array_equal(knn_search(A[1], 5).idx, search.idx)
        for m, grid in whole.items():
            np.testing.assert_array_equal(layer_grid(A, metric=m, k=5), grid)


def test_torch_path_equals_numpy_path():
    torch = pytest.importorskip("torch")  # a dependency of the precompute side, installed here
    assert torch is not None
    X = near_tie_data(n=90, d=24, ties=40).astype(np.float32)
    groups = np.arange(90) // 2
    for g in (None, groups):
        a = knn_search(X, 5, g, device="numpy")
        b = knn_search(X, 5, g, device="cpu")  # the torch code, on CPU
        np.testing.assert_array_equal(a.idx, b.idx)
        np.testing.assert_array_equal(a.idx, reference_knn(X, 5, g))


def test_collapsed_layers_give_nan_and_only_their_cells():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(40, 8))
    same = np.tile(rng.normal(size=8), (40, 1))
    same_scaled = same * rng.uniform(0.5, 2.0, size=(40, 1))  # one direction, many lengths
    zeros = np.zeros((40, 8))
    for bad in (same, same_scaled, zeros):
        for f in (mutual_knn, cycle_knn, cknna):
            assert np.isnan(f(X, bad, k=5)) and np.isnan(f(bad, X, k=5))
    A = np.stack([X, same, X + 0.1 * rng.normal(size=X.shape)])
    for metric in ("mutual_knn", "cycle_knn", "cknna"):
        grid = layer_grid(A, metric=metric, k=5)
        assert np.isnan(grid[1]).all() and np.isnan(grid[:, 1]).all()
        assert np.isfinite(grid[[0, 2]][:, [0, 2]]).all()
    # the old code scored all-identical vectors: a value, not NaN
    assert not np.isnan(old_float64_metrics(X, same, 5)[0])


def test_nearly_collapsed_layer_is_still_scored():
    rng = np.random.default_rng(6)
    X = rng.normal(size=(40, 8))
    almost = np.tile(rng.normal(size=8), (40, 1)) + 1e-3 * rng.normal(size=(40, 8))
    assert np.isfinite(mutual_knn(X, almost, k=5))
    assert Cknna().prepare(almost, k=5).collapsed is False


def test_device_check_grid_part_runs_on_cpu_torch(capsys):
    pytest.importorskip("torch")
    from bench.device_check import grid_check

    assert grid_check("cpu", [300], d=32, layers=2, k=5)
    out = capsys.readouterr().out
    assert "neighbours identical: True" in out and "grids identical: True" in out


def test_mutual_knn_scoring_at_large_n_stays_small_in_memory():
    """N = 60k: N^2 slots exceed int32 and an N^2-wide sparse transpose would need 29 GB."""
    import tracemalloc

    from analysis.metrics.knn import KnnState, MutualKnn

    n, k = 60_000, 5
    X = np.ones((n, 2), dtype=np.float32)  # rows unused by mutual k-NN scoring
    rng = np.random.default_rng(7)
    states = []
    for _ in range(3):
        idx = np.sort(rng.integers(0, n - 1, size=(n, k)), axis=1)
        idx = idx + np.arange(k)  # distinct per row, < n + k
        idx = np.where(idx >= np.arange(n)[:, None], idx + 1, idx) % n  # never the row itself
        states.append(KnnState(np.sort(idx, axis=1), X, np.ones(n)))
    tracemalloc.start()
    grid = MutualKnn().score_block(states, states)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    for a in range(3):
        for b in range(3):
            hits = (states[a].idx[:, :, None] == states[b].idx[:, None, :]).sum()
            assert grid[a, b] == hits / (k * n)
    assert peak < 200 * 2**20


def test_rows_with_tiny_norms_are_searched_exactly():
    """Rows of float32 values so small that their float32 reciprocal norm would overflow (subnormal
    entries) take the float64 path to their unit rows: the answer is still the exact one."""
    rng = np.random.default_rng(11)
    X = rng.normal(size=(60, 8)).astype(np.float32)
    X[:20] *= np.float32(1e-40)  # subnormal float32 entries: 1 / ||x|| ~ 1e40 > float32's max
    assert np.all(np.linalg.norm(X[:20].astype(np.float64), axis=1) < 1e-38)
    res = knn_search(X, 5)
    np.testing.assert_array_equal(res.idx, reference_knn(X, 5))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [1, 7, 768])
def test_row_norms_are_the_bits_of_numpys_float64_norm(dtype, d):
    """The search's norms (one float64 square per entry, no widened copy of the layer) are the bits
    of ``np.linalg.norm`` of the float64 rows, from subnormal to huge rows and all-zero ones, and
    within one rounding of the correctly rounded norm (``math.fsum`` of the squares)."""
    rng = np.random.default_rng(d)
    scale = 10.0 ** rng.integers(-40 if dtype == np.float32 else -150, 30, size=(200, 1))
    X = (rng.normal(size=(200, d)) * scale).astype(dtype)
    X[3] = 0
    np.testing.assert_array_equal(neighbors.norms64(X), np.linalg.norm(X.astype(np.float64), axis=1))
    exact = np.array([math.sqrt(math.fsum(float(v) ** 2 for v in row)) for row in X.astype(np.float64)])
    np.testing.assert_allclose(neighbors.norms64(X), exact, rtol=4 * d * 2.0**-53, atol=0)
    expected = np.where(exact == 0, 1.0, neighbors.norms64(X))
    np.testing.assert_array_equal(neighbors.row_norms(X), expected)
