"""Measured downstream numbers: the labelled probes per layer (``analyze --labels``) and the check the
LayerScope paper makes, the label-free verdict's layer against the probe's best layer.

Read from the current ``probes`` study rows (:mod:`analysis.studies.probes`); nothing is computed
here but lookups in the stored paired intervals.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.methods.verdict import Verdict
from analysis.null import beyond_chance
from analysis.sides import pair_names
from analysis.storage import results as R
from analysis.views.charts import plot_height
from analysis.views.stored_choices import layer_choices
from analysis.views.layers import LAYER_ZERO, layer_label, run_layer_zero
from analysis.views.section import Section
from analysis.views.store_info import dataset_runs, has_table, model_labels
from analysis.views.text import fmt_number

#: the score an Overview line reads per field: the first of these the probes stored
HEADLINE_SCORES = ("linear_accuracy", "knn_accuracy", "kmeans_nmi")

#: what the check says, per outcome, in the report's marks and the Markdown summary
CHECK_WORDS = {"best": "pick is best", "within": "within noise", "loses": "pick loses", "untested": "no interval",
               "chance": "at chance"}


def probe_payloads(con, dataset) -> list[dict]:
    """The current probe payloads of ``dataset`` (one per run and field), sorted by model key and field."""
    if not has_table(con, "result_studies"):
        return []
    rows = R.read_studies(con, current=True, study="probes", dataset=dataset)
    return sorted((r["payload"] for r in rows), key=lambda p: (p["key"], p["field"], p["n_frames"] or 0,
                                                               p["n_captions"] or 0))


def setting_text(p: dict) -> str:
    """``8 frames`` / ``1 caption``: the run's budget."""
    if p.get("n_frames") is not None:
        return f"{p['n_frames']} frame{'s' if p['n_frames'] != 1 else ''}"
    if p.get("n_captions") is not None:
        return f"{p['n_captions']} caption{'s' if p['n_captions'] != 1 else ''}"
    return ""


def probes_long(con, dataset) -> pd.DataFrame:
    """One row per (run, field, score, layer): ``model`` (key), ``label``, ``field``, ``score``,
    ``score_label``, ``setting``, ``run_id``, ``layer``, ``layer_label``, ``value``, ``ci_low``,
    ``ci_high``, ``note`` (why a layer has no value), ``chance`` (accuracy scores: the largest
    class's share), ``source`` (``measured``)."""
    labels = model_labels(con)
    rows = []
    for p in probe_payloads(con, dataset):
        base = p["model"]
        label = labels.get(base, base) + p["key"][len(base):]
        names = {int(i): n for i, n in (p.get("layer_names") or {}).items()}
        for score, sc in p["scores"].items():
            for layer, v in enumerate(sc["values"]):
                rows.append({"model": p["key"], "label": label, "field": p["field"], "score": score,
                             "score_label": sc["label"], "setting": setting_text(p), "run_id": p["run_id"],
                             "layer": layer, "layer_label": layer_label(layer, names),
                             "value": np.nan if v is None else v,
                             "ci_low": np.nan if sc["ci_low"][layer] is None else sc["ci_low"][layer],
                             "ci_high": np.nan if sc["ci_high"][layer] is None else sc["ci_high"][layer],
                             "note": sc["notes"].get(str(layer), ""),
                             "chance": p["chance"] if score.endswith("accuracy") else np.nan,
                             "source": "measured"})
    return pd.DataFrame(rows)


def advised_layer(v: Verdict) -> int | None:
    """The layer a verdict line tells the user to use: the pick when it recommends a layer, the last
    layer when it says so, else (a tie, untested, at chance, the default output) the model's ``default``
    output when stored, else its last layer; None for controls and models without a verdict."""
    status = v.status
    if status in ("control", "none") or v.control:
        return None
    if status == "recommend":
        return v.layer
    if status == "last":
        return v.last_layer
    return v.default_layer if v.default_layer is not None else v.last_layer


def _best_layer(values: list, last: int) -> int | None:
    """The probe's best numbered layer (0..last; ties to the deeper layer, the rule every pick follows)."""
    v = np.array([np.nan if x is None else x for x in values[:last + 1]], dtype=float)
    if not np.isfinite(v).any():
        return None
    top = np.nanmax(v)
    return int(np.flatnonzero(v == top).max())


def _at(sc: dict, layer: int | None) -> dict | None:
    if layer is None or layer >= len(sc["values"]) or sc["values"][layer] is None:
        return None
    return {"layer": layer, "value": sc["values"][layer], "ci": [sc["ci_low"][layer], sc["ci_high"][layer]]}


