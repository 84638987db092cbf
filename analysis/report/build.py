"""The report as data: every number it shows, gathered from the result tables (nothing recomputed),
and its charts, which are the dashboard pages' charts built by :mod:`analysis.views`.

:func:`build_report` returns a plain JSON-able dict per dataset: the verdicts, one entry per section
of :data:`PAGE_SECTIONS`, each a page's section (or the sentence of the section saying why it is left
out), the sentences each page reads under its charts under ``notes`` (and chart by chart under
``chart_notes``), the Vega-Lite specs under ``charts`` and the provenance."""

from __future__ import annotations

import datetime as dt


from analysis import __version__
from analysis.storage import results as R
from analysis.studies import stored_settings
from analysis.studies.context import Settings
from analysis.views import curves as curves_view, downstream, heatmap as heatmap_view, paper_figures, predictors, probes
from analysis.views import scaling as scaling_view, store_info, temporal
from analysis.views.heatmap import heat_grids
from analysis.views.neighbours import items as dataset_items
from analysis.views.overview import section as overview_section
from analysis.views.studies import model_map_section



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
    unfinished = store_info.unfinished_analysis(con, store)
    report = {"title": "LayerScope layer-selection report", "store": store,
              "generated": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "code_version": __version__, "command": command,
              # the last analysis did not finish: where it stopped, what is shown, how to finish it
              "unfinished": unfinished.sentence if unfinished else None, "datasets": []}
    all_ds = list(ov["datasets"]["dataset"])
    for ds in datasets or all_ds:
        if ds not in all_ds:
            raise ValueError(f"unknown dataset {ds!r}; the store has: {', '.join(all_ds)}")
        report["datasets"].append(_dataset_section(con, ds, chosen, references, ov))
    return report


#: every section after the summary, in the report's order: each page's ``section(con, dataset, *,
#: models, references)`` (:class:`~analysis.views.section.Section`: its data, or the sentence saying
#: why it is omitted and naming the command that would fill it)
PAGE_SECTIONS = {"heatmaps": heatmap_view.section, "layer_curves": curves_view.section, "scaling": scaling_view.section,
                 "model_map": model_map_section, "downstream": downstream.section, "probes": probes.section,
                 "predictors": predictors.section, "temporal": temporal.section, "paper_figures": paper_figures.section}


def _dataset_section(con, ds, chosen, references, ov) -> dict:
    """One dataset's part of the report: its verdicts, then every section of :data:`PAGE_SECTIONS` (its data,
    or its sentence saying why it is left out), the notes read under its charts, the charts, and the
    provenance.

    ``notes`` maps a section's name to its notes (:attr:`~analysis.views.section.Section.notes`), each
    distinct sentence once in the page's order; a section without notes has no entry. A map beside
    ``sections`` rather than a key inside each: a section's data may be a list (heatmaps, curves,
    scaling), and an omitted section can still have notes (the temporal study's). The summary's
    notes stay in its own data (``sections["summary"]["notes"]``), as before.

    ``chart_notes`` maps the name of a section whose view ties sentences to charts
    (:attr:`~analysis.views.section.Section.chart_notes`) to one ``{"chart": title, "notes": [...]}``
    per chart of the section, in the order of its charts (a chart no sentence is tied to has ``[]``);
    each of these sentences is among the section's ``notes``. The renderers place each sentence once
    (:func:`analysis.report.text.placed_notes`)."""
    n_items = int(ov["datasets"].set_index("dataset").loc[ds, "n_items"])
    runs = ov["runs"][(ov["runs"]["dataset"] == ds) & (ov["runs"]["status"] == "done")]
    text_models = sorted(runs[runs["modality"] == "text"]["model"].unique())
    refs = [r for r in (references or text_models) if r in set(runs["model"])]
    # the Overview's section: the verdicts open the dataset's part, the summary is its first section
    opening = overview_section(con, ds, models=chosen, references=refs).data
    sec = {"dataset": ds, "n_items": n_items, "verdicts": opening["verdicts"],
           "sections": {"summary": opening["summary"]}, "omitted": {}, "notes": {},
           "chart_notes": {}, "charts": []}
    for name, section in PAGE_SECTIONS.items():
        part = section(con, ds, models=chosen, references=refs)
        if part.data is None:
            sec["omitted"][name] = part.omitted
        else:
            sec["sections"][name] = part.data
        # the page reads a sentence under each chart it concerns (the same help under every scaling
        # subject's panels); the report's section shows all its charts together, so each sentence once
        notes = list(dict.fromkeys(part.notes))
        if notes:
            sec["notes"][name] = notes
        if any(part.chart_notes):
            sec["chart_notes"][name] = [{"chart": title, "notes": list(dict.fromkeys(said))}
                                        for (title, _), said in zip(part.charts, part.chart_notes)]
        sec["charts"] += [(name, title, _spec(chart)) for title, chart in part.charts]
    grids = R.read_grids(con, current=True, dataset=ds) if store_info.has_table(con, "result_grids") else []
    sec["provenance"] = _provenance(con, ds, chosen, heat_grids(grids, chosen, refs), runs, ov)
    return sec




def _provenance(con, ds, chosen, heat, runs, ov) -> dict:
    """The runs the heatmaps (``heat``: their grids) stand on, the chosen models, the settings, k,
    resamples, seed and a few items."""
    used = sorted({g["run_a"] for g in heat} | {g["run_b"] for g in heat})
    prov = store_info.provenance(con, tuple(used)) if used else {}
    examples = dataset_items(con, ds).head(3)
    models = ov["models"][ov["models"]["model"].isin(chosen)][["model", "revision", "source", "random_init"]]
    return {
        # display_table: a text run's n_frames is empty, not "None"
        "runs": store_info.display_table(prov["runs"]).astype(str).to_dict(orient="records") if "runs" in prov else [],
        "models": store_info.display_table(models).astype(str).to_dict(orient="records"),
        "settings": {"n_frames": sorted(int(x) for x in runs["n_frames"].dropna().unique()),
                     "n_captions": sorted(int(x) for x in runs["n_captions"].dropna().unique())},
        "k": (heat[0]["params"].get("k") if heat else None), "bootstrap_resamples": heat[0]["n_boot"] if heat else None,
        # the seed the store was last analysed with (its bootstrap and null draws), the default if unsaved
        "seed": stored_settings(con).get("seed", Settings.seed),
        "example_items": [{"id": r.item_id, "captions": list(r.captions)[:2]} for r in examples.itertuples()],
    }


def _spec(chart) -> dict:
    """A chart as the report embeds it: its Vega-Lite spec, data inlined. Not validated against the
    Vega-Lite schema here: the spec is the page's chart, which the page validates when it draws it
    (the tests compare the two specs section by section), and validating ~100 charts again was 40 %
    of a report's build time (the demo store's: 7.7 of 18.6 s under a profiler)."""
    return chart.to_dict(validate=False)




def report_data(con, store_path: str) -> dict:
    """The layer-selection report of the whole store as data (:func:`build_report`), for the dashboard."""
    return build_report(con, store=store_path, command=f"layerscope report --store {store_path} --out report.html")
