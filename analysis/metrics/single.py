"""Metrics of one representation: effective rank, intrinsic dimension, uniformity."""

from __future__ import annotations

import warnings

import numpy as np

from ..neighbors import l2_normalize, row_chunks
from ..validation import as_matrix, check_k, check_positive

LID_METHODS = ("mle", "twonn")


def rankme(X) -> float:
    """RankMe effective rank of ``X`` ``(N, d)``, in ``[1, min(N, d)]``; higher is better.

    ``σ`` = singular values of X (no centring); ``p = σ/||σ||₁ + 1e-7``; ``exp(-Σ p log p)``.
    Reference: Garrido et al. (2023), RankMe.
    """
    X = as_matrix(X)
    s = np.linalg.svd(X, compute_uv=False)
    if s.sum() == 0:
        raise ValueError("rankme: X is all zeros")
    p = s / np.sum(np.abs(s)) + 1e-7
    return float(np.exp(-np.sum(p * np.log(p))))


def _lid_estimator(method: str):
    import skdim  # imported lazily: it pulls scikit-learn and numba-free extras

    if method == "mle":
        return skdim.id.MLE()
    if method == "twonn":
        return skdim.id.TwoNN()
    raise ValueError(f"lid method must be one of {LID_METHODS}, got {method!r}")


def lid(X, *, method: str = "mle", k: int = 20) -> float:
    """Global local-intrinsic-dimension estimate through scikit-dimension.

    ``method="mle"``: Levina–Bickel maximum likelihood on the ``k`` nearest neighbours of each
    point, combined as ``1 / mean(1/d_i)``. ``method="twonn"``: TwoNN (Facco et al., 2017), which
    uses only the two nearest neighbours (``k`` unused). Result ``> 0``; no preferred direction.
    """
    X = as_matrix(X)
    if method == "mle":
        check_k(X.shape[0], k)
        est = _lid_estimator(method).fit(X, n_neighbors=k)
    else:
        check_k(X.shape[0], 2, name="N for TwoNN (needs 2 neighbours)")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = _lid_estimator(method).fit(X)
    return float(est.dimension_)


def lid_pointwise(X, *, method: str = "mle", k: int = 20) -> np.ndarray:
    """Per-point LID ``(N,)``: MLE on each point's k neighbours, or TwoNN fitted in each point's k-neighbourhood."""
    X = as_matrix(X)
    check_k(X.shape[0], k)
    est = _lid_estimator(method)
    if method == "mle":
        return np.asarray(est.fit(X, n_neighbors=k).dimension_pw_, dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(est.fit_pw(X, n_neighbors=k).dimension_pw_, dtype=np.float64)


def uniformity(X, *, t: float = 2.0) -> float:
    """Wang & Isola (2020) uniformity ``log mean_{i≠j} exp(-t ||x̂_i - x̂_j||²)``, in ``[-4t, 0]``; lower is better."""
    X = as_matrix(X)
    check_positive(t, "t")
    Xn = l2_normalize(X)
    n = Xn.shape[0]
    total = 0.0
    for start, stop in row_chunks(n, n):
        sq = np.maximum(2.0 - 2.0 * (Xn[start:stop] @ Xn.T), 0.0)
        E = np.exp(-t * sq)
        E[np.arange(stop - start), np.arange(start, stop)] = 0.0
        total += E.sum()
    return float(np.log(total / (n * (n - 1))))
