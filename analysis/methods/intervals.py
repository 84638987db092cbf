"""Confidence intervals with a closed form, for values the studies store without resamples."""

from __future__ import annotations

import numpy as np
from scipy.stats import norm


def wilson_interval(p_hat: float, n: int, level: float = 0.95) -> tuple[float, float] | None:
    """Wilson score interval of a proportion ``p_hat`` observed on ``n`` independent trials, in [0, 1]:
    ``(p̂ + z²/2n ± z sqrt(p̂(1−p̂)/n + z²/4n²)) / (1 + z²/n)`` with ``z`` the normal quantile of
    ``(1 + level) / 2`` (Wilson 1927; Brown, Cai & DasGupta 2001 recommend it over the Wald interval
    for small ``n`` and proportions near 0 or 1). ``None`` when ``p_hat`` is undefined or ``n < 1``.
    A two-way choice scored with ties as ½ is not exactly binomial; the interval then is approximate."""
    if p_hat is None or n is None or int(n) < 1 or not np.isfinite(p_hat):
        return None
    if not 0 <= p_hat <= 1:
        raise ValueError(f"wilson_interval: p_hat must lie in [0, 1], got {p_hat!r}")
    n = int(n)
    z = float(norm.ppf((1 + level) / 2))
    centre = (p_hat + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * np.sqrt(p_hat * (1 - p_hat) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)
