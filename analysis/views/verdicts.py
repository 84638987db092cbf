"""The Overview's layer verdicts, per dataset and model, and the rule they follow."""

from __future__ import annotations

import numpy as np

from analysis.storage import results as R
from analysis.methods.layer_selection import PRACTICAL_MARGIN
from analysis.views.curves import _alignment_sources, _row_best, layer_choices
from analysis.views.null import grid_null
from analysis.views.store_info import has_table, model_labels


#: how a verdict line is decided, said under the verdicts on the Overview and in the report
VERDICT_RULE = (
    "Per model: the layer that alignment with trained reference models picks (the most alignment curves; layer "
    "0, degenerate and named layers never count; alignment with a random-init control, or no better than "
    "shuffled pairings, never votes; the line names the null its deciding alignment passed: between-group "
    "shuffles of whole sources when the manifest groups items). Single-space signals (RankMe, uniformity) "
    "support or dissent but never decide: alone they never say \"use layer N\". Its value with a 95% interval, "
    "and its gain over the last layer and over the model's own default output, each a paired bootstrap "
    "difference on the same item resamples with its 95% interval. \"Use layer N\" only when both intervals "
    "exclude zero and both gains reach the practical margin of {margin:.0%}; otherwise a tie. A difference whose "
    "interval includes zero never picks between the last layer and the default output; a pick below the default "
    "output beyond its interval is never recommended over it. Every signal that picks another layer is named in "
    "the line. Random-init models are controls: shown, never recommended.").format(margin=PRACTICAL_MARGIN)


