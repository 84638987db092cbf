"""Metrics for paired embeddings in one space (a joint video–text space such as CLIP's, or the two
sides of an MLLM).

Row i of X and row i of Y are partners; similarity is cosine. A query's *relevant set* is its
partner alone by default; with ``groups`` (one label per item) it is every item of the query's
group, so a gallery may hold several right answers (items sharing an action, a caption, or
copies of one item in a bootstrap resample).

Ties are ranked pessimistically everywhere: a wrong candidate scoring exactly as high as a right
one is placed before it, so a space that cannot tell items apart is never rewarded for it.
"""

from __future__ import annotations

import numpy as np

from analysis.metrics.neighbors import l2_normalize, row_chunks
from analysis.metrics.validation import as_matrix, check_paired, check_same_space

DIRECTIONS = ("x2y", "y2x", "both")


def _same_space_pair(X, Y):
    X = as_matrix(X, "X")
    Y = as_matrix(Y, "Y")
    check_paired(X, Y)
    check_same_space(X, Y)
    return X, Y


def group_codes(groups, n: int, name: str = "groups") -> np.ndarray:
    """``(n,)`` integer codes of any hashable labels (equal labels, equal codes); None: ``0..n-1``."""
    if groups is None:
        return np.arange(n)
    g = np.asarray(groups)
    if g.ndim != 1 or len(g) != n:
        raise ValueError(f"{name} must hold one label per item ({n}), got shape {g.shape}")
    return np.unique(g.astype(str) if g.dtype == object else g, return_inverse=True)[1].reshape(-1)


def _blocks(Q, G, q_codes, g_codes):
    """``(start, S, rel)`` per block of query rows: cosines ``(b, n)`` and the relevance mask."""
    Qn, Gn = l2_normalize(Q), l2_normalize(G)
    for start, stop in row_chunks(len(Qn), len(Gn)):
        yield start, Qn[start:stop] @ Gn.T, q_codes[start:stop, None] == g_codes[None, :]


def query_ranks(Q, G, *, query_groups=None, gallery_groups=None) -> np.ndarray:
    """0-based rank of each query's best relevant candidate: ``#{j not relevant: s_ij >= max_r s_ir}``.

    Args:
        Q: ``(m, d)`` queries; G: ``(n, d)`` gallery in the same space.
        query_groups, gallery_groups: labels; gallery item j is relevant to query i when the labels
            are equal. Both None: paired rows (``m == n``), item i relevant to query i only.
    Returns:
        ``(m,)`` float ranks in ``[0, n - 1]``; NaN for a query with no relevant gallery item.
    """
    Q, G = as_matrix(Q, "Q", min_rows=1), as_matrix(G, "G")
    check_same_space(Q, G, "Q", "G")
    if query_groups is None and gallery_groups is None:
        check_paired(Q, G, "Q", "G")
    qc, gc = _codes_pair(query_groups, gallery_groups, len(Q), len(G))
    out = np.empty(len(Q))
    for start, S, rel in _blocks(Q, G, qc, gc):
        best = np.where(rel, S, -np.inf).max(axis=1)
        out[start:start + len(S)] = np.sum(~rel & (S >= best[:, None]), axis=1)
        out[start:start + len(S)][~rel.any(axis=1)] = np.nan
    return out


def _codes_pair(qg, gg, m, n):
    """Shared integer codes for query and gallery labels (one vocabulary for both)."""
    if qg is None and gg is None:
        return np.arange(m), np.arange(n)
    if qg is None or gg is None:
        raise ValueError("give query_groups and gallery_groups together (or neither, for paired rows)")
    q, g = np.asarray(qg), np.asarray(gg)
    if q.ndim != 1 or len(q) != m:
        raise ValueError(f"query_groups must hold one label per query ({m}), got shape {q.shape}")
    if g.ndim != 1 or len(g) != n:
        raise ValueError(f"gallery_groups must hold one label per gallery item ({n}), got shape {g.shape}")
    both = np.concatenate([q.astype(str), g.astype(str)])
    codes = np.unique(both, return_inverse=True)[1].reshape(-1)
    return codes[:m], codes[m:]


