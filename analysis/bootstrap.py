"""Percentile bootstrap confidence intervals for any registered metric, resampling items."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .registry import get_metric


@dataclass(frozen=True)
class BootstrapCI:
    estimate: float  # the metric on the full sample
    low: float
    high: float
    level: float
    n_boot: int
    samples: np.ndarray  # (n_boot,) resampled values (NaN where a resample was degenerate)


def bootstrap_ci(metric: str, X, Y=None, *, n_boot: int = 200, level: float = 0.95, seed: int = 0,
                 **params) -> BootstrapCI:
    """Confidence interval of ``metric(X[, Y])`` by resampling items with replacement.

    Paired metrics draw one index set for both X and Y (pairs stay together); unpaired metrics
    resample X and Y independently. Interval: the ``(1-level)/2`` and ``(1+level)/2`` percentiles
    of the resampled values (Efron's percentile method).
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
            samples[b] = spec(X[ix], Y[ix], **params)
    ok = samples[np.isfinite(samples)]
    if len(ok) < 2:
        raise ValueError(f"bootstrap of {metric!r}: fewer than 2 finite resamples")
    alpha = (1 - level) / 2
    low, high = np.quantile(ok, [alpha, 1 - alpha])
    return BootstrapCI(float(estimate), float(low), float(high), float(level), int(n_boot), samples)
