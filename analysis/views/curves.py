"""The layer-curves page's data and chart: profiles, alignment curves, intervals, recommended marks."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.sides import VISION, key_label, legend_title, side_key, split_side
from analysis.storage import results as R
from analysis.views.charts import lazy_altair, chart_title, plot_height
from analysis.views.layers import last_numbered, layer_label, relative_depth, run_layer_names
from analysis.views.metric_help import baseline_rules, baselines, metric_help
from analysis.views.nuance import collapse_notes
from analysis.views.rankme_cap import capped_curves, rankme_cap_text
from analysis.views.section import Section, section_models
from analysis.views.stored_choices import curve_sources, layer_choices
from analysis.views.store_info import dataset_context, has_table, model_labels


def profiles_long(con, dataset) -> pd.DataFrame:
    """Per-layer single-space metrics for every model side at its largest setting: one row per
    (side, metric, layer). ``model`` is the side's key, as the layer-choice study keys its curves
    (:func:`analysis.sides.side_key`): a dual encoder's or MLLM's vision run under the model's name,
    its caption run under ``"<model> [text]"``, a one-sided model under its name. With ``run_id``
    (the run the curve is measured on: its side and its vectors' width), ``depth`` (``layer / last
    numbered layer`` in [0, 1]; ``None`` for a named layer), ``layer_name`` (the index as text, or
    ``default`` / ``joint``), value, note, flagged, budgets."""
    if not has_table(con, "result_profiles"):
        return pd.DataFrame()
    rows = R.read_profiles(con, current=True, dataset=dataset)
    keys = side_keys(rows)
    choice = _largest_setting_runs(rows, keys)
    run_names = run_layer_names(con, dataset)
    out = []
    for r in rows:
        key = keys[r["run_id"]]
        if choice.get(key) != r["run_id"]:
            continue
        v = r["layer_values"]
        names = run_names.get(r["run_id"], {})
        last = last_numbered(len(v), names)
        notes = {int(k): n for k, n in (r.get("flags") or {}).items()}
        for layer, value in enumerate(v):
            finite = bool(np.isfinite(value))
            out.append({"model": key, "run_id": r["run_id"], "metric": r["metric"], "layer": layer,
                        "depth": relative_depth(layer, last, names), "layer_name": layer_label(layer, names),
                        "value": float(value) if finite else None,
                        "note": notes.get(layer) or ("" if finite else "undefined"),
                        "flagged": layer in notes or not finite,
                        "n_frames": r["n_frames"], "n_captions": r["n_captions"]})
    return pd.DataFrame(out)


def flag_lines(data: pd.DataFrame) -> list[str]:
    """One line per (model, note) among flagged points of a long curve table: ``"model: note
    (layers 0, 1, 4)"`` — the notes said once, not once per layer."""
    if "flagged" not in data or not data["flagged"].any():
        return []
    out = []
    for (model, note), g in data[data["flagged"]].groupby(["model", "note"], sort=True):
        g = g.sort_values("layer")
        layers = ", ".join(g["layer_name"] if "layer_name" in g else g["layer"].astype(int).astype(str))
        out.append(f"{model}: {note or 'undefined'} (layer{'s' if len(g) > 1 else ''} {layers})")
    return out


def side_keys(rows) -> dict:
    """``{run_id: side key}`` of profile rows (dicts with ``run_id``, ``model``, ``modality``): a
    caption run is ``"<model> [text]"`` when its model has a vision run among ``rows``, every other
    run its model's name (:func:`analysis.sides.side_key`), as the layer-choice study keys its sides.

    >>> side_keys([{"run_id": "v", "model": "clip", "modality": "image"},
    ...            {"run_id": "t", "model": "clip", "modality": "text"}, {"run_id": "b", "model": "bert", "modality": "text"}])
    {'v': 'clip', 't': 'clip [text]', 'b': 'bert'}
    """
    vision = {r["model"] for r in rows if r["modality"] in VISION}
    return {r["run_id"]: side_key(r["model"], r["modality"], vision) for r in rows}


