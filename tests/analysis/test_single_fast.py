"""The cheaper per-run metrics ``analyze`` uses equal their reference definitions.

RankMe from the Gram eigenvalues against the SVD (``rankme``); exact k-NN distances against a
brute-force ``cdist``; the MLE of intrinsic dimension against scikit-dimension on distinct rows.
"""

from __future__ import annotations

import numpy as np
import pytest
import skdim
from scipy.spatial.distance import cdist

from analysis.metrics.single import (
    RANKME_RTOL,
    knn_distances,
    lid_mle_from_distances,
    lid_report,
    rankme,
    rankme_fast,
)

RNG = np.random.default_rng(7)


def _svd_rankme(X) -> float:
    s = np.linalg.svd(np.asarray(X, float), compute_uv=False)
    p = s / s.sum() + 1e-7
    return float(np.exp(-np.sum(p * np.log(p))))


@pytest.mark.parametrize("case", ["gauss", "anisotropic", "very_anisotropic", "low_rank", "wide", "float32_offset",
                                  "rank1", "collapsed", "tiny"])
def test_rankme_fast_equals_the_svd_definition_within_its_tolerance(case):
    X = {
        "gauss": RNG.normal(size=(300, 64)),
        "anisotropic": RNG.normal(size=(300, 64)) * np.logspace(0, -4, 64),
        "very_anisotropic": RNG.normal(size=(300, 64)) * np.logspace(0, -8, 64),  # falls back to the SVD
        "low_rank": RNG.normal(size=(300, 5)) @ RNG.normal(size=(5, 64)),  # rank-deficient: SVD
        "wide": RNG.normal(size=(40, 500)),  # N < d: the N x N Gram
        "float32_offset": (RNG.normal(size=(300, 64)) + 5).astype(np.float32),
        "rank1": np.outer(np.arange(1, 41), RNG.normal(size=16)),
        "collapsed": np.tile(RNG.normal(size=16), (50, 1)),
        "tiny": RNG.normal(size=(3, 2)),
    }[case]
    ref = _svd_rankme(X)
    assert rankme_fast(X) == pytest.approx(ref, rel=RANKME_RTOL)
    assert rankme_fast(X) == pytest.approx(rankme(X), rel=RANKME_RTOL)


def test_rankme_fast_hand_cases():
    assert rankme_fast(np.eye(6) * 4.0) == pytest.approx(6.0, rel=1e-5)  # 6 equal singular values
    assert rankme_fast(np.outer(np.arange(1, 9), np.ones(5))) == pytest.approx(1.0, rel=1e-5)  # rank one
    with pytest.raises(ValueError, match="all zeros"):
        rankme_fast(np.zeros((5, 3)))


def _brute_knn(X, k):
    D = cdist(X, X)
    np.fill_diagonal(D, np.inf)
    return np.sort(D, axis=1)[:, :k]


ROUTES = ["numpy", pytest.param("faiss", marks=pytest.mark.skipif(
    __import__("importlib").util.find_spec("faiss") is None, reason="faiss not installed"))]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("n,d,k", [(200, 16, 20), (30, 5, 29), (120, 300, 7), (600, 40, 10)])
def test_knn_distances_equal_brute_force(n, d, k, route):
    X = RNG.normal(size=(n, d)) * 10 + 50  # an offset makes the norm trick lose digits
    np.testing.assert_allclose(knn_distances(X, k, route=route), _brute_knn(X, k), rtol=1e-12)


@pytest.mark.parametrize("route", ROUTES)
def test_knn_distances_with_ties_and_near_duplicates(route):
    # a lattice: many exactly equal distances, so the k-th neighbour sits in a tie (on the faiss
    # route most rows are then not proven by the returned columns and take the block path)
    g = np.stack(np.meshgrid(np.arange(6.0), np.arange(6.0)), axis=-1).reshape(-1, 2)
    np.testing.assert_allclose(knn_distances(g, 5, route=route), _brute_knn(g, 5), rtol=1e-12)
    X = RNG.normal(size=(80, 6))
    X[1] = X[0] + 1e-9  # a near duplicate: its distance must come from differences, not the norm trick
    got = knn_distances(X, 3, route=route)
    assert got[0, 0] == pytest.approx(np.linalg.norm(X[1] - X[0]), rel=1e-9)
    dup = np.vstack([X, X[:10]])  # exact duplicates: zero distances, exactly
    np.testing.assert_allclose(knn_distances(dup, 4, route=route), _brute_knn(dup, 4), rtol=1e-12, atol=0)


