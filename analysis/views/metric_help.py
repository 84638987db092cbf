"""What each metric means on screen: direction, chance level, help text, baseline rules."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.registry import REGISTRY
from analysis.views.text import fmt_number


def metric_direction(metric: str) -> str:
    hib = REGISTRY[metric].higher_is_better
    return {True: "higher is better", False: "lower is better", None: "no preferred direction"}[hib]


def chance_level(metric: str, n_items: int | None, params: dict | None = None) -> float | None:
    """The metric's expected value on unrelated spaces (registry ``chance``, e.g. mutual k-NN's
    k/(N−1)) for ``n_items`` items and the stored parameters; None where none is defined."""
    spec = REGISTRY.get(metric)
    if spec is None or spec.chance is None or not n_items or n_items < 2:
        return None
    known = spec.params
    return float(spec.chance(int(n_items), **spec.resolve(**{k: v for k, v in (params or {}).items() if k in known})))


def metric_help(metric: str, n_items: int | None = None, params: dict | None = None) -> str:
    """One paragraph on a registered metric, from the registry: what it measures, its range, its
    direction and its chance level (at ``n_items`` and ``params`` when given), and its reference."""
    spec = REGISTRY.get(metric)
    if spec is None:
        return ""
    lo, hi = spec.bounds
    rng = f"{'(−∞' if lo is None else f'[{lo:g}'}, {'∞)' if hi is None else f'{hi:g}]'}"
    text = (f"{metric}: {spec.summary}. Range {rng}; "
            f"{metric_direction(metric)}.")
    if spec.chance is not None:
        formula = {"mutual_knn": "k/(N−1)", "recall_at_k": "k/N", "mean_ap": "H_N/N", "median_rank": "(N+1)/2"}
        c = chance_level(metric, n_items, params)
        at = ", ".join(f"{k}={v}" for k, v in (params or {}).items() if k in spec.params)
        text += (f" Chance (unrelated spaces): {formula.get(metric, 'defined')}"
                 + (f" = {fmt_number(c)} at N={n_items}{', ' + at if at else ''}." if c is not None else "."))
    if spec.reference:
        text += f" Reference: {spec.reference}."
    return text


def baselines(metric: str, values, *, n_items=None, params=None, chance_label: str | None = None) -> list:
    """Reference levels worth drawing for ``metric`` next to ``values``: its chance level (registry
    ``chance``) and the bounds of its range that lie near the data (within a quarter of the data's
    span), as ``[(level, label)]``. A bound far off the data is said in the caption, not drawn."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    out = []
    c = chance_level(metric, n_items, params)
    if c is not None:
        out.append((c, chance_label or f"chance {fmt_number(c)}"))
    spec = REGISTRY.get(metric)
    if spec is not None and len(v):
        span = max(float(np.ptp(v)), 1e-12)
        for b, name in zip(spec.bounds, ("lower bound", "upper bound")):
            if b is not None and v.min() - span / 4 <= b <= v.max() + span / 4:
                out.append((float(b), f"{name} {b:g}"))
    return out


def baseline_rules(rules, field: str) -> list:
    """Dashed horizontal rules with a label for baselines (chance, bounds, a fitted ceiling):
    ``rules`` is ``[(value, name)]``, ``field`` the y field of the chart they join. Empty for none."""
    if not rules:
        return []
    import altair as alt

    df = pd.DataFrame([{field: float(v), "baseline": name} for v, name in rules])
    return [alt.Chart(df).mark_rule(strokeDash=[5, 4], color="#6e7781").encode(
                y=f"{field}:Q", tooltip=["baseline", alt.Tooltip(f"{field}:Q", format=".4g")]),
            alt.Chart(df).mark_text(align="left", dx=4, dy=-6, color="#57606a", fontSize=11).encode(
                y=f"{field}:Q", x=alt.value(0), text="baseline:N")]