def _diff(sc: dict, a: int | None, b: int | None) -> dict | None:
    """Layer ``a``'s score minus layer ``b``'s with its paired interval (None bounds: no interval)."""
    if a is None or b is None or sc["values"][a] is None or sc["values"][b] is None:
        return None
    lo = sc["diff_low"][a][b] if sc.get("diff_low") and a != b else None
    hi = sc["diff_high"][a][b] if sc.get("diff_high") and a != b else None
    return {"value": sc["values"][a] - sc["values"][b], "ci": [lo, hi] if a != b else [0.0, 0.0]}


def _outcome(pick: int, best: int, d: dict | None) -> str:
    if pick == best:
        return "best"
    if d is None or d["ci"][0] is None:
        return "untested"
    return "loses" if d["ci"][1] < 0 else "within"


def _ci_text(ci) -> str:
    return "" if ci is None or ci[0] is None else f" (95% CI {fmt_number(ci[0])} to {fmt_number(ci[1])})"


def _layer_words(layer: int, names: dict, zero: str = LAYER_ZERO["unknown"]) -> str:
    """A layer in a sentence: ``the default output`` for a named one, ``layer 0 (<zero>)`` with what the
    run's layer 0 is (:func:`~analysis.views.layers.layer_zero_text`), else ``layer <i>``."""
    label = layer_label(layer, names)
    if not label.isdigit():
        return f"the {label} output"
    return f"layer 0 ({zero})" if layer == 0 else f"layer {label}"


def check_sentence(c: dict) -> str:
    """One line: the label-free pick's probe score against the probe's best layer, in plain words."""
    names, zero = c["layer_names"], c.get("layer_zero", LAYER_ZERO["unknown"])
    head = f"{c['label']} on {c['field']} ({c['score_label']}, {c['setting']}): the label-free pick, " \
           f"{_layer_words(c['pick']['layer'], names, zero)}, scores {fmt_number(c['pick']['value'])}{_ci_text(c['pick']['ci'])}"
    if c.get("at_chance"):
        return head + f"; no layer beats chance ({c['chance_text']}): these embeddings do not separate this field " \
                      "here, so the pick is not tested by it."
    if c["outcome"] == "best":
        return head + "; it is the probe's best layer."
    best = f"; the best layer, {_layer_words(c['best']['layer'], names, zero)}, scores {fmt_number(c['best']['value'])}" \
           f"{_ci_text(c['best']['ci'])}"
    d = c["pick_vs_best"]
    gap = f"difference {fmt_number(d['value'])}{_ci_text(d['ci'])}"
    tail = {"loses": f": the pick loses to the best layer, {gap}.",
            "within": f"; {gap}: within noise, the pick is as good as the best layer on these items.",
            "untested": f"; {gap}, untested (no interval: analyse with --bootstrap 200)."}[c["outcome"]]
    return head + best + tail


