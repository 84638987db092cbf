"""The science behind DR's figures as pure functions: the least-squares line and Pearson r
of Fig. 7, Kendall's τ and W of the model ranking across text encoders (Figs. 11/12), and Fig. 2's
"video − image" offset. Inputs are plain arrays; the views read them from the result tables.

Reference: DR = "Dynamic Reflections: Probing Video Representations with Text Alignment"
(``../shared/papers/video-text-alignment-test-time-scaling.txt``).
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy import stats

from analysis.methods.downstream import EXACT_P_MAX_MODELS

#: Fig. 2's kinds of vision point, with the paper's markers (DR §"Video Encoding Pipeline")
KINDS = {"image_on_image": "■ image model on image", "image_on_video": "● image model on video",
         "video": "▲ video model"}


def _finite_pairs(x, y) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"x and y must be 1-D of one length, got shapes {x.shape} and {y.shape}")
    keep = np.isfinite(x) & np.isfinite(y)
    return x[keep], y[keep]


def line_fit(x, y) -> dict:
    """Least-squares line ``y = slope·x + intercept`` through points and their Pearson r (DR Fig. 7:
    1-caption against 10-caption alignment, y = 1.6x − 0.018, r = 0.998 in the paper).

    ``x``, ``y``: ``(n,)``; pairs with a NaN are left out (``n`` counts those kept).
    slope = cov(x, y) / var(x), intercept = ȳ − slope·x̄; r = cov / (sd_x sd_y) ∈ [−1, 1].
    Returns ``{slope, intercept, r, n, error}``: ``error`` names why no line exists (fewer than
    three points: any two points lie on a line with r = ±1, which says nothing; all x equal), ``r`` is None (with ``r_error``) when every y is equal (the line is flat and
    defined, the correlation is not).

    >>> f = line_fit([0, 1, 2], [1, 3, 5]); (f["slope"], f["intercept"], f["r"])
    (2.0, 1.0, 1.0)
    """
    x, y = _finite_pairs(x, y)
    out = {"slope": None, "intercept": None, "r": None, "n": int(len(x)), "error": None, "r_error": None}
    if len(x) < 3:
        out["error"] = f"{len(x)} point(s): a line needs at least 3 (through two points r is ±1 by construction)"
        return out
    dx, dy = x - x.mean(), y - y.mean()
    sxx, syy = float(dx @ dx), float(dy @ dy)
    # relative to the data's scale: a spread of rounding error is no spread
    if sxx <= (1e-12 * max(1.0, float(np.abs(x).max()))) ** 2 * len(x):
        out["error"] = f"all {len(x)} x values are equal ({x[0]:.4g}): the slope is undefined"
        return out
    slope = float(dx @ dy) / sxx
    out.update(slope=slope, intercept=float(y.mean() - slope * x.mean()))
    if syy <= (1e-12 * max(1.0, float(np.abs(y).max()))) ** 2 * len(y):
        out["r_error"] = "every y value is equal: Pearson r is undefined"
    else:
        out["r"] = float(np.clip(float(dx @ dy) / np.sqrt(sxx * syy), -1.0, 1.0))
    return out


def kendall_tau_b(a, b) -> float | None:
    """Kendall's τ-b between two rankings (ties counted as in scipy.stats.kendalltau's default).

    ``a``, ``b``: ``(n,)`` scores of the same n objects. τ_b = (C − D) / sqrt((P − T_a)(P − T_b)) with C,
    D the concordant and discordant pairs, P = n(n−1)/2 and T_a, T_b the pairs tied in a, in b.
    Range [−1, 1]; None when either side is all ties (no ranking) or n < 2. Reference: Kendall (1945).

    >>> kendall_tau_b([1, 2, 3], [3, 2, 1])
    -1.0
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"two rankings of the same objects needed, got shapes {a.shape} and {b.shape}")
    i, j = np.triu_indices(len(a), 1)
    sa, sb = np.sign(a[i] - a[j]), np.sign(b[i] - b[j])
    pairs = len(i)
    ties_a, ties_b = int((sa == 0).sum()), int((sb == 0).sum())
    denom = np.sqrt(float(pairs - ties_a) * float(pairs - ties_b))
    if pairs == 0 or denom == 0:
        return None
    return float((sa * sb).sum() / denom)


def _average_ranks(column: np.ndarray) -> np.ndarray:
    return stats.rankdata(column, method="average")


