"""Layer-selection reports: which layer of which model to use, and why, as one shareable file.

``build_report`` gathers numbers from the result tables (nothing is recomputed), ``render_html``
writes one self-contained HTML file (Vega, Vega-Lite and vega-embed inlined; no network needed),
``render_markdown`` a short summary for pasting, and the JSON is the report dict itself.
Every user-supplied string is escaped: HTML text through ``html.escape``, chart specs as JSON
with ``<`` written as ``\\u003c`` so nothing can close a script element.
"""

from __future__ import annotations

import datetime as dt
import html
import json

import numpy as np
import pandas as pd

from analysis import __version__
from analysis.storage import results as R
from analysis import views
from analysis.methods import grid_compare
from analysis.methods.layer_selection import describe_pick
from analysis.methods.scaling import undetermined_params
from analysis.null import beyond_chance, null_label
from analysis.report.markdown import md_block, md_cell, md_inline
from analysis.report.paper_figures import paper_figures_html, paper_figures_md, paper_figures_section
from analysis.studies import stored_settings
from analysis.studies.context import Settings
from analysis.views.heatmap import grid_chart
from analysis.views.null import grid_null_within
from analysis.views.predictors import predictor_heat_chart
from analysis.views.studies import model_map_title
from analysis.views.verdicts import VERDICT_WORDS, missing_text
from analysis.views.rankme_cap import RANKME_CAP_SHARE, rankme_cap_text, rankme_capped  # noqa: F401 (RANKME_CAP_SHARE: older callers)

#: a grid's pair kind in words (report titles and tables)
_KIND_WORDS = {"vision_text": "vision×text", "vision_vision": "vision×vision", "text_text": "text×text"}
SECTIONS = ("summary", "heatmaps", "layer_curves", "scaling", "model_map", "downstream", "probes", "predictors",
            "temporal", "paper_figures")


def _largest(rows, key):
    best = {}
    for r in rows:
        if r[key] is not None and (r["model"] not in best or r[key] > best[r["model"]][key]):
            best[r["model"]] = r
    return best


def build_report(con, *, store: str, models=None, references=None, datasets=None, command: str = "") -> dict:
    """Everything the report shows, as plain JSON-able data (numbers straight from the result tables)."""
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


