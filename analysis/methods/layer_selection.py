"""Label-free layer recommendation: which layer each metric picks, and how much they agree."""

from __future__ import annotations

import json

import numpy as np

from analysis.methods.verdict import Verdict
from analysis.null import beyond_chance, null_kind, null_label


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


#: a partner run whose every layer matches this run's, item by item, to this cosine (1 − 1e-6) is a
#: copy of it (the same model stored twice, or one that differs by rounding): its alignment is 1 by
#: construction, so it is flagged and never evidence in a verdict
COPY_TOL = 1e-6


def near_identical(A, B, *, tol: float = COPY_TOL) -> bool:
    """Whether two runs are (near-)identical copies: ``A``, ``B`` ``(L, N, d)`` of one shape, and at
    every layer every item's cosine ``<a_i, b_i> / (|a_i| |b_i|) >= 1 − tol`` (a zero row matches
    only a zero row). Different shapes are never copies. Computed in float64, layer by layer.

    >>> X = np.random.default_rng(0).normal(size=(2, 5, 3))
    >>> near_identical(X, X * 2.0), near_identical(X, X[:, ::-1])
    (True, False)
    """
    if np.shape(A) != np.shape(B) or np.ndim(A) != 3:
        return False
    for a, b in zip(A, B):
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
        zero = (na == 0) | (nb == 0)
        if np.any(zero & ((na == 0) != (nb == 0))):
            return False
        cos = np.einsum("ij,ij->i", a[~zero], b[~zero]) / (na[~zero] * nb[~zero])
        if not np.all(cos >= 1.0 - tol):
            return False
    return True


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


def recommend_layers(curves: dict[str, tuple[np.ndarray, bool]], *, last_layer: int | None = None,
                     controls=()) -> dict:
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
        picks in relative depth (max - min), over the curves not in ``controls`` (alignment with a
        random-init model: picked and shown, never counted); None when every curve is a control.
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
    # controls are baselines: their picks are kept for display, never counted in the agreement
    voting = [p for name, p in picks.items() if name not in set(controls)]
    agreement = None
    if voting:
        values, counts = np.unique([p["layer"] for p in voting], return_counts=True)
        depths = [p["relative_depth"] for p in voting]
        agreement = {
            "modal_layer": int(values[np.argmax(counts)]), "share_agreeing": float(counts.max() / len(voting)),
            "depth_spread": float(max(depths) - min(depths)), "n_metrics": len(voting),
        }
    return {"picks": picks, "agreement": agreement, "n_layers": n_layers, "last_layer": last,
            "controls": sorted(set(controls) & set(picks))}


def describe_pick(model: str, pick: dict, n_layers: int, what: str, *, samples: dict | None = None) -> str:
    """A plain sentence: "layer 9 of 12 of vit is best by alignment with text; the last layer is 18%
    lower; 0.41 against 0.35, +18% over the last layer (95% CI +9% to +27%) on 200 paired item
    resamples".

    ``pick``: one entry of :func:`recommend_layers`'s ``picks``; ``samples``: that metric's item
    resamples ``{layer: (B,)}`` (the layer-choice payload's ``resamples[metric]``), from which the
    gain over the last layer gets its paired interval (:func:`paired_gain`); without them the
    sentence says there is none."""
    last = n_layers - 1
    if pick["layer"] == last:
        return f"the last layer ({last}) of {model} is best by {what} ({pick['value']:.3g})"
    short = pick["final_shortfall"]
    if not np.isfinite(short):
        change = "the pick scores 0"
    elif abs(short) < TIE_TOLERANCE:  # would print "0% lower": no layer is better, whatever the argmax says
        return (f"layer {pick['layer']} of 0–{last} of {model} and the last layer are within 0.5% by {what}: "
                "no reason to move off the last layer")
    elif pick.get("higher_is_better", True):
        change = f"the last layer is {abs(short) * 100:.0f}% {'lower' if short > 0 else 'higher'}"
    else:
        change = f"the last layer is {abs(short) * 100:.0f}% {'worse' if short > 0 else 'better'}"
    a, b = _samples({"m": samples}, "m", pick["layer"]), _samples({"m": samples}, "m", last)
    values = f"{pick['value']:.3g} against {pick['final_value']:.3g}"
    if a is None or b is None:
        gain = f"{values}, no paired interval (no item resamples stored)"
    else:
        cmp = paired_gain(a, b, pick["value"], pick["final_value"], higher=pick.get("higher_is_better", True))
        gain = f"{values}, {_gain_text(cmp, 'the last layer')} on {len(a)} paired item resamples"
    return f"layer {pick['layer']} of 0–{last} of {model} is best by {what}; {change}; {gain}"