def query_average_precision(Q, G, *, query_groups=None, gallery_groups=None) -> np.ndarray:
    """Average precision of each query over the whole gallery, ``(m,)`` in ``(0, 1]``.

    ``AP_i = (1/|R_i|) Σ_{r ∈ R_i} |{relevant at positions <= pos(r)}| / pos(r)``: the gallery is
    sorted by decreasing cosine, ties with a non-relevant candidate put the relevant one last (the
    order among tied relevant items does not change AP). NaN for a query with no relevant item.
    Reference: Manning, Raghavan & Schütze (2008), Introduction to Information Retrieval, §8.4.
    Arguments as :func:`query_ranks`.
    """
    Q, G = as_matrix(Q, "Q", min_rows=1), as_matrix(G, "G")
    check_same_space(Q, G, "Q", "G")
    if query_groups is None and gallery_groups is None:
        check_paired(Q, G, "Q", "G")
        return 1.0 / (query_ranks(Q, G) + 1.0)  # one relevant item: AP = 1 / its position
    qc, gc = _codes_pair(query_groups, gallery_groups, len(Q), len(G))
    out = np.empty(len(Q))
    pos = np.arange(1, len(G) + 1)
    for start, S, rel in _blocks(Q, G, qc, gc):
        order = np.lexsort((rel, -S), axis=1)  # by score, then non-relevant (False) first on ties
        hits = np.take_along_axis(rel, order, axis=1)
        prec = np.cumsum(hits, axis=1) / pos
        n_rel = hits.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[start:start + len(S)] = np.where(n_rel > 0, (prec * hits).sum(axis=1) / n_rel, np.nan)
    return out


def partner_ranks(X, Y, *, groups=None) -> np.ndarray:
    """0-based rank of each query's true partner among all candidates, X rows querying Y rows.

    ``rank_i = #{j not relevant to i : cos(x_i, y_j) >= max_{r relevant} cos(x_i, y_r)}``; without
    ``groups`` the relevant set is ``{i}``, so ``rank_i = #{j != i : cos(x_i, y_j) >= cos(x_i, y_i)}``.
    Ties are ranked pessimistically: a candidate scoring exactly as high as the partner is placed
    before it, so a space that cannot tell items apart (all-zero or all-identical rows) ranks every
    partner last (``N - 1``) instead of first. Shape ``(N,)``, integers.

    >>> import numpy as np; X = np.random.default_rng(0).normal(size=(50, 8))
    >>> int(partner_ranks(X, X).max())  # every partner at rank 0
    0
    """
    X, Y = _same_space_pair(X, Y)
    if groups is not None:
        g = group_codes(groups, len(X))
        return query_ranks(X, Y, query_groups=g, gallery_groups=g).astype(np.int64)
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


def _pairs(X, Y, direction):
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    return {"x2y": [(X, Y)], "y2x": [(Y, X)], "both": [(X, Y), (Y, X)]}[direction]


def _ranks(X, Y, direction, groups=None):
    return [partner_ranks(a, b, groups=groups) for a, b in _pairs(X, Y, direction)]


