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

from analysis import __version__
from analysis import views
from analysis.methods.layer_selection import describe_pick
from analysis.storage import results as R
from analysis.studies import stored_settings
from analysis.studies.context import Settings
from analysis.views import curves as curves_view, downstream, heatmap as heatmap_view, paper_figures, predictors, probes
from analysis.views import scaling as scaling_view, temporal
from analysis.views.heatmap import best_grid, heat_grids
from analysis.views.null import grid_null_within
from analysis.views.rankme_cap import rankme_cap_text, rankme_capped
from analysis.views.section import Section
from analysis.views.studies import MODEL_MAP_OMITTED, model_map_section



def build_report(con, *, store: str, models=None, references=None, datasets=None, command: str = "") -> dict:
    """Everything the report shows, as plain JSON-able data (numbers straight from the result tables).
    Raises ValueError naming the command when the results were computed by another analysis version."""
    stale = views.stale_results(con, store)
    if stale:  # their payloads may have another shape: none is read
        raise ValueError(stale)
    ov = views.overview(con, store)
    if ov.get("empty"):
        raise ValueError(f"{store} holds no runs: nothing to report. Run `layerscope demo` or precompute first.")
    all_models = list(ov["models"]["model"])
    unknown = [m for m in (models or []) + (references or []) if m not in all_models]
    if unknown:
        raise ValueError(f"unknown model(s) {unknown}; the store has: {', '.join(all_models)}")
    chosen = list(models or all_models)
    labels = views.model_labels(con)
    report = {"title": "LayerScope layer-selection report", "store": store,
              "generated": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "code_version": __version__, "command": command, "datasets": []}
    all_ds = list(ov["datasets"]["dataset"])
    for ds in datasets or all_ds:
        if ds not in all_ds:
            raise ValueError(f"unknown dataset {ds!r}; the store has: {', '.join(all_ds)}")
        report["datasets"].append(_dataset_section(con, ds, chosen, references, labels, ov))
    return report


def _verdicts(con, ds, chosen) -> list[dict]:
    """The report's opening: the same per-model verdicts as the dashboard's Overview
    (:func:`views.verdicts`), for the chosen models, with the dashboard query of their evidence."""
    out = []
    for v in views.verdicts(con, ds):
        if v["base"] not in chosen:
            continue
        keep = ("status", "layer", "last_layer", "default_layer", "n_agree", "n_metrics", "agreeing", "lead",
                "value", "last_value", "default_value", "interval", "gain_vs_last", "gain_vs_default", "reason",
                # the paired bootstrap gains (diff, interval, relative gain and its interval), the margin they
                # must pass, and what did not vote (random-init controls, alignment no better than chance)
                "vs_last", "vs_default", "margin", "controls", "chance", "control",
                # the null the deciding alignment passed, and every signal that picks another layer
                "null", "dissent")
        out.append({"model": v["model"], "label": v["label"], "sentence": v["sentence"], "n_boot": v["n_boot"],
                    **{k: getattr(v["verdict"], k) for k in keep}, "heatmap_query": v["heatmap"], "curves_query": v["curves"]})
    return out


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
    sec = {"dataset": ds, "n_items": n_items, "verdicts": _verdicts(con, ds, chosen), "sections": {}, "omitted": {},
           "charts": []}
    runs = ov["runs"][(ov["runs"]["dataset"] == ds) & (ov["runs"]["status"] == "done")]
    text_models = sorted(runs[runs["modality"] == "text"]["model"].unique())
    refs = [r for r in (references or text_models) if r in set(runs["model"])]
    grids = R.read_grids(con, current=True, dataset=ds) if views.has_table(con, "result_grids") else []
    scope = _Scope(con, ds, list(chosen), refs, labels, n_items, grids, heat_grids(grids, chosen, refs))
    sec["sections"]["summary"] = _summary(scope, set(runs["model"]))
    for name, build in _SECTION_BUILDERS.items():
        data, charts = build(scope)
        if data is None:
            sec["omitted"][name] = OMITTED[name]
        else:
            sec["sections"][name] = data
        sec["charts"] += [(name, title, spec) for title, spec in charts]
    sec["provenance"] = _provenance(scope, runs, ov)
    return sec


