"""Temporal probes: does a space encode the order of events, or only which events occur?

References: the video–text alignment paper (Test of Time, reorder negatives) and the nuanced
video retrieval paper (chiral retrieval). Inputs are one layer's embeddings ``(N, d)``.
"""

from __future__ import annotations

import numpy as np

from .neighbors import cosine_topk, l2_normalize
from .validation import as_matrix, check_k, check_paired

NEIGHBOUR_TYPES = ("same_event_same_words", "logical_equivalent", "bow_swap", "other")


def neighbour_type(i: int, j: int, event, phrasing, bow) -> str:
    """What item j is to item i: the same event in the same words, a logical equivalent (same event,
    other words), a bag-of-words swap (same words, events in the other order), or other."""
    if event[j] == event[i]:
        return "same_event_same_words" if phrasing[j] == phrasing[i] else "logical_equivalent"
    if bow[j] == bow[i]:
        return "bow_swap"
    return "other"


def first_neighbour_types(X, *, event, phrasing, bow) -> dict[str, float]:
    """Share of items whose first cosine neighbour is of each type (sums to 1)."""
    X = as_matrix(X)
    idx, _ = cosine_topk(l2_normalize(X), 1)
    counts = dict.fromkeys(NEIGHBOUR_TYPES, 0)
    for i, j in enumerate(idx[:, 0]):
        counts[neighbour_type(i, int(j), event, phrasing, bow)] += 1
    return {t: c / len(X) for t, c in counts.items()}


def _knn_sets(idx):
    return [set(row.tolist()) for row in idx]


#: neighbours of the reorder probe; its own default, independent of the grids' k
REORDER_K = 5


def reorder_alignment(V, T_pos, T_neg, *, k: int = REORDER_K) -> dict[str, float]:
    """Positive vs reorder-negative alignment at ONE layer pair (``V`` one vision layer, ``T_pos``
    and ``T_neg`` the same text layer), so positive and negative are always comparable.

    ``positive`` is mutual k-NN between V and the positive captions. ``negative`` replaces each
    item's caption by its time-reordered negative and finds that negative's k nearest neighbours
    among the *other* items' positives, then measures their overlap with the item's V-neighbours.
    A text space that encodes order gives ``negative < positive``.
    """
    V, T_pos, T_neg = as_matrix(V, "V"), as_matrix(T_pos, "T_pos"), as_matrix(T_neg, "T_neg")
    check_paired(V, T_pos, "V", "T_pos")
    check_paired(T_pos, T_neg, "T_pos", "T_neg")
    n = len(V)
    check_k(n, k)
    v_idx, _ = cosine_topk(l2_normalize(V), k)
    p_idx, _ = cosine_topk(l2_normalize(T_pos), k)
    S = l2_normalize(T_neg) @ l2_normalize(T_pos).T
    np.fill_diagonal(S, -np.inf)  # neighbours among the other items' positives
    n_idx = np.argpartition(-S, k - 1, axis=1)[:, :k]
    vs, ps, ns = _knn_sets(v_idx), _knn_sets(p_idx), _knn_sets(n_idx)
    pos = sum(len(vs[i] & ps[i]) for i in range(n)) / (k * n)
    neg = sum(len(vs[i] & ns[i]) for i in range(n)) / (k * n)
    return {"positive": pos, "negative": neg, "drop": pos - neg}


def reorder_at_best_pair(V, T_pos, T_neg, *, k: int = REORDER_K) -> dict:
    """The reorder probe at the layer pair where the positive aligns best.

    Args:
        V: ``(Lv, N, p)`` vision stack; T_pos, T_neg: ``(Lt, N, q)`` text stacks (positive captions
            and their time-reordered negatives, same items).
        k: neighbours (default :data:`REORDER_K` = 5).
    Returns:
        ``{"layer_v", "layer_t", "positive", "negative", "drop", "k", "positive_grid"}``: the pair is
        the best cell of the positive's mutual k-NN grid (``positive_grid``, ``(Lv, Lt)``), and
        positive and negative are both scored at that one pair by :func:`reorder_alignment`.
    Raises:
        analysis.grid.NoBestCell when the positive grid is flat (no pair can be chosen).
    """
    from .grid import best_cell, layer_grid

    T_pos, T_neg = np.asarray(T_pos), np.asarray(T_neg)
    if T_pos.shape != T_neg.shape:
        raise ValueError(f"T_pos and T_neg must have one shape (layers, N, d): got {T_pos.shape} and {T_neg.shape}")
    grid = layer_grid(V, T_pos, metric="mutual_knn", k=k)
    a, b, _ = best_cell(grid, higher_is_better=True)
    r = reorder_alignment(V[a], T_pos[b], T_neg[b], k=k)
    return {"layer_v": a, "layer_t": b, **r, "k": int(k), "positive_grid": grid}


def arrow_of_time(V, V_reversed) -> float:
    """How far time reversal moves each video, relative to the spread between videos.

    ``mean_i d(v_i, v_i^rev) / mean_{i≠j} d(v_i, v_j)`` with cosine distance ``d = 1 - cos``.
    0: the space ignores time direction (e.g. frame averaging); values near 1: reversal moves a
    video as far as an unrelated video is. NaN when the spread between videos is negligible
    (collapsed layer); :func:`arrow_of_time_report` also says why.
    """
    return arrow_of_time_report(V, V_reversed)[0]


def arrow_of_time_report(V, V_reversed) -> tuple[float, str | None]:
    """:func:`arrow_of_time` with its reason: ``(value, None)``, or ``(nan, reason)`` when the
    spread between videos is negligible (``<= REL_TOL``, about 1.9e-6, on a scale of 1 for cosine
    distances; see :mod:`analysis.degenerate`). Dividing by a spread of float32 rounding noise
    would give meaningless values (up to 1e14 on collapsed layers)."""
    from .degenerate import REL_TOL, negligible

    V, R = as_matrix(V, "V"), as_matrix(V_reversed, "V_reversed")
    check_paired(V, R, "V", "V_reversed")
    Vn, Rn = l2_normalize(V), l2_normalize(R)
    self_d = 1.0 - np.sum(Vn * Rn, axis=1)
    G = 1.0 - Vn @ Vn.T
    n = len(V)
    between = (G.sum() - np.trace(G)) / (n * (n - 1))
    if negligible(between, 1.0):
        return float("nan"), (f"the mean cosine distance between videos is {between:.3g} (<= {REL_TOL:.2g}): "
                              "all videos have one embedding direction, so the ratio is undefined")
    return float(self_d.mean() / between), None


def chiral_accuracy(V, T_pos, T_neg) -> float:
    """Chiral retrieval in a shared space: share of videos closer to their caption than to its
    temporal opposite (``cos(v, t) > cos(v, t_neg)``). 0.5 is chance."""
    V, T_pos, T_neg = as_matrix(V, "V"), as_matrix(T_pos, "T_pos"), as_matrix(T_neg, "T_neg")
    check_paired(V, T_pos, "V", "T_pos")
    if V.shape[1] != T_pos.shape[1] or T_pos.shape[1] != T_neg.shape[1]:
        raise ValueError("chiral retrieval needs videos and captions in one shared space (same dimension)")
    Vn = l2_normalize(V)
    return float(np.mean(np.sum(Vn * l2_normalize(T_pos), 1) > np.sum(Vn * l2_normalize(T_neg), 1)))
