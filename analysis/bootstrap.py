"""Percentile bootstrap confidence intervals for any registered metric, resampling items."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .registry import get_metric


def _paired_resample(spec, X, Y, ix, params) -> float:
    """The metric on rows ``ix`` through its two-stage kernel, duplicates grouped by source item."""
    from .metrics.knn import KnnKernel

    if not isinstance(spec.kernel, KnnKernel):
        return spec(X[ix], Y[ix], **params)
    p = spec.resolve(**params)
    states = [spec.kernel.prepare(A[ix], groups=ix, **p) for A in (X, Y)]
    return float(spec.kernel.score_block([states[0]], [states[1]], **p)[0, 0])


@dataclass(frozen=True)
class BootstrapCI:
    estimate: float  # the metric on the full sample
    low: float
    high: float
    level: float
    n_boot: int
    samples: np.ndarray  # (n_boot,) resampled values (NaN where a resample was degenerate)
    raw_low: float = float("nan")  # plain percentile bounds, before the median shift
    raw_high: float = float("nan")


def bootstrap_ci(metric: str, X, Y=None, *, n_boot: int = 200, level: float = 0.95, seed: int = 0,
                 **params) -> BootstrapCI:
    """Confidence interval of ``metric(X[, Y])`` by resampling items with replacement.

    Paired metrics draw one index set for both X and Y (pairs stay together); unpaired metrics
    resample X and Y independently. Neighbourhood metrics never let an item resampled twice be its
    own copy's neighbour (that would inflate them); the other pairwise metrics see the resample as
    is. Interval: the ``(1-level)/2`` and ``(1+level)/2`` percentiles of the resampled values
    (Efron's percentile method), shifted by ``estimate - median(resamples)`` and clipped to the
    metric's bounds. The shift removes the resampling bias that neighbourhood metrics have (a
    resample holds ~63% distinct items, so neighbourhoods reach further); the raw percentiles
    are kept as ``raw_low``/``raw_high``.
    """
    spec = get_metric(metric)
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    if n_boot < 2:
        raise ValueError(f"n_boot must be at least 2, got {n_boot}")
    X = np.asarray(X, dtype=np.float64)
    needs_y = spec.kind != "single"
    if needs_y and Y is None:
        raise ValueError(f"metric {metric!r} compares two spaces: pass Y")
    if not needs_y and Y is not None:
        raise ValueError(f"metric {metric!r} scores one space: do not pass Y")
    Y = None if Y is None else np.asarray(Y, dtype=np.float64)
    args = (X,) if Y is None else (X, Y)
    estimate = spec(*args, **params)
    rng = np.random.default_rng(seed)
    samples = np.empty(n_boot)
    for b in range(n_boot):
        ix = rng.integers(0, len(X), len(X))
        if Y is None:
            samples[b] = spec(X[ix], **params)
        elif spec.kind == "unpaired":
            samples[b] = spec(X[ix], Y[rng.integers(0, len(Y), len(Y))], **params)
        else:
            samples[b] = _paired_resample(spec, X, Y, ix, params)
    ok = samples[np.isfinite(samples)]
    if len(ok) < 2:
        raise ValueError(f"bootstrap of {metric!r}: fewer than 2 finite resamples")
    alpha = (1 - level) / 2
    raw_low, raw_high = np.quantile(ok, [alpha, 1 - alpha])
    shift = estimate - float(np.median(ok))
    lo_b, hi_b = spec.bounds
    low = raw_low + shift if lo_b is None else max(lo_b, raw_low + shift)
    high = raw_high + shift if hi_b is None else min(hi_b, raw_high + shift)
    return BootstrapCI(float(estimate), float(low), float(high), float(level), int(n_boot), samples,
                       float(raw_low), float(raw_high))
