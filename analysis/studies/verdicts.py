"""Verdicts study: per model, the layer to use (``result_studies``, study ``verdict``, one row per model
side). Decided once, here, from the rows the earlier studies stored: each model's layer-choice curves
and item resamples (:mod:`.layer_choice`) and the mutual k-NN grids behind its alignment curves, with
their best-cell intervals and shuffled-pairing nulls (:mod:`.grids`). The dashboard and the report
read the stored :class:`~analysis.methods.verdict.Verdict`; nothing decides a verdict at read time.

A model's sides come from its run, never from its name: the vision side is keyed by the model's name
and its caption side by ``"<model> [text]"`` (:meth:`DatasetRuns.largest_settings`), and a partner is
the model a grid row names, so a model called ``"x [text]"`` or ``"alignment with y"`` is read as it is.
"""

from __future__ import annotations

import numpy as np

from analysis.storage import results as R
from analysis.methods.layer_selection import ALIGNMENT_PREFIX, layer_verdict, no_verdict
from analysis.sides import split_side
from analysis.studies.context import Context, DatasetRuns

STUDY = "verdict"


def row_best(grid, layer: int, model_is_a: bool) -> int:
    """The other model's layer that aligns best with ``layer`` (NaN cells skipped; ties to the deepest
    layer, as every pick; 0 when none is finite)."""
    line = np.asarray(grid, dtype=float)[layer] if model_is_a else np.asarray(grid, dtype=float)[:, layer]
    return len(line) - 1 - int(np.nanargmax(line[::-1])) if np.isfinite(line).any() else 0


def grid_null(g: dict) -> dict | None:
    """The best cell's shuffled-pairing null a grid row stores (``flags["null"]``), or None when it has
    none (switched off, or no best cell)."""
    null = (g.get("flags") or {}).get("null")
    return null if isinstance(null, dict) and null.get("p") is not None else None


def curve_partner(curve: str, models) -> str | None:
    """The model an ``"alignment with <reference>"`` curve names, for a curve whose grid is not at hand:
    the reference itself when a model has that name (``"x [text]"`` may be a model's own name), else
    the model of a side (``"clip [text]"`` -> ``clip``, :func:`analysis.sides.split_side`); None for a
    curve of one space or a reference no model of ``models`` matches.

    >>> curve_partner("alignment with clip [text]", {"clip"}), curve_partner("alignment with x [text]", {"x [text]"})
    ('clip', 'x [text]')
    """
    if not curve.startswith(ALIGNMENT_PREFIX):
        return None
    ref = curve[len(ALIGNMENT_PREFIX):]
    if ref in models:
        return ref
    model, _ = split_side(ref)
    return model if model in models else None


def heatmap_query(dataset: str, g: dict, is_a: bool, layer: int) -> dict:
    """The heatmap's query parameters that open grid ``g`` with ``layer`` of this model selected and
    the partner layer that aligns best with it."""
    other = row_best(g["grid"], layer, is_a)
    heat = {"dataset": dataset, "kind": g.get("pair_kind") or "vision_text", "a": g["model_a"], "b": g["model_b"],
            "metric": "mutual_knn", "nf": str(int(g["n_frames"])) if g["n_frames"] is not None else None,
            "nc": str(int(g["n_captions"])) if g["n_captions"] is not None else None,
            "la": str(layer if is_a else other), "lb": str(other if is_a else layer)}
    return {k: x for k, x in heat.items() if x is not None}