def _dataset_section(con, ds, chosen, references, labels, ov) -> dict:
    sec = {"dataset": ds, "n_items": int(ov["datasets"].set_index("dataset").loc[ds, "n_items"]),
           "verdicts": _verdicts(con, ds, chosen), "sections": {}, "omitted": {}, "charts": []}
    runs = ov["runs"][(ov["runs"]["dataset"] == ds) & (ov["runs"]["status"] == "done")]
    text_models = sorted(runs[runs["modality"] == "text"]["model"].unique())
    refs = [r for r in (references or text_models) if r in set(runs["model"])]
    grids = R.read_grids(con, current=True, dataset=ds) if views.has_table(con, "result_grids") else []
    choices = views.layer_choices(con, ds)

    # ---- summary: per model, recommended layers, best alignment with each reference, final layer
    rows, sentences = [], []
    for m in chosen:
        if m not in set(runs["model"]):
            continue
        entry = {"model": m, "label": labels.get(m, m), "recommended": {}, "alignment": {}}
        c = choices.get(m)
        if c:
            entry["n_layers"] = c["n_layers"]
            for metric, p in c["picks"].items():
                entry["recommended"][metric] = {k: p.get(k) for k in ("layer", "value", "final_value", "from_final",
                                                                  "final_shortfall")}
            entry["agreement"] = c["agreement"]
        for ref in refs:
            if ref == m:
                continue
            g = _best_grid(grids, m, ref)
            if g is None:
                continue
            a_is_m = g["model_a"] == m
            final_row = g["grid"][-1] if a_is_m else g["grid"][:, -1]
            finite = final_row[np.isfinite(final_row)]
            entry["alignment"][ref] = {
                "metric": g["metric"], "value": g["best_value"], "ci": [g["ci_low"], g["ci_high"]],
                "layer": g["best_a"] if a_is_m else g["best_b"], "ref_layer": g["best_b"] if a_is_m else g["best_a"],
                "final_layer_value": float(finite.max()) if len(finite) else None, "n_frames": g["n_frames"],
                "n_captions": g["n_captions"], "result_id": g["result_id"],
                "note": (g.get("flags") or {}).get("best") or "",
                # the best cell against the grid maximum under shuffled pairings (None: not computed)
                "null": views.grid_null(g),
                # with item groups: the within-group null beside it (fine-grained alignment within sources)
                "null_within": grid_null_within(g)}
            # the reference is its text side: a dual encoder's curve is "alignment with <ref> [text]"
            name = next((n for n in (f"alignment with {ref} [text]", f"alignment with {ref}") if c and n in c["picks"]),
                        None)
            if name:
                sentences.append(describe_pick(labels.get(m, m), c["picks"][name],
                                               c.get("last_layer", c["n_layers"] - 1) + 1, name,
                                               samples=(c.get("resamples") or {}).get(name)))
        if c and "rankme" in c["picks"]:
            sentences.append(describe_pick(labels.get(m, m), c["picks"]["rankme"], c.get("last_layer", c["n_layers"] - 1) + 1,
                                           "RankMe", samples=(c.get("resamples") or {}).get("rankme")))
        rows.append(entry)
    sec["sections"]["summary"] = {"models": rows, "sentences": sentences,
                                  "notes": rankme_cap_notes(con, rows, sec["n_items"])}

    # ---- heatmaps: each chosen model against each reference at its largest setting
    heat = []
    for m in chosen:
        for ref in refs:
            g = _best_grid(grids, m, ref) if m != ref else None
            # a text×text grid is each model's against the other: drawn once
            if g is not None and all(h["result_id"] != g["result_id"] for h in heat):
                heat.append(g)
    if heat:
        sec["sections"]["heatmaps"] = [{"pair_kind": g.get("pair_kind", "vision_text"),
                                        "model_a": g["model_a"], "model_b": g["model_b"], "metric": g["metric"],
                                        "n_frames": g["n_frames"], "n_captions": g["n_captions"],
                                        "grid": g["grid"].tolist(), "best": [g["best_a"], g["best_b"]],
                                        "best_value": g["best_value"], "ci": [g["ci_low"], g["ci_high"]],
                                        "flags": g.get("flags") or {}}
                                       for g in heat]
        layer_names = views.run_layer_names(con, ds)
        for g, h in zip(heat, sec["sections"]["heatmaps"]):
            kind = _KIND_WORDS.get(h["pair_kind"], h["pair_kind"])
            chart = grid_chart(g, labels=labels, layer_names=layer_names, n_items=sec["n_items"])
            sec["charts"].append(("heatmaps", f"{h['model_a']} × {h['model_b']} ({kind}, {h['metric']}, "
                                              f"{grid_compare.budget_text(h)})", _spec(chart)))
    else:
        sec["omitted"]["heatmaps"] = ("no vision×text or text×text grids for the chosen models against a text "
                                      "reference (run `layerscope analyze`; a text×text grid needs two text models "
                                      "at one n_c)")

    # ---- layer curves
    prof = views.profiles_long(con, ds)
    if len(prof):
        prof = prof[prof["model"].isin(chosen)]
        sec["sections"]["layer_curves"] = prof.to_dict(orient="records")
        sec["charts"] += _curve_charts(con, ds, prof, chosen, labels)
    else:
        sec["omitted"]["layer_curves"] = "no per-layer profiles (run `layerscope analyze`)"

    # ---- scaling
    fits = []
    for subject in views.scaling_subjects(con, ds):
        a, b, metric = subject.split("|")
        if a in chosen and metric == "mutual_knn":
            sv = views.scaling_view(con, ds, subject)
            fits.append(scaling_entry(subject, sv))
            if "curve_vs_frames" in sv:
                title = views.scaling_title(sv, subject, dataset=ds, labels=labels)
                by_frames, by_captions, _ = views.scaling_panels(sv, title=title)
                sec["charts"] += [("scaling", f"scaling: {a} × {b}, against {what}", _spec(chart))
                                  for what, chart in (("n_f", by_frames), ("n_c", by_captions))]
    if fits:
        sec["sections"]["scaling"] = fits
    else:
        sec["omitted"]["scaling"] = ("no scaling fits (needs vision×text pairs at several n_f and n_c settings, then "
                                     "`layerscope analyze`)")

    # ---- model map
    mm = views.study(con, "model_map", ds)
    if mm:
        sec["sections"]["model_map"] = mm
        heat_map, scatter = views.model_map_charts(views.model_map_view(mm), labels=labels,
                                                   title=model_map_title(mm, dataset=ds, labels=labels))
        sec["charts"] += [("model_map", "model × model best-layer alignment", _spec(heat_map)),
                          ("model_map", "the models on a 2-D map (classical MDS of 1 − similarity)", _spec(scatter))]
    else:
        sec["omitted"]["model_map"] = "no model map (needs at least two models, then `layerscope analyze`)"

    # ---- downstream
    dsm = views.study(con, "downstream", ds)
    if dsm:
        table = [{k: r.get(k) for k in ("task", "task_metric", "score", "n", "pearson_r", "pearson_p", "spearman_rho",
                                        "spearman_p", "p_method", "r_ci", "rho_ci", "ci_note", "higher_is_better", "better", "error")}
                 for r in dsm["rows"] if "score" in r]
        sec["sections"]["downstream"] = table
    else:
        sec["omitted"]["downstream"] = ("no downstream results (import them with `layerscope downstream import "
                                        "results.csv`, then `layerscope analyze`)")

    # ---- labelled probes: measured per layer, and each verdict's pick against the probe's best layer
    probes = probes_section(con, ds)
    if probes:
        sec["sections"]["probes"] = probes["data"]
        sec["charts"].extend(("probes", title, spec) for title, spec in probes["charts"])
    else:
        sec["omitted"]["probes"] = ("no labelled probes (name a categorical manifest field: `layerscope analyze "
                                    "--labels FIELD`)")

    # ---- predictors: which per-layer signal predicts per-layer downstream results
    pred = predictors_section(con, ds)
    if pred:
        sec["sections"]["predictors"] = pred
        sec["charts"].append(("predictors", "Spearman ρ across layers: signal × task", _predictors_spec(pred)))
    else:
        sec["omitted"]["predictors"] = ("no per-layer downstream results (a `layer` column in the CSV of "
                                        "`layerscope downstream import`, then `layerscope analyze`)")

    # ---- temporal, and the shared-space probes
    temporal = temporal_section(con, ds)
    if temporal:
        sec["sections"]["temporal"] = temporal
        reorder = views.temporal_view({"reorder": temporal["reorder"]})["reorder"]
        for chart, title in zip(views.reorder_charts(reorder),
                                ("reorder negatives: positive vs negative at the positive's best layer pair (95% "
                                 "paired bootstrap intervals over items, conditional on the pair; dashed: chance "
                                 "k/(N−1))", "reorder negatives: drop = positive − negative (95% interval; rule at 0)")):
            sec["charts"].append(("temporal", title, _spec(chart.properties(width=360))))
    else:
        sec["omitted"]["temporal"] = "no temporal probes for this dataset"

    # ---- DR's figures
    figures, figure_charts = paper_figures_section(con, ds)
    if figures:
        sec["sections"]["paper_figures"] = figures
        sec["charts"] += [("paper_figures", title, _spec(chart)) for title, chart in figure_charts]
    else:
        sec["omitted"]["paper_figures"] = "no vision×text grids (needs vision and text runs, then `layerscope analyze`)"

    # ---- provenance
    used = sorted({g["run_a"] for g in heat} | {g["run_b"] for g in heat})
    prov = views.provenance(con, tuple(used)) if used else {}
    examples = views.items(con, ds).head(3)
    sec["provenance"] = {
        # display_table: a text run's n_frames is empty, not "None"
        "runs": views.display_table(prov["runs"]).astype(str).to_dict(orient="records") if "runs" in prov else [],
        "models": views.display_table(ov["models"][ov["models"]["model"].isin(chosen)][["model", "revision", "source",
                                                                                         "random_init"]])
        .astype(str).to_dict(orient="records"),
        "settings": {"n_frames": sorted(int(x) for x in runs["n_frames"].dropna().unique()),
                     "n_captions": sorted(int(x) for x in runs["n_captions"].dropna().unique())},
        "k": (heat[0]["params"].get("k") if heat else None), "bootstrap_resamples": heat[0]["n_boot"] if heat else None,
        # the seed the store was last analysed with (its bootstrap and null draws), the default if unsaved
        "seed": stored_settings(con).get("seed", Settings.seed),
        "example_items": [{"id": r.item_id, "captions": list(r.captions)[:2]} for r in examples.itertuples()],
    }
    return sec


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


