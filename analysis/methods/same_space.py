"""Same-space scores of one layer pair: a video side ``V`` and a text side ``T`` that live in one
embedding space (an MLLM's two sides at one layer, or a dual encoder's ``joint`` layers).

:func:`score_layer` gives every number the ``same_space`` study stores, with the reason for each
number that is undefined; :func:`paired_resamples` scores the paired metrics on many item
resamples at once (for bootstrap intervals) from one ``(N, N)`` cosine matrix per direction.
Ties and duplicates follow :mod:`analysis.metrics.retrieval`: items whose captions (or videos)
have one embedding are relevant to each other's queries, so a duplicate is never a wrong answer.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse
from scipy.sparse.csgraph import connected_components

from analysis.metrics.degenerate import duplicate_labels, layer_status
from analysis.metrics.distribution import frechet, mmd
from analysis.metrics.retrieval import modality_gap, partner_ranks, query_average_precision, query_ranks
from analysis.metrics.validation import check_paired
from analysis.metrics.neighbors import l2_normalize, row_chunks

RECALL_KS = (1, 5, 10)
DIRECTIONS = ("v2t", "t2v")
#: name -> (higher_is_better, (lo, hi) bounds); one entry per number the study stores per layer
METRICS: dict[str, tuple[bool, tuple]] = {
    **{f"recall@{k}_{d}": (True, (0.0, 1.0)) for d in DIRECTIONS for k in RECALL_KS},
    **{f"map_{d}": (True, (0.0, 1.0)) for d in DIRECTIONS},
    **{f"median_rank_{d}": (False, (1.0, None)) for d in DIRECTIONS},
    "modality_gap": (False, (0.0, 2.0)),
    "alignment": (False, (0.0, 4.0)),
    "mmd": (False, (None, None)),
    "frechet": (False, (0.0, None)),
}
RANKING = tuple(m for m in METRICS if m.startswith(("recall@", "map_", "median_rank_")))
PAIRED = RANKING + ("modality_gap", "alignment")  # what item resamples can score (pairs stay together)


def duplicate_groups(V, T) -> np.ndarray:
    """``(N,)`` labels joining items whose video or whose caption has one embedding (transitively).

    Item j is then a right answer for item i's query in both directions: if ``t_i == t_j`` the
    video ``v_i`` cannot prefer its own caption, and a query ``t_i`` cannot prefer ``v_i`` over
    ``v_j``; the same with videos. Labels run from 0; all distinct when nothing is duplicated.
    """
    a, b = duplicate_labels(V), duplicate_labels(T)
    n = len(a)
    rows, cols = [], []
    for lab in (a, b):
        order = np.argsort(lab, kind="stable")
        same = lab[order][1:] == lab[order][:-1]
        rows.append(order[:-1][same])
        cols.append(order[1:][same])
    i, j = np.concatenate(rows), np.concatenate(cols)
    graph = sparse.coo_matrix((np.ones(len(i)), (i, j)), shape=(n, n))
    return connected_components(graph, directed=False)[1]


def ranking_groups(V, T, *, status_v=None, status_t=None) -> tuple[np.ndarray, str | None, str | None]:
    """The right answers the ranking metrics count, for the paired sides ``V``, ``T`` ``(N, d)``.

    Returns ``(groups, why, note)``: ``groups`` ``(N,)`` labels, the :func:`duplicate_groups` of the
    two sides (item j is a right answer for item i's query when their labels are equal; all
    distinct when nothing is duplicated; ``0..N-1`` on a degenerate side); ``why`` is None where a
    ranking exists, else why none does (a collapsed or rank-1 side: every cosine ties; every item
    in one group: every candidate is right); ``note`` what a kept ranking needs said (items
    grouped), else None. The manifest's ``group`` field (an item's source) plays no part: items
    of one source with their own videos and captions stay wrong answers for each other.
    ``status_v``, ``status_t``: the sides' :func:`analysis.metrics.degenerate.layer_status` when known.
    """
    sv = status_v if status_v is not None else layer_status(V)
    st = status_t if status_t is not None else layer_status(T)
    degenerate = [f"{side} side {s.reason}" for side, s in (("video", sv), ("text", st)) if s.degenerate]
    if degenerate:
        return np.arange(len(V)), "; ".join(degenerate) + ": every cosine ties, so there is no ranking", None
    groups = duplicate_groups(V, T)
    n_groups = len(np.unique(groups))
    if n_groups < 2:
        return groups, ("every item shares its video or caption embedding with the others: all are right "
                        "answers, nothing to rank"), None
    if n_groups < len(V):
        return groups, None, (f"{len(V) - n_groups} item(s) share a video or caption embedding with another: "
                              f"grouped as right answers for each other ({n_groups} groups)")
    return groups, None, None


def first_right_ranks(Q, G, groups, rows=None) -> np.ndarray:
    """0-based rank of each query's first right answer, ``(N,)`` integers in ``[0, N - 1]``: Q's row i
    querying G's rows, the right answers of i every j with ``groups[j] == groups[i]`` (its partner
    alone when all labels differ), ``#{j wrong : cos(q_i, g_j) >= max_{r right} cos(q_i, g_r)}``
    (:func:`analysis.metrics.retrieval.partner_ranks`: a wrong candidate tying with the best right
    one is placed before it). Recall@k is the share of queries with rank ``< k``.

    ``rows``: only these query rows ``(m,)``, each still ranked among all ``N`` rows of ``G`` (the
    same count, ``(m,)``), in row blocks of at most ``CHUNK_ENTRIES`` cosines, so a sample of the
    items gets the ranks the full ranking gives them without an ``(N, N)`` matrix."""
    trivial = len(np.unique(groups)) == len(groups)
    if rows is None:
        return partner_ranks(Q, G, groups=None if trivial else groups)
    rows = np.asarray(rows, dtype=np.int64)
    labels = np.arange(len(G)) if trivial else np.asarray(groups)
    Q, G = np.asarray(Q), np.asarray(G)
    check_paired(Q, G)
    return query_ranks(Q[rows], G, query_groups=labels[rows], gallery_groups=labels).astype(np.int64)


def _ranking(V, T, groups) -> dict[str, float]:
    out = {}
    trivial = len(np.unique(groups)) == len(groups)
    for d, (Q, G) in zip(DIRECTIONS, ((V, T), (T, V))):
        r = first_right_ranks(Q, G, groups)
        for k in RECALL_KS:
            out[f"recall@{k}_{d}"] = float(np.mean(r < k))
        ap = 1.0 / (r + 1.0) if trivial else query_average_precision(Q, G, query_groups=groups, gallery_groups=groups)
        out[f"map_{d}"] = float(np.mean(ap))
        out[f"median_rank_{d}"] = float(np.median(r + 1.0))
    return out


def score_layer(V, T, *, status_v=None, status_t=None) -> tuple[dict[str, float], dict[str, str], np.ndarray]:
    """Every same-space number of one layer pair.

    Args:
        V: ``(N, d)`` video side; T: ``(N, d)`` text side, row i of each is item i.
        status_v, status_t: the sides' :class:`analysis.metrics.degenerate.LayerStatus` when known (the
            study engine memoises them per run; cutting zero padding does not change them).
    Returns:
        ``(values, reasons, groups)``: ``values`` has every name of :data:`METRICS` (NaN where
        undefined), ``reasons`` says why for each NaN and notes what a kept value needs said
        (a collapsed side, duplicates grouped), ``groups`` the :func:`duplicate_groups` labels used.
    Rules: on a collapsed or rank-1 side every cosine ties, so no ranking exists: the ranking
    metrics are NaN with the side's reason (the pessimistic tie rule would report them as the
    worst possible, which is a fact about the data, not a score). The modality gap, alignment,
    MMD and Fréchet are defined there and kept, with the note. MMD is NaN when the pooled sample
    has no spread (its median-distance bandwidth is 0).
    """
    V = np.asarray(V, dtype=np.float64)
    T = np.asarray(T, dtype=np.float64)
    reasons: dict[str, str] = {}
    sv = status_v if status_v is not None else layer_status(V)
    st = status_t if status_t is not None else layer_status(T)
    degenerate = [f"{side} side {s.reason}" for side, s in (("video", sv), ("text", st)) if s.degenerate]
    values = dict.fromkeys(METRICS, float("nan"))
    groups, why, note = ranking_groups(V, T, status_v=sv, status_t=st)
    if why is not None:
        reasons.update(dict.fromkeys(RANKING, why))
    else:
        values.update(_ranking(V, T, groups))
        if note is not None:
            reasons.update(dict.fromkeys(RANKING, note))
    if degenerate:
        for m in ("modality_gap", "alignment", "mmd", "frechet"):
            reasons[m] = "; ".join(degenerate) + " (value kept: it is defined there)"
    values["modality_gap"] = modality_gap(V, T)
    d = np.linalg.norm(l2_normalize(V) - l2_normalize(T), axis=1)
    values["alignment"] = float(np.mean(d ** 2))
    try:
        values["mmd"] = mmd(V, T)
    except ValueError as exc:
        reasons["mmd"] = f"undefined: {exc}"
    values["frechet"] = frechet(V, T)
    return values, reasons, groups


def paired_resamples(V, T, W) -> dict[str, np.ndarray]:
    """The paired metrics of :data:`PAIRED` on ``B`` item resamples, ``{name: (B,)}``.

    Args:
        V, T: ``(N, d)`` paired sides with no duplicated items (every item its own group).
        W: ``(B, N)`` copy counts: resample b holds item a ``W[b, a]`` times (rows sum to N).
    Method: a resample's copies of an item are relevant to each other's queries (a copy is never
    a wrong answer), so query a's first relevant position is
    ``r_a = Σ_{b ≠ a} W_b [s_ab >= s_aa]`` (ties pessimistic, as on the full sample): one product
    of ``W`` with a fixed ``(N, N)`` 0/1 matrix per direction. Its ``W_a`` copies share ``r_a``,
    and its relevant copies sit at positions ``r_a + 1 .. r_a + W_a``, so
    ``AP_a = (1/W_a) Σ_{j=1..W_a} j / (r_a + j)``. Every number equals the metric of
    :func:`score_layer` on the resampled rows with copies grouped (tested).
    """
    V = l2_normalize(np.asarray(V, dtype=np.float64))
    T = l2_normalize(np.asarray(T, dtype=np.float64))
    W = np.asarray(W, dtype=np.float64)
    n = W.shape[1]
    out = {}
    for d, (Q, G) in zip(DIRECTIONS, ((V, T), (T, V))):
        R = np.empty_like(W)  # (B, N): r_a in each resample
        for start, stop in row_chunks(n, max(n, len(W))):  # bounded memory: a block of queries at a time
            S = Q[start:stop] @ G.T
            rows = np.arange(stop - start)
            C = S >= S[rows, rows + start][:, None]  # the partner's own score, as the full-sample ranks take it
            C[rows, rows + start] = False  # the partner is not a competitor
            R[:, start:stop] = W @ C.T.astype(np.float64)
        for k in RECALL_KS:
            out[f"recall@{k}_{d}"] = np.sum(W * (R < k), axis=1) / n
        ap = np.zeros_like(R)
        for j in range(1, int(W.max()) + 1):
            ap += np.where(W >= j, j / (R + j), 0.0)
        out[f"map_{d}"] = ap.sum(axis=1) / n
        out[f"median_rank_{d}"] = np.array([np.median(np.repeat(r + 1.0, w.astype(int))) for r, w in zip(R, W)])
    D = V - T
    out["modality_gap"] = np.linalg.norm(W @ D, axis=1) / n
    out["alignment"] = W @ np.sum(D * D, axis=1) / n
    return out


def percentile_interval(estimate: float, samples, bounds, level: float = 0.95) -> list | None:
    """``[lo, hi]`` from resampled values, as :func:`analysis.bootstrap.bootstrap_ci` makes them:
    the percentile interval shifted by ``estimate - median`` and clipped to the metric's bounds;
    None with fewer than 2 finite samples or a non-finite estimate."""
    ok = np.asarray(samples, dtype=np.float64)
    ok = ok[np.isfinite(ok)]
    if len(ok) < 2 or not np.isfinite(estimate):
        return None
    a = (1 - level) / 2
    lo, hi = np.quantile(ok, [a, 1 - a]) + (estimate - float(np.median(ok)))
    if bounds[0] is not None:
        lo = max(bounds[0], lo)
    if bounds[1] is not None:
        hi = min(bounds[1], hi)
    return [float(lo), float(hi)]
