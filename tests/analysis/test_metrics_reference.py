"""Each metric against a literal, slow implementation of its paper formula, plus exact hand cases."""

import numpy as np
import pytest
import skdim
from scipy import linalg

from analysis import metrics as M
from tests.helpers import planted
from tests.reference import (ref_cka, ref_cknna, ref_cycle_knn, ref_hsic_biased, ref_hsic_unbiased, ref_mutual_knn,
                             ref_rbf, ref_ranks, ref_svcca)


# ---------- comparisons on planted data ----------

K = 7


@pytest.fixture(scope="module")
def pair():
    return planted(60, seed=11)


def test_mutual_knn_matches_reference(pair):
    X, Y = pair
    assert M.mutual_knn(X, Y, k=K) == pytest.approx(ref_mutual_knn(X, Y, K), abs=1e-15)


def test_cycle_knn_matches_reference(pair):
    X, Y = pair
    noisy = Y + 2.0 * np.random.default_rng(0).normal(size=Y.shape)
    for B in (Y, noisy):
        assert M.cycle_knn(X, B, k=K) == pytest.approx(ref_cycle_knn(X, B, K), abs=1e-15)
    assert M.cycle_knn(X, noisy, k=K) < 1.0  # the reference case is not trivially saturated


@pytest.mark.parametrize("debiased", [False, True])
def test_linear_cka_matches_formula(pair, debiased):
    X, Y = pair
    hsic = ref_hsic_unbiased if debiased else ref_hsic_biased
    expected = ref_cka(X @ X.T, Y @ Y.T, hsic)
    assert M.cka(X, Y, debiased=debiased) == pytest.approx(expected, rel=1e-10)


@pytest.mark.parametrize("debiased", [False, True])
@pytest.mark.parametrize("sigma", [0.5, 1.0, 2.0])
def test_rbf_cka_matches_formula(pair, debiased, sigma):
    X, Y = pair
    hsic = ref_hsic_unbiased if debiased else ref_hsic_biased
    expected = ref_cka(ref_rbf(X, sigma), ref_rbf(Y, sigma), hsic)
    assert M.cka(X, Y, kernel="rbf", debiased=debiased, sigma=sigma) == pytest.approx(expected, rel=1e-10)


def test_linear_cka_equals_feature_space_formula(pair):
    # Kornblith et al. eq. (3): ||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F) on centred features
    X, Y = pair
    Xc, Yc = X - X.mean(0), Y - Y.mean(0)
    expected = np.linalg.norm(Yc.T @ Xc) ** 2 / (np.linalg.norm(Xc.T @ Xc) * np.linalg.norm(Yc.T @ Yc))
    assert M.cka(X, Y) == pytest.approx(expected, rel=1e-10)


def test_cknna_matches_platonic_formula(pair):
    X, Y = pair
    assert M.cknna(X, Y, k=K) == pytest.approx(ref_cknna(X, Y, K), rel=1e-10)


def test_svcca_matches_classical_cca(pair):
    X, Y = pair
    assert M.svcca(X, Y, keep=0.99) == pytest.approx(ref_svcca(X, Y, 0.99), rel=1e-8)
    assert M.svcca(X, Y, keep=0.9) == pytest.approx(ref_svcca(X, Y, 0.9), rel=1e-8)


def test_retrieval_matches_brute_force(pair):
    X, _ = pair
    Y = X + 1.5 * np.random.default_rng(2).normal(size=X.shape)
    r_xy, r_yx = ref_ranks(X, Y), ref_ranks(Y, X)
    np.testing.assert_array_equal(M.partner_ranks(X, Y), r_xy)
    out = M.retrieval(X, Y)
    for k in (1, 5, 10):
        assert out[f"recall@{k}_x2y"] == np.mean(r_xy < k)
        assert out[f"recall@{k}_y2x"] == np.mean(r_yx < k)
        assert M.recall_at_k(X, Y, k=k, direction="both") == pytest.approx((np.mean(r_xy < k) + np.mean(r_yx < k)) / 2)
    assert out["map_x2y"] == pytest.approx(np.mean(1 / (r_xy + 1)))
    assert out["median_rank_y2x"] == np.median(r_yx + 1)
    assert 0 < out["recall@1_x2y"] < 1  # the case is not trivial


def test_alignment_uniformity_gap_match_loops(pair):
    X, Y = pair
    xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    yn = Y[:, : X.shape[1]] if Y.shape[1] >= X.shape[1] else None
    Y2 = X + np.random.default_rng(4).normal(size=X.shape)
    yn = Y2 / np.linalg.norm(Y2, axis=1, keepdims=True)
    assert M.alignment(X, Y2) == pytest.approx(np.mean([np.sum((a - b) ** 2) for a, b in zip(xn, yn)]))
    assert M.alignment(X, Y2, alpha=1.0) == pytest.approx(np.mean([np.linalg.norm(a - b) for a, b in zip(xn, yn)]))
    n = len(X)
    pot = [np.exp(-2 * np.sum((xn[i] - xn[j]) ** 2)) for i in range(n) for j in range(n) if i != j]
    assert M.uniformity(X) == pytest.approx(np.log(np.mean(pot)))
    assert M.modality_gap(X, Y2) == pytest.approx(np.linalg.norm(xn.mean(0) - yn.mean(0)))


