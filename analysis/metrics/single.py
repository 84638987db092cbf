"""Metrics of one representation: effective rank, intrinsic dimension, uniformity."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

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


@dataclass(frozen=True)
class LidReport:
    """A LID estimate with what it rests on: ``value`` (NaN when undefined, then ``reason`` says
    why), ``n_distinct`` distinct rows used out of ``n_items``."""

    value: float
    n_distinct: int
    n_items: int
    reason: str | None = None


def distinct_rows(X) -> np.ndarray:
    """Indices of one representative row per group of duplicates (rows within float32 rounding of
    each other, see :mod:`analysis.degenerate`), in order of first appearance."""
    from ..degenerate import duplicate_labels, layer_status

    X = np.asarray(X, dtype=np.float64)
    if layer_status(X).collapsed:
        return np.array([0])
    labels = duplicate_labels(X)
    _, first = np.unique(labels, return_index=True)
    return np.sort(first)


def lid_report(X, *, method: str = "mle", k: int = 20) -> LidReport:
    """:func:`lid` on the distinct rows of ``X`` ``(N, d)``, with the number of rows it used.

    Duplicated items put zero distances into the estimators (``log(r_k / r_j)`` with ``r_j = 0``),
    which turns whole layers into LID 0 or inf; so duplicates are merged first. The value is NaN
    with a reason when fewer than ``k + 1`` distinct rows remain (MLE needs ``k`` neighbours) or
    fewer than 3 (TwoNN needs 2), e.g. on a collapsed layer.
    """
    X = as_matrix(X)
    if method not in LID_METHODS:
        raise ValueError(f"lid method must be one of {LID_METHODS}, got {method!r}")
    need = k + 1 if method == "mle" else 3
    if method == "mle":
        check_k(X.shape[0], k)
    else:
        check_k(X.shape[0], 2, name="N for TwoNN (needs 2 neighbours)")
    keep = distinct_rows(X)
    n, nd = X.shape[0], len(keep)
    if nd < need:
        return LidReport(float("nan"), nd, n, f"only {nd} distinct rows of {n}: {method} LID needs at least "
                                              f"{need}" + (f" (k={k} neighbours)" if method == "mle" else ""))
    Xd = X[keep]
    if method == "mle":
        est = _lid_estimator(method).fit(Xd, n_neighbors=k)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = _lid_estimator(method).fit(Xd)
    return LidReport(float(est.dimension_), nd, n, None)


def lid(X, *, method: str = "mle", k: int = 20) -> float:
    """Global local-intrinsic-dimension estimate through scikit-dimension, on distinct rows.

    ``method="mle"``: Levina–Bickel maximum likelihood on the ``k`` nearest neighbours of each
    point, combined as ``1 / mean(1/d_i)``. ``method="twonn"``: TwoNN (Facco et al., 2017), which
    uses only the two nearest neighbours (``k`` unused). Result ``> 0``; no preferred direction.
    Duplicated rows are merged first; NaN when too few distinct rows remain (see :func:`lid_report`).
    """
    return lid_report(X, method=method, k=k).value


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
