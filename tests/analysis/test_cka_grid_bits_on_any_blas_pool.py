"""A CKA grid's cells are the same bits whatever the BLAS pool's size, on the packed route, the
row-block route (N above ``GRAM_CACHE_MAX_N``) and the float64 feature route (N above
``FEATURE_CKA_MIN_N``), each bound lowered here so the cases stay small: every
product runs on one BLAS thread (OpenBLAS sums a long 1-D dot or a thin product in another order
on two threads), several layers' blocks at once on threads of our own. So a grid computed outside
``analyze`` (the whole pool) equals ``analyze``'s (one thread), and each cell equals its one-pair
call and the brute-force centred-Gram formula."""

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from analysis.grid import layer_grid
from analysis.metrics import kernel as K


def stack(n, layers, d, seed):
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, 5))
    return np.stack([Z @ rng.normal(size=(5, d)) + (0.3 + l) * rng.normal(size=(n, d)) + 3.0
                     for l in range(layers)])


def brute_cka(X, Y, debiased):
    """Linear CKA from full N x N Grams (Kornblith et al. 2019; unbiased HSIC: Song et al. 2012)."""
    n = len(X)
    H = np.eye(n) - 1.0 / n
    Kx, Ky = X @ X.T, Y @ Y.T
    if not debiased:
        hsic = lambda A, B: np.sum((H @ A @ H) * (H @ B @ H))  # noqa: E731
    else:
        def hsic(A, B):
            A, B = A - np.diag(np.diag(A)), B - np.diag(np.diag(B))
            one = np.ones(n)
            return (np.sum(A * B) + A.sum() * B.sum() / ((n - 1) * (n - 2))
                    - 2.0 * (one @ A @ B @ one) / (n - 2)) / (n * (n - 3))
    return hsic(Kx, Ky) / np.sqrt(hsic(Kx, Kx) * hsic(Ky, Ky))


@pytest.mark.parametrize("route", ["packed", "blocks"])
@pytest.mark.parametrize("params", [{}, {"debiased": True}, {"kernel": "rbf"}])
def test_cka_grid_is_the_same_bits_on_any_blas_pool(monkeypatch, route, params):
    n = 300
    if route == "blocks":
        monkeypatch.setattr(K, "GRAM_CACHE_MAX_N", 64)
    A, B = stack(n, 3, 40, 1), stack(n, 4, 30, 2)
    grids = []
    for threads in (1, 2, 4):
        with threadpool_limits(threads, user_api="blas"):
            grids.append(layer_grid(A, B, metric="cka", **params))
    for g in grids[1:]:
        np.testing.assert_array_equal(g, grids[0])
    for a, b in [(0, 0), (2, 3)]:
        np.testing.assert_array_equal(grids[0][a, b], layer_grid(A[a:a + 1], B[b:b + 1], metric="cka", **params)[0, 0])
    if params.get("kernel", "linear") == "linear":
        want = [[brute_cka(x, y, params.get("debiased", False)) for y in B] for x in A]
        np.testing.assert_allclose(grids[0], want, rtol=1e-10)


@pytest.mark.parametrize("debiased", [False, True])
def test_feature_route_cka_is_the_same_bits_on_any_blas_pool(monkeypatch, debiased):
    monkeypatch.setattr(K, "FEATURE_CKA_MIN_N", 64)
    monkeypatch.setattr(K, "FEATURE32_CKA_MIN_N", 10**9)  # the float64 form, not the float32 blocks
    n = 3000  # products of (200 x 3000) by (3000 x 200): large enough for OpenBLAS to split them
    A, B = stack(n, 2, 200, 1), stack(n, 3, 200, 2)
    grids = []
    for threads in (1, 2):
        with threadpool_limits(threads, user_api="blas"):
            grids.append(layer_grid(A, B, metric="cka", debiased=debiased))
    np.testing.assert_array_equal(grids[1], grids[0])
    np.testing.assert_array_equal(grids[0][1, 2], layer_grid(A[1:2], B[2:3], metric="cka", debiased=debiased)[0, 0])
    Xc, Yc = A[1] - A[1].mean(0), B[2] - B[2].mean(0)
    if not debiased:  # Kornblith et al. 2019, eq. 4
        want = np.sum((Xc.T @ Yc) ** 2) / np.sqrt(np.sum((Xc.T @ Xc) ** 2) * np.sum((Yc.T @ Yc) ** 2))
        np.testing.assert_allclose(grids[0][1, 2], want, rtol=1e-10)