def probe_checks(con, dataset, verdicts: list[dict] | None = None) -> list[dict]:
    """Per model with a verdict and per (field, score): the layer the verdict advises
    (:func:`advised_layer`) against the probe's best layer on the verdict's own run.

    Returns ``[{"model", "label", "field", "score", "score_label", "setting", "status" (the verdict's),
    "pick", "best", "last", "default" ({"layer", "value", "ci"} or None), "pick_vs_best",
    "best_vs_last", "best_vs_default", "pick_vs_last", "pick_vs_default" ({"value", "ci": [lo, hi]}:
    paired intervals on the same item resamples, or None), "outcome" (best | within | loses |
    untested | chance: the best layer is not beyond its shuffled-label null, so the field checks
    nothing), "null", "at_chance", "chance_text", "headline" (the field's first of :data:`HEADLINE_SCORES`), "layer_names",
    "layer_zero" (what the run's layer 0 is, from its stored config: :func:`~analysis.views.layers.layer_zero_text`),
    "sentence"}]``."""
    from analysis.views.verdicts import verdicts as all_verdicts

    payloads = probe_payloads(con, dataset)
    if not payloads:
        return []
    verdicts = all_verdicts(con, dataset) if verdicts is None else verdicts
    choices = layer_choices(con, dataset)
    zeros = run_layer_zero(con, dataset)
    by_run = {(p["run_id"], p["field"]): p for p in payloads}
    fields = sorted({p["field"] for p in payloads})
    out = []
    for v in verdicts:
        run_id = ((choices.get(v["model"]) or {}).get("setting") or {}).get("run_id")
        pick = advised_layer(v["verdict"])
        if pick is None or run_id is None:
            continue
        last = v["verdict"].last_layer
        default = v["verdict"].default_layer
        for field in fields:
            p = by_run.get((run_id, field))
            if p is None:
                continue
            names = {int(i): n for i, n in (p.get("layer_names") or {}).items()}
            last_l = last if last is not None else len(next(iter(p["scores"].values()))["values"]) - 1
            headline = next((s for s in HEADLINE_SCORES if s in p["scores"]), None)
            for score, sc in p["scores"].items():
                best = _best_layer(sc["values"], last_l)
                at_pick = _at(sc, pick)
                if best is None or at_pick is None:
                    continue
                c = {"model": v["model"], "label": v["label"], "field": field, "score": score,
                     "score_label": sc["label"], "setting": setting_text(p), "status": v["verdict"].status,
                     "pick": at_pick, "best": _at(sc, best), "last": _at(sc, last_l), "default": _at(sc, default),
                     "pick_vs_best": _diff(sc, pick, best), "best_vs_last": _diff(sc, best, last_l),
                     "best_vs_default": _diff(sc, best, default), "pick_vs_last": _diff(sc, pick, last_l),
                     "pick_vs_default": _diff(sc, pick, default), "headline": score == headline,
                     "layer_names": names, "layer_zero": zeros.get(run_id, LAYER_ZERO["unknown"])}
                c["outcome"] = _outcome(pick, best, c["pick_vs_best"])
                # a field the embeddings do not separate at any layer cannot check a pick: the best layer's
                # score is compared with its shuffled-label null (the best of the layers again under each
                # shuffle of the labels), as a grid's best cell is with its shuffled pairings
                null = sc.get("null")
                c["null"] = null
                c["at_chance"] = bool(null) and null.get("p") is not None and not beyond_chance(null)
                c["chance_text"] = (f"shuffled labels reach {fmt_number(null['q95'])} at the 95th percentile, "
                                    f"p = {fmt_number(null['p'])}") if null else ""
                if c["at_chance"]:
                    c["outcome"] = "chance"
                c["sentence"] = check_sentence(c)
                out.append(c)
    return out


def checks_table(checks: list[dict]) -> pd.DataFrame:
    """The checks as a table: one row per model, field and score (values and differences with intervals)."""
    rows = []
    for c in checks:
        names = c["layer_names"]

        def cell(x):
            return "" if x is None else f"{fmt_number(x['value'])}{_ci_text(x['ci'])}"

        rows.append({"model": c["label"], "field": c["field"], "score": c["score_label"], "run": c["setting"],
                     "label-free pick": layer_label(c["pick"]["layer"], names), "at pick": cell(c["pick"]),
                     "best layer": layer_label(c["best"]["layer"], names), "at best": cell(c["best"]),
                     "pick − best": cell(c["pick_vs_best"]), "at last": cell(c["last"]),
                     "at default": cell(c["default"]), "outcome": CHECK_WORDS[c["outcome"]]})
    return pd.DataFrame(rows)


#: how each check outcome is marked on screen: a badge with a Material icon and a word, so a pick that
#: loses never looks like one that holds without colour
CHECK_BADGES = {
    "best": ":green-badge[:material/verified: pick is best]",
    "within": ":blue-badge[:material/drag_handle: within noise]",
    "loses": ":orange-badge[:material/trending_down: pick loses]",
    "untested": ":gray-badge[:material/help: no interval]",
    "chance": ":gray-badge[:material/casino: at chance]",
}