def test_mmd_matches_double_loop(pair):
    X, _ = pair
    Y = X[:45] + 0.7
    s = 1.3

    def k(a, b):
        return np.exp(-np.sum((a - b) ** 2) / (2 * s**2))

    m, n = len(X), len(Y)
    xx = sum(k(X[i], X[j]) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
    yy = sum(k(Y[i], Y[j]) for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
    xy = sum(k(X[i], Y[j]) for i in range(m) for j in range(n)) / (m * n)
    assert M.mmd(X, Y, sigma=s) == pytest.approx(xx + yy - 2 * xy, rel=1e-10)


def test_frechet_closed_forms():
    rng = np.random.default_rng(0)
    # diagonal Gaussians: ||mu1-mu2||^2 + sum (s1 - s2)^2 with sample moments
    X = rng.normal(size=(400, 3)) * [1.0, 2.0, 0.5]
    Y = rng.normal(size=(300, 3)) * [3.0, 1.0, 0.5] + [1.0, -2.0, 0.0]
    cx, cy = np.cov(X, rowvar=False), np.cov(Y, rowvar=False)
    mx, my = X.mean(0), Y.mean(0)
    expected = np.sum((mx - my) ** 2) + np.trace(cx + cy - 2 * np.real(linalg.sqrtm(cx @ cy)))
    assert M.frechet(X, Y) == pytest.approx(expected, rel=1e-9)
    # 1-D: exactly (m1-m2)^2 + (s1-s2)^2
    a, b = rng.normal(size=(50, 1)), 2 + 3 * rng.normal(size=(70, 1))
    s1, s2 = np.std(a, ddof=1), np.std(b, ddof=1)
    assert M.frechet(a, b) == pytest.approx((a.mean() - b.mean()) ** 2 + (s1 - s2) ** 2, rel=1e-10)
    assert M.frechet(X, X) == pytest.approx(0.0, abs=1e-8)


def test_rankme_formula_and_hand_cases(pair):
    X, _ = pair
    s = np.linalg.svd(X, compute_uv=False)
    p = s / s.sum() + 1e-7
    assert M.rankme(X) == pytest.approx(np.exp(-np.sum(p * np.log(p))), rel=1e-12)
    # d equal singular values: entropy log d (up to the 1e-7 offset)
    assert M.rankme(np.eye(6) * 4.0) == pytest.approx(6.0, rel=1e-5)
    # rank one: effective rank 1
    v = np.outer(np.arange(1, 9), np.ones(5))
    assert M.rankme(v) == pytest.approx(1.0, rel=1e-5)


def test_lid_matches_scikit_dimension_directly():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3)) @ rng.normal(size=(3, 10))  # a 3-D plane in 10-D
    assert M.lid(X, method="mle", k=20) == skdim.id.MLE().fit(X, n_neighbors=20).dimension_
    assert M.lid(X, method="twonn") == skdim.id.TwoNN().fit(X).dimension_
    np.testing.assert_array_equal(
        M.lid_pointwise(X, method="mle", k=20), skdim.id.MLE().fit(X, n_neighbors=20).dimension_pw_
    )
    assert 2.3 < M.lid(X, method="twonn") < 3.7  # and it sees the planted dimension


def test_lid_rejects_unknown_method():
    with pytest.raises(ValueError, match="mle"):
        M.lid(np.random.default_rng(0).normal(size=(50, 4)), method="pca")


# ---------- small hand cases with exact answers ----------

def on_circle(deg):
    r = np.deg2rad(np.asarray(deg, dtype=float))
    return np.stack([np.cos(r), np.sin(r)], axis=1)


def test_knn_hand_cases():
    X = on_circle([0, 10, 100, 110])
    swapped = on_circle([0, 100, 10, 110])  # items 1 and 2 trade places
    other = on_circle([0, 10, 100, 200])
    assert M.mutual_knn(X, swapped, k=1) == 0.0
    assert M.cycle_knn(X, swapped, k=1) == 0.0
    assert M.mutual_knn(X, other, k=1) == 0.75
    assert M.cycle_knn(X, other, k=1) == 0.75


def test_same_space_hand_cases():
    X = np.random.default_rng(0).normal(size=(20, 5))
    assert M.recall_at_k(X, X, k=1) == 1.0
    assert M.median_rank(X, X) == 1.0
    assert M.mean_ap(X, X) == 1.0
    assert M.alignment(X, X) == pytest.approx(0.0, abs=1e-12)
    e1 = np.tile([1.0, 0.0], (4, 1))
    e2 = np.tile([0.0, 3.0], (4, 1))
    assert M.modality_gap(e1, e2) == pytest.approx(np.sqrt(2))
    assert M.uniformity(np.array([[1.0, 0.0], [-1.0, 0.0]])) == pytest.approx(-8.0)


def test_cka_hand_cases():
    X = np.random.default_rng(0).normal(size=(30, 4))
    Q, _ = np.linalg.qr(np.random.default_rng(1).normal(size=(4, 4)))
    assert M.cka(X, 3 * X @ Q) == pytest.approx(1.0, abs=1e-12)
    # orthogonal one-hot codes of two unrelated labellings: centred linear CKA is exactly 0
    a = np.array([[1, 0], [1, 0], [0, 1], [0, 1]], dtype=float)
    b = np.array([[1, 0], [0, 1], [1, 0], [0, 1]], dtype=float)
    assert M.cka(a, b) == pytest.approx(0.0, abs=1e-15)
