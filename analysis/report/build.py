"""The report as data: every number it shows, gathered from the result tables (nothing recomputed),
and its charts, which are the dashboard pages' charts built by :mod:`analysis.views`.

:func:`build_report` returns a plain JSON-able dict per dataset: the verdicts, one entry per section
of :data:`analysis.report.text.SECTIONS` (or the sentence of :data:`OMITTED` saying why it is left
out), the Vega-Lite specs under ``charts`` and the provenance."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any


from analysis import __version__
from analysis import views
from analysis.methods import grid_compare
from analysis.methods.scaling import undetermined_params
from analysis.storage import results as R
from analysis.studies import stored_settings
from analysis.studies.context import Settings
from analysis.views import downstream, paper_figures, predictors, probes, store_info, temporal
from analysis.views.heatmap import best_grid, grid_chart
from analysis.views.neighbours import items as dataset_items
from analysis.views.overview import section as overview_section
from analysis.views.section import Section
from analysis.views.studies import MODEL_MAP_OMITTED, model_map_section

#: a grid's pair kind in words (report titles and tables)
_KIND_WORDS = {"vision_text": "vision×text", "vision_vision": "vision×vision", "text_text": "text×text"}



def build_report(con, *, store: str, models=None, references=None, datasets=None, command: str = "") -> dict:
    """Everything the report shows, as plain JSON-able data (numbers straight from the result tables).
    Raises ValueError naming the command when the results were computed by another analysis version."""
    stale = store_info.stale_results(con, store)
    if stale:  # their payloads may have another shape: none is read
        raise ValueError(stale)
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
    "downstream": downstream.OMITTED,
    "probes": probes.OMITTED,
    "predictors": predictors.OMITTED,
    "temporal": temporal.OMITTED,
    "paper_figures": paper_figures.OMITTED,
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


def _page(section):
    """A page's ``section(con, dataset, *, models, references)`` (:class:`~analysis.views.section.Section`)
    as a report builder: the section for the chosen models and references, through :func:`_from_view`."""
    def build(scope: _Scope):
        return _from_view(section(scope.con, scope.ds, models=scope.chosen, references=scope.refs))
    return build


#: every section after the summary, in the report's order: each returns ``(data or None, [(title, spec)])``
_SECTION_BUILDERS = {"heatmaps": _heatmaps, "layer_curves": _layer_curves, "scaling": _scaling,
                     "model_map": _model_map, "downstream": _page(downstream.section), "probes": _page(probes.section),
                     "predictors": _page(predictors.section), "temporal": _page(temporal.section),
                     "paper_figures": _page(paper_figures.section)}


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


def report_data(con, store_path: str) -> dict:
    """The layer-selection report of the whole store as data (:func:`build_report`), for the dashboard."""
    return build_report(con, store=store_path, command=f"layerscope report --store {store_path} --out report.html")