def decide(dataset: str, key: str, choice: dict, run: dict, found: dict, random: set, models) -> dict:
    """One model side's stored verdict (the payload of its ``result_studies`` row).

    Args:
        key: the side's key among the dataset's runs (``clip``, ``clip [text]``, ``bert``).
        choice: its layer-choice payload (``curves``, ``higher_is_better``, ``resamples``,
            ``layer_names``, ``degenerate_layers``, ``copies``, ...).
        run: its run (``model``: the model's own name, whatever the key; ``modality``).
        found: ``{alignment curve: (grid row with its grid, whether the run is the grid's A)}``.
        random: the models with random-init weights; ``models``: every model of the store.
    Returns:
        ``{"model": key, "base": the model, "side": the modality when the key names a side, else None,
        "verdict": Verdict.to_dict(), "n_boot", "heatmap": query | None, "curves": query}``; the
        curves query opens the side's own curve (``models``: ``key``, the key the Curves page draws a
        side under: ``clip [text]`` for a caption side; the model's name alone there is its vision side).
    """
    base = run["model"]
    side = {"model": key, "base": base, "side": run["modality"] if key != base else None}
    curves = {k: np.asarray(v, dtype=float) for k, v in (choice.get("curves") or {}).items()}
    if not curves:  # stored without curves: every one is undefined (degenerate layers)
        v = no_verdict(choice.get("reason") or "no per-layer curve is defined", choice.get("last_layer"),
                       choice.get("undefined_curves") or [])
        return {**side, "verdict": v.to_dict(), "n_boot": None, "heatmap": None,
                "curves": {"dataset": dataset, "models": key}}
    names = {int(k): n for k, n in (choice.get("layer_names") or {}).items()}
    hib = choice.get("higher_is_better") or {}
    intervals = {m: ((g["best_a"] if is_a else g["best_b"]), g["ci_low"], g["ci_high"])
                 for m, (g, is_a) in found.items() if g.get("best_a") is not None and g.get("ci_low") is not None}
    n_layers = len(next(iter(curves.values())))
    last = min(names) - 1 if names and 1 <= min(names) - 1 < n_layers else None
    default = next((i for i, n in names.items() if n == "default"), None)
    # alignment with a random-init model is a control: the partner is the model its grid names
    partners = {m: curve_partner(m, models) for m in curves}
    partners.update({m: (g["model_b"] if is_a else g["model_a"]) for m, (g, is_a) in found.items()})
    controls = [m for m, ref in partners.items() if ref in random]
    # the null is the grid's maximum under shuffled pairings: when the best cell is within chance,
    # every row maximum (each layer's value on the curve) is too, so the whole curve does not vote
    nulls = {m: nl for m, (g, _) in found.items() if (nl := grid_null(g)) is not None}
    v = layer_verdict(curves, {m: hib.get(m, True) for m in curves}, last_layer=last, default_layer=default,
                      degenerate=[int(i) for i in (choice.get("degenerate_layers") or {})], intervals=intervals,
                      resamples=choice.get("resamples"), controls=controls, nulls=nulls,
                      control_model=base in random, copies=choice.get("copies"))
    lead = v.lead if v.lead in found else next((m for m in v.agreeing if m in found), next(iter(sorted(found)), None))
    heat = None
    if lead is not None:
        g, is_a = found[lead]
        heat = heatmap_query(dataset, g, is_a, v.layer if v.layer is not None
                             else (g["best_a"] if is_a else g["best_b"]) or 0)
    n_boot = v.n_boot or (found[v.lead][0].get("n_boot") if v.lead in found and v.interval else None)
    return {**side, "verdict": v.to_dict(), "n_boot": n_boot, "heatmap": heat,
            "curves": {"dataset": dataset, "metric": v.lead or next(iter(sorted(curves))), "models": key}}


def _sources(ctx: Context, dataset: str, choice: dict) -> dict:
    """``{alignment curve: (grid row with its grid, whether the run is A)}`` of the curves the choice
    kept, from the grid ids it stored (``sources``)."""
    run_id = choice["setting"]["run_id"]
    found = {}
    for name, rid in (choice.get("sources") or {}).items():
        g = ctx.result_row("result_grids", dataset, rid) if name in (choice.get("curves") or {}) else None
        if g is not None:
            found[name] = (g, g["run_a"] == run_id)
    return found


def run(ctx: Context, d: DatasetRuns) -> None:
    """Every model side's verdict on dataset ``d``, after the layer-choice study (whose rows it reads)."""
    chosen = d.largest_settings()
    models = dict(ctx.con.execute("SELECT model, random_init FROM models").fetchall())
    random = {m for m, ri in models.items() if ri}
    choices = {s["result_id"]: s for s in ctx.read_studies(study="layer_choice", dataset=d.name)}
    grid_keys = ctx.input_keys("result_grids")
    for key, r in sorted(chosen.items()):
        choice = choices.get(ctx.rid("layer_choice", d.name, key))
        if choice is None:
            continue  # no curve at all: the layer-choice study stored nothing to decide from
        p = choice["payload"]
        sources = sorted((p.get("sources") or {}).values())
        ikey = R.key(choice["input_key"], [grid_keys.get(s) for s in sources], sorted(random), r["model"])
        rid = ctx.rid(STUDY, d.name, key)
        if not ctx.fresh(STUDY, "result_studies", rid, ikey):
            continue
        ctx.put_study(result_id=rid, study=STUDY, dataset=d.name, subject=key, params={"k": ctx.settings.k},
                      payload=decide(d.name, key, p, r, _sources(ctx, d.name, p), random, models), input_key=ikey)
