"""The report as data: every number it shows, gathered from the result tables (nothing recomputed),
and its charts, which are the dashboard pages' charts built by :mod:`analysis.views`.

:func:`build_report` returns a plain JSON-able dict per dataset: the verdicts, one entry per section
of :data:`analysis.report.text.SECTIONS` (or the sentence of :data:`OMITTED` saying why it is left
out), the Vega-Lite specs under ``charts`` and the provenance."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis import __version__
from analysis import views
from analysis.methods import grid_compare
from analysis.methods.scaling import undetermined_params
from analysis.report.paper_figures import paper_figures_section
from analysis.storage import results as R
from analysis.studies import stored_settings
from analysis.studies.context import Settings
from analysis.views import store_info
from analysis.views.heatmap import best_grid, grid_chart
from analysis.views.neighbours import items as dataset_items
from analysis.views.overview import section as overview_section
from analysis.views.predictors import predictor_heat_chart
from analysis.views.section import Section
from analysis.views.studies import MODEL_MAP_OMITTED, model_map_section

#: a grid's pair kind in words (report titles and tables)
_KIND_WORDS = {"vision_text": "vision×text", "vision_vision": "vision×vision", "text_text": "text×text"}



def build_report(con, *, store: str, models=None, references=None, datasets=None, command: str = "") -> dict:
    """Everything the report shows, as plain JSON-able data (numbers straight from the result tables)."""
    ov = store_info.overview(con, store)
    if ov.get("empty"):
        raise ValueError(f"{store} holds no runs: nothing to report. Run `layerscope demo` or precompute first.")
    all_models = list(ov["models"]["model"])
    unknown = [m for m in (models or []) + (references or []) if m not in all_models]
    if unknown:
        raise ValueError(f"unknown model(s) {unknown}; the store has: {', '.join(all_models)}")
    chosen = list(models or all_models)
    labels = store_info.model_labels(con)
    report = {"title": "LayerScope layer-selection report", "store": store,
              "generated": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "code_version": __version__, "command": command, "datasets": []}
    all_ds = list(ov["datasets"]["dataset"])
    for ds in datasets or all_ds:
        if ds not in all_ds:
            raise ValueError(f"unknown dataset {ds!r}; the store has: {', '.join(all_ds)}")
        report["datasets"].append(_dataset_section(con, ds, chosen, references, labels, ov))
    return report


@dataclass(frozen=True)
class _Scope:
    """What every section of one dataset is built from."""
    con: Any
    ds: str                #: the dataset
    chosen: list           #: the models asked for (all by default)
    refs: list             #: the text references their alignment is measured against
    labels: dict           #: model → label ("(random init)" included)
    n_items: int           #: the dataset's item count
    grids: list            #: the dataset's current grids (:func:`analysis.storage.results.read_grids`)
    heat: list             #: the grids the heatmap section draws (each chosen model against each reference)


#: why a section is left out, said in its place (each names the command that would fill it)
OMITTED = {
    "heatmaps": ("no vision×text or text×text grids for the chosen models against a text reference (run "
                 "`layerscope analyze`; a text×text grid needs two text models at one n_c)"),
    "layer_curves": "no per-layer profiles (run `layerscope analyze`)",
    "scaling": ("no scaling fits (needs vision×text pairs at several n_f and n_c settings, then "
                "`layerscope analyze`)"),
    "model_map": MODEL_MAP_OMITTED,
    "downstream": ("no downstream results (import them with `layerscope downstream import results.csv`, then "
                   "`layerscope analyze`)"),
    "probes": "no labelled probes (name a categorical manifest field: `layerscope analyze --labels FIELD`)",
    "predictors": ("no per-layer downstream results (a `layer` column in the CSV of `layerscope downstream import`, "
                   "then `layerscope analyze`)"),
    "temporal": "no temporal probes for this dataset",
    "paper_figures": "no vision×text grids (needs vision and text runs, then `layerscope analyze`)",
}


def _dataset_section(con, ds, chosen, references, labels, ov) -> dict:
    """One dataset's part of the report: its verdicts, then every section of :data:`SECTIONS` (its data,
    or the sentence of :data:`OMITTED` saying why it is left out), the charts, and the provenance."""
    n_items = int(ov["datasets"].set_index("dataset").loc[ds, "n_items"])
    runs = ov["runs"][(ov["runs"]["dataset"] == ds) & (ov["runs"]["status"] == "done")]
    text_models = sorted(runs[runs["modality"] == "text"]["model"].unique())
    refs = [r for r in (references or text_models) if r in set(runs["model"])]
    # the Overview's section: the verdicts open the dataset's part, the summary is its first section
    opening = overview_section(con, ds, models=chosen, references=refs).data
    sec = {"dataset": ds, "n_items": n_items, "verdicts": opening["verdicts"],
           "sections": {"summary": opening["summary"]}, "omitted": {}, "charts": []}
    grids = R.read_grids(con, current=True, dataset=ds) if store_info.has_table(con, "result_grids") else []
    scope = _Scope(con, ds, list(chosen), refs, labels, n_items, grids, _heat_grids(grids, chosen, refs))
    for name, build in _SECTION_BUILDERS.items():
        data, charts = build(scope)
        if data is None:
            sec["omitted"][name] = OMITTED[name]
        else:
            sec["sections"][name] = data
        sec["charts"] += [(name, title, spec) for title, spec in charts]
    sec["provenance"] = _provenance(scope, runs, ov)
    return sec


def _heat_grids(grids, chosen, refs) -> list[dict]:
    """Each chosen model against each reference at its largest setting; a text×text grid (each
    model's against the other) once."""
    heat = []
    for m in chosen:
        for ref in refs:
            g = best_grid(grids, m, ref) if m != ref else None
            if g is not None and all(h["result_id"] != g["result_id"] for h in heat):
                heat.append(g)
    return heat


def _heatmaps(scope: _Scope):
    """The heatmap page's chart of each grid of ``scope.heat``, and the grids' numbers."""
    if not scope.heat:
        return None, []
    data = [{"pair_kind": g.get("pair_kind", "vision_text"), "model_a": g["model_a"], "model_b": g["model_b"],
             "metric": g["metric"], "n_frames": g["n_frames"], "n_captions": g["n_captions"],
             "grid": g["grid"].tolist(), "best": [g["best_a"], g["best_b"]], "best_value": g["best_value"],
             "ci": [g["ci_low"], g["ci_high"]], "flags": g.get("flags") or {}} for g in scope.heat]
    layer_names = views.run_layer_names(scope.con, scope.ds)
    charts = []
    for g, h in zip(scope.heat, data):
        kind = _KIND_WORDS.get(h["pair_kind"], h["pair_kind"])
        chart = grid_chart(g, labels=scope.labels, layer_names=layer_names, n_items=scope.n_items)
        charts.append((f"{h['model_a']} × {h['model_b']} ({kind}, {h['metric']}, {grid_compare.budget_text(h)})",
                       _spec(chart)))
    return data, charts


def _layer_curves(scope: _Scope):
    """Every per-layer profile of the chosen models, and the curves page's chart of each metric."""
    prof = views.profiles_long(scope.con, scope.ds)
    if not len(prof):
        return None, []
    prof = prof[prof["model"].isin(scope.chosen)]
    return prof.to_dict(orient="records"), _curve_charts(scope.con, scope.ds, prof, scope.chosen, scope.labels)


def _scaling(scope: _Scope):
    """The saturating law's fit of each chosen vision model's mutual k-NN against its text partner,
    and the scaling page's two panels where a law is drawn."""
    fits, charts = [], []
    for subject in views.scaling_subjects(scope.con, scope.ds):
        a, b, metric = subject.split("|")
        if a in scope.chosen and metric == "mutual_knn":
            sv = views.scaling_view(scope.con, scope.ds, subject)
            fits.append(scaling_entry(subject, sv))
            if "curve_vs_frames" in sv:
                title = views.scaling_title(sv, subject, dataset=scope.ds, labels=scope.labels)
                by_frames, by_captions, _ = views.scaling_panels(sv, title=title)
                charts += [(f"scaling: {a} × {b}, against {what}", _spec(chart))
                           for what, chart in (("n_f", by_frames), ("n_c", by_captions))]
    return (fits or None), charts


def _model_map(scope: _Scope):
    """The Model map page's section (:func:`analysis.views.studies.model_map_section`)."""
    return _from_view(model_map_section(scope.con, scope.ds))


def _from_view(section: Section):
    """A page's :class:`~analysis.views.section.Section` as a report section: its data (None: omitted)
    and its charts as Vega-Lite specs."""
    return section.data, [(title, _spec(chart)) for title, chart in section.charts]


#: the downstream table's columns, as the study stores them
DOWNSTREAM_COLUMNS = ("task", "task_metric", "score", "n", "pearson_r", "pearson_p", "spearman_rho", "spearman_p",
                      "p_method", "r_ci", "rho_ci", "ci_note", "higher_is_better", "better", "error")


def _downstream(scope: _Scope):
    """Each imported whole-model downstream result against each score across models."""
    dsm = views.study(scope.con, "downstream", scope.ds)
    if not dsm:
        return None, []
    return [{k: r.get(k) for k in DOWNSTREAM_COLUMNS} for r in dsm["rows"] if "score" in r], []


def _probes(scope: _Scope):
    """Labelled probes measured per layer, and each verdict's pick against the probe's best layer."""
    probes = probes_section(scope.con, scope.ds)
    return (probes["data"], probes["charts"]) if probes else (None, [])


def _predictors(scope: _Scope):
    """Which per-layer signal predicts per-layer downstream results."""
    pred = predictors_section(scope.con, scope.ds)
    if not pred:
        return None, []
    return pred, [("Spearman ρ across layers: signal × task", _predictors_spec(pred))]


#: the captions of the temporal page's two reorder charts, as the report shows them
REORDER_CAPTIONS = ("reorder negatives: positive vs negative at the positive's best layer pair (95% paired bootstrap "
                    "intervals over items, conditional on the pair; dashed: chance k/(N−1))",
                    "reorder negatives: drop = positive − negative (95% interval; rule at 0)")


def _temporal(scope: _Scope):
    """The temporal probes and the shared-space probes, with the temporal page's reorder charts."""
    temporal = temporal_section(scope.con, scope.ds)
    if not temporal:
        return None, []
    reorder = views.temporal_view({"reorder": temporal["reorder"]})["reorder"]
    return temporal, [(title, _spec(chart.properties(width=360)))
                      for chart, title in zip(views.reorder_charts(reorder), REORDER_CAPTIONS)]


def _paper_figures(scope: _Scope):
    """DR's and TARA's figures (:mod:`analysis.report.paper_figures`)."""
    figures, charts = paper_figures_section(scope.con, scope.ds)
    if not figures:
        return None, []
    return figures, [(title, _spec(chart)) for title, chart in charts]


#: every section after the summary, in the report's order: each returns ``(data or None, [(title, spec)])``
_SECTION_BUILDERS = {"heatmaps": _heatmaps, "layer_curves": _layer_curves, "scaling": _scaling,
                     "model_map": _model_map, "downstream": _downstream, "probes": _probes,
                     "predictors": _predictors, "temporal": _temporal, "paper_figures": _paper_figures}


def _provenance(scope: _Scope, runs, ov) -> dict:
    """The runs the heatmaps stand on, the chosen models, the settings, k, resamples, seed and a few items."""
    heat = scope.heat
    used = sorted({g["run_a"] for g in heat} | {g["run_b"] for g in heat})
    prov = store_info.provenance(scope.con, tuple(used)) if used else {}
    examples = dataset_items(scope.con, scope.ds).head(3)
    models = ov["models"][ov["models"]["model"].isin(scope.chosen)][["model", "revision", "source", "random_init"]]
    return {
        # display_table: a text run's n_frames is empty, not "None"
        "runs": store_info.display_table(prov["runs"]).astype(str).to_dict(orient="records") if "runs" in prov else [],
        "models": store_info.display_table(models).astype(str).to_dict(orient="records"),
        "settings": {"n_frames": sorted(int(x) for x in runs["n_frames"].dropna().unique()),
                     "n_captions": sorted(int(x) for x in runs["n_captions"].dropna().unique())},
        "k": (heat[0]["params"].get("k") if heat else None), "bootstrap_resamples": heat[0]["n_boot"] if heat else None,
        # the seed the store was last analysed with (its bootstrap and null draws), the default if unsaved
        "seed": stored_settings(scope.con).get("seed", Settings.seed),
        "example_items": [{"id": r.item_id, "captions": list(r.captions)[:2]} for r in examples.itertuples()],
    }


def _spec(chart) -> dict:
    """A chart as the report embeds it: its Vega-Lite spec, data inlined."""
    return chart.to_dict()


def _curve_charts(con, ds, prof, chosen, labels) -> list[tuple]:
    """The Layer curves page's chart of every per-layer metric of the chosen models (a curve with no
    defined value is not drawn, as on the page)."""
    choices = views.layer_choices(con, ds)
    curves, align, marks = views.chosen_curves(prof, choices, chosen)
    ctx, intervals = views.dataset_context(con, ds), views.curve_intervals(con, ds)
    out = []
    for metric in sorted(prof["metric"].unique()):
        data = views.metric_rows(curves, align, metric)
        if data.empty or data["value"].isna().all():
            continue
        nulls = views.curve_null_levels(con, ds) if views.is_alignment_curve(metric) else None
        fig = views.metric_curves(data, metric, dataset=ds, chosen=chosen, choices=choices, marks=marks, ctx=ctx,
                                  intervals=intervals, nulls=nulls, labels=labels)
        out.append((f"{metric} per layer", _spec(fig["chart"])))
    return out


def scaling_entry(subject: str, sv: dict) -> dict:
    """A scaling subject as the report stores it (JSON, HTML and Markdown tables read it): the
    saturating fit with every parameter the data do not determine as None and its reason in
    ``undetermined`` (its interval None too), and the drawn curves (``curves``: DR's law, then the
    held-out-best form when it differs), each with its own R² and parameters blanked the same way."""
    fit = dict(sv["fit"]) if sv.get("fit") else None
    blank = sv.get("undetermined") or {}
    if fit:
        fit["params"] = {k: (None if k in blank else v) for k, v in fit["params"].items()}
        fit["undetermined"] = dict(blank)
    intervals = ({k: (None if k in blank else v) for k, v in sv["intervals"].items()} if sv.get("intervals")
                 else sv.get("intervals"))
    curves = []
    for c in sv.get("curves", []):
        gone = (blank if c["form"] == "saturating" else
                undetermined_params(c["form"], c["params"], c.get("status"), c.get("reason"), bounds=sv.get("bounds")))
        curves.append({"form": c["form"], "formula": c["formula"], "label": c["label"], "r2": c["r2"],
                       "held_out_best": c["held_out_best"], "status": c.get("status"),
                       "params": {k: (None if k in gone else v) for k, v in c["params"].items()},
                       "undetermined": dict(gone)})
    return {"subject": subject, "fit": fit, "intervals": intervals, "curves": curves,
            "drawn": [c["form"] for c in curves], "held_out_best": sv.get("held_out_best"),
            "error": sv.get("error"), "status": sv.get("status"), "reason": sv.get("reason"),
            "notes": sv.get("notes"), "points": sv["points"].to_dict(orient="records"),
            "held_out": sv["held_out"].to_dict(orient="records") if "held_out" in sv else [],
            # the page's parameter table: d_v = 2/α, and DR's Table 1 beside the fit where names are mapped
            "parameter_table": sv["table"].to_dict(orient="records") if "table" in sv else []}


def _pick(values, layers, higher_is_better=True) -> dict:
    """The best entry of a per-layer curve (never on an undefined value; a flat curve has none) and
    the last entry, as ``{"best_layer", "best", "last_layer", "last", "note"}``."""
    from analysis.grid import NoBestCell, best_cell

    v = np.array([np.nan if x is None else x for x in values], dtype=float)
    out = {"best_layer": None, "best": None, "last_layer": layers[-1] if layers else None,
           "last": None if not len(v) or not np.isfinite(v[-1]) else float(v[-1]), "note": ""}
    if len(v) == 1:
        out.update(best_layer=layers[0], best=out["last"])
        return out
    try:
        _, j, value = best_cell(v[None, :], higher_is_better=higher_is_better)
        out.update(best_layer=layers[j], best=float(value))
    except (NoBestCell, ValueError) as exc:
        out["note"] = str(exc)
    return out


def temporal_section(con, ds) -> dict | None:
    """The report's temporal section: Test of Time, reorder negatives, arrow of time, and where video
    and text share a space, chiral choice (V2T), time reversal (T2V), chiral-gallery mAP, negated
    queries and the same-space summary (best layer by text-to-video mAP, modality gap there). None
    when the dataset has none of them."""
    from analysis.views.nuance import pair_label, same_space_studies

    tp = views.study(con, "temporal", ds) or {}
    same = same_space_studies(con, ds)
    out = {
        "test_of_time": [{"vision": e["vision"], "text": e["text"],
                          "alignment": {k: v["value"] for k, v in e["alignment"].items()},
                          "first_neighbours": e["first_neighbours"],
                          "notes": {k: v["reason"] for k, v in e["alignment"].items() if v.get("reason")}}
                         for e in tp.get("test_of_time", [])],
        "reorder": tp.get("reorder", []), "arrow_of_time": tp.get("arrow_of_time", []),
        "notes": tp.get("notes", [])}
    for key in ("chiral", "time_reversal"):
        out[key] = [{"video": e["video"], "text": e["text"], "space": e["space"], "n_items": e.get("n_items"),
                     "per_layer": e["per_layer"], "layers": e["layers_a"], **_pick(e["per_layer"], e["layers_a"])}
                    for e in tp.get(key, []) if "layers_a" in e]
    # one query per action (TARA's protocol) under the setting's name; the item-query variant labelled
    out["chiral_gallery"] = [{"video": e["video"], "text": e["text"], "space": e["space"],
                              "n_queries": e.get("n_queries"), "n_item_queries": e.get("n_item_queries"),
                              "queries": e.get("queries", "item"),
                              "settings": {s: _pick(v, e["layers_a"]) for s, v in e["map"].items()},
                              "settings_item_queries": {s: _pick(v, e["layers_a"])
                                                        for s, v in (e.get("map_item_queries") or {}).items()}}
                             for e in tp.get("chiral_gallery", [])]
    out["negation"] = [{"video": e["video"], "text": e["text"], "space": e["space"], "n_queries": e.get("n_queries"),
                        "recall": {k: _pick(v, e["layers_a"]) for k, v in e["recall"].items()}}
                       for e in tp.get("negation", [])]
    out["same_space"] = []
    for r in same:
        p = r["payload"]
        m = p["metrics"]
        pick = _pick(m["map_t2v"]["values"], p["layers_a"])
        at = p["layers_a"].index(pick["best_layer"]) if pick["best_layer"] is not None else None
        gap = m["modality_gap"]["values"]
        out["same_space"].append({"pair": pair_label(r["subject"], p), "map_t2v": pick,
                                  "recall@1_t2v_at_best": None if at is None else m["recall@1_t2v"]["values"][at],
                                  "modality_gap_at_best": None if at is None else gap[at],
                                  "modality_gap_last": gap[-1]})
    if not any(out[k] for k in ("test_of_time", "reorder", "arrow_of_time", "chiral", "time_reversal",
                                "chiral_gallery", "negation", "same_space")):
        return None
    return out


def probes_section(con, ds) -> dict | None:
    """The probes of ``ds``: ``{"data": {"checks": [sentence and numbers per model, field and score],
    "table": the checks as rows, "per_layer": every stored value}, "charts": [(title, spec)]}`` (the
    Downstream page's charts), or None when the dataset has no probes."""
    from analysis.views.probes import checks_table, probe_chart, probe_checks, probes_long

    long = probes_long(con, ds)
    if not len(long):
        return None
    checks = probe_checks(con, ds)
    keep = ("model", "label", "field", "score", "score_label", "setting", "status", "pick", "best", "last",
            "default", "pick_vs_best", "outcome", "headline", "sentence")
    charts = []
    for (field, score), part in long.groupby(["field", "score"], sort=True):
        chart = probe_chart(part)
        if chart is not None and score in ("knn_accuracy", "linear_accuracy", "kmeans_nmi"):
            charts.append((f"{part['score_label'].iloc[0]} on {field} per layer (bands: 95% item-resampling "
                           "intervals; dashed: the largest class's share)", _spec(chart)))
    per_layer = long.drop(columns=["source"]).astype(object).where(long.drop(columns=["source"]).notna(), None)
    return {"data": {"checks": [{k: c[k] for k in keep} for c in checks],
                     "table": checks_table(checks).to_dict("records"),
                     "per_layer": per_layer.to_dict("records")},
            "charts": charts}


#: columns of the predictor table in the report (the page shows them all)
PREDICTOR_COLUMNS = ("task", "rank", "signal", "kind", "coverage", "interval excludes 0", "ρ across layers",
                     "interval (layers)", "models with ρ",
                     "ρ pooled", "interval (pooled)", "layers used", "layers excluded", "higher signal goes with")



def predictors_section(con, ds) -> dict | None:
    """The predictor table of ``ds`` (every task × signal, ranked), the truly best layer per model vs
    its last and ``default`` layer, and per (task, signal) how often its pick is the best layer;
    None when the store has no per-layer downstream results."""
    data = views.predictors_tables(con, ds)
    if data is None or not data["tasks"]:
        return None
    table = data["table"]
    picks = data["picks"]
    pick_rows = []
    if len(picks):
        for (task, signal), g in picks.groupby(["task", "signal"], sort=False):
            pick_rows.append({"task": task, "signal": signal, "models": len(g), "picks the best": int(g["found best"].sum()),
                              "mean shortfall vs best": float(g["shortfall vs best"].mean()),
                              "mean pick vs last": (float(g["pick vs last"].dropna().mean())
                                                    if g["pick vs last"].notna().any() else None)})
    return {"fabricated": data["fabricated"], "setting": data["setting"], "level": data["level"],
            "n_boot": data["n_boot"], "notes": data["notes"],
            "table": [{c: r.get(c) for c in PREDICTOR_COLUMNS} for r in table.to_dict(orient="records")],
            "best_layers": data["models"].to_dict(orient="records"), "picks": pick_rows}


def _predictors_spec(pred) -> dict:
    return _spec(predictor_heat_chart(pd.DataFrame(pred["table"])))


def report_data(con, store_path: str) -> dict:
    """The layer-selection report of the whole store as data (:func:`build_report`), for the dashboard."""
    return build_report(con, store=store_path, command=f"layerscope report --store {store_path} --out report.html")
