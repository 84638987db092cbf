"""Does a label-free score predict users' downstream results? Pearson and Spearman, signed as computed."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats


@dataclass
class Correlation:
    n: int
    pearson_r: float
    pearson_p: float
    spearman_rho: float
    spearman_p: float
    r_ci: tuple[float, float]  # bootstrap percentile interval over models (NaN below MIN_CI_MODELS)
    rho_ci: tuple[float, float]
    higher_is_better: bool  # the task's direction (False: errors, depth RMSE, ...)
    better: bool  # True when a higher score goes with a better result: r > 0 for higher-is-better
    # tasks, r < 0 for lower-is-better ones (False when r is 0 or NaN)
    p_method: str = "scipy"  # "exact permutation" (fewer than EXACT_P_MAX_MODELS + 1 models) or "scipy"
    ci_note: str = ""  # why there is no interval ("too few models"), else ""


#: up to this many models the p-values are exact permutation tests (all n! pairings enumerated;
#: 9! = 362,880): scipy's t-based (Pearson) and asymptotic (Spearman) p are wrong at tiny n, e.g.
#: "ρ = 1, p = 0" over 3 models where 2 of the 6 pairings give |ρ| = 1 (exact p = 1/3)
EXACT_P_MAX_MODELS = 9
#: fewest models for a bootstrap interval: resampling 3-4 models gives a handful of distinct values
MIN_CI_MODELS = 5
TOO_FEW_MODELS = "too few models"


@lru_cache(maxsize=EXACT_P_MAX_MODELS)
def _pairings(n: int) -> np.ndarray:
    """``(n!, n)`` every permutation of ``range(n)``."""
    return np.array(list(itertools.permutations(range(n))), dtype=np.intp)


def exact_permutation_p(x, y) -> float:
    """Two-sided exact permutation p of Pearson's r between ``x`` and ``y`` ``(n,)``: the share of the
    n! pairings of y with x whose ``|r|`` reaches the observed one (the observed pairing included, so
    p >= 2/n! for distinct values). Spearman's ρ: pass ranks. Range (0, 1]; n <= EXACT_P_MAX_MODELS.
    Reference: Pitman (1937); Good (2005), Permutation Tests, §3.

    >>> round(exact_permutation_p([1, 2, 3], [1, 2, 3]), 4)
    0.3333
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = len(x)
    if n > EXACT_P_MAX_MODELS:
        raise ValueError(f"exact permutation p enumerates n! pairings; n = {n} > {EXACT_P_MAX_MODELS}")
    xc, yc = x - x.mean(), y - y.mean()
    denom = np.sqrt((xc @ xc) * (yc @ yc))
    if denom == 0:
        return float("nan")
    r = (yc[_pairings(n)] @ xc) / denom  # every pairing; row 0 is the observed one
    # pairings equal to the observed |r| up to rounding count as reaching it
    return float(np.mean(np.abs(r) >= np.abs(r[0]) * (1 - 1e-12)))


