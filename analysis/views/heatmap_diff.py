"""The heatmap's difference view: the difference of the two grids' best values with an interval.

Grids store their best cell's 95% bootstrap interval but not its item resamples, so no paired
interval can be formed. The interval used is the conservative (Bonferroni) one: with best values
``v1 ∈ [l1, h1]`` and ``v2 ∈ [l2, h2]``, the difference ``v1 − v2`` lies in ``[l1 − h2, h1 − l2]``
whenever both intervals cover their value, which happens with probability ≥ 1 − 0.05 − 0.05 = 0.90
for any dependence between the two grids (the same items are resampled in both). It is wider than
a paired interval, never narrower, so an interval that excludes 0 is a real difference.
"""

from __future__ import annotations

import math


def _num(x) -> float | None:
    return float(x) if x is not None and math.isfinite(float(x)) else None


def best_difference(g1: dict, g2: dict) -> dict:
    """``best_value(g1) − best_value(g2)`` with its conservative interval.

    Args:
        g1, g2: grid dicts (:func:`analysis.storage.results.read_grids`), same metric.
    Returns:
        ``{"diff", "low", "high", "level": 0.90 | None, "reason": str | None}``; ``low``/``high`` are
        ``None`` with a ``reason`` when either grid has no best cell or no interval, or the metrics differ.
    """
    out = {"diff": None, "low": None, "high": None, "level": None, "reason": None}
    if g1.get("metric") != g2.get("metric"):
        return {**out, "reason": f"the grids hold different metrics ({g1.get('metric')} and {g2.get('metric')})"}
    v1, v2 = _num(g1.get("best_value")), _num(g2.get("best_value"))
    if v1 is None or v2 is None:
        return {**out, "reason": "a grid has no best cell (every cell undefined or degenerate)"}
    out["diff"] = v1 - v2
    l1, h1, l2, h2 = (_num(g1.get("ci_low")), _num(g1.get("ci_high")), _num(g2.get("ci_low")), _num(g2.get("ci_high")))
    if None in (l1, h1, l2, h2):
        return {**out, "reason": "a best cell has no bootstrap interval (run `layerscope analyze` with --bootstrap 2 "
                                 "or more)"}
    return {**out, "low": l1 - h2, "high": h1 - l2, "level": 0.90}


def best_difference_text(d: dict, this: str, other: str) -> str:
    """One line on :func:`best_difference`: the number, its interval and what the interval is."""
    if d["diff"] is None:
        return f"No difference of the best values: {d['reason']}."
    head = f"Best value here minus best at {other}: {d['diff']:+.3f}"
    if d["low"] is None:
        return f"{head} (point estimate; no interval: {d['reason']})."
    verdict = ("the interval excludes 0" if d["low"] > 0 or d["high"] < 0
               else "the interval includes 0: no difference established")
    return (f"{head} (conservative ≥90% interval {d['low']:+.3f} to {d['high']:+.3f}, from the two 95% bootstrap "
            f"intervals as [low₁ − high₂, high₁ − low₂]: no paired resamples are stored for grids; {verdict}). "
            f"The best cells may lie at different layer pairs ({this}).")