#: smallest relative gain, ``|Δ| / |baseline|``, for which "use layer N" is said: 2%. A paired interval
#: that excludes zero says a gain is real, not that it matters. Moving off the last layer or the
#: model's own output costs the user a re-extraction at a hook the model's API does not expose,
#: and a label-free score is a proxy whose link to any task is loose (LayerScope's abstract: no
#: single signal is a universal selector), so a gain of a few tenths of a percent in a proxy
#: promises nothing downstream (the demo once said "use layer N" on +0.7% RankMe). Below the
#: margin a real gain is reported as a tie, with its value and interval.
PRACTICAL_MARGIN = 0.02


#: verdict statuses (:func:`layer_verdict`; gains are the lead metric's paired gains):
#:
#: - ``recommend``: decided by alignment, both gains' 95% intervals exclude zero and both gains
#:   reach the margin (use layer N);
#: - ``last``: the candidate is the last layer, and it beats ``default`` beyond its interval and
#:   the margin (or no ``default`` is stored);
#: - ``default``: the lead metric scores the candidate (or the last layer) below ``default``
#:   beyond the 95% interval: the pick is never recommended over the model's own output;
#: - ``tie``: a gain's interval includes zero or the gain is under the margin (``tie_with`` says
#:   against what: a difference whose interval includes 0 never picks between the last layer
#:   and the default output);
#: - ``untested``: no paired resamples, so no gain can be tested (never a recommendation);
#: - ``unsupported``: single-space signals alone would recommend the layer: never a recommendation;
#: - ``chance``: every voter was an alignment curve with no alignment beyond chance;
#: - ``control``: a random-init model: the same fields, never a recommendation;
#: - ``none``: no voter is defined at any layer (or the only signals were controls).
STATUSES = ("recommend", "last", "default", "tie", "untested", "unsupported", "chance", "control", "none")

#: how the layer-choice study names a curve of alignment with another model (a reference)
ALIGNMENT_PREFIX = "alignment with "


def is_alignment(name: str) -> bool:
    """Whether a curve measures alignment with a reference model (two spaces), not one space alone."""
    return name.startswith(ALIGNMENT_PREFIX)


def percentile_interval(samples, estimate: float, *, level: float = 0.95) -> tuple[float, float] | None:
    """The bootstrap interval of ``estimate`` from its resampled values ``samples`` ``(B,)`` (NaN =
    a resample that could not be scored, skipped): the ``(1∓level)/2`` percentiles of the valid
    values shifted by ``estimate − median(samples)``, as :func:`analysis.bootstrap.bootstrap_ci` does
    (the shift removes the resampling bias of neighbourhood metrics). None with fewer than 2 valid
    resamples. Reference: Efron & Tibshirani (1993), ch. 13."""
    s = np.asarray(samples, dtype=float)
    ok = s[np.isfinite(s)]
    if len(ok) < 2 or not np.isfinite(estimate):
        return None
    alpha = (1 - level) / 2
    lo, hi = np.quantile(ok, [alpha, 1 - alpha])
    shift = float(estimate) - float(np.median(ok))
    return float(lo + shift), float(hi + shift)