def alignment_heading(summary: dict) -> str:
    """The best-alignment column's heading, naming the metric(s) its values are."""
    metrics = sorted({a["metric"] for m in summary.get("models", []) for a in m["alignment"].values()})
    return f"best alignment ({', '.join(metrics)})" if metrics else "best alignment"


def _best_grid(grids, m, ref):
    """The mutual k-NN grid of m against ref's text side at the largest setting stored: ``m``'s vision
    side × ``ref`` (vision×text), else the two text models' grid (text×text, either orientation: a
    text-only store's heatmaps), else, as before text×text grids existed, ``ref``'s vision side × ``m``."""
    def cands(ok):
        return [g for g in grids if g["metric"] == "mutual_knn" and ok(g, g.get("pair_kind", "vision_text"))]

    for ok in (lambda g, kind: kind == "vision_text" and (g["model_a"], g["model_b"]) == (m, ref),
               lambda g, kind: kind == "text_text" and {g["model_a"], g["model_b"]} == {m, ref},
               lambda g, kind: kind == "vision_text" and (g["model_a"], g["model_b"]) == (ref, m)):
        found = cands(ok)
        if found:
            return max(found, key=lambda g: ((g["n_frames"] or 0), (g["n_captions"] or 0)))
    return None


# ---------------------------------------------------------------- chart specs


def _spec(chart) -> dict:
    return chart.to_dict()


def _null_cell(null: dict | None, within: dict | None = None) -> str:
    """A best cell's shuffled-pairing null in a table cell: verdict, p, the null's 95th percentile and
    the shuffles by kind; with item groups the within-group null follows, named apart (it asks whether
    the pairing holds within sources, not whether the sources align)."""
    if not null:
        return "—"
    verdict = "beyond chance" if beyond_chance(null) else "not beyond chance"
    out = f"{verdict}: p = {_fmt(null['p'])}, {_fmt(null['q95'])} ({null['n_perm']} {null_label(null)})"
    if within:
        out += (f"; within sources: p = {_fmt(within['p'])} ({within['n_perm']} within-group shuffles, "
                f"{'beyond' if beyond_chance(within) else 'not beyond'} chance)")
    return out


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
        out.append(("layer_curves", f"{metric} per layer", _spec(fig["chart"])))
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


# ---------------------------------------------------------------- rendering


def to_json(report: dict) -> str:
    """The report's numbers and provenance (charts are omitted: they are drawn from these numbers)."""
    data = {**report, "datasets": [{k: v for k, v in d.items() if k != "charts"} for d in report["datasets"]]}
    return json.dumps(R.clean_json(data), indent=2, default=str)


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _fmt(v, digits=3):
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "–"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def _script_json(obj) -> str:
    """JSON safe inside <script>: no '<' survives, so no '</script>' or '<!--' can appear."""
    return json.dumps(R.clean_json(obj)).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;margin:2rem auto;padding:0 1rem;
