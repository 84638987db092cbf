"""report.md: a short Markdown summary (:func:`render_markdown`), its text escaped by
:mod:`analysis.report.md_escape` (only what Markdown would read as syntax where the text lands)."""

from __future__ import annotations

from analysis.report.md_escape import md_block, md_cell, md_inline
from analysis.report.paper_figures import paper_figures_md
from analysis.report.text import (RANKING_TEXT, PROBES_TEXT, alignment_heading, fabricated_text, fmt, null_cell,
                                  placed_notes, scaling_rows)
from analysis.views.scaling import SATURATING_TITLE
from analysis.views.temporal import reorder_drop_text, temporal_view
from analysis.views.verdicts import VERDICT_WORDS, missing_text

# ---------------------------------------------------------------- the summary


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
    if report.get("unfinished"):  # before any number: which of them the last, unfinished analysis left
        lines += [f"**Analysis unfinished.** {md_inline(report['unfinished'])}", ""]
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
                lines.append(f"| {md_cell(m['label'])} | {md_cell(ref)} | {fmt(a['value'])} | {fmt(a['ci'][0])}–"
                             f"{fmt(a['ci'][1])} | {md_cell(null_cell(a.get('null'), a.get('null_within')))} | "
                             f"({a['layer']}, {a['ref_layer']}) |")
        # each section's notes follow its lines; a section with no lines here (its charts are in
        # report.html) says its notes where it would stand
        lines += _notes_md(d, "heatmaps") + _notes_md(d, "layer_curves")
        lines += _scaling_md(d["sections"].get("scaling")) + _notes_md(d, "scaling")
        lines += _notes_md(d, "model_map") + _notes_md(d, "downstream")
        lines += _probes_md(d["sections"].get("probes")) + _notes_md(d, "probes")
        lines += _predictors_md(d["sections"].get("predictors")) + _notes_md(d, "predictors")
        lines += paper_figures_md(d["sections"].get("paper_figures")) + _notes_md(d, "paper_figures")
        t = d["sections"].get("temporal") or {}
        probes = (("chiral", "chiral choice (video → caption)"), ("time_reversal", "time reversal (caption → video)"))
        if t.get("reorder"):
            df = temporal_view({"reorder": t["reorder"]})["reorder"]
            lines += [f"- reorder negatives, {md_inline(line)}" for line in reorder_drop_text(df)]
        for key, what in probes:
            for c in t.get(key, []):
                lines.append(f"- {what}, {md_inline(c['video'])} × {md_inline(c['text'])} ({md_inline(c['space'])}): "
                             f"best {fmt(c['best'])} at layer {c['best_layer']}, last layer {fmt(c['last'])} "
                             "(chance 0.5)")
        lines += _notes_md(d, "temporal")
        if d["omitted"]:
            lines += ["", "Omitted: " + "; ".join(f"{md_inline(k)} ({md_inline(v)})" for k, v in d["omitted"].items())]
        lines.append("")
    lines += ["Reproduce:", "", "    " + " ".join(str(report["command"]).splitlines()), ""]
    return "\n".join(lines)


def _notes_md(d, name) -> list[str]:
    """The notes of section ``name`` as lists, each note escaped as a list item's text and placed as
    :func:`~analysis.report.text.placed_notes` says: a chart's own sentences under a line naming that
    chart (its drawing is in report.html), those several charts read under a line naming them, then
    the section-wide ones; without sentences tied to charts, one list under a line naming the
    section. ``[]`` when it has none."""
    under, shared, wide = placed_notes(d, name)
    titles = [t for s, t, _ in d.get("charts", []) if s == name]
    groups = [([t], said) for t, said in zip(titles, under) if said] + shared
    section = name.replace("_", " ")
    if not groups:
        return ["", f"Notes on {section}:", ""] + [f"- {md_block(n)}" for n in wide] if wide else []
    lines = ["", f"Notes on {section}, chart by chart (the charts are in report.html):"]
    for charts, said in groups:
        lines += ["", f"Under {'the chart' if len(charts) == 1 else 'the charts'} "
                      f"{'; '.join(md_inline(t) for t in charts)}:", ""] + [f"- {md_block(n)}" for n in said]
    if wide:
        lines += ["", f"On {section} as a whole:", ""] + [f"- {md_block(n)}" for n in wide]
    return lines


def _scaling_md(fits) -> list[str]:
    """The scaling table in Markdown: the rows of :func:`scaling_rows`, blanks as –."""
    if not fits:
        return []
    rows = scaling_rows(fits)
    cols = list(rows[0])
    out = ["", f"{md_block(SATURATING_TITLE)} per pair (blank –: not determined by the data, reason given):", "",
           "| " + " | ".join(md_cell(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(md_cell(fmt(r[c])) for c in cols) + " |")
    return out


def _probes_md(probes) -> list[str]:
    if not probes:
        return []
    lines = ["", "### Labelled probes", "", md_block(PROBES_TEXT), ""]
    lines += [f"- {md_block(c['sentence'])}" for c in probes["checks"] if c["headline"]]
    return lines


def _predictors_md(pred) -> list[str]:
    if not pred:
        return []
    lines = ["", "### Layer predictors", ""]
    if pred["fabricated"]:
        lines += [f"**{md_inline(fabricated_text(pred))}**", ""]
    lines += [md_block(RANKING_TEXT), "",
              "| task | rank | signal | ρ across layers | interval | ρ pooled | interval | coverage |",
              "|---|---|---|---|---|---|---|---|"]
    for r in pred["table"]:
        lines.append(f"| {md_cell(r['task'])} | {r['rank']} | {md_cell(r['signal'])} | {fmt(r['ρ across layers'])} | "
                     f"{md_cell(r['interval (layers)'])} | {fmt(r['ρ pooled'])} | {md_cell(r['interval (pooled)'])} | "
                     f"{md_cell(r['coverage'])} |")
    lines += [x for sentence in pred.get("not_measured", []) for x in ("", md_block(sentence))]
    return lines