def verdicts(con, dataset) -> list[dict]:
    """Per model of ``dataset``, the layer to use (:func:`analysis.methods.layer_selection.layer_verdict` on
    the stored layer-choice curves and their item resamples: gains over the last layer and the
    model's ``default`` output are paired bootstrap differences), with the stored 95% interval of
    each alignment pick (the mutual k-NN grid's best-cell bootstrap CI), a sentence, and the query
    parameters of the heatmap and curves views that show the evidence. Random-init models are
    controls: alignment with one never votes, and a random-init model's own line is a control's,
    never a recommendation. A grid whose best cell carries a shuffled-pairing null (``"null": {"p",
    "q95", "n_perm"}``) with p ≥ 0.05 is no alignment beyond chance and does not vote either.

    Returns ``[{"model", "label", "verdict", "sentence", "n_boot", "heatmap": {param: value} | None,
    "curves": {param: value}}]`` sorted by model."""
    from analysis.methods.layer_selection import layer_verdict, named_layers, no_verdict, verdict_sentence

    choices = layer_choices(con, dataset)
    if not choices:
        return []
    labels = model_labels(con)
    random = {m for m, ri in con.execute("SELECT model, random_init FROM models").fetchall() if ri}
    grids = (R.read_grids(con, current=True, dataset=dataset, metric="mutual_knn")
             if has_table(con, "result_grids") else [])
    by_id = {g["result_id"]: g for g in grids}
    out = []
    for model, p in sorted(choices.items()):
        run_id = (p.get("setting") or {}).get("run_id")
        names = {int(k): n for k, n in (p.get("layer_names") or {}).items()}
        if not names and run_id and "layer_names" not in p:  # payloads written before layer names were kept
            row = con.execute("SELECT config FROM runs WHERE run_id = ?", [run_id]).fetchall()
            names = named_layers(row[0][0]) if row else {}
        curves = {k: np.asarray(v, dtype=float) for k, v in (p.get("curves") or {}).items()}
        hib = p.get("higher_is_better") or {}
        base = model.removesuffix(" [text]")
        label = labels.get(base, base) + model[len(base):]
        if not curves:  # stored without curves: every one is undefined (degenerate layers)
            v = no_verdict(p.get("reason") or "no per-layer curve is defined", p.get("last_layer"),
                           p.get("undefined_curves") or [])
            out.append({"model": model, "label": label, "verdict": v, "n_boot": None,
                        "sentence": verdict_sentence(label, v), "heatmap": None,
                        "curves": {"dataset": dataset, "models": base}})
            continue
        found = _alignment_sources(p, curves, grids, by_id)
        intervals = {m: ((g["best_a"] if is_a else g["best_b"]), g["ci_low"], g["ci_high"])
                     for m, (g, is_a) in found.items() if g.get("best_a") is not None and g.get("ci_low") is not None}
        deg = [int(i) for i in (p.get("degenerate_layers") or {})]
        n_layers = len(next(iter(curves.values())))
        last = min(names) - 1 if names and 1 <= min(names) - 1 < n_layers else None
        default = next((i for i, n in names.items() if n == "default"), None)
        partners = {m: (g["model_b"] if is_a else g["model_a"]) for m, (g, is_a) in found.items()}
        partners.update({m: m.removeprefix("alignment with ") for m in curves
                         if m.startswith("alignment with ") and m not in partners})
        controls = [m for m, ref in partners.items() if ref.removesuffix(" [text]") in random]
        # the null is the grid's maximum under shuffled pairings: when the best cell is within chance,
        # every row maximum (each layer's value on the curve) is too, so the whole curve does not vote
        nulls = {m: nl for m, (g, _) in found.items() if (nl := grid_null(g)) is not None}
        v = layer_verdict(curves, {m: hib.get(m, True) for m in curves}, last_layer=last, default_layer=default,
                          degenerate=deg, intervals=intervals, resamples=p.get("resamples"), controls=controls,
                          nulls=nulls, control_model=base in random, copies=p.get("copies"))
        lead = v.lead if v.lead in found else next((m for m in v.agreeing if m in found),
                                                          next(iter(sorted(found)), None))
        heat = None
        if lead is not None:
            g, is_a = found[lead]
            layer = v.layer if v.layer is not None else (g["best_a"] if is_a else g["best_b"]) or 0
            other = _row_best(g["grid"], layer, is_a)
            heat = {"dataset": dataset, "kind": g.get("pair_kind") or "vision_text", "a": g["model_a"],
                    "b": g["model_b"], "metric": "mutual_knn",
                    "nf": str(int(g["n_frames"])) if g["n_frames"] is not None else None,
                    "nc": str(int(g["n_captions"])) if g["n_captions"] is not None else None,
                    "la": str(layer if is_a else other), "lb": str(other if is_a else layer)}
            heat = {k: x for k, x in heat.items() if x is not None}
        n_boot = v.n_boot or (found[v.lead][0].get("n_boot") if v.lead in found and v.interval else None)
        out.append({"model": model, "label": label, "verdict": v, "n_boot": n_boot,
                    "sentence": verdict_sentence(label, v, n_boot=n_boot), "heatmap": heat,
                    "curves": {"dataset": dataset, "metric": v.lead or next(iter(sorted(curves))), "models": base}})
    return out


#: each verdict status in words: the report's marks and the Markdown summary carry them, so a tie and a
#: recommendation never look alike without colour or an icon font
VERDICT_WORDS = {"recommend": "recommended", "last": "last layer", "default": "default output", "tie": "tie",
                 "untested": "untested", "unsupported": "no alignment support", "chance": "at chance",
                 "control": "control", "none": "no verdict"}

#: how each verdict status is marked on screen: a Streamlit badge with a Material icon (shipped with
#: the app: no emoji font needed) and a word, so a tie and a recommendation never look alike
VERDICT_BADGES = {
    "recommend": ":green-badge[:material/check_circle: recommended]",
    "last": ":green-badge[:material/check: last layer]",
    "default": ":blue-badge[:material/undo: default output]",
    "tie": ":gray-badge[:material/drag_handle: tie]",
    "untested": ":gray-badge[:material/help: untested]",
    "unsupported": ":gray-badge[:material/block: no alignment support]",
    "chance": ":orange-badge[:material/casino: at chance]",
    "control": ":violet-badge[:material/science: control]",
    "none": ":red-badge[:material/warning: no verdict]",
}