color:#1f2328;background:#fff}h1{margin-bottom:.2rem}h2{border-bottom:1px solid #d0d7de;padding-bottom:.3rem;margin-top:2.2rem}
table{border-collapse:collapse;margin:.6rem 0;font-size:.92rem}td,th{border:1px solid #d0d7de;padding:.3rem .55rem;text-align:left}
th{background:#f6f8fa}.note{color:#57606a;font-style:italic}.chart{margin:1rem 0}.muted{color:#57606a;font-size:.9rem}
code{background:#f6f8fa;padding:.1rem .3rem;border-radius:4px}.charts{display:flex;flex-wrap:wrap;gap:1rem}
@media (prefers-color-scheme: dark){body{background:#0d1117;color:#e6edf3}th{background:#161b22}td,th{border-color:#30363d}
code{background:#161b22}.note,.muted{color:#8b949e}}
"""


def render_html(report: dict) -> str:
    """One self-contained HTML file: inlined Vega/Vega-Lite/vega-embed, escaped text, no network."""
    import vl_convert as vlc

    parts = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
             "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; script-src 'unsafe-inline' "
             "'unsafe-eval'; style-src 'unsafe-inline'; img-src data: blob:\">",
             f"<title>{_e(report['title'])}</title><style>{CSS}</style>",
             f"<script>{vlc.javascript_bundle()}</script></head><body>",
             f"<h1>{_e(report['title'])}</h1>",
             f"<p class='muted'>Store <code>{_e(report['store'])}</code> · generated {_e(report['generated'])} · "
             f"LayerScope {_e(report['code_version'])}</p>", _verdicts_html(report)]
    specs = []
    for d in report["datasets"]:
        parts.append(f"<h2>Dataset {_e(d['dataset'])} <span class='muted'>({d['n_items']} items)</span></h2>")
        parts.append(_summary_html(d["sections"].get("summary", {})))
        for name in SECTIONS[1:]:
            title = name.replace("_", " ").capitalize()
            if name in d["omitted"]:
                parts.append(f"<h3>{_e(title)}</h3><p class='note'>Omitted: {_e(d['omitted'][name])}</p>")
                continue
            charts = [(t, s) for sect, t, s in d["charts"] if sect == name]
            if name not in d["sections"] and not charts:
                continue
            parts.append(f"<h3>{_e(title)}</h3>")
            if name == "scaling":
                parts.append(_scaling_html(d["sections"]["scaling"]))
            if name == "downstream":
                parts.append(_table_html(d["sections"]["downstream"]))
            if name == "probes":
                parts.append(_probes_html(d["sections"]["probes"]))
            if name == "predictors":
                parts.append(_predictors_html(d["sections"]["predictors"]))
            if name == "temporal":
                parts.append(_temporal_html(d["sections"]["temporal"]))
            if name == "paper_figures":
                parts.append(paper_figures_html(d["sections"]["paper_figures"]))
            parts.append("<div class='charts'>")
            for t, s in charts:
                i = len(specs)
                specs.append(s)
                parts.append(f"<figure class='chart'><div id='chart-{i}' class='vis'></div>"
                             f"<figcaption class='muted'>{_e(t)}</figcaption></figure>")
            parts.append("</div>")
        parts.append(_provenance_html(d["provenance"]))
    parts.append(f"<h2>Reproduce</h2><pre><code>{_e(report['command'])}</code></pre>")
    parts.append(f"<script type='application/json' id='layerscope-specs'>{_script_json(specs)}</script>")
    parts.append("<script>const specs = JSON.parse(document.getElementById('layerscope-specs').textContent);"
                 "specs.forEach((s, i) => vegaEmbed('#chart-' + i, s, {mode: 'vega-lite', actions: false})"
                 ".catch(e => { document.getElementById('chart-' + i).textContent = 'chart error: ' + e; }));"
                 "</script></body></html>")
    return "".join(parts)


#: an inline SVG shape per verdict status (14 px, no font needed): colour and shape differ, and the
#: word of :data:`analysis.views.verdicts.VERDICT_WORDS` follows it, so nothing relies on an emoji font
_SHAPES = {
    "recommend": ('#1a7f37', '<circle cx="7" cy="7" r="6"/><path d="M4 7.2l2 2 4-4.4" fill="none" stroke="#fff" '
                             'stroke-width="1.8"/>'),
    "last": ('#1a7f37', '<path d="M2 7.5l3.2 3.2L12 3.8" fill="none" stroke="currentColor" stroke-width="2.2"/>'),
    "default": ('#0969da', '<path d="M5 3L1.5 6.5 5 10M2 6.5h6.5a4 4 0 010 8" fill="none" stroke="currentColor" '
                           'stroke-width="1.8"/>'),
    "tie": ('#57606a', '<path d="M2 5h10M2 9h10" stroke="currentColor" stroke-width="2"/>'),
    "untested": ('#57606a', '<circle cx="7" cy="7" r="5.5" fill="none" stroke="currentColor" stroke-width="1.5"/>'
                            '<circle cx="7" cy="7" r="1.5"/>'),
    "unsupported": ('#57606a', '<circle cx="7" cy="7" r="5.5" fill="none" stroke="currentColor" stroke-width="1.5"/>'
                               '<path d="M4 10L10 4" stroke="currentColor" stroke-width="1.5"/>'),
    "chance": ('#bc4c00', '<rect x="1.5" y="1.5" width="11" height="11" rx="2" fill="none" stroke="currentColor" '
                          'stroke-width="1.5"/><circle cx="4.5" cy="4.5" r="1.2"/><circle cx="9.5" cy="9.5" r="1.2"/>'),
    "control": ('#8250df', '<path d="M5 1.5h4M6 1.5v4L2.5 12h9L8 5.5v-4" fill="none" stroke="currentColor" '
                           'stroke-width="1.5"/>'),
    "none": ('#cf222e', '<path d="M7 1.5L13 12.5H1z" fill="none" stroke="currentColor" stroke-width="1.5"/>'
                        '<path d="M7 5.5v3.5M7 10.3v1" stroke="currentColor" stroke-width="1.5"/>'),
}


def _mark(status: str) -> str:
    """A verdict status as an inline SVG icon and its word (``<span class="mark">``)."""
    colour, body = _SHAPES[status]
    svg = (f'<svg width="14" height="14" viewBox="0 0 14 14" fill="currentColor" aria-hidden="true" '
           f'style="vertical-align:-2px">{body}</svg>')
    return f'<span class="mark" style="color:{colour}">{svg} <b>{_e(VERDICT_WORDS[status])}</b></span>'


def _verdicts_html(report) -> str:
    """The opening: which layer to use, per dataset and model (the dashboard Overview's lines)."""
    out = ["<h2 id='verdicts'>Which layer to use</h2>"]
    for d in report["datasets"]:
        if len(report["datasets"]) > 1:
            out.append(f"<h3>{_e(d['dataset'])}</h3>")
        if not d.get("verdicts"):
            out.append(f"<p class='note'>{_e(missing_text(d['dataset']))}</p>")
            continue
        out.append("<ul>" + "".join(f"<li>{_mark(v['status'])} {_e(v['sentence'])}</li>" for v in d["verdicts"])
                   + "</ul>")
    out.append(f"<p class='muted'>{_e(views.VERDICT_RULE)} The per-metric picks follow in each dataset's summary.</p>")
    return "".join(out)


def _summary_html(summary) -> str:
    if not summary.get("models"):
        return "<p class='note'>No model of the selection has runs on this dataset.</p>"
    out = ["<h3>Per-metric picks</h3><ul>"]
    out += [f"<li>{_e(s)}</li>" for s in summary["sentences"]]
    out.append("</ul>")
    out += [f"<p class='note'>{_e(n)}</p>" for n in summary.get("notes", [])]
    out.append("<table><tr><th>model</th><th>metric</th><th>recommended layer</th><th>value</th>"
               "<th>final layer value</th><th>layers from final</th></tr>")
    for m in summary["models"]:
        for metric, p in m["recommended"].items():
            out.append(f"<tr><td>{_e(m['label'])}</td><td>{_e(metric)}</td><td>{p['layer']}</td><td>{_fmt(p['value'])}"
                       f"</td><td>{_fmt(p['final_value'])}</td><td>{p['from_final']}</td></tr>")
    out.append(f"</table><table><tr><th>model</th><th>reference</th><th>{_e(alignment_heading(summary))}</th><th>95% CI</th>"
               "<th>shuffled null (p, 95th pct.)</th><th>layer pair</th><th>final layer's best</th></tr>")
    for m in summary["models"]:
        for ref, a in m["alignment"].items():
            null = _null_cell(a.get("null"), a.get("null_within"))
            out.append(f"<tr><td>{_e(m['label'])}</td><td>{_e(ref)}</td><td>{_fmt(a['value'])}</td>"
                       f"<td>{_fmt(a['ci'][0])}–{_fmt(a['ci'][1])}</td><td>{_e(null)}</td>"
                       f"<td>({a['layer']}, {a['ref_layer']})</td><td>{_fmt(a['final_layer_value'])}</td></tr>")
    out.append("</table>")
    if any(a.get("null") for m in summary["models"] for a in m["alignment"].values()):
        out.append("<p class='note'>Shuffled null: the best cell is a maximum over every layer pair, so it is "
                   "tested against the same maximum when the items are paired at random; p ≤ 0.05 is alignment "
                   "beyond chance, above it none. Chance k/(N−1) is the analytic level of one cell.</p>")
    return "".join(out)


def _table_html(rows) -> str:
    if not rows:
        return ""
    cols = list(rows[0])
    out = ["<table><tr>" + "".join(f"<th>{_e(c)}</th>" for c in cols) + "</tr>"]
    for r in rows:
        out.append("<tr>" + "".join(f"<td>{_e(_fmt(r.get(c)) if not isinstance(r.get(c), list) else r.get(c))}</td>"
                                    for c in cols) + "</tr>")
    return "".join(out) + "</table>"


#: the saturating law's parameters as the report's tables head them
SCALING_COLUMNS = (("s_inf", "S∞"), ("c_f", "C_f"), ("c_c", "C_c"), ("alpha", "α"), ("beta", "β"))


def scaling_rows(fits) -> list[dict]:
    """One table row per scaling subject (HTML and Markdown alike): DR's saturating law's parameters
    (None where the data do not determine them, the reason under ``not determined``), its own R²,
    and the held-out-best form with *its* R² when that is another form."""
    rows = []
    for f in fits:
        pair = f["subject"].replace("|", " × ", 1).replace("|", " · ")
        fit = f.get("fit")
        if not fit:
            rows.append({"pair": pair, **{h: None for _, h in SCALING_COLUMNS}, "d_v = 2/α": None, "R² (saturating)": None,
                         "held-out best (R²)": "", "DR Table 1 (published)": "", "fit": "", "not determined": "",
                         "note": f.get("error")})
            continue
        other = next((c for c in f.get("curves", []) if c["form"] != "saturating"), None)
        best = (f"{other['form']} ({_fmt(other['r2'])})" if other else "saturating") if f.get("curves") else ""
        why = fit.get("undetermined") or {}
        table = {r["parameter"]: r for r in f.get("parameter_table", [])}
        dv = table.get("d_v = 2/α") or {}
        published = "; ".join(f"{h} {table[k]['paper']}" for k, h in (*SCALING_COLUMNS, ("d_v = 2/α", "d_v"), ("R²", "R²"))
                              if (table.get(k) or {}).get("paper"))
        rows.append({"pair": pair, **{h: fit["params"].get(k) for k, h in SCALING_COLUMNS},
                     "d_v = 2/α": dv.get("value") or None,
                     "R² (saturating)": fit["r2"], "held-out best (R²)": best,
                     "DR Table 1 (published)": published, "fit": f.get("status") or "",
                     "not determined": "; ".join(f"{h}: {why[k]}" for k, h in SCALING_COLUMNS if k in why),
                     "note": ("" if why else (f.get("reason") or "")) + "; ".join(f.get("notes") or [])})
    return rows


def _scaling_html(fits) -> str:
    return ("<p>" + _e(views.SATURATING_TITLE) + ", fitted per pair; a parameter the data do not determine is left "
            "blank (–) with the reason.</p>" + _table_html(scaling_rows(fits)))


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


def reorder_report_rows(entries) -> list[dict]:
    """The reorder probe as report table rows: pair, layers, each value with its 95% interval, chance."""
    df = views.temporal_view({"reorder": entries})["reorder"]

    def ci(r, v):
        lo, hi = r[f"{v}_low"], r[f"{v}_high"]
        return "—" if lo is None or not np.isfinite(lo) else f"[{_fmt(lo)}, {_fmt(hi)}]"

    return [{"pair": r["pair"], "layers": r["layers"], "k": r["k"], "positive": r["positive"],
             "positive 95% CI": ci(r, "positive"), "negative": r["negative"], "negative 95% CI": ci(r, "negative"),
             "drop": r["drop"], "drop 95% CI": ci(r, "drop"), "chance k/(N−1)": r["chance"],
             "resamples scored": r["resamples"], "note": r["note"]}
            for r in df.to_dict(orient="records")]


def _temporal_html(t) -> str:
    rows = [{"vision": e["vision"], "text": e["text"], **{f"k={k}": v for k, v in e["alignment"].items()}}
            for e in t.get("test_of_time", [])]
    parts = [_table_html(rows)]
    if t.get("reorder"):
        parts.append("<h4>Reorder negatives</h4><p class='muted'>Positive and time-reordered negative captions "
                     "scored at the positive's best layer pair (chosen once on all items); 95% paired bootstrap "
                     "intervals over items, conditional on that pair.</p>" + _table_html(reorder_report_rows(t["reorder"])))
        df = views.temporal_view({"reorder": t["reorder"]})["reorder"]
        parts += [f"<p class='note'>{_e(line)}</p>" for line in views.reorder_drop_text(df)]

    def curve_rows(entries, what):
        return [{"pair": f"{e['video']} × {e['text']} ({e['space']})", "probe": what, "best layer": e["best_layer"],
                 "best": e["best"], "last layer": e["last_layer"], "last": e["last"], "note": e["note"]}
                for e in entries]

    probes = curve_rows(t.get("chiral", []), "chiral choice, video → caption vs opposite (chance 0.5)")
    probes += curve_rows(t.get("time_reversal", []), "time reversal, caption → video vs reversed (chance 0.5)")
    for e in t.get("chiral_gallery", []):
        per = "action" if e.get("queries") == "action" else "item"
        for key, n, what in (("settings", e["n_queries"], f"one query per {per}"),
                             ("settings_item_queries", e.get("n_item_queries"), "one query per item")):
            got = e.get(key) or {}
            if not got:
                continue
            probes += curve_rows([{**e, **p} for p in got.values()], "")
            for row, s in zip(probes[-len(got):], got):
                row["probe"] = f"chiral gallery mAP, {s} setting ({n} queries, {what})"
    for e in t.get("negation", []):
        for key in ("standard@5", "negated@5"):
            if key in e["recall"]:
                probes += curve_rows([{**e, **e["recall"][key]}], f"negated queries: {key.replace('@', ' R@')}")
    if probes:
        parts.append("<h4>Nuanced retrieval in a shared space</h4>" + _table_html(probes))
    same = [{"pair": s["pair"], "best layer (T→V mAP)": s["map_t2v"]["best_layer"], "T→V mAP": s["map_t2v"]["best"],
             "T→V R@1 there": s["recall@1_t2v_at_best"], "modality gap there": s["modality_gap_at_best"],
             "last layer T→V mAP": s["map_t2v"]["last"], "modality gap, last": s["modality_gap_last"],
             "note": s["map_t2v"]["note"]} for s in t.get("same_space", [])]
    if same:
        parts.append("<h4>Shared video–text space</h4>" + _table_html(same))
    parts += [f"<p class='note'>{_e(n)}</p>" for n in t.get("notes", [])]
    return "".join(parts)


def _provenance_html(p) -> str:
    out = ["<h3>Provenance</h3>", f"<p>k = {_e(p.get('k'))} · bootstrap resamples = "
           f"{_e(p.get('bootstrap_resamples'))} · seed = {_e(p.get('seed'))} · n_f settings {_e(p['settings']['n_frames'])}"
           f" · n_c settings {_e(p['settings']['n_captions'])}</p>", _table_html(p["models"])]
    if p["runs"]:
        out.append(_table_html(p["runs"]))
    if p["example_items"]:
        out.append("<p class='muted'>Example items:</p><ul>")
        out += [f"<li><code>{_e(x['id'])}</code>: {_e(' | '.join(x['captions']))}</li>" for x in p["example_items"]]
        out.append("</ul>")
    return "".join(out)


def _verdicts_md(report) -> list[str]:
    """The Markdown summary's opening: each verdict line led by its status in words (no emoji font needed)."""
    lines = ["## Which layer to use", ""]
    for d in report["datasets"]:
        prefix = f"{md_inline(d['dataset'])}: " if len(report["datasets"]) > 1 else ""
        for v in d.get("verdicts", []):
            lines.append(f"- **{VERDICT_WORDS[v['status']]}**: {prefix}{md_inline(v['sentence'])}")
        if not d.get("verdicts"):
            lines.append(f"- {md_inline(missing_text(d['dataset']))}")
    return lines + [""]


def render_markdown(report: dict) -> str:
    """A short Markdown summary. Every user string (store path, dataset, model and reference names,
    sentences quoting them) is escaped for where it lands (:mod:`analysis.report.markdown`: inside a
    line, at a line's or list item's start, in a table cell), so a name such as
    ``![x](http://host/x.png)`` or ``<script>`` stays text in any CommonMark renderer while times and
    versions (``19:48 UTC``, ``0.1.0``) stay as written; the command sits in an indented code block
    on one line."""
    lines = [f"# {md_block(report['title'])}", "", f"Store {md_inline(report['store'])}, generated "
             f"{md_inline(report['generated'])}, LayerScope {md_inline(report['code_version'])}.", ""]
    lines += _verdicts_md(report)
    for d in report["datasets"]:
        lines += [f"## {md_block(d['dataset'])} ({d['n_items']} items)", ""]
        summary = d["sections"].get("summary", {})
        for s in summary.get("sentences", []):
            lines.append(f"- {md_block(s)}")
        for note in summary.get("notes", []):
            lines += ["", md_block(note)]
        lines += ["", f"| model | reference | {md_cell(alignment_heading(summary))} | 95% CI | "
                      "shuffled null (p, 95th pct.) | layers |", "|---|---|---|---|---|---|"]
        for m in summary.get("models", []):
            for ref, a in m["alignment"].items():
                lines.append(f"| {md_cell(m['label'])} | {md_cell(ref)} | {_fmt(a['value'])} | {_fmt(a['ci'][0])}–"
                             f"{_fmt(a['ci'][1])} | {md_cell(_null_cell(a.get('null'), a.get('null_within')))} | "
                             f"({a['layer']}, {a['ref_layer']}) |")
        lines += _scaling_md(d["sections"].get("scaling"))
        lines += _probes_md(d["sections"].get("probes"))
        lines += _predictors_md(d["sections"].get("predictors"))
        lines += paper_figures_md(d["sections"].get("paper_figures"))
        t = d["sections"].get("temporal") or {}
        probes = (("chiral", "chiral choice (video → caption)"), ("time_reversal", "time reversal (caption → video)"))
        if t.get("reorder"):
            df = views.temporal_view({"reorder": t["reorder"]})["reorder"]
            lines += [f"- reorder negatives, {md_inline(line)}" for line in views.reorder_drop_text(df)]
        for key, what in probes:
            for c in t.get(key, []):
                lines.append(f"- {what}, {md_inline(c['video'])} × {md_inline(c['text'])} ({md_inline(c['space'])}): "
                             f"best {_fmt(c['best'])} at layer {c['best_layer']}, last layer {_fmt(c['last'])} "
                             "(chance 0.5)")
        if d["omitted"]:
            lines += ["", "Omitted: " + "; ".join(f"{md_inline(k)} ({md_inline(v)})" for k, v in d["omitted"].items())]
        lines.append("")
    lines += ["Reproduce:", "", "    " + " ".join(str(report["command"]).splitlines()), ""]
    return "\n".join(lines)


def _scaling_md(fits) -> list[str]:
    """The scaling table in Markdown: the rows of :func:`scaling_rows`, blanks as –."""
    if not fits:
        return []
    rows = scaling_rows(fits)
    cols = list(rows[0])
    out = ["", f"{md_block(views.SATURATING_TITLE)} per pair (blank –: not determined by the data, reason given):", "",
           "| " + " | ".join(md_cell(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(md_cell(_fmt(r[c])) for c in cols) + " |")
    return out


# ---------------------------------------------------------------- labelled probes section
PROBES_TEXT = ("Measured on this dataset: each manifest field named with `analyze --labels` is a task, probed at "
               "every layer (k-NN accuracy leave-one-out, k-means NMI and ARI, a linear probe when asked) with 95% "
               "intervals over item resamples. Each model's label-free pick (the layer its verdict advises) is set "
               "against the probe's best layer on the verdict's run; differences are paired on the same resamples.")


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


def _probes_html(probes) -> str:
    out = [f"<p class='muted'>{_e(PROBES_TEXT)}</p>"]
    lines = [c["sentence"] for c in probes["checks"] if c["headline"]]
    if lines:
        out.append("<ul>" + "".join(f"<li>{_e(x)}</li>" for x in lines) + "</ul>")
    if probes["table"]:
        out.append(_table_html(probes["table"]))
    return "".join(out)


def _probes_md(probes) -> list[str]:
    if not probes:
        return []
    lines = ["", "### Labelled probes", "", md_block(PROBES_TEXT), ""]
    lines += [f"- {md_block(c['sentence'])}" for c in probes["checks"] if c["headline"]]
    return lines


# ---------------------------------------------------------------- predictors section

#: columns of the predictor table in the report (the page shows them all)
PREDICTOR_COLUMNS = ("task", "rank", "signal", "kind", "coverage", "interval excludes 0", "ρ across layers",
                     "interval (layers)", "models with ρ",
                     "ρ pooled", "interval (pooled)", "layers used", "layers excluded", "higher signal goes with")


#: how the predictor table is ordered (by coverage: a signal is only as good as the models it stands on), said wherever it is shown
RANKING_TEXT = ("Ranked by the number of models a signal's ρ stands on, then whether its interval excludes 0, "
                "then |ρ|: a signal seen in one model only (\"1 model only\") ranks below every signal seen in "
                "more. No single signal is a universal selector; the table shows which signal predicts which task.")


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


def _fabricated_text(pred) -> str:
    return ("FABRICATED numbers: the downstream results of " + ", ".join(pred["fabricated"]) + " were made up by "
            "`layerscope demo` to exercise this section; they measure nothing.") if pred["fabricated"] else ""


def _predictors_html(pred) -> str:
    out = []
    if pred["fabricated"]:
        out.append(f"<p class='note'><strong>{_e(_fabricated_text(pred))}</strong></p>")
    out.append(f"<p class='muted'>Spearman ρ between each label-free per-layer signal and per-layer downstream "
               f"results, signed as computed (a lower-is-better task shows ρ &lt; 0 for a signal that goes with "
               f"better results); across layers = mean of each model's ρ, pooled = over models × layers; "
               f"{int((pred['level'] or 0.95) * 100)}% bootstrap intervals ({_e(pred['n_boot'])} resamples of layers "
               f"within each model); degenerate layers left out and counted. {_e(RANKING_TEXT)}</p>")
    out.append(_table_html(pred["table"]))
    if pred["best_layers"]:
        out.append("<p>Truly best layer per model vs its last numbered layer and its <code>default</code> "
                   "(gaps in the task's metric, positive: the best layer is better):</p>")
        out.append(_table_html(pred["best_layers"]))
    if pred["picks"]:
        out.append("<p>How good a layer each signal picks:</p>")
        out.append(_table_html(pred["picks"]))
    out += [f"<p class='note'>{_e(n)}</p>" for n in pred["notes"]]
    return "".join(out)


def _predictors_md(pred) -> list[str]:
    if not pred:
        return []
    lines = ["", "### Layer predictors", ""]
    if pred["fabricated"]:
        lines += [f"**{md_inline(_fabricated_text(pred))}**", ""]
    lines += [md_block(RANKING_TEXT), "",
              "| task | rank | signal | ρ across layers | interval | ρ pooled | interval | coverage |",
              "|---|---|---|---|---|---|---|---|"]
    for r in pred["table"]:
        lines.append(f"| {md_cell(r['task'])} | {r['rank']} | {md_cell(r['signal'])} | {_fmt(r['ρ across layers'])} | "
                     f"{md_cell(r['interval (layers)'])} | {_fmt(r['ρ pooled'])} | {md_cell(r['interval (pooled)'])} | "
                     f"{md_cell(r['coverage'])} |")
    return lines


def report_data(con, store_path: str) -> dict:
    """The layer-selection report of the whole store as data (:func:`build_report`), for the dashboard."""
    return build_report(con, store=store_path, command=f"layerscope report --store {store_path} --out report.html")


def render_report_files(report: dict) -> dict[str, str]:
    """``{"html", "json", "md"}`` texts of a report (no store access: render after letting go of it)."""
    return {"html": render_html(report), "json": to_json(report), "md": render_markdown(report)}