def correlate(scores, results, *, higher_is_better: bool = True, n_boot: int = 1000, level: float = 0.95,
              seed: int = 0) -> Correlation:
    """Correlation between a label-free score per model and a downstream result per model.

    The correlation is reported signed as computed on the raw values (a paper's R = -0.832 for a
    lower-is-better pose error stays -0.832); the task's direction sits beside it
    (``higher_is_better``) and ``better`` says whether a higher score goes with a better result.
    p-values are two-sided: exact permutation tests (:func:`exact_permutation_p`) up to
    ``EXACT_P_MAX_MODELS`` models, scipy's tests above (``p_method`` says which). Intervals
    resample models with replacement (resamples with a constant side are skipped); below
    ``MIN_CI_MODELS`` models there is none (NaN, ``ci_note`` = "too few models").
    """
    x = np.asarray(scores, dtype=float)
    y = np.asarray(results, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"scores and results must be 1-D and of equal length, got {x.shape} and {y.shape}")
    if len(x) < 3:
        raise ValueError(f"a correlation needs at least 3 models, got {len(x)}")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError("scores and results must be finite")
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        raise ValueError("scores or results are constant across models: correlation undefined")
    pr = stats.pearsonr(x, y)
    sr = stats.spearmanr(x, y)
    p_r, p_rho, p_method = float(pr[1]), float(sr[1]), "scipy"
    if len(x) <= EXACT_P_MAX_MODELS:
        p_method = "exact permutation"
        p_r = exact_permutation_p(x, y)
        p_rho = exact_permutation_p(stats.rankdata(x), stats.rankdata(y))
    rng = np.random.default_rng(seed)
    rs, rhos = [], []
    for _ in range(n_boot if len(x) >= MIN_CI_MODELS else 0):
        ix = rng.integers(0, len(x), len(x))
        if np.ptp(x[ix]) == 0 or np.ptp(y[ix]) == 0:
            continue
        rs.append(stats.pearsonr(x[ix], y[ix])[0])
        rhos.append(stats.spearmanr(x[ix], y[ix])[0])
    a = (1 - level) / 2

    def ci(v):
        v = np.asarray(v)[np.isfinite(v)]
        return (float(np.quantile(v, a)), float(np.quantile(v, 1 - a))) if len(v) >= 2 else (np.nan, np.nan)

    r = float(pr[0])
    return Correlation(len(x), r, p_r, float(sr[0]), p_rho, ci(rs), ci(rhos),
                       bool(higher_is_better), better_direction(r, higher_is_better), p_method,
                       TOO_FEW_MODELS if len(x) < MIN_CI_MODELS else "")


def better_direction(r: float, higher_is_better: bool) -> bool:
    """Whether a correlation ``r`` between a score and a task result means "a higher score goes with
    a better result": ``r > 0`` for higher-is-better tasks, ``r < 0`` for lower-is-better ones."""
    if not np.isfinite(r) or r == 0:
        return False
    return bool(r > 0) == bool(higher_is_better)


def depth_layer(depth: float, n_layers: int) -> int:
    """The layer nearest to a relative depth (0 = embeddings, 1 = last layer): ``floor(d * (L - 1) + 0.5)``
    (halves round up)."""
    return int(np.floor(depth * (n_layers - 1) + 0.5))


def depth_curve(per_layer_scores: dict[str, np.ndarray], results: dict[str, float], *, higher_is_better=True,
                points: int = 11) -> dict:
    """Pearson R between the score at each relative depth (0 = embeddings, 1 = last layer) and the task.

    Each model contributes its layer nearest to the relative depth (:func:`depth_layer`). A model
    whose layer there has no score (NaN: a degenerate layer, such as layer 0 of a class-token model,
    one constant vector for every input) is left out of that depth only and named in
    ``excluded[i]``; a depth left with fewer than 3 models, or a constant side, has ``r`` NaN.

    Returns ``{"depth": [...], "r": [...], "n_models": [...], "excluded": [[{"model", "layer"}]],
    "higher_is_better": bool, "better": [...]}``: ``r`` signed as computed on the raw results,
    ``better[i]`` per :func:`better_direction`.
    """
    models = [m for m in per_layer_scores if m in results]
    if len(models) < 3:
        raise ValueError(f"a per-layer correlation curve needs at least 3 models with results, got {len(models)}"
                         + (f" ({', '.join(models)})" if models else ""))
    depths = np.linspace(0, 1, points)
    rs, counts, excluded = [], [], []
    for d in depths:
        layer = {m: depth_layer(d, len(per_layer_scores[m])) for m in models}
        ok = [m for m in models if np.isfinite(per_layer_scores[m][layer[m]])]
        excluded.append([{"model": m, "layer": layer[m]} for m in models if m not in ok])
        counts.append(len(ok))
        x = np.array([per_layer_scores[m][layer[m]] for m in ok], dtype=float)
        y = np.array([results[m] for m in ok], dtype=float)
        defined = len(ok) >= 3 and np.ptp(x) > 0 and np.ptp(y) > 0
        rs.append(float(stats.pearsonr(x, y)[0]) if defined else float("nan"))
    return {"depth": depths.tolist(), "r": rs, "n_models": counts, "excluded": excluded,
            "higher_is_better": bool(higher_is_better), "better": [better_direction(r, higher_is_better) for r in rs]}