def recall_at_k(X, Y, *, k: int = 1, direction: str = "x2y", groups=None) -> float:
    """Share of queries with a relevant candidate among the top ``k``, in ``[0, 1]`` (higher better).

    ``direction="both"`` averages x→y and y→x; ``groups`` (N,) labels make every item of the query's
    group relevant (default: the partner alone).

    >>> import numpy as np; X = np.random.default_rng(0).normal(size=(50, 8))
    >>> recall_at_k(X, X, k=1)
    1.0
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"recall k must be a positive integer, got {k!r}")
    return float(np.mean([np.mean(r < k) for r in _ranks(X, Y, direction, groups)]))


def mean_ap(X, Y, *, direction: str = "x2y", groups=None) -> float:
    """Mean average precision, in ``(0, 1]`` (higher better).

    Without ``groups`` each query has one relevant candidate, its partner, and AP is
    ``1/(rank+1)``. With ``groups`` (N,) labels, query i's relevant set is every item j with
    ``groups[j] == groups[i]`` and AP is :func:`query_average_precision` over that set.
    ``direction="both"`` averages x→y and y→x.

    >>> import numpy as np; X = np.random.default_rng(0).normal(size=(50, 8))
    >>> mean_ap(X, X)  # each item's partner ranked first
    1.0
    """
    out = []
    for a, b in _pairs(*_same_space_pair(X, Y), direction):
        if groups is None:
            out.append(np.mean(1.0 / (partner_ranks(a, b) + 1.0)))
        else:
            g = group_codes(groups, len(a))
            out.append(np.mean(query_average_precision(a, b, query_groups=g, gallery_groups=g)))
    return float(np.mean(out))


def median_rank(X, Y, *, direction: str = "x2y", groups=None) -> float:
    """Median 1-based rank of the first relevant candidate, in ``[1, N]``; lower is better.

    >>> import numpy as np; X = np.random.default_rng(0).normal(size=(50, 8))
    >>> median_rank(X, X)
    1.0
    """
    return float(np.mean([np.median(r + 1.0) for r in _ranks(X, Y, direction, groups)]))


def retrieval(X, Y, *, groups=None) -> dict[str, float]:
    """Every retrieval number at once: Recall@1/5/10 both ways, mAP and median rank both ways.

    >>> import numpy as np; X = np.random.default_rng(0).normal(size=(50, 8))
    >>> retrieval(X, X)["recall@1_x2y"]
    1.0
    """
    X, Y = _same_space_pair(X, Y)
    out: dict[str, float] = {}
    for name, (a, b) in (("x2y", (X, Y)), ("y2x", (Y, X))):
        r = partner_ranks(a, b, groups=groups)
        for k in (1, 5, 10):
            out[f"recall@{k}_{name}"] = float(np.mean(r < k))
        if groups is None:
            out[f"map_{name}"] = float(np.mean(1.0 / (r + 1.0)))
        else:
            g = group_codes(groups, len(a))
            out[f"map_{name}"] = float(np.mean(query_average_precision(a, b, query_groups=g, gallery_groups=g)))
        out[f"median_rank_{name}"] = float(np.median(r + 1.0))
    return out


def modality_gap(X, Y) -> float:
    """``||mean(x̂) - mean(ŷ)||`` on L2-normalised rows, in ``[0, 2]``; lower means the modalities mix.

    Reference: Liang et al. (2022), Mind the Gap.

    >>> import numpy as np; X = np.random.default_rng(0).normal(size=(50, 8))
    >>> modality_gap(X, X)  # identical spaces share their mean direction
    0.0
    """
    X, Y = _same_space_pair(X, Y)
    return float(np.linalg.norm(l2_normalize(X).mean(axis=0) - l2_normalize(Y).mean(axis=0)))


def alignment(X, Y, *, alpha: float = 2.0) -> float:
    """Wang & Isola (2020) alignment ``E ||x̂_i - ŷ_i||^alpha``, in ``[0, 2^alpha]``; lower is better.

    >>> import numpy as np; X = np.random.default_rng(0).normal(size=(50, 8))
    >>> alignment(X, X)  # every pair at distance 0
    0.0
    """
    X, Y = _same_space_pair(X, Y)
    if not alpha > 0:
        raise ValueError(f"alpha must be positive, got {alpha!r}")
    d = np.linalg.norm(l2_normalize(X) - l2_normalize(Y), axis=1)
    return float(np.mean(d**alpha))