@pytest.mark.skipif(__import__("importlib").util.find_spec("faiss") is None, reason="faiss not installed")
@pytest.mark.parametrize("extra", [0, 1])
def test_knn_distances_faiss_rows_not_proven_fall_back(extra, monkeypatch):
    """Few extra columns leave many rows unproven (their candidates may lie beyond what faiss
    returned): those go through the block path, and every row still equals brute force; small
    faiss query blocks and re-rank blocks exercise the block seams."""
    from analysis.metrics import single

    monkeypatch.setattr(single, "LID_FAISS_EXTRA", extra)
    monkeypatch.setattr(single, "LID_FAISS_ROWS", 37)
    monkeypatch.setattr(single, "LID_RERANK_ROWS", 5)
    X = np.round(RNG.normal(size=(300, 3)) * 2) / 2  # a coarse grid of values: many exact ties
    np.testing.assert_allclose(knn_distances(X, 8, route="faiss"), _brute_knn(X, 8), rtol=1e-12)
    Y = RNG.normal(size=(250, 12)) + 1000.0  # a large offset against the spread
    np.testing.assert_allclose(knn_distances(Y, 6, route="faiss"), _brute_knn(Y, 6), rtol=1e-12)
    # a planted near tie float32 cannot order: 60 rows on a unit sphere around row 0, radii
    # 1 + 1e-9 · (a random order): row 0's 8 nearest are the 8 smallest radii, wherever faiss's
    # float32 order puts them
    u = RNG.normal(size=(60, 12))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    far = RNG.normal(size=(140, 12))
    far = 10 * far / np.linalg.norm(far, axis=1, keepdims=True)
    Z = np.vstack([np.zeros((1, 12)), u * (1 + 1e-9 * RNG.permutation(60))[:, None], far]) + 1000.0
    got = knn_distances(Z, 8, route="faiss")
    np.testing.assert_allclose(got, _brute_knn(Z, 8), rtol=1e-12)
    assert np.all(np.diff(got[0]) > 0)  # the planted radii, in order


def test_knn_distances_rejects_an_unknown_route():
    with pytest.raises(ValueError, match="route"):
        knn_distances(RNG.normal(size=(20, 3)), 3, route="gpu")


def test_lid_mle_from_distances_formula():
    # k = 2: d_i = 1 / log(R_i2 / R_i1); combined 1 / mean(1 / d_i)
    R = np.array([[1.0, 2.0], [1.0, 4.0]])
    assert lid_mle_from_distances(R) == pytest.approx(1 / np.mean([np.log(2), np.log(4)]), rel=1e-14)
    assert lid_mle_from_distances(np.ones((4, 3))) == float("inf")  # every neighbourhood a sphere


@pytest.mark.parametrize("k", [5, 20])
def test_fast_lid_equals_scikit_dimension(k):
    X = RNG.normal(size=(400, 4)) @ RNG.normal(size=(4, 30))  # a 4-D plane in 30-D
    ref = skdim.id.MLE().fit(X, n_neighbors=k).dimension_
    rep = lid_report(X, k=k, fast=True)
    assert rep.value == pytest.approx(ref, rel=1e-10)
    assert rep.value == pytest.approx(lid_report(X, k=k).value, rel=1e-10)
    assert 2 < rep.value < 6


def test_fast_lid_keeps_the_duplicate_handling():
    X = RNG.normal(size=(150, 4)) @ RNG.normal(size=(4, 12))
    doubled = np.vstack([X, X[:60]])
    ref = skdim.id.MLE().fit(X, n_neighbors=10).dimension_  # the estimator on the 150 distinct rows
    rep = lid_report(doubled, k=10, fast=True)
    assert (rep.n_distinct, rep.n_items, rep.reason) == (150, 210, None)
    assert rep.value == pytest.approx(ref, rel=1e-10)
    few = lid_report(np.vstack([X[:8]] * 5), k=10, fast=True)  # 8 distinct rows: too few for k = 10
    assert np.isnan(few.value) and few.n_distinct == 8 and "8 distinct" in few.reason
    flat = lid_report(np.ones((40, 5)), k=10, fast=True)
    assert np.isnan(flat.value) and flat.n_distinct == 1
    # the caller's distinct rows are used as given (the engine passes arange(N) when there are none)
    assert lid_report(X, k=10, keep=np.arange(150), fast=True).value == pytest.approx(ref, rel=1e-10)


