"""Does a label-free score predict users' downstream results? Pearson and Spearman, sign-aware."""

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
    sign_flipped: bool  # True when the task is lower-is-better and values were negated


def correlate(scores, results, *, higher_is_better: bool = True, n_boot: int = 1000, level: float = 0.95,
              seed: int = 0) -> Correlation:
    """Correlation between a label-free score per model and a downstream result per model.

    Sign-aware: for lower-is-better tasks (errors, depth RMSE) the results are negated first, so a
    positive R always means "a higher score goes with a better result". p-values are scipy's
    two-sided tests; intervals resample models with replacement (resamples with a constant side are
    skipped).
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
    if not higher_is_better:
        y = -y
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

    return Correlation(len(x), float(pr[0]), float(pr[1]), float(sr[0]), float(sr[1]), ci(rs), ci(rhos),
                       not higher_is_better)


def depth_curve(per_layer_scores: dict[str, np.ndarray], results: dict[str, float], *, higher_is_better=True,
                points: int = 11) -> dict:
    """Pearson R between the score at each relative depth (0 = embeddings, 1 = last layer) and the task.

    Each model contributes its layer nearest to the relative depth, ``floor(d * (L - 1) + 0.5)``
    (halves round up). Returns ``{"depth": [...], "r": [...]}``.
    """
    models = [m for m in per_layer_scores if m in results]
    if len(models) < 3:
        raise ValueError("a per-layer correlation curve needs at least 3 models with results")
    depths = np.linspace(0, 1, points)
    y = np.array([results[m] for m in models], dtype=float) * (1 if higher_is_better else -1)
    rs = []
    for d in depths:
        x = np.array([per_layer_scores[m][int(np.floor(d * (len(per_layer_scores[m]) - 1) + 0.5))] for m in models])
        rs.append(float(stats.pearsonr(x, y)[0]) if np.ptp(x) > 0 and np.ptp(y) > 0 else float("nan"))
    return {"depth": depths.tolist(), "r": rs}
