"""Does a label-free score predict users' downstream results? Pearson and Spearman, signed as computed."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass
class Correlation:
    n: int
    pearson_r: float
    pearson_p: float
    spearman_rho: float
    spearman_p: float
    r_ci: tuple[float, float]  # bootstrap percentile interval over models
    rho_ci: tuple[float, float]
    higher_is_better: bool  # the task's direction (False: errors, depth RMSE, ...)
    better: bool  # True when a higher score goes with a better result: r > 0 for higher-is-better
    # tasks, r < 0 for lower-is-better ones (False when r is 0 or NaN)


def correlate(scores, results, *, higher_is_better: bool = True, n_boot: int = 1000, level: float = 0.95,
              seed: int = 0) -> Correlation:
    """Correlation between a label-free score per model and a downstream result per model.

    The correlation is reported signed as computed on the raw values (a paper's R = -0.832 for a
    lower-is-better pose error stays -0.832); the task's direction sits beside it
    (``higher_is_better``) and ``better`` says whether a higher score goes with a better result.
    p-values are scipy's two-sided tests; intervals resample models with replacement (resamples
    with a constant side are skipped).
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
    rng = np.random.default_rng(seed)
    rs, rhos = [], []
    for _ in range(n_boot):
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
    return Correlation(len(x), r, float(pr[1]), float(sr[0]), float(sr[1]), ci(rs), ci(rhos),
                       bool(higher_is_better), better_direction(r, higher_is_better))


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
