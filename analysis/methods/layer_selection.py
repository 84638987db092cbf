"""Label-free layer recommendation: which layer each metric picks, and how much they agree."""

from __future__ import annotations

import json

import numpy as np


def named_layers(config) -> dict[int, str]:
    """The named layers of a run (``{13: "default", 14: "joint"}``) from its config (a dict or JSON
    text) key ``layer_names``; empty when the run stored only numbered layers."""
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError:
            return {}
    names = (config or {}).get("layer_names") or {}
    return {int(k): str(v) for k, v in names.items()}


def _as_curves(curves: dict) -> tuple[dict, int]:
    """Each curve as a float ``(L,)`` array, all of one length ``L >= 2``; returns ``(arrays, L)``.
    Raises ValueError naming the curve that is not."""
    arrays, n_layers = {}, None
    for name, values in curves.items():
        v = np.asarray(values, dtype=float)
        if v.ndim != 1 or len(v) < 2:
            raise ValueError(f"curve {name!r} needs at least 2 layers, got shape {v.shape}")
        n_layers = n_layers or len(v)
        if len(v) != n_layers:
            raise ValueError(f"curve {name!r} has {len(v)} layers, others have {n_layers}")
        arrays[name] = v
    return arrays, n_layers


def recommend_layers(curves: dict[str, tuple[np.ndarray, bool]], *, last_layer: int | None = None) -> dict:
    """Per metric, the layer it picks, and the agreement between metrics.

    Args:
        curves: metric name -> (per-layer values ``(L,)``, higher_is_better). Layer 0 is the
            embedding output and is never recommended (it is not a learned representation);
            ties go to the deepest layer.
        last_layer: the last numbered layer (default: the last one); layers after it are named
            layers (the model's ``default`` output, ``joint``): never picked, and "final" means this one.
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
    arrays, n_layers = _as_curves({name: values for name, (values, _) in curves.items()})
    for name, (_, higher) in curves.items():
        v = arrays[name]
        last = len(v) - 1 if last_layer is None else int(last_layer)
        if not 1 <= last < len(v):
            raise ValueError(f"last_layer {last_layer} is outside 1..{len(v) - 1} for curve {name!r}")
        candidates = np.where(np.isfinite(v[1:last + 1]), v[1:last + 1], -np.inf if higher else np.inf)
        # ties go to the deepest layer: a recommendation should move away from the default
        # (last) layer only when an earlier layer is strictly better
        rev = candidates[::-1]
        layer = last - int(np.argmax(rev) if higher else np.argmin(rev))
        final = float(v[last])
        gain = (v[layer] - final) / abs(final) if final != 0 else float("nan")
        drop = (v[layer] - final) / abs(v[layer]) if v[layer] != 0 else float("nan")
        picks[name] = {
            "layer": layer, "value": float(v[layer]), "final_value": final,
            "from_final": last - layer, "relative_depth": layer / last,
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
    return {"picks": picks, "agreement": agreement, "n_layers": n_layers, "last_layer": last}


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


#: relative change below which a layer and the last layer are called a tie (|Δ| / |last| < 0.5%)
TIE_TOLERANCE = 0.005


def _rel_gain(value: float, base: float, higher: bool) -> float | None:
    """Signed relative change from ``base`` to ``value``, positive when ``value`` is better:
    ``±(value − base) / |base|``; None when either is undefined or ``base`` is 0."""
    if not (np.isfinite(value) and np.isfinite(base)) or base == 0:
        return None
    g = (value - base) / abs(base)
    return float(g if higher else -g)


def layer_verdict(curves: dict[str, np.ndarray], higher_is_better: dict[str, bool], *, last_layer: int | None = None,
                  default_layer: int | None = None, degenerate=(), intervals: dict | None = None,
                  tol: float = TIE_TOLERANCE) -> dict:
    """One answer per model: the layer to use, how many metrics agree, and whether it beats the last layer.

    Each metric's pick is its best layer among ``1..last_layer`` (layer 0 is the embedding output;
    degenerate and undefined (NaN) layers are never picked; ties go to the deepest layer). The
    recommended layer is the one most metrics pick (a tie in votes goes to the deeper layer). Its
    *lead* metric is an agreeing metric with a stored interval at that layer, else the agreeing
    metric with the smallest gain over the last layer, so the headline never overstates.

    Args:
        curves: metric -> per-layer values ``(L,)`` (NaN = undefined).
        higher_is_better: metric -> direction.
        last_layer: index of the last numbered layer (default ``L − 1``); layers after it are named
            layers (``default``, ``joint``): compared against, never recommended.
        default_layer: index of the model's own output (named layer ``default``) when stored.
        degenerate: layer indices whose values do not measure a representation (collapsed etc.).
        intervals: metric -> ``(layer, low, high)``, a 95% interval of that metric at that layer
            (the bootstrap CI of a grid's best cell); used only when ``layer`` is the recommendation.
        tol: relative change under which the pick and the last layer tie (0.5%).
    Returns:
        ``{"status": "recommend" | "tie" | "last" | "none", "layer", "last_layer", "default_layer",
        "n_agree", "n_metrics", "agreeing", "picks": {metric: layer}, "undefined": [metric],
        "lead", "value", "last_value", "default_value", "interval": [lo, hi] | None,
        "gain_vs_last", "gain_vs_default" (lead metric, signed, + = pick better; None when undefined),
        "gains_vs_last": {metric: gain}, "reason"}``. A tie is called when the lead metric's gain is
        under ``tol`` or when the last layer's value lies inside the pick's interval (the last
        layer's own interval is not computed, so this is the overlap test the stored data allow).
    """
    if not curves:
        raise ValueError("no per-layer curves to choose from")
    picks, undefined = {}, []
    bad = {int(i) for i in degenerate}
    for name in curves:
        if name not in higher_is_better:
            raise ValueError(f"curve {name!r} has no direction in higher_is_better")
    arrays, n_layers = _as_curves(curves)
    last = n_layers - 1 if last_layer is None else int(last_layer)
    if not 1 <= last < n_layers:
        raise ValueError(f"last_layer {last_layer} is outside 1..{n_layers - 1}")
    for name, v in arrays.items():
        higher = bool(higher_is_better[name])
        ok = [i for i in range(1, last + 1) if i not in bad and np.isfinite(v[i])]
        if not ok:
            undefined.append(name)
            continue
        # deepest first, so argmax/argmin (first occurrence) breaks ties towards the last layer
        cand = ok[::-1]
        vals = v[cand]
        picks[name] = cand[int(np.argmax(vals) if higher else np.argmin(vals))]
    out = {"last_layer": last, "default_layer": default_layer, "picks": picks, "undefined": sorted(undefined),
           "n_metrics": len(picks), "layer": None, "n_agree": 0, "agreeing": [], "lead": None, "value": None,
           "last_value": None, "default_value": None, "interval": None, "gain_vs_last": None,
           "gain_vs_default": None, "gains_vs_last": {}}
    if not picks:
        why = "degenerate or undefined at every layer" if bad else "undefined at every layer"
        return no_verdict(f"every curve is {why} ({', '.join(sorted(undefined))})", last, undefined)
    layers, counts = np.unique(list(picks.values()), return_counts=True)
    layer = int(layers[counts == counts.max()].max())  # most votes; the deeper of equals
    agreeing = sorted(m for m, p in picks.items() if p == layer)
    gains = {m: _rel_gain(arrays[m][layer], arrays[m][last], bool(higher_is_better[m])) for m in agreeing}
    iv = {m: (lo, hi) for m, (il, lo, hi) in (intervals or {}).items()
          if m in agreeing and int(il) == layer and lo is not None and hi is not None}
    if iv:
        lead = min(iv)
    else:  # the smallest gain (undefined gains last), so the headline never overstates
        lead = min(agreeing, key=lambda m: (gains[m] is None, gains[m] if gains[m] is not None else 0.0, m))
    v, higher = arrays[lead], bool(higher_is_better[lead])
    d = default_layer if default_layer is not None and 0 <= default_layer < n_layers else None
    out.update(layer=layer, n_agree=len(agreeing), agreeing=agreeing, lead=lead, value=float(v[layer]),
               last_value=float(v[last]) if np.isfinite(v[last]) else None,
               default_value=float(v[d]) if d is not None and np.isfinite(v[d]) else None,
               interval=list(iv[lead]) if lead in iv else None, gain_vs_last=gains[lead],
               gain_vs_default=_rel_gain(v[layer], v[d], higher) if d is not None else None, gains_vs_last=gains)
    if layer == last:
        return {**out, "status": "last", "reason": "the last layer is best"}
    g = gains[lead]
    if g is not None and abs(g) < tol:
        return {**out, "status": "tie",
                "reason": f"layer {layer} and the last layer are within {tol:.1%} by {lead}"}
    if lead in iv and out["last_value"] is not None:
        lo, hi = iv[lead]
        if (out["last_value"] >= lo) if higher else (out["last_value"] <= hi):
            return {**out, "status": "tie",
                    "reason": f"the last layer's {lead} ({out['last_value']:.3g}) lies inside layer {layer}'s "
                              f"95% interval [{lo:.3g}, {hi:.3g}]"}
    if g is None:
        reason = ("the last layer is degenerate or undefined" if not np.isfinite(v[last])
                  else "the last layer scores 0: no relative gain")
        return {**out, "status": "recommend", "reason": reason}
    return {**out, "status": "recommend", "reason": f"{g:+.0%} over the last layer by {lead}"}


def no_verdict(reason: str, last_layer: int | None, undefined=()) -> dict:
    """The verdict (as :func:`layer_verdict` shapes it) of a model no layer of which can be recommended."""
    return {"status": "none", "reason": reason, "last_layer": last_layer, "default_layer": None, "picks": {},
            "undefined": sorted(undefined), "n_metrics": 0, "layer": None, "n_agree": 0, "agreeing": [],
            "lead": None, "value": None, "last_value": None, "default_value": None, "interval": None,
            "gain_vs_last": None, "gain_vs_default": None, "gains_vs_last": {}}


def _pct(g) -> str:
    return "—" if g is None else f"{g:+.1%}" if abs(g) < 0.1 else f"{g:+.0%}"


def verdict_sentence(model: str, v: dict, *, n_boot: int | None = None) -> str:
    """The verdict of :func:`layer_verdict` as one line for people, e.g. "vit: use layer 7 of 12 —
    3 of 4 metrics agree; alignment with bert 0.41 (95% CI 0.39–0.43, 200 resamples); +18% over the
    last layer, +12% over the default output"."""
    last = v["last_layer"]
    if v["status"] == "none":
        return f"{model}: no layer can be recommended — {v['reason']}"
    agree = f"{v['n_agree']} of {v['n_metrics']} metric{'s' if v['n_metrics'] != 1 else ''} agree"
    if v["status"] == "last":
        return f"{model}: use the last layer ({last}) — {agree}"
    if v["status"] == "tie":
        return (f"{model}: tie between layer {v['layer']} ({agree}) and the last layer ({last}) — {v['reason']}: "
                "no reason to move off the last layer")
    lead = f"{v['lead']} {v['value']:.3g}"
    if v.get("interval"):
        lo, hi = v["interval"]
        lead += f" (95% CI {lo:.3g}–{hi:.3g}{f', {n_boot} resamples' if n_boot else ''})"
    gains = [f"{_pct(v['gain_vs_last'])} over the last layer" if v["gain_vs_last"] is not None
             else v["reason"]]
    if v.get("gain_vs_default") is not None:
        gains.append(f"{_pct(v['gain_vs_default'])} over the default output")
    return f"{model}: use layer {v['layer']} of {last} — {agree}; {lead}; {', '.join(gains)}"