def probe_chart(data: pd.DataFrame, *, height: int = 280):
    """Per-layer probe values of one field and score: a line per model and run with its 95%
    item-resampling band (one layer only: a point with its interval as a rule), and the chance rule (the
    largest class's share) for accuracies. ``data``: rows of :func:`probes_long` (or
    :func:`retrieval_long`) for one field and score. The value axis spans the score's range ([0, 1];
    ARI from its lowest value). None when it holds no value."""
    import altair as alt

    d = data[np.isfinite(data["value"])].copy()
    if d.empty:
        return None
    d["series"] = d["label"] + " · " + d["setting"]
    title = d["score_label"].iloc[0]
    lo = float(min(0.0, np.nanmin(d[["value", "ci_low"]].to_numpy(dtype=float))))
    y = alt.Y("value:Q", title=title, scale=alt.Scale(domain=[lo, 1.0]))
    one_layer = d["layer"].nunique() < 2
    x = (alt.X("layer_label:N", title="layer") if one_layer
         else alt.X("layer:Q", title="layer", axis=alt.Axis(tickMinStep=1)))
    colour = alt.Color("series:N", title="model · run", legend=alt.Legend(orient="bottom", columns=1, labelLimit=0))
    tooltip = ["label", "setting", "layer_label", alt.Tooltip("value:Q", format=".3f"),
               alt.Tooltip("ci_low:Q", format=".3f"), alt.Tooltip("ci_high:Q", format=".3f")]
    base = alt.Chart(d).encode(x=x, color=colour)
    spread = [alt.Tooltip("ci_low:Q", format=".3f", title="95% CI low"),
              alt.Tooltip("ci_high:Q", format=".3f", title="95% CI high")]
    band = (base.mark_rule(strokeWidth=2) if one_layer else base.mark_area(opacity=0.15)).encode(
        y=alt.Y("ci_low:Q", title=title, scale=alt.Scale(domain=[lo, 1.0])), y2="ci_high:Q", tooltip=spread)
    line = (base.mark_point(filled=True, size=60) if one_layer else base.mark_line(point=True)).encode(
        y=y, tooltip=tooltip)
    chart = band + line
    chance = d["chance"].dropna()
    if len(chance):
        rule = alt.Chart(pd.DataFrame({"chance": [float(chance.max())]})).mark_rule(strokeDash=[4, 4], color="gray")
        chart = chart + rule.encode(y="chance:Q", tooltip=[alt.Tooltip("chance:Q", title="largest class's share")])
    return plot_height(chart, height)  # the legend below (one run a row) adds to the plot's height


#: the same-space retrieval scores shown as measured tasks (the items' own pairing is the label)
RETRIEVAL_SCORES = ("recall@1_v2t", "recall@1_t2v", "recall@5_v2t", "recall@5_t2v", "map_v2t", "map_t2v")


def retrieval_long(con, dataset) -> pd.DataFrame:
    """Video–text retrieval where a model's two sides share a space (the same-space study), as
    measured tasks in :func:`probes_long`'s columns: one row per (pair, score, compared layer) at each
    pair's largest budgets; ``field`` ``video–text retrieval``, ``layer`` the video side's layer,
    ``setting`` the budgets and the space (``layers`` or ``joint``); chance is not drawn (it is
    ``k / N`` for recall@k)."""
    if not has_table(con, "result_studies"):
        return pd.DataFrame()
    labels, runs = model_labels(con), dataset_runs(con, dataset)
    latest = {}
    for r in R.read_studies(con, current=True, study="same_space", dataset=dataset):
        p = r["payload"]
        key = (r["subject"], p.get("space"))
        size = ((p.get("n_frames") or 0), (p.get("n_captions") or 0))
        if key not in latest or size > latest[key][0]:
            latest[key] = (size, r["subject"], p)
    rows = []
    for (size, subject, p) in latest.values():
        a, _, b = subject.partition("|")
        # one model's own two sides: its label (the field says video–text); else each model by its side
        label = labels.get(a, a) if a == b else " × ".join(pair_names(a, b, runs, labels))
        # the budgets' short names: a legend row is "model · setting", and it must fit a phone's width
        setting = f"n_f {p.get('n_frames')}, n_c {p.get('n_captions')}, {p.get('space')}"
        for score in RETRIEVAL_SCORES:
            m = (p.get("metrics") or {}).get(score)
            if not m:
                continue
            cis = m.get("ci") or [None] * len(m["values"])
            for layer, v, ci in zip(p.get("layers_a") or [], m["values"], cis):
                rows.append({"model": a, "label": label, "field": "video–text retrieval", "score": score,
                             "score_label": score.replace("_v2t", " video→text").replace("_t2v", " text→video"),
                             "setting": setting, "run_id": p.get("run_a"), "layer": int(layer),
                             "layer_label": str(layer), "value": np.nan if v is None else float(v),
                             "ci_low": np.nan if not ci else ci[0], "ci_high": np.nan if not ci else ci[1],
                             "note": "", "chance": np.nan, "source": "measured"})
    return pd.DataFrame(rows)


#: which outcome leads a model's summary badge: a loss first, then noise, then a held pick
_LEAD = ("loses", "within", "best", "untested", "chance")


