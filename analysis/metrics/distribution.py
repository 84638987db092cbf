"""Distances between two distributions in one space; rows need not be paired."""

from __future__ import annotations

import numpy as np
from scipy import linalg

from ..validation import as_matrix, check_positive, check_same_space
from .kernel import median_distance, pairwise_sq_dists


def mmd(X, Y, *, sigma: float | None = None) -> float:
    """Unbiased squared maximum mean discrepancy with an RBF kernel.

    ``MMD²_u = 1/(m(m-1)) Σ_{i≠j} k(x_i,x_j) + 1/(n(n-1)) Σ_{i≠j} k(y_i,y_j) - 2/(mn) Σ k(x_i,y_j)``
    with ``k(a, b) = exp(-||a-b||² / (2σ²))``; ``sigma=None`` uses the median distance of the pooled
    sample. Near 0 (can be slightly negative) when both come from one distribution; lower is closer.
    Reference: Gretton et al. (2012), A Kernel Two-Sample Test.
    """
    X = as_matrix(X, "X")
    Y = as_matrix(Y, "Y")
    check_same_space(X, Y)
    if sigma is None:
        sigma = median_distance(np.vstack([X, Y]))
    gamma = 1.0 / (2.0 * check_positive(sigma, "sigma") ** 2)
    m, n = len(X), len(Y)
    kxx = np.exp(-gamma * pairwise_sq_dists(X, X))
    kyy = np.exp(-gamma * pairwise_sq_dists(Y, Y))
    kxy = np.exp(-gamma * pairwise_sq_dists(X, Y))
    sxx = (kxx.sum() - np.trace(kxx)) / (m * (m - 1))
    syy = (kyy.sum() - np.trace(kyy)) / (n * (n - 1))
    return float(sxx + syy - 2.0 * kxy.mean())


def frechet(X, Y) -> float:
    """Fréchet distance between Gaussians fitted to X and Y (the FID formula), ``>= 0``; lower is closer.

    ``||μx - μy||² + tr(Σx + Σy - 2 (Σx Σy)^{1/2})``. Reference: Heusel et al. (2017).
    """
    X = as_matrix(X, "X")
    Y = as_matrix(Y, "Y")
    check_same_space(X, Y)
    mx, my = X.mean(axis=0), Y.mean(axis=0)
    cx = np.atleast_2d(np.cov(X, rowvar=False))
    cy = np.atleast_2d(np.cov(Y, rowvar=False))
    covmean = linalg.sqrtm(cx @ cy)
    covmean = np.real(covmean)  # imaginary round-off from sqrtm of a near-singular product
    value = float(np.sum((mx - my) ** 2) + np.trace(cx) + np.trace(cy) - 2.0 * np.trace(covmean))
    return max(value, 0.0)
