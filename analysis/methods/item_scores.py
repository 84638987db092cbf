"""Per-item scores between two layers of the same items: where a layer pair agrees and where it does not.

A grid cell's mutual k-NN score is a mean over items; these functions keep the items apart, so the
dashboard can list the items two layers disagree on first (outliers), and score any subset of items
(a selection on a map) against its own chance level. Neighbours are exact cosine k-NN with the item
itself excluded (:func:`analysis.metrics.neighbors.knn_search`, the search the grids use), so an
item's agreement averages to the grid's :func:`analysis.metrics.knn.mutual_knn` over all items.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.methods.probes import knn_predictions
from analysis.metrics.neighbors import knn_search, l2_normalize
from analysis.metrics.validation import as_matrix


def _paired(A, B) -> tuple[np.ndarray, np.ndarray]:
    A, B = as_matrix(A, "A"), as_matrix(B, "B")
    if A.shape[0] != B.shape[0]:
        raise ValueError(f"A and B must hold the same items, row for row: got {A.shape[0]} and {B.shape[0]} rows")
    return A, B


def neighbour_lists(X: np.ndarray, k: int) -> np.ndarray | None:
    """``(N, k)`` the exact cosine k nearest other rows of each row of ``X`` ``(N, d)``; None when
    every row is the same point (a collapsed layer has no neighbours, only tie-breaking)."""
    found = knn_search(np.asarray(X), int(k))
    return None if found.collapsed else found.idx


def agreement_from_lists(idx_a: np.ndarray, idx_b: np.ndarray) -> np.ndarray:
    """``(N,)`` ``|N_k^A(i) ∩ N_k^B(i)| / k`` from two ``(N, k)`` neighbour lists of the same items."""
    idx_a, idx_b = np.asarray(idx_a), np.asarray(idx_b)
    k = idx_a.shape[1]
    return np.array([len(np.intersect1d(a, b, assume_unique=True)) / k for a, b in zip(idx_a, idx_b)],
                    dtype=np.float64)


def item_agreement(A, B, *, k: int = 10) -> np.ndarray:
    """Each item's own mutual k-NN agreement between two layers.

    Args:
        A: ``(N, p)`` one layer's embeddings; B: ``(N, q)`` another layer's (or model's), row i the same item.
        k: neighbours per item (the item itself excluded), ``1 <= k < N``.
    Returns:
        ``(N,)`` float: ``|N_k^A(i) ∩ N_k^B(i)| / k`` in ``[0, 1]``, higher is more agreement; chance is
        about ``k / (N - 1)``. Its mean is :func:`analysis.metrics.knn.mutual_knn` (Huh et al. 2024).
        Invariant to rotation and scaling of either layer. All NaN when a layer is collapsed.

    >>> import numpy as np; X = np.random.default_rng(0).normal(size=(20, 4))
    >>> float(item_agreement(X, 2 * X, k=3).min())
    1.0
    """
    A, B = _paired(A, B)
    idx_a, idx_b = neighbour_lists(A, k), neighbour_lists(B, k)
    if idx_a is None or idx_b is None:
        return np.full(A.shape[0], np.nan)
    return agreement_from_lists(idx_a, idx_b)


@dataclass(frozen=True)
class SubsetAgreement:
    value: float | None  #: mean agreement over the subset's items, neighbours searched inside it; None under 2
    #: items or on a collapsed layer
    chance: float | None  #: k / (n - 1): the expected agreement of two unrelated layers on n items
    n: int  #: items in the subset
    k: int  #: neighbours used: the asked k, at most n - 1


def subset_agreement(A, B, rows, *, k: int = 10) -> SubsetAgreement:
    """Mutual k-NN of two layers restricted to the items ``rows`` (indices into A's and B's rows):
    neighbours are searched among those items only, so the score says whether the layers agree
    *within* the selection; its chance level ``k/(n-1)`` grows as the subset shrinks, which is why
    it travels with the value. ``k`` shrinks to ``n - 1`` on a small subset."""
    A, B = _paired(A, B)
    rows = np.unique(np.asarray(list(rows), dtype=np.int64))
    n = len(rows)
    if n < 2:
        return SubsetAgreement(None, None, n, 0)
    k = int(min(k, n - 1))
    scores = item_agreement(A[rows], B[rows], k=k)
    value = float(scores.mean()) if np.isfinite(scores).all() else None
    return SubsetAgreement(value, k / (n - 1), n, k)


def knn_probe_correct(X, y, *, k: int = 10) -> np.ndarray | None:
    """Each item's leave-one-out k-NN probe verdict at one layer.

    Args:
        X: ``(N, d)`` embeddings; y: ``(N,)`` class codes 0..C-1; k: neighbours voting.
    Returns:
        ``(N,)`` bool: the majority class of the item's k nearest other items (ties by the larger
        summed cosine, then the lower class: :func:`analysis.methods.probes.knn_predictions`, the
        probes study's rule) equals its own class. Its mean is the layer's k-NN probe accuracy.
        None when the layer is collapsed (every row the same point): its neighbour lists are decided by
        tie-breaking alone, so no item has a verdict (the probes study calls the accuracy undefined).
    """
    X = as_matrix(X, "X")
    y = np.asarray(y, dtype=np.int64)
    idx = neighbour_lists(X, k)
    if idx is None:
        return None
    Xn = l2_normalize(X.astype(np.float64))
    sim = np.einsum("nd,nkd->nk", Xn, Xn[idx])
    return knn_predictions(idx, sim, y, int(y.max()) + 1) == y
