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
from analysis.storage import results as R
from analysis.studies import stored_settings
from analysis.studies.context import Settings
from analysis.views import curves as curves_view, downstream, heatmap as heatmap_view, paper_figures, predictors, probes
from analysis.views import scaling as scaling_view, store_info, temporal
from analysis.views.heatmap import heat_grids
from analysis.views.neighbours import items as dataset_items
from analysis.views.overview import section as overview_section
from analysis.views.section import Section
from analysis.views.studies import MODEL_MAP_OMITTED, model_map_section



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
    "heatmaps": heatmap_view.OMITTED,
    "layer_curves": curves_view.OMITTED,
    "scaling": scaling_view.OMITTED,
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
    scope = _Scope(con, ds, list(chosen), refs, labels, n_items, grids, heat_grids(grids, chosen, refs))
    for name, build in _SECTION_BUILDERS.items():
        data, charts = build(scope)
        if data is None:
            sec["omitted"][name] = OMITTED[name]
        else:
            sec["sections"][name] = data
        sec["charts"] += [(name, title, spec) for title, spec in charts]
    sec["provenance"] = _provenance(scope, runs, ov)
    return sec




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
_SECTION_BUILDERS = {"heatmaps": _page(heatmap_view.section), "layer_curves": _page(curves_view.section),
                     "scaling": _page(scaling_view.section),
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




def report_data(con, store_path: str) -> dict:
    """The layer-selection report of the whole store as data (:func:`build_report`), for the dashboard."""
    return build_report(con, store=store_path, command=f"layerscope report --store {store_path} --out report.html")
