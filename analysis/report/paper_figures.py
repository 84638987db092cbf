"""The report's "Paper figures" section as HTML and Markdown: DR Fig. 7's fit, Figs. 11/12's matrices
with their layers and rank agreement, Fig. 2's "video − image" offset, each with the papers' published
number beside it where the user mapped the names. The numbers and charts are the section of
:mod:`analysis.views.paper_figures` (nothing recomputed); rendering escapes every store string."""

from __future__ import annotations

import html

from analysis.report.md_escape import md_cell, md_inline


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _table(rows) -> str:
    if not rows:
        return ""
    cols = list(rows[0])
    head = "".join(f"<th>{_e(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{_e('' if r.get(c) is None else r.get(c))}</td>" for c in cols) + "</tr>"
                   for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def paper_figures_html(sec: dict) -> str:
    parts = [f"<p>DR's figures on this store's {_e(sec['metric'])} best cells; a paper's number is shown beside "
             "yours only where you mapped your names to the paper's (<code>layerscope papers map</code>).</p>"]
    for f in sec["fig7"]:
        parts.append(f"<p><b>Fig. 7, text model {_e(f['text_model'])}:</b> {_e(f['sentence'])}</p>")
    for m in sec["fig11"]:
        parts.append(f"<p><b>Figs. 11/12, {_e(m['budget'])} caption budget (n_c {m['n_c']}):</b> "
                     f"{_e(m['sentence'])}</p>" + _table(m["table"]) + _table(m["pairs"]))
        # its notes are among the section's notes, printed once under the section's charts
    for f in sec["fig2"]:
        parts.append(f"<p><b>Fig. 2, {_e(f['task'])} with {_e(f['text_model'])}:</b> {_e(f['sentence'])}</p>")
    for f in sec.get("fig8", []):
        parts.append(f"<p><b>Fig. 8, {_e(f['vision'])} × {_e(f['text_model'])}:</b> {_e(f['sentence'])}</p>")
    if sec.get("gap_maps"):
        parts.append("<p><b>TARA's pictures of the modality gap:</b> "
                     + "; ".join(f"{_e(m['subject'])} ({_e(m['n_points'])} points)" for m in sec["gap_maps"])
                     + " (charts below; the sides' clouds apart = the gap).</p>")
    for f in sec.get("prompts", []):
        parts.append(f"<p><b>TARA prompt comparison, {_e(f['a'])} (A) against {_e(f['b'])} (B):</b> "
                     f"{_e(f['sentence'])}</p>" + _table(f["table"]))
    return "".join(parts)


def paper_figures_md(sec: dict | None) -> list[str]:
    if not sec:
        return []
    e = md_inline
    out = ["", "Paper figures (DR):", ""]
    out += [f"- Fig. 7, text model {e(f['text_model'])}: {e(f['sentence'])}" for f in sec["fig7"]]
    for m in sec["fig11"]:
        out.append(f"- Figs. 11/12, n_c {m['n_c']}: {e(m['sentence'])}")
        if m["table"]:
            cols = list(m["table"][0])
            out += ["", "| " + " | ".join(md_cell(c) for c in cols) + " |", "|" + "---|" * len(cols)]
            out += ["| " + " | ".join(md_cell(r.get(c)) for c in cols) + " |" for r in m["table"]]
            out.append("")
    out += [f"- Fig. 2, {e(f['task'])} with {e(f['text_model'])}: {e(f['sentence'])}" for f in sec["fig2"]]
    out += [f"- Fig. 8, {e(f['vision'])} × {e(f['text_model'])}: {e(f['sentence'])}" for f in sec.get("fig8", [])]
    out += [f"- TARA's picture of the gap: {e(m['subject'])} ({m['n_points']} points)" for m in sec.get("gap_maps", [])]
    out += [f"- TARA prompt comparison, {e(f['a'])} (A) against {e(f['b'])} (B): {e(f['sentence'])}"
            for f in sec.get("prompts", [])]
    return out