def check_summaries(checks: list[dict]) -> list[dict]:
    """One line per model from its headline checks (:func:`probe_checks`): the check's own sentence when
    the model was probed on one field, else the fields grouped by outcome, every loss with its numbers.

    Returns ``[{"model", "label", "outcome" (the summary's badge: a loss first, then noise, then best),
    "sentence", "n_fields"}]`` in the checks' order."""
    by_model: dict = {}
    for c in checks:
        if c["headline"]:
            by_model.setdefault(c["model"], []).append(c)
    out = []
    for model, cs in by_model.items():
        lead = min((c["outcome"] for c in cs), key=_LEAD.index)
        if len(cs) == 1:
            out.append({"model": model, "label": cs[0]["label"], "outcome": lead, "sentence": cs[0]["sentence"],
                        "n_fields": 1})
            continue
        names, zero = cs[0]["layer_names"], cs[0].get("layer_zero", LAYER_ZERO["unknown"])
        groups = {o: [c for c in cs if c["outcome"] == o] for o in _LEAD}
        parts = []
        if groups["best"]:
            parts.append(f"is the probe's best layer on {', '.join(c['field'] for c in groups['best'])}")
        if groups["within"]:
            parts.append(f"is as good as the best layer within noise on {', '.join(c['field'] for c in groups['within'])}")
        for c in groups["loses"]:
            d = c["pick_vs_best"]
            parts.append(f"loses on {c['field']} to {_layer_words(c['best']['layer'], names, zero)} "
                         f"({fmt_number(c['pick']['value'])} against {fmt_number(c['best']['value'])}, difference "
                         f"{fmt_number(d['value'])}{_ci_text(d['ci'])})")
        if groups["untested"]:
            parts.append(f"is untested on {', '.join(c['field'] for c in groups['untested'])} (no interval)")
        if groups["chance"]:
            parts.append(f"cannot be checked on {', '.join(c['field'] for c in groups['chance'])} (no layer beats "
                         "shuffled labels)")
        scores = sorted({c["score_label"] for c in cs})
        pick = _layer_words(cs[0]["pick"]["layer"], names, zero)
        out.append({"model": model, "label": cs[0]["label"], "outcome": lead, "n_fields": len(cs),
                    "sentence": f"{cs[0]['label']} against labels ({', '.join(scores)}, {cs[0]['setting']}): the "
                                f"label-free pick, {pick}, " + "; ".join(parts) + "."})
    return out


#: why the section is empty, naming the command that fills it
OMITTED = "no labelled probes (name a categorical manifest field: `layerscope analyze --labels FIELD`)"

#: the scores charted when no (field, score) is chosen: the accuracies and NMI (ARI stays in the numbers)
SECTION_SCORES = ("knn_accuracy", "linear_accuracy", "kmeans_nmi")

#: the keys of each check the section's data keeps
_CHECK_KEYS = ("model", "label", "field", "score", "score_label", "setting", "status", "pick", "best", "last",
               "default", "pick_vs_best", "outcome", "headline", "sentence")


def section(con, dataset, *, models=None, references=None, field: str | None = None,
            score: str | None = None) -> Section:
    """The labelled probes of ``dataset`` as the Downstream page and the report show them. ``data``:
    ``{"checks": [sentence and numbers per model, field and score], "table": the checks as rows
    (:func:`checks_table`), "per_layer": every stored value}`` (None when the dataset has no probes);
    ``charts``: :func:`probe_chart` per (field, score) of :data:`SECTION_SCORES`, or of the chosen
    ``field`` and ``score`` alone (any score). ``models`` and ``references`` are accepted for the
    report's loop and not used: the probes' checks cover every model."""
    long = probes_long(con, dataset)
    if not len(long):
        return Section(None, omitted=OMITTED)
    checks = probe_checks(con, dataset)
    charts = []
    for (f, sc), part in long.groupby(["field", "score"], sort=True):
        wanted = sc in SECTION_SCORES if field is None and score is None else (f, sc) == (field, score)
        if not wanted:
            continue
        chart = probe_chart(part)
        if chart is not None:
            charts.append((f"{part['score_label'].iloc[0]} on {f} per layer (bands: 95% item-resampling "
                           "intervals; dashed: the largest class's share)", chart))
    values = long.drop(columns=["source"])
    per_layer = values.astype(object).where(values.notna(), None)
    return Section({"checks": [{k: c[k] for k in _CHECK_KEYS} for c in checks],
                    "table": checks_table(checks).to_dict("records"), "per_layer": per_layer.to_dict("records")},
                   charts=tuple(charts))