def _largest_setting_runs(rows, keys: dict) -> dict:
    """``{side key: run_id}``: each side's run at its largest budget (its ``n_f`` for a vision run, its
    ``n_c`` for a caption run), the setting the layer-choice study measures a side's alignment curves
    at (:meth:`analysis.studies.context.DatasetRuns.largest_settings`), so its profiles and its picks
    share a run. ``keys``: ``{run_id: side key}``."""
    best = {}
    for r in rows:
        key, size = keys[r["run_id"]], (r["n_frames"] or 0) + (r["n_captions"] or 0)
        if key not in best or size > best[key][0]:
            best[key] = (size, r["run_id"])
    return {k: v[1] for k, v in best.items()}


def curve_intervals(con, dataset) -> pd.DataFrame:
    """The intervals that exist for the layer curves: per model and alignment curve, the 95%
    bootstrap CI of the mutual k-NN grid's best cell, at that model's best layer (the curve is the
    row maximum, so its value there is the best cell's). Columns: model, metric, layer, depth, low,
    high, n_boot. Per-layer profiles have no stored intervals."""
    rows = []
    for model, p, metric, g, is_a in curve_sources(con, dataset):
        last = p["last_layer"]
        if g.get("best_a") is None or g.get("ci_low") is None:
            continue
        layer = int(g["best_a"] if is_a else g["best_b"])
        names = p["layer_names"]
        rows.append({"model": model, "metric": metric, "layer": layer, "depth": relative_depth(layer, last, names),
                     "layer_name": layer_label(layer, names), "low": float(g["ci_low"]),
                     "high": float(g["ci_high"]), "n_boot": int(g["n_boot"] or 0)})
    return pd.DataFrame(rows, columns=["model", "metric", "layer", "depth", "layer_name", "low", "high", "n_boot"])


def alignment_curves_long(choices: dict) -> pd.DataFrame:
    """The alignment curves of layer-choice payloads as long rows: ``model, metric, layer, depth,
    layer_name, value`` (``depth`` ``None`` for the named layers stored after the last numbered one)."""
    out = []
    for model, p in choices.items():
        names, last = p["layer_names"], p["last_layer"]
        for metric, values in p["curves"].items():
            if not metric.startswith("alignment with"):
                continue
            for layer, v in enumerate(values):
                out.append({"model": model, "metric": metric, "layer": layer,
                            "depth": relative_depth(layer, last, names), "layer_name": layer_label(layer, names),
                            "value": v if v is not None and np.isfinite(v) else None})
    return pd.DataFrame(out)


def recommended_marks(choices: dict) -> pd.DataFrame:
    """Each metric's recommended layer per model: ``model, metric, layer, depth, layer_name, value``."""
    out = []
    for model, p in choices.items():
        names, last = p["layer_names"], p["last_layer"]
        for metric, pick in p["picks"].items():
            out.append({"model": model, "metric": metric, "layer": pick["layer"],
                        "depth": relative_depth(pick["layer"], last, names),
                        "layer_name": layer_label(pick["layer"], names), "value": pick["value"]})
    return pd.DataFrame(out)