@pytest.mark.parametrize("n,dtype", [(2, np.float64), (37, np.float32), (300, np.float64)])
def test_uniformity_over_pairs_i_lt_j_equals_the_double_loop(n, dtype, monkeypatch):
    from analysis.metrics import neighbors
    from analysis.metrics.single import uniformity

    monkeypatch.setattr(neighbors, "CHUNK_ENTRIES", 64 * max(n, 1))  # several row blocks
    X = RNG.normal(size=(n, 5)).astype(dtype)
    xn = X.astype(np.float64) / np.linalg.norm(X.astype(np.float64), axis=1, keepdims=True)
    pot = [np.exp(-2.0 * np.sum((xn[i] - xn[j]) ** 2)) for i in range(n) for j in range(n) if i != j]
    assert uniformity(X) == pytest.approx(np.log(np.mean(pot)), rel=1e-12)


def _degenerate_cases():
    rng = np.random.default_rng(11)
    X = rng.normal(size=(60, 9))
    v = rng.normal(size=9)
    return {
        "gauss": X,
        "duplicated_rows": np.vstack([X, X[:25], X[:5]]),
        "collapsed": np.tile(v, (40, 1)),
        "rank1_both_signs": np.outer(rng.uniform(-3, 3, 40), v),  # cosines ±1
        "two_rows": X[:2],
        "wide_float32": rng.normal(size=(23, 70)).astype(np.float32),
    }


def _double_loop_uniformity(X, t=2.0):
    X = np.asarray(X, np.float64)
    xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    n = len(xn)
    pot = [np.exp(-t * np.sum((xn[i] - xn[j]) ** 2)) for i in range(n) for j in range(n) if i != j]
    return float(np.log(np.mean(pot)))


@pytest.mark.parametrize("case", list(_degenerate_cases()))
@pytest.mark.parametrize("block,chunk", [(128, None), (7, None), (1, None), (5, 3)])
def test_uniformity_blocks_equal_the_double_loop_on_degenerate_inputs(case, block, chunk, monkeypatch):
    """Any row blocking (several blocks, a ragged last block, one row per block, the memory cap
    splitting rows first) sums the same pairs i < j as a naive double loop over all i != j.
    Collapsed layers measure 0 (every pair at distance 0), up to the rounding the docstring bounds."""
    from analysis.metrics import neighbors
    from analysis.metrics import single
    from analysis.metrics.single import uniformity

    X = _degenerate_cases()[case]
    monkeypatch.setattr(single, "UNIFORMITY_BLOCK_ROWS", block)
    if chunk:
        monkeypatch.setattr(neighbors, "CHUNK_ENTRIES", chunk * X.shape[0])
    ref = _double_loop_uniformity(X)
    assert uniformity(X) == pytest.approx(ref, rel=1e-12, abs=1e-13)
    assert uniformity(X, t=0.5) == pytest.approx(_double_loop_uniformity(X, t=0.5), rel=1e-12, abs=1e-13)
    if case == "collapsed":
        assert abs(uniformity(X)) <= 1e-13