def kendall_w(scores) -> dict:
    """Kendall's coefficient of concordance W of m raters ranking n objects (tie-corrected).

    ``scores``: ``(n, m)``: row = object (a vision model), column = rater (a text encoder); higher is
    ranked higher. With r_ij the average rank of object i under rater j, R_i = Σ_j r_ij,
    S = Σ_i (R_i − m(n+1)/2)², T_j = Σ_groups (t³ − t) over the tie groups of rater j:
    W = 12 S / (m²(n³ − n) − m Σ_j T_j). Range [0, 1]: 1 = every rater ranks alike, 0 = no agreement.
    Returns ``{w, n, m, error}``; ``error`` when n < 3 (two objects give W = 0 or 1 by
    construction), m < 2, a NaN cell, or every rater ties
    every object. Reference: Kendall & Babington Smith (1939); Legendre (2005) for the tie correction.

    >>> kendall_w([[1, 1], [2, 2], [3, 3]])["w"]
    1.0
    """
    X = np.asarray(scores, dtype=float)
    if X.ndim != 2:
        raise ValueError(f"scores must be (objects, raters), got {X.ndim}-D")
    n, m = X.shape
    out = {"w": None, "n": int(n), "m": int(m), "error": None}
    if n < 3 or m < 2:
        out["error"] = (f"{n} model(s) × {m} text encoder(s): agreement needs at least 2 text encoders and "
                        "at least 3 models")
        return out
    if not np.isfinite(X).all():
        out["error"] = "a missing score: W needs every model scored against every text encoder"
        return out
    ranks = np.column_stack([_average_ranks(X[:, j]) for j in range(m)])
    R = ranks.sum(axis=1)
    S = float(((R - m * (n + 1) / 2) ** 2).sum())
    T = sum(float(((c := np.unique(X[:, j], return_counts=True)[1]) ** 3 - c).sum()) for j in range(m))
    denom = m ** 2 * (n ** 3 - n) - m * T
    if denom <= 0:
        out["error"] = "every text encoder ties every model: no ranking to agree on"
        return out
    out["w"] = float(12 * S / denom)
    return out


def rank_agreement(scores, raters: list[str]) -> dict:
    """Does the vision-model ranking survive a change of text encoder (DR Figs. 11/12)?

    ``scores``: ``(n, m)`` best alignment of n vision models (rows) with m text encoders (columns);
    ``raters``: the m column names. Returns ``{pairs: [{a, b, tau, why}], w: kendall_w(...)}``, τ-b for
    every pair of text encoders (None, with ``why``, where fewer than two models or a column ties them all)."""
    X = np.asarray(scores, dtype=float)
    if X.ndim != 2 or X.shape[1] != len(raters):
        raise ValueError(f"scores {X.shape} do not match {len(raters)} text encoder name(s)")
    pairs = []
    for i, j in itertools.combinations(range(len(raters)), 2):
        tau = kendall_tau_b(X[:, i], X[:, j])
        why = None if tau is not None else ("fewer than two vision models" if len(X) < 2
                                            else "a text encoder gives every vision model the same score")
        p = kendall_exact_p(X[:, i], X[:, j]) if tau is not None and len(X) <= EXACT_P_MAX_MODELS else None
        pairs.append({"a": raters[i], "b": raters[j], "tau": tau, "why": why, "p": p})
    return {"pairs": pairs, "w": kendall_w(X)}


def kendall_exact_p(a, b) -> float:
    """Two-sided exact permutation p of Kendall's τ-b between ``a`` and ``b`` ``(n,)``, n <=
    :data:`EXACT_P_MAX_MODELS`: the share of the n! orderings of ``b`` against ``a`` whose ``|τ|``
    reaches the observed one (ties kept: the denominator of τ-b does not change under a permutation, so
    the numerator C − D decides). Over 4 models τ = 1 has p = 2/24, not scipy's asymptotic value.

    >>> round(kendall_exact_p([1, 2, 3, 4], [1, 2, 3, 4]), 4)
    0.0833
    """
    from analysis.methods.downstream import _pairings

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    i, j = np.triu_indices(len(a), k=1)
    sa = np.sign(a[i] - a[j])
    observed = abs(float(sa @ np.sign(b[i] - b[j])))
    perms = b[_pairings(len(b))]  # (n!, n)
    reached = np.abs(np.sign(perms[:, i] - perms[:, j]) @ sa) >= observed - 1e-9
    return float(np.mean(reached))


