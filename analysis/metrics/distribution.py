"""Distances between two distributions in one space; rows need not be paired."""

from __future__ import annotations

import numpy as np
from scipy import linalg

from analysis.metrics.validation import as_matrix, check_positive, check_same_space
from analysis.metrics.kernel import median_distance, pairwise_sq_dists


def mmd(X, Y, *, sigma: float | None = None) -> float:
    """Unbiased squared maximum mean discrepancy with an RBF kernel.

    ``MMD²_u = 1/(m(m-1)) Σ_{i≠j} k(x_i,x_j) + 1/(n(n-1)) Σ_{i≠j} k(y_i,y_j) - 2/(mn) Σ k(x_i,y_j)``
    with ``k(a, b) = exp(-||a-b||² / (2σ²))``; ``sigma=None`` uses the median distance of the pooled
    sample. Near 0 (can be slightly negative) when both come from one distribution; lower is closer.
    Reference: Gretton et al. (2012), A Kernel Two-Sample Test.

    >>> import numpy as np; X = np.random.default_rng(0).normal(size=(50, 8))
    >>> mmd(X, X + 10) > mmd(X, X)  # a shifted copy is farther than the sample itself
    True
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

    Computed without a d x d matrix square root: with ``A = (X - μx)/sqrt(m-1)`` and
    ``B = (Y - μy)/sqrt(n-1)``, ``Σx = AᵀA`` and ``Σy = BᵀB``, the non-zero eigenvalues of ``Σx Σy``
    are those of ``(ABᵀ)(ABᵀ)ᵀ``, so ``tr (Σx Σy)^{1/2} = ||ABᵀ||_*`` (the sum of the singular values
    of the ``(m, n)`` matrix ``ABᵀ``). When ``d`` is smaller than ``min(m, n)`` the same trace comes
    from the symmetric ``Σx^{1/2} Σy Σx^{1/2}`` instead. Either way the cost is cubic in
    ``min(d, m, n)``: a 4096-wide layer of 1024 items is a 1024-square problem, not a 4096-square
    one, and both routes avoid ``sqrtm`` of a non-symmetric, near-singular product.

    >>> import numpy as np; X = np.random.default_rng(0).normal(size=(50, 8))
    >>> frechet(X, X)
    0.0
    >>> round(frechet(X, X + 1), 9)  # a mean shift of 1 on each of 8 axes: ||Δμ||² = 8
    8.0
    """
    X = as_matrix(X, "X")
    Y = as_matrix(Y, "Y")
    check_same_space(X, Y)
    mx, my = X.mean(axis=0), Y.mean(axis=0)
    A = (X - mx) / np.sqrt(len(X) - 1)
    B = (Y - my) / np.sqrt(len(Y) - 1)
    if X.shape[1] < min(len(X), len(Y)):
        ev, vec = linalg.eigh(A.T @ A)
        root = (vec * np.sqrt(np.clip(ev, 0.0, None))) @ vec.T  # Σx^{1/2}
        inner = linalg.eigvalsh(root @ (B.T @ B) @ root)
        cross = float(np.sum(np.sqrt(np.clip(inner, 0.0, None))))
    else:
        cross = float(np.sum(linalg.svdvals(A @ B.T)))
    value = float(np.sum((mx - my) ** 2) + np.sum(A * A) + np.sum(B * B) - 2.0 * cross)
    return max(value, 0.0)
