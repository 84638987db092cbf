"""Metrics for paired embeddings in one space (a joint video–text space such as CLIP's).

Row i of X and row i of Y are partners; similarity is cosine.
"""

from __future__ import annotations

import numpy as np

from ..neighbors import l2_normalize, row_chunks
from ..validation import as_matrix, check_paired, check_same_space

DIRECTIONS = ("x2y", "y2x", "both")


def _same_space_pair(X, Y):
    X = as_matrix(X, "X")
    Y = as_matrix(Y, "Y")
    check_paired(X, Y)
    check_same_space(X, Y)
    return X, Y


def partner_ranks(X, Y) -> np.ndarray:
    """0-based rank of each query's true partner among all candidates, X rows querying Y rows.

    ``rank_i = #{j != i : cos(x_i, y_j) >= cos(x_i, y_i)}``. Ties are ranked pessimistically: a
    candidate scoring exactly as high as the partner is placed before it, so a space that cannot
    tell items apart (all-zero or all-identical rows) ranks every partner last (``N - 1``) instead
    of first. Shape ``(N,)``.
    """
    X, Y = _same_space_pair(X, Y)
    Xn, Yn = l2_normalize(X), l2_normalize(Y)
    n = Xn.shape[0]
    ranks = np.empty(n, dtype=np.int64)
    for start, stop in row_chunks(n, n):
        S = Xn[start:stop] @ Yn.T
        true = S[np.arange(stop - start), np.arange(start, stop)]
        rows = np.arange(stop - start)
        S[rows, rows + start] = -np.inf  # the partner itself is not a competitor
        ranks[start:stop] = np.sum(S >= true[:, None], axis=1)
    return ranks


def _ranks(X, Y, direction):
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if direction == "x2y":
        return [partner_ranks(X, Y)]
    if direction == "y2x":
        return [partner_ranks(Y, X)]
    return [partner_ranks(X, Y), partner_ranks(Y, X)]


def recall_at_k(X, Y, *, k: int = 1, direction: str = "x2y") -> float:
    """Share of queries whose partner is among the top ``k`` candidates, in ``[0, 1]`` (higher better).

    ``direction="both"`` averages x→y and y→x.
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"recall k must be a positive integer, got {k!r}")
    return float(np.mean([np.mean(r < k) for r in _ranks(X, Y, direction)]))


def mean_ap(X, Y, *, direction: str = "x2y") -> float:
    """Mean average precision with one relevant candidate per query: ``mean 1/(rank+1)``, in ``(0, 1]``."""
    return float(np.mean([np.mean(1.0 / (r + 1.0)) for r in _ranks(X, Y, direction)]))


def median_rank(X, Y, *, direction: str = "x2y") -> float:
    """Median 1-based rank of the true partner, in ``[1, N]``; lower is better."""
    return float(np.mean([np.median(r + 1.0) for r in _ranks(X, Y, direction)]))


def retrieval(X, Y) -> dict[str, float]:
    """Every retrieval number at once: Recall@1/5/10 both ways, mAP and median rank both ways."""
    out: dict[str, float] = {}
    for name, r in (("x2y", partner_ranks(X, Y)), ("y2x", partner_ranks(Y, X))):
        for k in (1, 5, 10):
            out[f"recall@{k}_{name}"] = float(np.mean(r < k))
        out[f"map_{name}"] = float(np.mean(1.0 / (r + 1.0)))
        out[f"median_rank_{name}"] = float(np.median(r + 1.0))
    return out


def modality_gap(X, Y) -> float:
    """``||mean(x̂) - mean(ŷ)||`` on L2-normalised rows, in ``[0, 2]``; lower means the modalities mix.

    Reference: Liang et al. (2022), Mind the Gap.
    """
    X, Y = _same_space_pair(X, Y)
    return float(np.linalg.norm(l2_normalize(X).mean(axis=0) - l2_normalize(Y).mean(axis=0)))


def alignment(X, Y, *, alpha: float = 2.0) -> float:
    """Wang & Isola (2020) alignment ``E ||x̂_i - ŷ_i||^alpha``, in ``[0, 2^alpha]``; lower is better."""
    X, Y = _same_space_pair(X, Y)
    if not alpha > 0:
        raise ValueError(f"alpha must be positive, got {alpha!r}")
    d = np.linalg.norm(l2_normalize(X) - l2_normalize(Y), axis=1)
    return float(np.mean(d**alpha))
