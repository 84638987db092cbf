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


@pytest.mark.parametrize("n,d,k", [(200, 16, 20), (30, 5, 29), (120, 300, 7)])
def test_knn_distances_equal_brute_force(n, d, k):
    X = RNG.normal(size=(n, d)) * 10 + 50  # an offset makes the norm trick lose digits
    np.testing.assert_allclose(knn_distances(X, k), _brute_knn(X, k), rtol=1e-12)


def test_knn_distances_with_ties_and_near_duplicates():
    # a lattice: many exactly equal distances, so the k-th neighbour sits in a tie
    g = np.stack(np.meshgrid(np.arange(6.0), np.arange(6.0)), axis=-1).reshape(-1, 2)
    np.testing.assert_allclose(knn_distances(g, 5), _brute_knn(g, 5), rtol=1e-12)
    X = RNG.normal(size=(80, 6))
    X[1] = X[0] + 1e-9  # a near duplicate: its distance must come from differences, not the norm trick
    got = knn_distances(X, 3)
    assert got[0, 0] == pytest.approx(np.linalg.norm(X[1] - X[0]), rel=1e-9)


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
    from analysis import neighbors
    from analysis.metrics.single import uniformity

    monkeypatch.setattr(neighbors, "CHUNK_ENTRIES", 64 * max(n, 1))  # several row blocks
    X = RNG.normal(size=(n, 5)).astype(dtype)
    xn = X.astype(np.float64) / np.linalg.norm(X.astype(np.float64), axis=1, keepdims=True)
    pot = [np.exp(-2.0 * np.sum((xn[i] - xn[j]) ** 2)) for i in range(n) for j in range(n) if i != j]
    assert uniformity(X) == pytest.approx(np.log(np.mean(pot)), rel=1e-12)
