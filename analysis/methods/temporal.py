"""Temporal probes: does a space encode the order of events, or only which events occur?

References: the video–text alignment paper (Test of Time, reorder negatives) and the nuanced
video retrieval paper (chiral retrieval). Inputs are one layer's embeddings ``(N, d)``.
"""

from __future__ import annotations

import numpy as np

from analysis.metrics.neighbors import cosine_topk, cross_topk, l2_normalize
from analysis.metrics.validation import as_matrix, check_k, check_paired

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

    Neighbours are exact float64 cosine neighbours, ties to the lower index (the V and positive
    lists by ``knn_search``, the negative's by :func:`analysis.metrics.neighbors.cross_topk`), so the
    values are the item resample ``0..N-1`` of :func:`reorder_resamples`.
    """
    V, T_pos, T_neg = as_matrix(V, "V"), as_matrix(T_pos, "T_pos"), as_matrix(T_neg, "T_neg")
    check_paired(V, T_pos, "V", "T_pos")
    check_paired(T_pos, T_neg, "T_pos", "T_neg")
    n = len(V)
    check_k(n, k)
    v_idx, _ = cosine_topk(l2_normalize(V), k)
    p_idx, _ = cosine_topk(l2_normalize(T_pos), k)
    n_idx, _ = cross_topk(T_neg, T_pos, k)  # neighbours among the other items' positives
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
    from analysis.grid import best_cell, layer_grid

    T_pos, T_neg = np.asarray(T_pos), np.asarray(T_neg)
    if T_pos.shape != T_neg.shape:
        raise ValueError(f"T_pos and T_neg must have one shape (layers, N, d): got {T_pos.shape} and {T_neg.shape}")
    grid = layer_grid(V, T_pos, metric="mutual_knn", k=k)
    a, b, _ = best_cell(grid, higher_is_better=True)
    r = reorder_alignment(V[a], T_pos[b], T_neg[b], k=k)
    return {"layer_v": a, "layer_t": b, **r, "k": int(k), "positive_grid": grid}


#: what the reorder probe's intervals are, said wherever they are stored or drawn
REORDER_INTERVAL_METHOD = ("paired item bootstrap: items resampled with replacement, the k-NN lists of every "
                           "resample found among its own items (copies of an item are not each other's "
                           "neighbours), positive, negative and drop scored on the same resamples; percentile "
                           "interval shifted by estimate - median (as every LayerScope bootstrap); the layer pair "
                           "is chosen once on the full data, so the interval is conditional on that pair")


#: bytes of the vision side's memoised resample lists (the positive and the negative read each once)
REORDER_MEMO_BYTES = 64 << 20


def reorder_spaces(V, T_pos, T_neg, k: int) -> tuple:
    """The three :class:`analysis.bootstrap.ResampleNeighbours` of the probe: the vision rows, the
    positive captions, and the negative captions as queries among the positives."""
    from analysis.bootstrap import ResampleNeighbours

    return (ResampleNeighbours(V, k, memo_bytes=REORDER_MEMO_BYTES), ResampleNeighbours(T_pos, k),
            ResampleNeighbours(T_pos, k, queries=T_neg))


def reorder_resamples(V, T_pos, T_neg, IX, *, k: int = REORDER_K, spaces=None) -> dict[str, np.ndarray]:
    """:func:`reorder_alignment` on each item resample: ``{"positive", "negative", "drop"}``, each ``(B,)``.

    Resample ``b`` takes rows ``IX[b]`` ``(B, N)`` of all three sides (an item keeps its video, its
    caption and its negative together). Its lists are those of the resampled set: a position's k
    nearest *positions*, copies of its own item left out (never their own neighbours), ties to the
    lower position, an item drawn c times filling up to c slots; the negative's query is the
    position's negative caption, its candidates the positives of the other items' positions. Each
    list is derived from lists computed once per side (:class:`analysis.bootstrap.ResampleNeighbours`,
    the grids' bootstrap machinery; the negative's a space of ``queries``), and each score is
    :func:`analysis.bootstrap.list_overlap`. ``drop = positive − negative`` on the same resample.
    NaN where a resample holds ``<= k`` distinct items, is collapsed on a side, or a side's lists are
    decided by ties there. ``spaces``: :func:`reorder_spaces` of the same rows and k, when held.
    """
    from analysis.bootstrap import list_overlap

    V, T_pos, T_neg = as_matrix(V, "V"), as_matrix(T_pos, "T_pos"), as_matrix(T_neg, "T_neg")
    check_paired(V, T_pos, "V", "T_pos")
    check_paired(T_pos, T_neg, "T_pos", "T_neg")
    check_k(len(V), k)
    IX = np.atleast_2d(np.asarray(IX))
    sv, sp, sn = reorder_spaces(V, T_pos, T_neg, k) if spaces is None else spaces
    if any(space.k != k or space.n != len(V) for space in (sv, sp, sn)):
        raise ValueError(f"reorder_resamples: spaces built for another k or item count than k={k}, N={len(V)}")
    pos = np.array([list_overlap(sv, sp, ix) for ix in IX])
    neg = np.array([list_overlap(sv, sn, ix) for ix in IX])
    return {"positive": pos, "negative": neg, "drop": pos - neg}


#: the range of each reorder value: the interval is clipped to it
REORDER_BOUNDS = {"positive": (0.0, 1.0), "negative": (0.0, 1.0), "drop": (-1.0, 1.0)}


def reorder_intervals(V, T_pos, T_neg, *, k: int = REORDER_K, n_boot: int = 200, seed: int = 0,
                      level: float = 0.95, estimate: dict | None = None) -> dict:
    """Paired item-bootstrap intervals of ``positive``, ``negative`` and ``drop`` at ONE layer pair.

    Args:
        V, T_pos, T_neg: ``(N, d)`` the chosen layer pair's rows (as :func:`reorder_alignment`).
        k: the probe's neighbours. n_boot: resamples (``>= 2``). seed: of
            :func:`analysis.bootstrap.resample_indices` (``default_rng(seed)``, the draw every
            LayerScope bootstrap of N items makes). level: of the intervals.
        estimate: :func:`reorder_alignment`'s values on the full sample when the caller has them.
    Returns:
        ``{"positive", "negative", "drop": [low, high] or None, "estimate": {...}, "level", "n_boot",
        "n_valid" (resamples scored), "seed", "k", "n_items", "chance": k/(N−1), "method", "reason"}``.
        Each interval: the ``(1∓level)/2`` percentiles of the resampled values (:func:`reorder_resamples`,
        NaN ones skipped) shifted by ``estimate − median``, clipped to :data:`REORDER_BOUNDS`
        (Efron & Tibshirani 1993, ch. 13; the shift as in :func:`analysis.bootstrap.bootstrap_ci`).
        The layer pair is not re-chosen per resample: the interval is conditional on it.
        ``reason``: why every interval is None (a collapsed side, lists decided by ties, too few
        resamples with more than k distinct items), or how many resamples were skipped; None otherwise.
        A missing interval is None, never a number.
    Chance: random lists share ``k/(N−1)`` of their slots with any fixed list, for ``positive`` and
    ``negative`` alike; the drop's reference is 0.
    """
    from analysis.bootstrap import resample_indices
    from analysis.methods.same_space import percentile_interval
    from analysis.metrics.neighbors import is_collapsed

    V, T_pos, T_neg = as_matrix(V, "V"), as_matrix(T_pos, "T_pos"), as_matrix(T_neg, "T_neg")
    check_paired(V, T_pos, "V", "T_pos")
    check_paired(T_pos, T_neg, "T_pos", "T_neg")
    n = len(V)
    if n_boot < 2:
        raise ValueError(f"n_boot must be at least 2, got {n_boot}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    out = {"positive": None, "negative": None, "drop": None, "estimate": None, "level": float(level),
           "n_boot": int(n_boot), "n_valid": 0, "seed": int(seed), "k": int(k), "n_items": n,
           "chance": k / (n - 1) if n > 1 else None, "method": REORDER_INTERVAL_METHOD, "reason": None}
    if n <= k:
        out["reason"] = f"no interval: {n} items, the probe needs more than k={k}"
        return out
    why = [f"the {name} rows are collapsed (every row one direction): neighbours are undefined"
           for name, A in (("vision", V), ("positive-caption", T_pos), ("negative-caption", T_neg)) if is_collapsed(A)]
    if why:
        out["reason"] = "no interval: " + "; ".join(why)
        return out
    full = np.arange(n)
    spaces = reorder_spaces(V, T_pos, T_neg, k)
    tied = [f"{name} side: {t}" for name, sp in zip(("vision", "positive-caption", "negative-caption"), spaces)
            if (t := sp.tie_decided(full))]
    if tied:
        out["reason"] = "no interval: " + "; ".join(tied)
        return out
    est = dict(estimate) if estimate is not None else reorder_alignment(V, T_pos, T_neg, k=k)
    out["estimate"] = {key: float(est[key]) for key in ("positive", "negative", "drop")}
    IX = resample_indices(n, n_boot, np.random.default_rng(seed))
    samples = reorder_resamples(V, T_pos, T_neg, IX, k=k, spaces=spaces)
    ok = np.isfinite(samples["drop"])
    out["n_valid"] = int(ok.sum())
    skipped = n_boot - out["n_valid"]
    few = int(sum(len(np.unique(ix)) <= k for ix in IX))
    if skipped:
        causes = []
        if few:
            causes.append(f"{few} held <= k={k} distinct items (of N={n})")
        if skipped > few:
            causes.append(f"{skipped - few} had a side collapsed or decided by ties")
        out["reason"] = f"{skipped} of {n_boot} resamples skipped: " + ", ".join(causes)
    if out["n_valid"] < 2:
        out["reason"] = f"no interval: {out['reason']}"
        return out
    for key, bounds in REORDER_BOUNDS.items():  # all three on the same scored resamples (paired)
        out[key] = percentile_interval(out["estimate"][key], samples[key][ok], bounds, level)
    return out


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
    distances; see :mod:`analysis.metrics.degenerate`). Dividing by a spread of float32 rounding noise
    would give meaningless values (up to 1e14 on collapsed layers)."""
    from analysis.metrics.degenerate import REL_TOL, negligible

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


def choice_report(A, right, wrong) -> tuple[float, int, str | None]:
    """Two-way choice in a shared space: share of anchors closer (cosine) to ``right`` than to ``wrong``.

    Args:
        A, right, wrong: ``(N, d)`` rows of one space; row i of each belongs to item i.
    Returns:
        ``(accuracy, n_ties, reason)``. A tie (the two cosines within ``REL_TOL``, e.g. a reversed
        video whose embedding did not change) is a coin flip and counts 1/2, the expected accuracy
        of any tie-break; 0.5 is chance. When every choice ties, the space cannot make the choice
        at all: accuracy is NaN and ``reason`` says so (never a number that looks like chance).
    """
    from analysis.metrics.degenerate import REL_TOL

    A, R, W = as_matrix(A, "anchors"), as_matrix(right, "right"), as_matrix(wrong, "wrong")
    check_paired(A, R, "anchors", "right")
    check_paired(R, W, "right", "wrong")
    if not A.shape[1] == R.shape[1] == W.shape[1]:
        raise ValueError("a choice needs anchors and candidates in one shared space (same dimension): "
                         f"got d={A.shape[1]}, {R.shape[1]} and {W.shape[1]}")
    An = l2_normalize(A)
    margin = np.sum(An * l2_normalize(R), 1) - np.sum(An * l2_normalize(W), 1)
    tie = np.abs(margin) <= REL_TOL
    n_ties = int(tie.sum())
    if n_ties == len(A):
        return float("nan"), n_ties, (f"all {n_ties} choices tie: the two candidates have one embedding "
                                      "direction for every item, so the space cannot choose")
    return float(np.mean(np.where(tie, 0.5, margin > 0))), n_ties, None


def chiral_accuracy(V, T_pos, T_neg) -> float:
    """Chiral retrieval in a shared space (video to text): share of videos closer to their caption
    than to its temporal opposite (``cos(v, t) > cos(v, t_neg)``); ties count 1/2, 0.5 is chance,
    NaN when every choice ties (:func:`choice_report`). Reference: Bagad & Zisserman, nuanced
    video retrieval (RTime V2T; CiA chiral)."""
    try:
        return choice_report(V, T_pos, T_neg)[0]
    except ValueError as exc:
        if "shared space" in str(exc):
            raise ValueError("chiral retrieval needs videos and captions in one shared space (same dimension)") from None
        raise


def time_reversal_accuracy(T, V, V_reversed) -> tuple[float, int, str | None]:
    """Text to video time reversal (RTime T2V): each caption chooses between its video and that
    video played backwards; the share that picks the forward video, ``(accuracy, n_ties, reason)``
    as :func:`choice_report` (ties 1/2; NaN when reversal never changes a video's embedding).

    Args:
        T: ``(N, d)`` captions; V, V_reversed: ``(N, d)`` the videos and their time reversals,
            all in one space.
    """
    return choice_report(T, V, V_reversed)


#: how CiA's mAP averages its queries: ``action`` (TARA, Tab. 1-2: one query per action, e.g. 32 for
#: SSv2, so each action weighs the same) or ``item`` (one query per item's caption: an action with more
#: videos weighs more)
GALLERY_QUERIES = ("action", "item")


def chiral_gallery_map(T, V, *, group, action, setting: str = "chiral",
                       queries: str = "action") -> tuple[float, int, str | None]:
    """Chirality-in-Action retrieval: text queries rank videos, mAP over the queries.

    Each item i has a chiral ``group`` (a pair of temporally opposite actions, e.g. "door") and an
    ``action`` ("opening" / "closing"); query ``t_i``'s relevant videos are every video with the
    same action (several relevant items). Galleries (Bagad et al., CiA; the nuanced-retrieval paper,
    Tab. 2): ``chiral``: the videos of the query's group only (its action and the opposite);
    ``static``: its action's videos and every video outside the group; ``all``: every video.
    Items with an empty group take no part.

    ``queries``: ``action`` (default, TARA's protocol: one query per action, Tab. 1 counts 32 for
    CiA-SSv2): ``mAP = (1/|A|) Σ_a AP_a``, where an action's AP is the mean AP of its items' captions
    (CiA's query is the action's caption, which its items share, so their APs are one and the same and
    this is exactly one query per action); ``item``: ``mAP = (1/n) Σ_i AP_i`` over every item's caption,
    which weighs an action by its number of videos.

    Args:
        T: ``(N, d)`` captions; V: ``(N, d)`` videos in the same space; group, action: ``(N,)``
            labels (None or "" for items outside any chiral group).
    Returns:
        ``(mAP, n_queries, reason)`` in ``[0, 1]``, ``n_queries`` the actions (or items) averaged: NaN
        and the reason when no query has both a relevant and a wrong video in its gallery (e.g. a
        group with one action only).
    """
    from analysis.metrics.retrieval import query_average_precision

    if setting not in ("chiral", "static", "all"):
        raise ValueError(f"setting must be chiral, static or all, got {setting!r}")
    if queries not in GALLERY_QUERIES:
        raise ValueError(f"queries must be one of {', '.join(GALLERY_QUERIES)}, got {queries!r}")
    T, V = as_matrix(T, "T"), as_matrix(V, "V")
    check_paired(T, V, "T", "V")
    group = np.array(["" if g is None else str(g) for g in group], dtype=object)
    action = np.array(["" if a is None else str(a) for a in action], dtype=object)
    if len(group) != len(T) or len(action) != len(T):
        raise ValueError(f"group and action need one label per item ({len(T)})")
    member = group != ""
    key = np.array([f"{g}\x1f{a}" for g, a in zip(group, action)], dtype=object)
    aps: dict = {}  # action key -> its items' APs
    for i in np.flatnonzero(member):
        if setting == "chiral":
            gallery = np.flatnonzero(group == group[i])
        elif setting == "static":
            gallery = np.flatnonzero((group != group[i]) | (key == key[i]))
        else:
            gallery = np.arange(len(V))
        rel = key[gallery] == key[i]
        if rel.all() or not rel.any():
            continue  # nothing to rank against, or nothing to find
        labels = np.where(rel, 1, 0)
        aps.setdefault(key[i], []).append(query_average_precision(T[i:i + 1], V[gallery], query_groups=np.array([1]),
                                                                  gallery_groups=labels)[0])
    if not aps:
        return float("nan"), 0, (f"no query has both a video of its action and a wrong one in the {setting} "
                                 "gallery (does every chiral group hold two actions?)")
    if queries == "action":
        return float(np.mean([np.mean(v) for v in aps.values()])), len(aps), None
    every = [ap for v in aps.values() for ap in v]
    return float(np.mean(every)), len(every), None


def negated_query_recall(T_query, V, *, ks=(1, 5, 10), queries=None) -> dict[str, float]:
    """Text to video Recall@k of chosen queries over the whole video gallery (NegBench R@k, R-Neg@k).

    Args:
        T_query: ``(N, d)`` query captions (row i describes video i); V: ``(N, d)`` videos.
        queries: indices of the items whose row is a query (default: all).
    Returns:
        ``{"recall@k": share of queries whose own video ranks in the top k}`` (ties pessimistic).
    """
    from analysis.metrics.retrieval import query_ranks

    T_query, V = as_matrix(T_query, "T_query"), as_matrix(V, "V")
    check_paired(T_query, V, "T_query", "V")
    q = np.arange(len(T_query)) if queries is None else np.asarray(queries, dtype=int)
    r = query_ranks(T_query[q], V, query_groups=q, gallery_groups=np.arange(len(V)))
    return {f"recall@{k}": float(np.mean(r < k)) for k in ks}