def _split_named(df: pd.DataFrame | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(numbered rows, named rows)`` of a long table: named layers have no depth."""
    if df is None or not len(df):
        return pd.DataFrame(), pd.DataFrame()
    if "depth" not in df:
        return df, df.iloc[0:0]
    named = df["depth"].isna()
    return df[~named], df[named]


def named_layer_rows(data: pd.DataFrame, marks: pd.DataFrame | None = None,
                     intervals: pd.DataFrame | None = None) -> pd.DataFrame:
    """The named layers of a curve table, one row each: ``model, layer, layer_name, value, low, high,
    pick`` (the metrics that recommend it, joined), ``label`` (``"joint 0.412 [0.38, 0.45]"``) — drawn
    as labelled levels at the plot's right edge, not on the depth axis."""
    from analysis.views.text import fmt_number

    _, named = _split_named(data)
    named = named[named["value"].notna()] if len(named) else named
    rows = []
    for r in named.itertuples(index=False):
        iv = (intervals[(intervals["model"] == r.model) & (intervals["layer"] == r.layer)]
              if intervals is not None and len(intervals) else pd.DataFrame())
        mk = (marks[(marks["model"] == r.model) & (marks["layer"] == r.layer)]
              if marks is not None and len(marks) else pd.DataFrame())
        low, high = (float(iv["low"].iloc[0]), float(iv["high"].iloc[0])) if len(iv) else (None, None)
        text = f"{r.layer_name} {fmt_number(r.value)}" + (
            f" [{fmt_number(low)}, {fmt_number(high)}]" if low is not None else "") + (" ◆ pick" if len(mk) else "")
        rows.append({"model": r.model, "layer": int(r.layer), "layer_name": r.layer_name, "value": float(r.value),
                     "low": low, "high": high, "pick": ", ".join(sorted(mk["metric"])) if len(mk) else "",
                     "label": text})
    return pd.DataFrame(rows, columns=["model", "layer", "layer_name", "value", "low", "high", "pick", "label"])


#: line dash by weights: a trained model's curve solid, a control's (random init) dashed
WEIGHT_DASHES = (("trained", [1, 0]), ("random init", [5, 3]))


def curves_chart(data: pd.DataFrame, metric: str, *, labels: dict, marks: pd.DataFrame | None = None,
                 intervals: pd.DataFrame | None = None, rules=(), title: dict | None = None, height: int = 380,
                 null_levels: pd.DataFrame | None = None):
    """Per-layer curves on relative depth in [0, 1]: one line per model side (legend below the plot, by
    label, "(random init)" included, titled "side" when a dual encoder's towers are drawn apart,
    :func:`analysis.sides.legend_title`), the recommended layers as diamonds, flagged values ringed,
    stored intervals as error bars, reference rules (chance, bounds) dashed, and each model's
    shuffled-pairing null (``null_levels`` rows of :func:`curve_null_levels`: the 95th percentile of
    the grid maximum under random pairings) dotted in the model's colour. Named layers (``default``,
    ``joint``: no depth) are drawn as levels in the model's colour, labelled with their name, value
    and interval at the right edge (:func:`named_layer_rows`), never past the depth axis."""
    alt = lazy_altair()
    lab = lambda df: df.assign(model=df["model"].map(lambda m: labels.get(m, m)))  # noqa: E731
    numbered, _ = _split_named(data)
    d = lab(numbered)
    # a control (random-init weights) dashed and faded: its curve is no trained model's result; a side's
    # label carries its side after the mark ("clip (random init) [text]")
    d = d.assign(weights=["random init" if "(random init)" in str(m) else "trained" for m in d["model"]])
    named = named_layer_rows(data, marks, intervals)
    # the lines are side keys: a dual encoder's towers are two lines, so the legend names sides then
    who = legend_title(data["model"].unique()) if "model" in data else "model"
    tips = [alt.Tooltip("model:N", title=who), alt.Tooltip("layer:O", title="layer"),
            alt.Tooltip("depth:Q", format=".2f", title="relative depth"),
            alt.Tooltip("value:Q", format=".4g", title=metric)] + (
        [alt.Tooltip("note:N", title="note")] if "note" in d else [])
    # a short title that fits a phone's width (the page's caption says what 0 and 1 are)
    x = alt.X("depth:Q", title="relative depth (0 → 1)", scale=alt.Scale(domain=[0, 1]),
              axis=alt.Axis(labelAngle=0, values=[0, 0.25, 0.5, 0.75, 1], format=".2f", titleLimit=0))
    y = alt.Y("value:Q", title=metric, scale=alt.Scale(zero=False), axis=alt.Axis(titleLimit=0))
    # below the plot, one model per row: long "(random init)" labels stay whole at 390 px
    color = alt.Color("model:N", title=who, legend=alt.Legend(orient="bottom", labelLimit=0, titleLimit=0,
                                                                  columns=1))
    kinds = [k for k, _ in WEIGHT_DASHES if k in set(d["weights"])]  # the legend names only what is drawn
    weights = alt.StrokeDash("weights:N", title="weights", scale=alt.Scale(
        domain=kinds, range=[dict(WEIGHT_DASHES)[k] for k in kinds]), legend=alt.Legend(orient="top"))  # beside the
    # model legend below, it passed a phone's width
    faded = alt.condition("datum.weights == 'random init'", alt.value(0.5), alt.value(1.0))
    layers = [alt.Chart(d).mark_line().encode(x=x, y=y, color=color, strokeDash=weights, opacity=faded, tooltip=tips),
              alt.Chart(d).mark_point(filled=True, size=40).encode(x=x, y=y, color="model:N", tooltip=tips)]
    iv, _ = _split_named(intervals)
    if len(iv):
        layers.append(alt.Chart(lab(iv)).mark_rule(strokeWidth=2).encode(
            x="depth:Q", y="low:Q", y2="high:Q", color="model:N",
            tooltip=["model", "layer", alt.Tooltip("low:Q", format=".4g", title="95% CI low"),
                     alt.Tooltip("high:Q", format=".4g", title="95% CI high"), alt.Tooltip("n_boot:Q", title="resamples")]))
    mk, _ = _split_named(marks)
    if len(mk):
        layers.append(alt.Chart(lab(mk)).mark_point(size=180, shape="diamond", filled=True).encode(
            x="depth:Q", y="value:Q", color="model:N", tooltip=["model", "layer", "metric"]))
    if "flagged" in d:
        flagged = d[d["flagged"] & d["value"].notna()]
        if len(flagged):  # a value that needs a note (collapsed layer, duplicates merged) is ringed
            layers.append(alt.Chart(flagged).mark_point(size=260, shape="circle", color="#d62728", filled=False)
                          .encode(x="depth:Q", y="value:Q", tooltip=["model", "layer", "value", "note"]))
    if len(named):
        nm = lab(named)
        ntips = [alt.Tooltip("model:N", title=who), alt.Tooltip("layer_name:N", title="named layer"),
                 alt.Tooltip("value:Q", format=".4g", title=metric), alt.Tooltip("low:Q", format=".3g", title="95% CI low"),
                 alt.Tooltip("high:Q", format=".3g", title="95% CI high"), alt.Tooltip("pick:N", title="recommended by")]
        layers.append(alt.Chart(nm).mark_rule(strokeDash=[8, 3], strokeWidth=1.5, opacity=0.8).encode(
            y="value:Q", color="model:N", tooltip=ntips))
        # in the order of their values, labels alternate below and above their level, the highest above:
        # two close levels (a default output and a joint projection) then never print on each other
        nm = nm.sort_values("value", kind="stable").reset_index(drop=True)
        nm["above"] = (len(nm) - 1 - nm.index) % 2 == 0
        for above, rows in nm.groupby("above"):
            layers.append(alt.Chart(rows.drop(columns="above")).mark_text(
                align="right", dx=-2, dy=-6 if above else 8, baseline="bottom" if above else "top", fontSize=11,
            ).encode(y="value:Q", x=alt.value("width"), text="label:N", color="model:N", tooltip=ntips))
    if null_levels is not None and len(null_levels):
        nl = lab(null_levels)
        layers.append(alt.Chart(nl).mark_rule(strokeDash=[2, 3], strokeWidth=1.5).encode(
            y="q95:Q", color="model:N",
            tooltip=["model", alt.Tooltip("q95:Q", format=".4g", title="shuffled null, 95th percentile"),
                     alt.Tooltip("p:Q", format=".3g", title="best cell p"), alt.Tooltip("n_perm:Q", title="shuffles")]))
    layers += baseline_rules(rules, "value")
    chart = plot_height(alt.layer(*layers), height)  # the legend below and the title add to it
    return chart.properties(title=title) if title else chart


def named_layers_text(named: pd.DataFrame, labels: dict) -> str:
    """A caption line on the named layers drawn at the right edge ("" when none)."""
    if not len(named):
        return ""
    which = sorted({f"{labels.get(m, m)}: {n}" for m, n in zip(named["model"], named["layer_name"])})
    return ("Named layers have no depth (they are not deeper than the last hidden state): each is a labelled "
            f"level at the right edge ({'; '.join(which)}).")


def budget_text(data: pd.DataFrame, choices: dict, models) -> str:
    """The test-time budgets behind a curve chart, e.g. "each model at its largest budget: n_f 4, n_c 4"."""
    nf, nc = set(), set()
    if "n_frames" in data:
        nf |= {int(x) for x in data["n_frames"].dropna()}
        nc |= {int(x) for x in data["n_captions"].dropna()}
    else:
        for m in models:
            st = (choices.get(m) or {}).get("setting") or {}
            nf |= {int(st["n_frames"])} if st.get("n_frames") is not None else set()
            nc |= {int(st["n_captions"])} if st.get("n_captions") is not None else set()
    parts = ([f"n_f {', '.join(map(str, sorted(nf)))}"] if nf else []) + (
        [f"n_c {', '.join(map(str, sorted(nc)))}"] if nc else [])
    return f"each model at its largest budget: {'; '.join(parts)}" if parts else ""


def uncertainty_text(intervals: pd.DataFrame, is_alignment: bool, n_items) -> str:
    """What the curve chart shows of uncertainty, and what was not computed."""
    on = f" on all {n_items} items" if n_items else ""
    if is_alignment and len(intervals):
        boots = sorted({int(b) for b in intervals["n_boot"]})
        return (f"Error bars: the 95% bootstrap interval of the grid's best cell ({', '.join(map(str, boots))} item "
                "resamples), at each model's best layer. Other layers' values are point estimates"
                f"{on}: no per-layer interval was computed.")
    if is_alignment:
        return (f"No interval is drawn: the best cells' bootstrap was off (`--bootstrap 0`) or undefined; values are "
                f"point estimates{on}.")
    return f"Values are point estimates{on}: per-layer profiles have no stored intervals, so none is drawn."


def chosen_curves(prof: pd.DataFrame, choices: dict, chosen) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The Layer curves page's frames for the ``chosen`` models: per-layer profiles
    (:func:`profiles_long`), alignment curves (:func:`alignment_curves_long`) and recommended-layer
    marks (:func:`recommended_marks`)."""
    curves = prof[prof["model"].isin(chosen)]
    align = alignment_curves_long(choices)
    if len(align):
        align = align[align["model"].isin(chosen)]
    marks = recommended_marks(choices)
    if len(marks):
        marks = marks[marks["model"].isin(chosen)]
    return curves, align, marks


def metric_rows(curves: pd.DataFrame, align: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The rows of one curve: a profile metric's, else an alignment curve's."""
    return curves[curves["metric"] == metric] if metric in set(curves["metric"]) else align[align["metric"] == metric]


def is_alignment_curve(metric: str) -> bool:
    """An alignment curve (``alignment with <reference>``) is a mutual k-NN row maximum."""
    return metric.startswith("alignment with ")


def metric_curves(data: pd.DataFrame, metric: str, *, dataset: str, chosen, choices: dict, marks: pd.DataFrame,
                  ctx: dict, intervals: pd.DataFrame, nulls: pd.DataFrame | None, labels: dict) -> dict:
    """The Layer curves page's chart of one metric (:func:`curves_chart` with the chance rule and
    bounds, the stored intervals, the recommended layers and, for an alignment curve, the shuffled
    null) and what its captions read: ``{"chart", "is_alignment", "base_metric", "params",
    "intervals", "nulls"}``. ``data``: :func:`metric_rows`; ``ctx``: :func:`dataset_context`;
    ``intervals``: :func:`curve_intervals`; ``nulls``: :func:`curve_null_levels` or None. The report
    embeds this same chart."""
    alignment = is_alignment_curve(metric)
    base_metric = "mutual_knn" if alignment else metric
    params = {"k": ctx["k"]} if ctx["k"] else None
    rules = baselines(base_metric, data["value"], n_items=ctx["n_items"], params=params,
                      chance_label="chance k/(N−1)" if base_metric == "mutual_knn" else None)
    intervals = intervals[intervals["model"].isin(chosen) & (intervals["metric"] == metric)]
    shown = sorted(data["model"].unique())
    title = chart_title(f"{metric} per layer", dataset=dataset, details=[budget_text(data, choices, shown)],
                        labels=labels, models=shown)
    m = marks[marks["metric"] == metric] if len(marks) else marks
    nulls = nulls[nulls["model"].isin(chosen) & (nulls["metric"] == metric)] if alignment and nulls is not None else None
    chart = curves_chart(data, metric, labels=labels, marks=m, intervals=intervals, rules=rules, title=title,
                         null_levels=nulls)
    return {"chart": chart, "is_alignment": alignment, "base_metric": base_metric, "params": params,
            "intervals": intervals, "nulls": nulls}


#: why the report's layer-curves section is empty, naming the command that would fill it
OMITTED = "no per-layer profiles (run `layerscope analyze`)"


def section(con, dataset, *, models=None, references=None, metrics=None, sides=None) -> Section:
    """The Layer curves section: every per-layer profile row of the sides of ``models`` (None: every
    model; a model stands for all its sides, :func:`section_sides`) as ``data`` (records of
    :func:`profiles_long`), one :func:`metric_curves` chart per metric titled ``"<metric> per layer"``,
    and the sentences read under each (:func:`metric_notes`: ``chart_notes``, and chart after chart
    ``notes``). ``sides``: the side
    keys to draw (the page's pick: ``clip``, ``clip [text]``); None: every side of ``models``.
    ``metrics``: the curves to draw (the page's pick, alignment curves included); None: every
    profile metric, by name, as the report shows them. A curve with no defined value is not drawn.
    ``references`` is accepted for the common section signature (the alignment curves' references
    were fixed by the analysis). Omitted (:data:`OMITTED`) when the dataset has no profiles."""
    prof = profiles_long(con, dataset)
    if not len(prof):
        return Section(None, omitted=OMITTED)
    keys = set(prof["model"]) | set(layer_choices(con, dataset))
    chosen = section_sides(keys, section_models(con, models), sides)
    prof = prof[prof["model"].isin(chosen)]
    charts, chart_notes = metric_charts(con, dataset, prof, chosen, metrics)
    return Section(prof.to_dict(orient="records"), charts=tuple(charts),
                   notes=tuple(n for said in chart_notes for n in said), chart_notes=tuple(map(tuple, chart_notes)))


def section_sides(keys, models, sides=None) -> list[str]:
    """The side keys among ``keys`` that a section covers: every side of each of ``models`` (a model's
    name stands for its vision and caption sides, :func:`analysis.sides.split_side`; a side key names
    that side alone), in the order of ``models``, then narrowed to ``sides`` when given.

    >>> section_sides({"clip", "clip [text]", "bert"}, ["clip", "bert"], None)
    ['clip', 'clip [text]', 'bert']
    >>> section_sides({"clip", "clip [text]", "bert"}, ["clip", "bert"], ["clip [text]"])
    ['clip [text]']
    """
    out = []
    for m in models:
        out += [k for k in sorted(keys) if (k == m or split_side(k)[0] == m) and k not in out]
    return [k for k in out if sides is None or k in set(sides)]


def side_labels(labels: dict, keys) -> dict:
    """``labels`` (model -> label, :func:`analysis.views.store_info.model_labels`) with each side key
    of ``keys`` labelled as the rest of the dashboard names sides (:func:`analysis.sides.key_label`:
    ``clip``, ``clip [text]``, ``clip (random init) [text]``)."""
    return {**labels, **{k: key_label(k, labels) for k in keys}}


def metric_charts(con, dataset, prof: pd.DataFrame, chosen, metrics=None) -> tuple[list, list]:
    """``([(title, chart)], [[note]])``: :func:`metric_curves` of each of ``metrics`` (None: every metric
    of ``prof``, by name) for the ``chosen`` models, and :func:`metric_notes` of each (one list per
    chart, in the charts' order), skipping a curve no chosen model has or whose every value is
    undefined (nothing to draw)."""
    from analysis.views.null import curve_null_levels  # it reads the curves' source grids through this module

    choices = layer_choices(con, dataset)
    labels = side_labels(model_labels(con), set(prof["model"]) | set(choices))
    curves, align, marks = chosen_curves(prof, choices, chosen)
    ctx, intervals = dataset_context(con, dataset), curve_intervals(con, dataset)
    # each curve's own run's width: a side's vectors need not be as wide as its model's models.dim
    dims = dict(con.execute("SELECT run_id, dim FROM runs WHERE dataset = ?", [dataset]).fetchall())
    charts, notes = [], []
    for metric in sorted(prof["metric"].unique()) if metrics is None else metrics:
        data = metric_rows(curves, align, metric)
        if data.empty or data["value"].isna().all():
            continue
        nulls = curve_null_levels(con, dataset) if is_alignment_curve(metric) else None
        fig = metric_curves(data, metric, dataset=dataset, chosen=chosen, choices=choices, marks=marks, ctx=ctx,
                            intervals=intervals, nulls=nulls, labels=labels)
        charts.append((f"{metric} per layer", fig["chart"]))
        notes.append(metric_notes(data, metric, fig, n_items=ctx["n_items"], labels=labels, dims=dims))
    return charts, notes


def metric_notes(data: pd.DataFrame, metric: str, fig: dict, *, n_items, labels: dict, dims: dict) -> list[str]:
    """The sentences read under one curve chart, in order: the named layers drawn at the right edge,
    the ringed and missing values (one line per reason, counted), RankMe's bound where the item count
    holds it down, what the metric measures, what the chart shows of uncertainty, and the shuffled
    nulls of an alignment curve. ``data``: :func:`metric_rows`; ``fig``: :func:`metric_curves`;
    ``dims``: ``{run_id: its vectors' width runs.dim}``."""
    from analysis.views.null import null_levels_text

    notes = []
    named = named_layers_text(named_layer_rows(data), labels)
    if named:
        notes.append(named)
    notes += collapse_notes(flag_lines(data))
    if metric == "rankme":  # at small N the item count, not the model, bounds RankMe
        cap = rankme_cap_text(capped_curves(data, n_items, dims, labels), n_items)
        if cap:
            notes.append(cap)
    help_text = metric_help(fig["base_metric"], n_items, fig["params"])
    if fig["is_alignment"]:
        help_text = (f"{metric}: each layer's best mutual k-NN with any layer of the reference (the row maximum of "
                     f"the grid; diamonds mark each model's pick). {help_text} A maximum over many layers sits a "
                     "little above chance even for unrelated spaces.")
    notes.append(help_text)
    notes.append(uncertainty_text(fig["intervals"], fig["is_alignment"], n_items))
    if fig["nulls"] is not None and len(fig["nulls"]):
        notes.append(null_levels_text(fig["nulls"], labels))
    return notes