@pytest.mark.parametrize("n,d,k,chunk", [(50, 6, 10, 7), (21, 4, 20, 4), (64, 40, 5, 1)])
def test_knn_distances_across_row_blocks_with_duplicates(n, d, k, chunk, monkeypatch):
    """Row blocks (the memory cap) give the brute-force distances, with exact zeros for duplicated
    rows (measured from differences) and N close to k (k = N - 1: every other row)."""
    from analysis.metrics import neighbors

    monkeypatch.setattr(neighbors, "CHUNK_ENTRIES", chunk * n)
    X = RNG.normal(size=(n, d)) + 3.0
    X[n // 2] = X[1]  # a duplicated row: its nearest distance is exactly 0
    got = knn_distances(X, k)
    np.testing.assert_allclose(got, _brute_knn(X, k), rtol=1e-12, atol=0)
    assert got[1, 0] == 0.0 and got[n // 2, 0] == 0.0


@pytest.mark.parametrize("case", ["gauss", "duplicated_rows", "collapsed", "rank1_both_signs", "two_rows",
                                  "wide_float32"])
def test_rankme_fast_from_the_layer_status_spectrum(case):
    """The layer status keeps the Gram eigenvalues of its rank-1 check; RankMe given them is the
    value it computes on its own, bit for bit, and the SVD's within RANKME_RTOL. The eigenvalues
    are the squared singular values (numpy's SVD) within the bound rankme_fast's docstring states."""
    from analysis.metrics.degenerate import gram_spectrum, layer_status

    X = _degenerate_cases()[case]
    st = layer_status(X)
    lam, trace = st.spectrum
    ref_lam, ref_trace = gram_spectrum(X)
    np.testing.assert_array_equal(lam, ref_lam)
    assert trace == ref_trace
    assert rankme_fast(X, spectrum=st.spectrum) == rankme_fast(X)
    assert rankme_fast(X, spectrum=st.spectrum) == pytest.approx(_svd_rankme(X), rel=RANKME_RTOL)
    s = np.linalg.svd(np.asarray(X, np.float64), compute_uv=False)
    n, d = X.shape
    delta = (max(n, d) + min(n, d)) * 2.0**-53 * np.sum(np.asarray(X, np.float64) ** 2)
    assert len(lam) == min(n, d) and np.all(np.abs(lam - s**2) <= delta * (1 + 1e-6))


def test_rankme_fast_rejects_a_spectrum_of_another_shape_and_zero_layers():
    from analysis.metrics.degenerate import gram_spectrum, layer_status

    X = RNG.normal(size=(30, 6))
    with pytest.raises(ValueError, match="spectrum has 5 eigenvalues"):
        rankme_fast(X, spectrum=gram_spectrum(X[:, :5]))
    zero = np.zeros((8, 3))
    assert layer_status(zero).spectrum is None  # all rows zero: no rank-1 check was needed
    with pytest.raises(ValueError, match="all zeros"):
        rankme_fast(zero, spectrum=layer_status(zero).spectrum)


@pytest.mark.parametrize("scale", [1e-30, 1.0, 1e25])
def test_knn_distances_at_any_scale_and_without_numba(scale, monkeypatch):
    """The float32 candidate search is scaled by a power of two, so layers whose squares overflow
    or underflow float32 still give the brute-force distances; the numpy path (no numba) gives the
    compiled path's bits."""
    from analysis.metrics import neighbors_jit

    X = (RNG.normal(size=(150, 24)) + 2.0) * scale
    X[7] = X[3]  # an exact duplicate: distance 0
    X[9] = X[4] + 1e-9 * scale  # a near duplicate, far below the float32 error of the candidates
    got = knn_distances(X, 12)
    np.testing.assert_allclose(got, _brute_knn(X, 12), rtol=1e-12, atol=0)
    assert got[7, 0] == 0.0
    assert got[9, 0] == pytest.approx(np.linalg.norm(X[9] - X[4]), rel=1e-9)
    monkeypatch.setattr(neighbors_jit, "near_kernel", lambda: None)
    np.testing.assert_array_equal(knn_distances(X, 12), got)


def test_knn_distances_candidates_cover_near_ties():
    """Rows whose k-th and (k+1)-th neighbours are closer than float32 can tell apart: the
    candidate margin keeps both, and the exact distances decide (values equal brute force)."""
    base = RNG.normal(size=(60, 8))
    X = np.concatenate([base, base[:30] + 1e-7 * RNG.normal(size=(30, 8))])
    np.testing.assert_allclose(knn_distances(X, 5), _brute_knn(X, 5), rtol=1e-12)


def test_uniformity_of_an_all_zero_layer_is_refused_not_the_best_value():
    from analysis.metrics.single import uniformity

    # what it used to return: every pair "orthogonal", log exp(-2t) = -2t, the value of a well-spread layer
    with pytest.raises(ValueError, match="all zeros"):
        uniformity(np.zeros((6, 4)))
    X = np.random.default_rng(0).normal(size=(6, 4))
    assert np.isfinite(uniformity(X))


def test_auto_route_never_asks_faiss(monkeypatch):
    """The auto route proposes candidates with numpy at every size (it beat faiss quiet and with a
    busy core beside); asked for, faiss does it; all three give the brute-force distances."""
    from analysis.metrics import neighbors_faiss

    calls = []
    real = neighbors_faiss.faiss_module
    monkeypatch.setattr(neighbors_faiss, "faiss_module", lambda: calls.append(1) or real())
    X = RNG.normal(size=(80, 6))
    np.testing.assert_allclose(knn_distances(X, 4), _brute_knn(X, 4), rtol=1e-12)
    assert calls == []
    if real() is not None:
        np.testing.assert_allclose(knn_distances(X, 4, route="faiss"), _brute_knn(X, 4), rtol=1e-12)
        assert calls == [1]