def video_minus_image_offset(x, y, kinds, *, reference: str = "image_on_video", target: str = "video") -> dict:
    """DR Fig. 2's "avg. video − image": how far the ``target`` points (native video models, ▲) lie
    above the least-squares line fitted on the ``reference`` points (image models on video, ●), on
    average. DR states it as video models reaching ≈0.014 higher retrieval accuracy "at the same
    alignment score compared to image models on video" (§"Downstream Retrieval Correlation").

    ``x``: ``(n,)`` alignment, ``y``: ``(n,)`` downstream score, ``kinds``: ``(n,)`` labels of :data:`KINDS`.
    offset = mean_{i ∈ target} (y_i − (slope·x_i + intercept)), the line fitted on the reference points
    alone. In the units of y; positive: video models above the image line. Returns ``{offset,
    n_target, line: line_fit(reference), error}``."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    kinds = np.asarray(kinds, dtype=object)
    if not (len(x) == len(y) == len(kinds)):
        raise ValueError(f"x, y and kinds must have one length, got {len(x)}, {len(y)}, {len(kinds)}")
    ok = np.isfinite(x) & np.isfinite(y)
    ref, tgt = ok & (kinds == reference), ok & (kinds == target)
    line = line_fit(x[ref], y[ref])
    out = {"offset": None, "n_target": int(tgt.sum()), "n_reference": int(ref.sum()), "line": line,
           "reference": reference, "target": target, "error": None}
    if line["error"]:
        out["error"] = f"no line through the {KINDS.get(reference, reference)} points: {line['error']}"
    elif not tgt.any():
        out["error"] = f"no {KINDS.get(target, target)} point to compare with the line"
    else:
        out["offset"] = float(np.mean(y[tgt] - (line["slope"] * x[tgt] + line["intercept"])))
    return out


def vision_kind(modality: str | None, n_frames: int | None, image_mode: str | None) -> str:
    """Fig. 2's kind of a vision run: an image model on one frame (``image_mode`` first, or n_f = 1)
    is "image on image", on several frames "image on video"; a video model is "video"; anything else
    (an MLLM) is its modality."""
    if modality == "image":
        return "image_on_image" if image_mode == "first" or (n_frames or 1) <= 1 else "image_on_video"
    return "video" if modality == "video" else str(modality)


def budget_reaching(n_captions, values, baseline) -> dict:
    """DR Fig. 8: the smallest caption budget whose alignment reaches the long original caption's.

    ``n_captions``, ``values``: ``(m,)`` the caption sweep (best alignment at each n_c); ``baseline``:
    the long caption's best alignment (same vision run, text model and metric). Budgets with a NaN
    value are left out. Returns ``{n_c, margin, error}``: ``n_c`` the smallest budget with
    ``value >= baseline`` (None when none does), ``margin`` = largest sweep value − baseline (positive:
    the sweep passes the baseline), ``error`` when there is no baseline or no sweep value.

    >>> budget_reaching([1, 2, 5], [0.1, 0.3, 0.4], 0.25)["n_c"]
    2
    """
    n = np.asarray(n_captions, dtype=float)
    v = np.asarray(values, dtype=float)
    if n.shape != v.shape or n.ndim != 1:
        raise ValueError(f"n_captions and values must be 1-D of one length, got {n.shape} and {v.shape}")
    out = {"n_c": None, "margin": None, "error": None}
    keep = np.isfinite(v) & np.isfinite(n)
    if baseline is None or not np.isfinite(baseline):
        out["error"] = "no baseline value (the long caption's grid has no best cell)"
        return out
    if not keep.any():
        out["error"] = "no caption-sweep value to compare with"
        return out
    n, v = n[keep], v[keep]
    out["margin"] = float(v.max() - baseline)
    reached = n[v >= baseline]
    out["n_c"] = int(reached.min()) if len(reached) else None
    return out


def side_by_side(a, b, *, higher_is_better: bool, ci_a=None, ci_b=None) -> dict:
    """Two runs of one metric side by side (TARA's EOL-prompt against plain-prompt comparison):
    ``delta = b − a``; ``better``: ``"a"``, ``"b"`` or ``"tie"`` by the metric's direction;
    ``separated``: whether the two intervals ``ci_a``, ``ci_b`` (``[lo, hi]``, None when absent) are
    disjoint (None when either is missing): a difference inside overlapping intervals is not one the
    resamples can tell apart. ``delta`` is None when either value is missing.

    >>> side_by_side(0.8, 0.3, higher_is_better=False, ci_a=[0.7, 0.9], ci_b=[0.2, 0.4])["better"]
    'b'
    """
    out = {"delta": None, "better": None, "separated": None}
    if a is None or b is None or not (np.isfinite(a) and np.isfinite(b)):
        return out
    out["delta"] = float(b - a)
    out["better"] = "tie" if b == a else ("b" if (b > a) == bool(higher_is_better) else "a")
    if ci_a is not None and ci_b is not None and None not in (*ci_a, *ci_b):
        out["separated"] = bool(ci_a[1] < ci_b[0] or ci_b[1] < ci_a[0])
    return out
