"""Label-free layer recommendation: which layer each metric picks, and how much they agree."""

from __future__ import annotations

import numpy as np


def recommend_layers(curves: dict[str, tuple[np.ndarray, bool]]) -> dict:
    """Per metric, the layer it picks, and the agreement between metrics.

    Args:
        curves: metric name -> (per-layer values ``(L,)``, higher_is_better). Layer 0 is the
            embedding output and is never recommended (it is not a learned representation);
            ties go to the deepest layer.
    Returns:
        ``{"picks": {metric: {"layer", "value", "final_value", "from_final", "relative_depth",
        "gain_vs_final", "final_shortfall"}}, "agreement": {...}}``. ``gain_vs_final`` is the change
        from the final layer's value to the pick's relative to the final value, ``final_shortfall``
        the same change relative to the pick's value; both signed so that positive means the pick is better.
        Agreement: ``modal_layer`` and the share of metrics that pick it, and the spread of the
        picks in relative depth (max - min).
    """
    if not curves:
        raise ValueError("no per-layer curves to choose from")
    picks = {}
    n_layers = None
    for name, (values, higher) in curves.items():
        v = np.asarray(values, dtype=float)
        if v.ndim != 1 or len(v) < 2:
            raise ValueError(f"curve {name!r} needs at least 2 layers, got shape {v.shape}")
        n_layers = n_layers or len(v)
        if len(v) != n_layers:
            raise ValueError(f"curve {name!r} has {len(v)} layers, others have {n_layers}")
        candidates = np.where(np.isfinite(v[1:]), v[1:], -np.inf if higher else np.inf)
        # ties go to the deepest layer: a recommendation should move away from the default
        # (last) layer only when an earlier layer is strictly better
        rev = candidates[::-1]
        layer = len(v) - 1 - int(np.argmax(rev) if higher else np.argmin(rev))
        final = float(v[-1])
        gain = (v[layer] - final) / abs(final) if final != 0 else float("nan")
        drop = (v[layer] - final) / abs(v[layer]) if v[layer] != 0 else float("nan")
        picks[name] = {
            "layer": layer, "value": float(v[layer]), "final_value": final,
            "from_final": (len(v) - 1) - layer, "relative_depth": layer / (len(v) - 1),
            "gain_vs_final": float(gain if higher else -gain),
            # how much worse the final layer is, relative to the pick ("the last layer is 18% lower")
            "final_shortfall": float(drop if higher else -drop),
            "higher_is_better": bool(higher),
        }
    layers = [p["layer"] for p in picks.values()]
    values, counts = np.unique(layers, return_counts=True)
    depths = [p["relative_depth"] for p in picks.values()]
    agreement = {
        "modal_layer": int(values[np.argmax(counts)]), "share_agreeing": float(counts.max() / len(layers)),
        "depth_spread": float(max(depths) - min(depths)), "n_metrics": len(layers),
    }
    return {"picks": picks, "agreement": agreement, "n_layers": n_layers}


def describe_pick(model: str, pick: dict, n_layers: int, what: str) -> str:
    """A plain sentence: "layer 9 of 12 aligns best with text; the last layer is 18% lower"."""
    last = n_layers - 1
    if pick["layer"] == last:
        return f"the last layer ({last}) of {model} is best by {what}"
    short = pick["final_shortfall"]
    if not np.isfinite(short):
        change = "the pick scores 0"
    elif abs(short) < 0.005:  # would print "0% lower": no layer is better, whatever the argmax says
        return (f"layer {pick['layer']} of {last} of {model} and the last layer are within 0.5% by {what}: "
                "no reason to move off the last layer")
    elif pick.get("higher_is_better", True):
        change = f"the last layer is {abs(short) * 100:.0f}% {'lower' if short > 0 else 'higher'}"
    else:
        change = f"the last layer is {abs(short) * 100:.0f}% {'worse' if short > 0 else 'better'}"
    return f"layer {pick['layer']} of {last} of {model} is best by {what}; {change}"