def paired_gain(pick_samples, base_samples, pick_value: float, base_value: float, *, higher: bool,
                level: float = 0.95) -> dict:
    """The gain of a picked layer over a baseline layer (the last layer, the ``default`` output),
    estimated on the same item resamples: a paired bootstrap of the difference.

    Args:
        pick_samples, base_samples: ``(B,)`` the metric at the pick and at the baseline on the same
            ``B`` item resamples (row ``b`` of both drawn from one index set; NaN = not scored).
        pick_value, base_value: the metric on the full sample at each layer.
        higher: the metric's direction; every difference is signed so that positive = pick better.
    Returns:
        ``{"diff": ±(pick − base), "low", "high": its interval (:func:`percentile_interval` of the
        per-resample differences ``d_b = ±(pick_b − base_b)``; None with < 2 paired resamples),
        "gain": diff / |base| (None when base is 0 or undefined), "gain_low", "gain_high": the interval
        on the same scale, "n_boot": B, "n_valid": resamples scored at both layers, "level"}``.
    """
    a, b = np.asarray(pick_samples, dtype=float), np.asarray(base_samples, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired resamples must be two (B,) arrays of one length, got {a.shape} and {b.shape}")
    sign = 1.0 if higher else -1.0
    diff = sign * (float(pick_value) - float(base_value))
    d = sign * (a - b)
    iv = percentile_interval(d, diff, level=level)
    scale = abs(float(base_value)) if np.isfinite(base_value) and base_value != 0 else None
    out = {"diff": diff if np.isfinite(diff) else None, "low": None, "high": None, "gain": None, "gain_low": None,
           "gain_high": None, "n_boot": int(len(d)), "n_valid": int(np.isfinite(d).sum()), "level": float(level)}
    if iv is not None:
        out.update(low=iv[0], high=iv[1])
    if scale is not None and out["diff"] is not None:
        out["gain"] = diff / scale
        if iv is not None:
            out.update(gain_low=iv[0] / scale, gain_high=iv[1] / scale)
    return out


def judge_gain(cmp: dict | None, margin: float = PRACTICAL_MARGIN) -> str:
    """``"better"`` when the paired interval lies above zero and the gain reaches ``margin``;
    ``"worse"`` when it lies below zero (the pick scores below the baseline beyond its interval);
    ``"tie"`` otherwise (an interval that includes zero decides nothing, either way); ``"untested"``
    when there is no interval (too few paired resamples) or no gain (a baseline of 0)."""
    if cmp is None or cmp["diff"] is None or cmp["low"] is None:
        return "untested"
    if cmp["high"] < 0:
        return "worse"
    if cmp["gain"] is None:
        return "untested"
    return "better" if cmp["low"] > 0 and cmp["gain"] >= margin else "tie"


#: relative change below which :func:`describe_pick` calls a layer and the last layer a tie (0.5%)
TIE_TOLERANCE = 0.005


def _rel_gain(value: float, base: float, higher: bool) -> float | None:
    """Signed relative change from ``base`` to ``value``, positive when ``value`` is better:
    ``±(value − base) / |base|``; None when either is undefined or ``base`` is 0."""
    if not (np.isfinite(value) and np.isfinite(base)) or base == 0:
        return None
    g = (value - base) / abs(base)
    return float(g if higher else -g)


def _metric_picks(arrays: dict, higher_is_better: dict, last: int, bad: set) -> tuple[dict, list]:
    """Each curve's best layer among ``1..last`` outside ``bad`` and NaN (ties to the deepest
    layer), and the curves with no such layer."""
    picks, undefined = {}, []
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
    return picks, undefined


def layers_to_resample(curves: dict[str, np.ndarray], higher_is_better: dict[str, bool], *,
                       last_layer: int | None = None, default_layer: int | None = None,
                       degenerate=()) -> dict[str, list[int]]:
    """Per curve, the layers whose item-resample scores :func:`layer_verdict` needs to test a pick
    made by that curve: its own pick, the last layer and the ``default`` output (when stored).
    Every lead metric of a verdict is a curve agreeing with the pick, so these always suffice."""
    arrays, n_layers = _as_curves(curves)
    last = n_layers - 1 if last_layer is None else int(last_layer)
    picks, _ = _metric_picks(arrays, higher_is_better, last, {int(i) for i in degenerate})
    extra = [last] + ([int(default_layer)] if default_layer is not None and 0 <= default_layer < n_layers else [])
    return {m: sorted({p, *extra}) for m, p in picks.items()}


def _samples(resamples: dict | None, metric: str, layer: int | None):
    """The ``(B,)`` resample scores of ``metric`` at ``layer`` (keys may be ints or strings), or None."""
    if layer is None or not resamples or metric not in resamples:
        return None
    per = resamples[metric] or {}
    s = per.get(layer, per.get(str(layer)))
    return None if s is None else np.array([np.nan if x is None else x for x in s], dtype=float)


def layer_verdict(curves: dict[str, np.ndarray], higher_is_better: dict[str, bool], *, last_layer: int | None = None,
                  default_layer: int | None = None, degenerate=(), intervals: dict | None = None,
                  resamples: dict | None = None, controls=(), nulls: dict | None = None,
                  control_model: bool = False, margin: float = PRACTICAL_MARGIN, alignment=None,
                  copies: dict | None = None) -> Verdict:
    """One answer per model: the layer to use, how many metrics agree, and whether its gain over
    the last layer and over the model's own ``default`` output is real and large enough.

    Voters: every curve except those in ``controls`` (alignment with a random-init model: a
    baseline, never a vote) and alignment curves whose best cell shows no alignment beyond chance
    (:func:`analysis.null.beyond_chance` false: ``p > NULL_ALPHA``). Each voter's pick is its best layer among ``1..last_layer``
    (layer 0 is the embedding output; degenerate and undefined (NaN) layers are never picked;
    ties go to the deepest layer). Alignment with a reference decides: the candidate is the layer
    most *alignment* voters pick (a tie in votes goes to the deeper layer); single-space signals
    (RankMe, uniformity, ...) only support or dissent, and decide only where no alignment voter is
    left, and then never "use layer N" (status ``unsupported``): an isotropic noise layer wins
    RankMe and uniformity (LayerScope: no single signal is a universal selector). Every voter that
    picks another layer is listed in ``dissent`` with its own gain there. The *lead* metric is an
    agreeing decider with paired resamples, the one with the smallest point gain over the last
    layer, so the headline never overstates.

    Gains are paired differences (:func:`paired_gain`) of the lead metric on the same item
    resamples, pick against the last layer and against ``default``. The status is one of
    :data:`STATUSES` (each one's rule is listed there).

    Args:
        curves: metric -> per-layer values ``(L,)`` (NaN = undefined).
        higher_is_better: metric -> direction.
        last_layer: index of the last numbered layer (default ``L − 1``); layers after it are named
            layers (``default``, ``joint``): compared against, never recommended.
        default_layer: index of the model's own output (named layer ``default``) when stored.
        degenerate: layer indices whose values do not measure a representation (collapsed etc.).
        intervals: metric -> ``(layer, low, high)``, a stored 95% interval of that metric at that
            layer (a grid's best-cell CI); the value's interval when ``layer`` is the candidate
            (else it comes from the resamples).
        resamples: metric -> {layer: ``(B,)`` scores}, every array on the same ``B`` item resamples
            (:func:`layers_to_resample` says which layers are needed).
        controls: curve names whose signal comes from a control model.
        nulls: metric -> ``{"p", "q95", "n_perm"}``, the shuffled-pairing null of the curve's best cell.
        control_model: the model itself has random-init weights.
        margin: the practical margin (:data:`PRACTICAL_MARGIN`).
        alignment: the curve names that measure alignment with a reference (default: the names
            starting with :data:`ALIGNMENT_PREFIX`, as the layer-choice study names them).
        copies: ``{curve: why}``, alignment with a (near-)identical copy of the model
            (:func:`near_identical`): flagged, never a vote.
    Returns:
        a :class:`~analysis.methods.verdict.Verdict` (one comment per field there). ``layer`` is the
        candidate whatever the status (the picked layer a probe is compared with).
    """
    if not curves:
        raise ValueError("no per-layer curves to choose from")
    bad = {int(i) for i in degenerate}
    for name in curves:
        if name not in higher_is_better:
            raise ValueError(f"curve {name!r} has no direction in higher_is_better")
    arrays, n_layers = _as_curves(curves)
    last = n_layers - 1 if last_layer is None else int(last_layer)
    if not 1 <= last < n_layers:
        raise ValueError(f"last_layer {last_layer} is outside 1..{n_layers - 1}")
    ctrl, copy, chance, voters = _voters(arrays, controls, copies, nulls)
    picks, undefined = _metric_picks(voters, higher_is_better, last, bad)
    align = {m for m in arrays if (m in set(alignment) if alignment is not None else is_alignment(m))}
    d = default_layer if default_layer is not None and 0 <= default_layer < n_layers else None
    out = {**_blank("", last, undefined), "default_layer": d, "picks": picks, "n_metrics": len(picks),
           "controls": ctrl, "chance": chance, "margin": float(margin), "control": bool(control_model),
           "copies": copy}
    if not picks:
        return Verdict(**{**out, **_without_voters(arrays, copy, chance, ctrl, undefined, bad)})
    out.update(_measured(ev := _Evidence(arrays, higher_is_better, resamples), picks, align, last, d, intervals))
    out["null"] = _lead_null(nulls, chance, out["lead"])
    if control_model:
        return Verdict(**{**out, "status": "control",
                          "reason": "random-init weights: a baseline for the trained models, not a candidate"})
    return Verdict(**_judged(out, ev.comparisons, align, last, margin))


def _lead_null(nulls: dict | None, chance: dict, lead: str | None) -> dict | None:
    """The null the lead (deciding) curve passed: its entry of ``nulls``, or None when it has none or
    did not pass it (then it is in ``chance`` and never leads)."""
    nl = (nulls or {}).get(lead)
    return dict(nl) if nl and lead not in chance else None


def _voters(arrays: dict, controls, copies: dict | None, nulls: dict | None) -> tuple[list, dict, dict, dict]:
    """``(controls, copies, chance, voters)``: the curves that are controls, copies of the model or
    alignment no stronger than chance, each set apart, and the curves left to vote."""
    ctrl = sorted(m for m in set(controls) if m in arrays)
    copy = {m: str(why) for m, why in (copies or {}).items() if m in arrays and m not in ctrl}
    chance = {m: dict(nl) for m, nl in (nulls or {}).items()
              if m in arrays and m not in ctrl and m not in copy and nl and nl.get("p") is not None
              and not beyond_chance(nl)}
    voters = {m: v for m, v in arrays.items() if m not in ctrl and m not in chance and m not in copy}
    return ctrl, copy, chance, voters


def _without_voters(arrays: dict, copy: dict, chance: dict, ctrl: list, undefined: list, bad: set) -> dict:
    """The status and reason of a verdict that no curve votes in."""
    if copy and not chance and not undefined:
        return {"reason": f"its only other signals are alignment with identical copies of this model "
                          f"({', '.join(sorted(copy))}): a copy is no evidence"}
    if chance:
        return {"status": "chance", "reason": "no alignment beyond chance: " + _chance_text(arrays, chance)}
    if ctrl and not undefined:
        return {"reason": f"its only signals are alignment with random-init controls "
                          f"({', '.join(ctrl)}): controls never vote"}
    why = "degenerate or undefined at every layer" if bad else "undefined at every layer"
    return {"reason": f"every curve is {why} ({', '.join(sorted(undefined))})"}


class _Evidence:
    """The curves, their directions and their item resamples, and the comparisons a verdict makes."""

    def __init__(self, arrays: dict, higher_is_better: dict, resamples: dict | None):
        self.arrays, self.higher_is_better, self.resamples = arrays, higher_is_better, resamples
        self.comparisons: dict = {}  # filled by _measured: "vs_last", "vs_default", "dissent"

    def paired(self, m: str, *layers: int) -> bool:
        return all(_samples(self.resamples, m, i) is not None for i in set(layers))

    def compare(self, m: str, pick: int, base: int) -> dict | None:
        """``m`` at ``pick`` against ``m`` at ``base``: paired when both have resamples, else point only."""
        w, up = self.arrays[m], bool(self.higher_is_better[m])
        if not (np.isfinite(w[base]) and np.isfinite(w[pick])):
            return None
        s_a, s_b = _samples(self.resamples, m, pick), _samples(self.resamples, m, base)
        if s_a is not None and s_b is not None:
            return paired_gain(s_a, s_b, w[pick], w[base], higher=up)
        diff = (1.0 if up else -1.0) * float(w[pick] - w[base])
        return {"diff": diff, "low": None, "high": None, "gain": _rel_gain(w[pick], w[base], up),
                "gain_low": None, "gain_high": None, "n_boot": 0, "n_valid": 0, "level": 0.95}


def _measured(ev: _Evidence, picks: dict, align: set, last: int, d: int | None, intervals: dict | None) -> dict:
    """The candidate layer, its lead metric and value, and its gains over the last layer and the default
    output; every dissenting voter with its own gain (``ev.comparisons`` keeps them for the status)."""
    arrays, higher_is_better = ev.arrays, ev.higher_is_better
    # alignment with a trained reference decides; single-space signals (RankMe, uniformity: both
    # reward isotropy, which an information-free layer has) support or dissent, never decide
    deciders = {m: p for m, p in picks.items() if m in align} or picks
    layers, counts = np.unique(list(deciders.values()), return_counts=True)
    layer = int(layers[counts == counts.max()].max())  # most votes; the deeper of equals
    agreeing = sorted(m for m, p in picks.items() if p == layer)
    gains = {m: _rel_gain(arrays[m][layer], arrays[m][last], bool(higher_is_better[m])) for m in agreeing}
    # the smallest gain among the testable deciding metrics (undefined gains last), so the headline
    # never overstates
    lead = min((m for m in agreeing if m in deciders),
               key=lambda m: (not ev.paired(m, layer, last), gains[m] is None,
                              gains[m] if gains[m] is not None else 0.0, m))
    v = arrays[lead]
    stored = {m: (lo, hi) for m, (il, lo, hi) in (intervals or {}).items()
              if m == lead and int(il) == layer and lo is not None and hi is not None}
    s_pick = _samples(ev.resamples, lead, layer)
    interval = stored.get(lead) or (percentile_interval(s_pick, v[layer]) if s_pick is not None else None)
    vs_last = ev.compare(lead, layer, last) if layer != last else None
    vs_default = ev.compare(lead, layer, d) if d is not None else None
    # every voter that picks another layer, with its own gain there over the last layer (or, when it
    # picks the last layer, over the candidate): said in the line, never hidden behind a majority
    dissent = []
    for m, p in sorted(picks.items(), key=lambda mp: (mp[0] not in align, mp[0])):
        if p == layer:
            continue
        cmp = ev.compare(m, p, last) if p != last else ev.compare(m, last, layer)
        dissent.append({"metric": m, "layer": p, "alignment": m in align, "vs": "the last layer" if p != last
                        else f"layer {layer}", "gain": cmp,
                        "beyond_interval": bool(cmp is not None and cmp["low"] is not None and cmp["low"] > 0)})
    ev.comparisons.update(vs_last=vs_last, vs_default=vs_default, dissent=dissent)
    return dict(layer=layer, n_agree=len(agreeing), agreeing=agreeing, lead=lead, value=float(v[layer]),
                interval=list(interval) if interval is not None else None,
                last_value=float(v[last]) if np.isfinite(v[last]) else None,
                default_value=float(v[d]) if d is not None and np.isfinite(v[d]) else None,
                gain_vs_last=gains[lead] if layer != last else 0.0,
                gain_vs_default=vs_default["gain"] if vs_default else None, gains_vs_last=gains,
                vs_last=vs_last, vs_default=vs_default, n_boot=len(s_pick) if s_pick is not None else None,
                decided_by="alignment" if lead in align else "single-space", dissent=dissent)


def _judged(out: dict, comparisons: dict, align: set, last: int, margin: float) -> dict:
    """``out`` with its status and reason (:data:`STATUSES`), from the candidate's paired gains."""
    layer, lead, agreeing = out["layer"], out["lead"], out["agreeing"]
    vs_last, vs_default, dissent = comparisons["vs_last"], comparisons["vs_default"], comparisons["dissent"]
    # an undefined default output (degenerate) is no baseline: shown, not tested against
    j_default = judge_gain(vs_default, margin) if vs_default is not None else None
    if j_default == "worse":
        where = "the last layer" if layer == last else f"layer {layer}"
        return {**out, "status": "default",
                "reason": f"{where} scores below the model's default output by {lead} beyond its 95% interval: "
                          "never recommended over it"}
    if layer == last:
        # "no earlier layer scores higher" only when it is true of every voter
        agree = ("no earlier layer scores higher" if not dissent else
                 f"{lead} picks it" + (" (alignment decides)" if lead in align else ""))
        if j_default in (None, "better"):
            return {**out, "status": "last", "reason": agree}
        # last layer against the model's own output: a difference whose interval includes zero (or
        # that cannot be tested) picks neither
        return {**out, "status": "untested" if j_default == "untested" else "tie", "tie_with": "the default output",
                "reason": agree + _why(j_default, vs_default, margin, "the default output")}
    single = lead not in align  # no alignment voter: single-space signals alone

    def unsupported(status: str, reason: str) -> dict:
        if single and status == "recommend":
            return {**out, "status": "unsupported",
                    "reason": f"single-space signals ({', '.join(agreeing)}) never decide alone: no alignment with "
                              "a trained reference supports it"}
        return {**out, "status": status, "reason": reason}

    if vs_last is None:  # the last layer is degenerate or undefined: the pick is the best defined layer
        if j_default in (None, "better"):
            return unsupported("recommend", "the last layer is degenerate or undefined: no gain over it to test")
        return {**out, "status": "untested" if j_default == "untested" else "tie", "tie_with": "the default output",
                "reason": "the last layer is degenerate or undefined" + _why(j_default, vs_default, margin,
                                                                              "the default output")}
    j_last = judge_gain(vs_last, margin)
    untested = [c for c, j in ((vs_last, j_last), (vs_default, j_default)) if j == "untested"]
    if untested:
        reason = ("a baseline scores 0: no relative gain to test" if all(c["gain"] is None for c in untested)
                  else "fewer than 2 paired item resamples could be scored to test the gain (none stored: run "
                       "`layerscope analyze` with --bootstrap 2 or more; or too few distinct items for the metric)")
        return {**out, "status": "untested", "reason": reason}
    if j_last == "better" and j_default in (None, "better"):
        return unsupported("recommend", "the paired gains exclude zero and pass the margin")
    which, cmp, j = (("the last layer", vs_last, j_last) if j_last != "better"
                     else ("the default output", vs_default, j_default))
    return {**out, "status": "tie", "tie_with": which, "reason": _why(j, cmp, margin, which).removeprefix(": ")}


def _why(judgement, cmp, margin: float, which: str) -> str:
    """Why a gain over ``which`` does not count: its interval includes zero or it is under the margin."""
    if judgement in (None, "better"):
        return ""
    if judgement == "untested":
        return f": the gain over {which} could not be tested"
    if cmp["low"] is not None and cmp["low"] <= 0:
        return f": the 95% interval of the gain over {which} includes zero"
    return f": the gain over {which} is under the {margin:.0%} practical margin"


def _null_name(null: dict) -> str:
    """"shuffled-pairing null", or the grouped null by its kind (between or within groups)."""
    return "shuffled-pairing null" if null_kind(null) == "plain" else f"null of {null_label(null)}"


def _chance_text(arrays: dict, chance: dict) -> str:
    return "; ".join(f"{m} best {np.nanmax(arrays[m]):.3g}, {_null_name(nl)} p={nl['p']:.2g}"
                     + (f" (null 95th percentile {nl['q95']:.3g}" if nl.get("q95") is not None else " (")
                     + (f", {nl['n_perm']} shuffles)" if nl.get("n_perm") else ")")
                     for m, nl in sorted(chance.items()))


#: how precompute samples a video's n_f frames (:func:`precompute.inputs.video.sample_indices`, the
#: DR protocol): n_f = 1 takes frame 0
FRAME_SAMPLING = "round(linspace(0, T−1, n_f))"


def one_input_reason(n_items: int, modality: str | None, *, n_frames: int | None = None,
                     n_captions: int | None = None, image_mode: str | None = None) -> str:
    """Why no layer of a run can be recommended when every layer, the first included, puts all
    ``n_items`` items at one point (:func:`analysis.metrics.degenerate.one_input`): the model received
    the same input for every item; then what that input was, from the run's settings, and what to do.

    A vision run (``video``/``image``) with ``n_frames`` known names the frames it saw: frames are
    sampled at ``round(linspace(0, T−1, n_f))`` (:data:`FRAME_SAMPLING`), so one frame per video is
    each video's first frame, and an image model with ``image_mode="first"`` sees the first frame
    whatever n_f; a text run says its captions gave one point. Nothing is said of frames without n_f.

    >>> one_input_reason(160, "image", n_frames=1)[:62]
    'every layer, the first included, maps all 160 items to one poi'
    """
    out = (f"every layer, the first included, maps all {n_items} items to one point: the model received the same "
           "input for every item")
    if modality == "image" and image_mode == "first":
        return (out + "; with --image-mode first an image model sees each video's first frame only: check the videos' "
                f"first frames, or precompute with --image-mode frames (the average of n_f frames sampled at "
                f"{FRAME_SAMPLING})")
    if modality in ("video", "image") and n_frames is not None:
        nf = int(n_frames)
        if nf == 1:
            return (out + f"; with 1 frame per video (frames sampled at {FRAME_SAMPLING}: the first frame), check "
                    "the videos' first frames or precompute with more frames (--frames)")
        return (out + f"; with {nf} frames per video (sampled at {FRAME_SAMPLING}), check the videos at those "
                "frames or precompute with more frames (--frames)")
    if modality == "text":
        nc = None if n_captions is None else int(n_captions)
        per = "" if nc is None else f" ({nc} caption{'s' if nc != 1 else ''} per item)"
        return (out + f"; its captions{per} gave one point: check that they differ, also once tokenized (unknown "
                "words and truncation can make them one)")
    return out


def no_verdict(reason: str, last_layer: int | None, undefined=()) -> Verdict:
    """The verdict of a model no layer of which can be recommended."""
    return Verdict(**_blank(reason, last_layer, undefined))


def _blank(reason: str, last_layer: int | None, undefined=()) -> dict:
    """The fields of a verdict with no pick, which :func:`layer_verdict` fills in."""
    return {"status": "none", "reason": reason, "last_layer": last_layer, "default_layer": None, "picks": {},
            "undefined": sorted(undefined), "n_metrics": 0, "layer": None, "n_agree": 0, "agreeing": [],
            "lead": None, "value": None, "last_value": None, "default_value": None, "interval": None,
            "gain_vs_last": None, "gain_vs_default": None, "gains_vs_last": {}, "vs_last": None,
            "vs_default": None, "controls": [], "chance": {}, "margin": PRACTICAL_MARGIN, "n_boot": None,
            "control": False, "decided_by": None, "dissent": [], "copies": {}, "null": None}


def _pct(g) -> str:
    return "—" if g is None else f"{g:+.1%}" if abs(g) < 0.1 else f"{g:+.0%}"


def _gain_text(cmp: dict | None, what: str) -> str:
    """"+18% over the last layer (95% CI +12% to +25%)", or the point gain and why it has no interval."""
    if cmp is None:
        return f"no gain over {what}: it is degenerate or undefined"
    if cmp["gain"] is None:
        return f"no relative gain over {what}: it scores 0"
    if cmp["gain_low"] is None:
        return f"{_pct(cmp['gain'])} over {what} (no paired interval)"
    return f"{_pct(cmp['gain'])} over {what} (95% CI {_pct(cmp['gain_low'])} to {_pct(cmp['gain_high'])})"


def verdict_sentence(model: str, v: Verdict, *, n_boot: int | None = None) -> str:
    """The verdict of :func:`layer_verdict` as one line for people: its value with an interval and
    its paired gains with theirs, or why not, e.g. "vit: use layer 7 of 12 — 3 of 4 metrics agree;
    rankme 41.2 (95% CI 40.1–42.0, 200 resamples); +18% over the last layer (95% CI +12% to +25%),
    +12% over the default output (95% CI +5% to +19%); paired bootstrap, practical margin 2%"."""
    last, status = v.last_layer, v.status
    if status == "none":
        return f"{model}: no layer can be recommended — {v.reason}" + _aside(v)
    if status == "chance":
        return f"{model}: {v.reason} — no layer is recommended" + _aside(v)
    agree = f"{v.n_agree} of {v.n_metrics} metric{'s' if v.n_metrics != 1 else ''} agree"
    n_boot = n_boot or v.n_boot
    value = f"{v.lead} {v.value:.3g}"
    if v.interval:
        lo, hi = v.interval
        sep = " to " if lo < 0 else "–"  # "-2.66–-2.13" misreads
        value += f" (95% CI {lo:.3g}{sep}{hi:.3g}{f', {n_boot} resamples' if n_boot else ''})"
    else:
        value += " (no interval: no item resamples stored)"
    if v.null:  # the test the deciding curve passed, named by kind (between groups by default)
        value += f"; beyond chance: p = {v.null['p']:.2g} under {v.null['n_perm']} {null_label(v.null)}"
    gains = [] if v.layer == last else [_gain_text(v.vs_last, "the last layer")]
    if v.default_layer is not None:
        gains.append(_gain_text(v.vs_default, "the default output"))
    gain = "; ".join([value, *gains]) + f"; paired bootstrap, practical margin {v.margin:.0%}"
    if status == "control":
        where = f"the last layer ({last})" if v.layer == last else f"layer {v.layer} of 0–{last}"
        return (f"{model}: a control (random-init weights), never a recommendation — its metrics pick {where} "
                f"({agree}); {gain}" + _aside(v))
    if status == "last":
        only = ("; single-space signals only (no alignment with a trained reference votes)"
                if v.decided_by == "single-space" else "")
        return f"{model}: use the last layer ({last}) — {agree}, {v.reason}; {gain}{only}" + _dissent(v) + _aside(v)
    if status == "default":
        return f"{model}: keep the model's default output — {v.reason}; {gain}" + _dissent(v) + _aside(v)
    where = "the last layer" if v.layer == last else f"layer {v.layer}"
    if status == "tie":
        which = v.tie_with or "the last layer"
        return (f"{model}: tie between {where} ({agree}) and {which} — {v.reason}; {gain}; "
                f"no reason to move off {which}" + _dissent(v) + _aside(v))
    if status in ("untested", "unsupported"):
        return (f"{model}: {where} of 0–{last} leads ({agree}) but is not recommended — {v.reason}; "
                f"{gain}" + _dissent(v) + _aside(v))
    extra = f" ({v.reason})" if v.vs_last is None else ""
    return f"{model}: use layer {v.layer} of 0–{last} — {agree}{extra}; {gain}" + _dissent(v) + _aside(v)


def _dissent(v: Verdict) -> str:
    """"; alignment with mpnet picks layer 3, +27% over the last layer (95% CI +11% to +39%); rankme
    picks the last layer, +2.0% over layer 3 (...)": every voter that picks another layer, alignment first."""
    parts = []
    for d in v.dissent or []:
        where = "the last layer" if d["layer"] == v.last_layer else f"layer {d['layer']}"
        gain = f", {_gain_text(d['gain'], d['vs'])}" if d.get("gain") is not None else ""
        parts.append(f"{d['metric']} picks {where}{gain}")
    return "; " + "; ".join(parts) if parts else ""


def _aside(v: Verdict) -> str:
    """What did not vote: controls and alignment no better than chance."""
    out = ""
    if v.controls:
        out += f"; not voting (random-init controls): {', '.join(v.controls)}"
    if v.copies:
        out += (f"; not voting (an identical copy of this model, cosine ≥ 1 − {COPY_TOL:g} at every layer): "
                f"{', '.join(sorted(v.copies))}")
    if v.chance and v.status != "chance":
        out += "; not voting (no alignment beyond chance): " + ", ".join(
            f"{m} (p={nl['p']:.2g}" + ("" if null_kind(nl) == "plain" else f", {null_label(nl)}") + ")"
            for m, nl in sorted(v.chance.items()))
    return out
