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


def reorder_alignment(V, T_pos, T_neg, *, k: int = 10) -> dict[str, float]:
    """Positive vs reorder-negative alignment.

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


def arrow_of_time(V, V_reversed) -> float:
    """How far time reversal moves each video, relative to the spread between videos.

    ``mean_i d(v_i, v_i^rev) / mean_{i≠j} d(v_i, v_j)`` with cosine distance ``d = 1 - cos``.
    0: the space ignores time direction (e.g. frame averaging); values near 1: reversal moves a
    video as far as an unrelated video is.
    """
    V, R = as_matrix(V, "V"), as_matrix(V_reversed, "V_reversed")
    check_paired(V, R, "V", "V_reversed")
    Vn, Rn = l2_normalize(V), l2_normalize(R)
    self_d = 1.0 - np.sum(Vn * Rn, axis=1)
    G = 1.0 - Vn @ Vn.T
    n = len(V)
    between = (G.sum() - np.trace(G)) / (n * (n - 1))
    if between <= 0:
        raise ValueError("all videos have the same embedding: the spread between videos is zero")
    return float(self_d.mean() / between)


def chiral_accuracy(V, T_pos, T_neg) -> float:
    """Chiral retrieval in a shared space: share of videos closer to their caption than to its
    temporal opposite (``cos(v, t) > cos(v, t_neg)``). 0.5 is chance."""
    V, T_pos, T_neg = as_matrix(V, "V"), as_matrix(T_pos, "T_pos"), as_matrix(T_neg, "T_neg")
    check_paired(V, T_pos, "V", "T_pos")
    if V.shape[1] != T_pos.shape[1] or T_pos.shape[1] != T_neg.shape[1]:
        raise ValueError("chiral retrieval needs videos and captions in one shared space (same dimension)")
    Vn = l2_normalize(V)
    return float(np.mean(np.sum(Vn * l2_normalize(T_pos), 1) > np.sum(Vn * l2_normalize(T_neg), 1)))
