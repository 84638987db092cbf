"""The report as one self-contained HTML file: Vega, Vega-Lite and vega-embed inlined (no network
needed). Every user-supplied string is escaped: text through ``html.escape``, chart specs as JSON
with ``<`` written as ``\\u003c`` so nothing can close a script element."""

from __future__ import annotations

import html
import json

from analysis.report.paper_figures import paper_figures_html
from analysis.report.text import (PROBES_TEXT, RANKING_TEXT, SECTIONS, alignment_heading, fabricated_text, fmt,
                                  null_cell, placed_notes, reorder_report_rows, scaling_rows)
from analysis.storage import results as R
from analysis.views.scaling import SATURATING_TITLE
from analysis.views.temporal import reorder_drop_text, temporal_view
from analysis.views.verdicts import VERDICT_RULE, VERDICT_WORDS, missing_text


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _script_json(obj) -> str:
    """JSON safe inside <script>: no '<' survives, so no '</script>' or '<!--' can appear."""
    return json.dumps(R.clean_json(obj)).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;margin:2rem auto;padding:0 1rem;
color:#1f2328;background:#fff}h1{margin-bottom:.2rem}h2{border-bottom:1px solid #d0d7de;padding-bottom:.3rem;margin-top:2.2rem}
table{border-collapse:collapse;margin:.6rem 0;font-size:.92rem}td,th{border:1px solid #d0d7de;padding:.3rem .55rem;text-align:left}
th{background:#f6f8fa}.note{color:#57606a;font-style:italic}.warning{border-left:4px solid #bf8700;padding:.4rem .8rem;
background:#fff8c5}.chart{margin:1rem 0}.muted{color:#57606a;font-size:.9rem}
code{background:#f6f8fa;padding:.1rem .3rem;border-radius:4px}.charts{display:flex;flex-wrap:wrap;gap:1rem}
/* a chart's notes wrap at its width rather than widening its figure past its row */
.chart .note{width:0;min-width:100%}
@media (prefers-color-scheme: dark){body{background:#0d1117;color:#e6edf3}th{background:#161b22}td,th{border-color:#30363d}
code{background:#161b22}.note,.muted{color:#8b949e}.warning{background:#272115}}
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
             f"LayerScope {_e(report['code_version'])}</p>"]
    if report.get("unfinished"):  # before any number: which of them the last, unfinished analysis left
        parts.append(f"<p class='warning'><strong>Analysis unfinished.</strong> {_e(report['unfinished'])}</p>")
    parts.append(_verdicts_html(report))
    specs = []
    for d in report["datasets"]:
        parts.append(f"<h2>Dataset {_e(d['dataset'])} <span class='muted'>({d['n_items']} items)</span></h2>")
        parts.append(_summary_html(d["sections"].get("summary", {})))
        for name in SECTIONS[1:]:
            title = name.replace("_", " ").capitalize()
            under, shared, wide = placed_notes(d, name)
            # sentences several charts read, after the charts under a line naming them, then the section's own
            notes = "".join(f"<p class='muted'>Under the charts {_e('; '.join(titles))}:</p>" + _notes_html(said)
                            for titles, said in shared) + _notes_html(wide)
            if name in d["omitted"]:
                parts.append(f"<h3>{_e(title)}</h3><p class='note'>Omitted: {_e(d['omitted'][name])}</p>{notes}")
                continue
            charts = [(t, s) for sect, t, s in d["charts"] if sect == name]
            if name not in d["sections"] and not charts:
                continue
            parts.append(f"<h3>{_e(title)}</h3>")
            if name in _SECTION_TABLES:
                parts.append(_SECTION_TABLES[name](d["sections"][name]))
            parts.append("<div class='charts'>")
            for (t, s), said in zip(charts, under):
                i = len(specs)
                specs.append(s)
                # the sentences about this chart alone, directly under it (inside its figure)
                parts.append(f"<figure class='chart'><div id='chart-{i}' class='vis'></div>"
                             f"<figcaption class='muted'>{_e(t)}</figcaption>{_notes_html(said)}</figure>")
            parts.append("</div>" + notes)  # the sentences the page reads under several of these charts
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


def _notes_html(notes) -> str:
    return "".join(f"<p class='note'>{_e(n)}</p>" for n in notes)


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
    out.append(f"<p class='muted'>{_e(VERDICT_RULE)} The per-metric picks follow in each dataset's summary.</p>")
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
            out.append(f"<tr><td>{_e(m['label'])}</td><td>{_e(metric)}</td><td>{p['layer']}</td><td>{fmt(p['value'])}"
                       f"</td><td>{fmt(p['final_value'])}</td><td>{p['from_final']}</td></tr>")
    out.append(f"</table><table><tr><th>model</th><th>reference</th><th>{_e(alignment_heading(summary))}</th><th>95% CI</th>"
               "<th>shuffled null (p, 95th pct.)</th><th>layer pair</th><th>final layer's best</th></tr>")
    for m in summary["models"]:
        for ref, a in m["alignment"].items():
            null = null_cell(a.get("null"), a.get("null_within"))
            out.append(f"<tr><td>{_e(m['label'])}</td><td>{_e(ref)}</td><td>{fmt(a['value'])}</td>"
                       f"<td>{fmt(a['ci'][0])}–{fmt(a['ci'][1])}</td><td>{_e(null)}</td>"
                       f"<td>({a['layer']}, {a['ref_layer']})</td><td>{fmt(a['final_layer_value'])}</td></tr>")
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
        out.append("<tr>" + "".join(f"<td>{_e(fmt(r.get(c)) if not isinstance(r.get(c), list) else r.get(c))}</td>"
                                    for c in cols) + "</tr>")
    return "".join(out) + "</table>"


def _scaling_html(fits) -> str:
    return ("<p>" + _e(SATURATING_TITLE) + ", fitted per pair; a parameter the data do not determine is left "
            "blank (–) with the reason.</p>" + _table_html(scaling_rows(fits)))


def _temporal_html(t) -> str:
    rows = [{"vision": e["vision"], "text": e["text"], **{f"k={k}": v for k, v in e["alignment"].items()}}
            for e in t.get("test_of_time", [])]
    parts = [_table_html(rows)]
    if t.get("reorder"):
        parts.append("<h4>Reorder negatives</h4><p class='muted'>Positive and time-reordered negative captions "
                     "scored at the positive's best layer pair (chosen once on all items); 95% paired bootstrap "
                     "intervals over items, conditional on that pair.</p>" + _table_html(reorder_report_rows(t["reorder"])))
        df = temporal_view({"reorder": t["reorder"]})["reorder"]
        parts += [f"<p class='note'>{_e(line)}</p>" for line in reorder_drop_text(df)]

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
    # the study's notes are the section's notes, printed under its charts (one line per reason)
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


def _probes_html(probes) -> str:
    out = [f"<p class='muted'>{_e(PROBES_TEXT)}</p>"]
    lines = [c["sentence"] for c in probes["checks"] if c["headline"]]
    if lines:
        out.append("<ul>" + "".join(f"<li>{_e(x)}</li>" for x in lines) + "</ul>")
    if probes["table"]:
        out.append(_table_html(probes["table"]))
    return "".join(out)


def _predictors_html(pred) -> str:
    out = []
    if pred["fabricated"]:
        out.append(f"<p class='note'><strong>{_e(fabricated_text(pred))}</strong></p>")
    out.append(f"<p class='muted'>Spearman ρ between each label-free per-layer signal and per-layer downstream "
               f"results, signed as computed (a lower-is-better task shows ρ &lt; 0 for a signal that goes with "
               f"better results); across layers = mean of each model's ρ, pooled = over models × layers; "
               f"{int((pred['level'] or 0.95) * 100)}% bootstrap intervals ({_e(pred['n_boot'])} resamples of layers "
               f"within each model); degenerate layers left out and counted. {_e(RANKING_TEXT)}</p>")
    out.append(_table_html(pred["table"]))
    out += [f"<p class='note'>{_e(x)}</p>" for x in pred.get("not_measured", [])]
    if pred["best_layers"]:
        out.append("<p>Truly best layer per model vs its last numbered layer and its <code>default</code> "
                   "(gaps in the task's metric, positive: the best layer is better):</p>")
        out.append(_table_html(pred["best_layers"]))
    if pred["picks"]:
        out.append("<p>How good a layer each signal picks:</p>")
        out.append(_table_html(pred["picks"]))
    # the study's notes are the section's notes, printed under its charts (one line per reason)
    return "".join(out)


#: the sections whose numbers the HTML shows as tables above their charts: name → renderer of the data
_SECTION_TABLES = {"scaling": _scaling_html, "downstream": _table_html, "probes": _probes_html,
                   "predictors": _predictors_html, "temporal": _temporal_html, "paper_figures": paper_figures_html}