def _summary(scope: _Scope, run_models: set) -> dict:
    """Per model: the recommended layers, the best alignment with each reference, the final layer's
    best; the per-metric picks in words; RankMe's bound where it binds."""
    choices = views.layer_choices(scope.con, scope.ds)
    rows, sentences = [], []
    for m in scope.chosen:
        if m not in run_models:
            continue
        entry = {"model": m, "label": scope.labels.get(m, m), "recommended": {}, "alignment": {}}
        c = choices.get(m)
        if c:
            entry["n_layers"] = c["n_layers"]
            for metric, p in c["picks"].items():
                entry["recommended"][metric] = {k: p.get(k) for k in ("layer", "value", "final_value", "from_final",
                                                                  "final_shortfall")}
            entry["agreement"] = c["agreement"]
        for ref in scope.refs:
            g = best_grid(scope.grids, m, ref) if ref != m else None
            if g is None:
                continue
            entry["alignment"][ref] = _alignment_entry(g, m)
            # the reference is its text side: a dual encoder's curve is "alignment with <ref> [text]"
            name = next((n for n in (f"alignment with {ref} [text]", f"alignment with {ref}") if c and n in c["picks"]),
                        None)
            if name:
                sentences.append(_pick_sentence(scope.labels.get(m, m), c, name, name))
        if c and "rankme" in c["picks"]:
            sentences.append(_pick_sentence(scope.labels.get(m, m), c, "rankme", "RankMe"))
        rows.append(entry)
    return {"models": rows, "sentences": sentences, "notes": rankme_cap_notes(scope.con, rows, scope.n_items)}


def _pick_sentence(label: str, c: dict, key: str, what: str) -> str:
    """One per-metric pick in words (:func:`describe_pick`), with its resamples."""
    return describe_pick(label, c["picks"][key], c.get("last_layer", c["n_layers"] - 1) + 1, what,
                         samples=(c.get("resamples") or {}).get(key))


def _alignment_entry(g: dict, m: str) -> dict:
    """Model ``m``'s best alignment in grid ``g`` (either side), its interval, its layers, the final
    layer's best, and the shuffled-pairing nulls."""
    a_is_m = g["model_a"] == m
    final_row = g["grid"][-1] if a_is_m else g["grid"][:, -1]
    finite = final_row[np.isfinite(final_row)]
    return {"metric": g["metric"], "value": g["best_value"], "ci": [g["ci_low"], g["ci_high"]],
            "layer": g["best_a"] if a_is_m else g["best_b"], "ref_layer": g["best_b"] if a_is_m else g["best_a"],
            "final_layer_value": float(finite.max()) if len(finite) else None, "n_frames": g["n_frames"],
            "n_captions": g["n_captions"], "result_id": g["result_id"],
            "note": (g.get("flags") or {}).get("best") or "",
            # the best cell against the grid maximum under shuffled pairings (None: not computed)
            "null": views.grid_null(g),
            # with item groups: the within-group null beside it (fine-grained alignment within sources)
            "null_within": grid_null_within(g)}


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
    prov = views.provenance(scope.con, tuple(used)) if used else {}
    examples = views.items(scope.con, scope.ds).head(3)
    models = ov["models"][ov["models"]["model"].isin(scope.chosen)][["model", "revision", "source", "random_init"]]
    return {
        # display_table: a text run's n_frames is empty, not "None"
        "runs": views.display_table(prov["runs"]).astype(str).to_dict(orient="records") if "runs" in prov else [],
        "models": views.display_table(models).astype(str).to_dict(orient="records"),
        "settings": {"n_frames": sorted(int(x) for x in runs["n_frames"].dropna().unique()),
                     "n_captions": sorted(int(x) for x in runs["n_captions"].dropna().unique())},
        "k": (heat[0]["params"].get("k") if heat else None), "bootstrap_resamples": heat[0]["n_boot"] if heat else None,
        # the seed the store was last analysed with (its bootstrap and null draws), the default if unsaved
        "seed": stored_settings(scope.con).get("seed", Settings.seed),
        "example_items": [{"id": r.item_id, "captions": list(r.captions)[:2]} for r in examples.itertuples()],
    }


def rankme_cap_notes(con, models: list[dict], n_items: int) -> list[str]:
    """A sentence when RankMe's bound binds (:mod:`analysis.views.rankme_cap`): a recommended RankMe above
    :data:`RANKME_CAP_SHARE` of ``N`` with ``N < d`` compares layers by how well they fill ``N``
    dimensions. ``models``: the summary's entries (``recommended["rankme"]["value"]``, the pick's
    RankMe). Returns ``[]`` or one sentence naming the models."""
    capped = []
    for m in models:
        pick = m.get("recommended", {}).get("rankme")
        row = con.execute("SELECT dim FROM models WHERE model = ?", [m["model"]]).fetchall()
        if pick and row and rankme_capped(pick.get("value"), n_items, row[0][0]):
            capped.append((m["label"], float(pick["value"])))
    text = rankme_cap_text(capped, n_items)
    return [text] if text else []


def _spec(chart) -> dict:
    """A chart as the report embeds it: its Vega-Lite spec, data inlined."""
    return chart.to_dict()




def report_data(con, store_path: str) -> dict:
    """The layer-selection report of the whole store as data (:func:`build_report`), for the dashboard."""
    return build_report(con, store=store_path, command=f"layerscope report --store {store_path} --out report.html")
