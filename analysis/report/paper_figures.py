"""The report's "Paper figures" section: DR Fig. 7's fit, Figs. 11/12's matrices with
their layers and rank agreement, Fig. 2's "video − image" offset, each with the papers' published
number beside it where the user mapped the names. Numbers come from :mod:`analysis.views.paper_figures`
(nothing recomputed); rendering escapes every store string."""

from __future__ import annotations

import html

from analysis.report.markdown import md_cell, md_inline
from analysis.views import caption_baseline as cb
from analysis.views import paper_figures as pf
from analysis.views import prompt_compare as pc

#: the metric DR's figures use, when the store has it
FIGURE_METRIC = "mutual_knn"


def paper_figures_section(con, ds) -> tuple[dict | None, list]:
    """``(section, charts)``: the section's numbers (None when the dataset has no vision×text grids)
    and ``[(title, chart)]`` Altair charts for the report to draw."""
    choices = pf.figure_choices(con, ds)
    prompts = _prompt_comparisons(con, ds)
    if not choices["metrics"] and not prompts and not _gap_pictures(con, ds):
        return None, []
    metric = FIGURE_METRIC if FIGURE_METRIC in choices["metrics"] or not choices["metrics"] else choices["metrics"][0]
    sec = {"metric": metric, "fig7": [], "fig11": [], "fig2": [], "fig8": [], "prompts": [], "gap_maps": []}
    charts = []
    for m in _gap_pictures(con, ds):
        sec["gap_maps"].append({"subject": m["subject"], "method": m["method"], "n_points": m["n_points"]})
        charts.append((f"TARA's picture of the gap ({m['method'].upper()}): {m['subject']}", m["chart"]))
    for cv in prompts:
        sec["prompts"].append({"a": cv["a"], "b": cv["b"], "sentence": pc.compare_text(cv), "prompts": cv["prompts"],
                               "table": cv["table"].to_dict(orient="records")})
        charts.append((f"TARA: modality gap per layer, {cv['a']} against {cv['b']}", pc.compare_chart(cv)))
    for text in choices["text"]:
        fv = pf.fig7_view(con, ds, metric, text)
        sec["fig7"].append({"text_model": text, "sentence": pf.fig7_text(fv), "notes": fv["notes"],
                            "points": fv["points"].to_dict(orient="records") if len(fv["points"]) else [],
                            "fit": fv["fit"], "published": fv["published"]})
        if not fv["error"]:
            charts.append((f"DR Fig. 7: {metric}, n_c {fv['n_c'][0]} against {fv['n_c'][1]}, text model {text}",
                           pf.fig7_chart(fv)))
    for budget in ("smallest", "largest"):
        av = pf.fig11_view(con, ds, metric, budget)
        if av["error"]:
            continue
        sec["fig11"].append({"budget": budget, "n_c": av["n_c"], "table": av["table"].to_dict(orient="records"),
                             "agreement": av["agreement"], "sentence": pf.agreement_text(av),
                             "pairs": pf.agreement_frame(av).to_dict(orient="records"), "notes": av["notes"]})
        charts.append((f"DR Figs. 11/12: {metric} at n_c {av['n_c']}, best value (vision layer/text layer)",
                       pf.fig11_chart(av)))
    for task in choices["tasks"]:
        for text in choices["text"]:
            fv = pf.fig2_view(con, ds, metric, text, task)
            if fv["error"]:
                continue
            sec["fig2"].append({"task": task, "text_model": text, "sentence": pf.fig2_text(fv), "offset": fv["offset"],
                                "published": fv["published"], "notes": fv["notes"]})
            charts.append((f"DR Fig. 2: {task} against {metric} with {text}", pf.fig2_chart(fv)))
    for vision, text in cb.baseline_choices(con, ds)["pairs"]:
        fv = cb.fig8_view(con, ds, metric, vision, text)
        if fv["error"]:
            continue
        for n_f in cb.frame_budgets(fv):
            sec["fig8"].append({"vision": vision, "text_model": text, "n_frames": n_f, "sentence": cb.fig8_text(fv, n_f)})
        if cb.frame_budgets(fv):
            n_f = cb.frame_budgets(fv)[0]
            charts.append((f"DR Fig. 8: {metric}, {vision} × {text} at n_f {n_f}; dashed: the long original caption",
                           cb.fig8_chart(fv, n_f)))
    return sec, charts


def _gap_pictures(con, ds) -> list[dict]:
    """Every stored two-sided map by PCA or t-SNE (TARA's pictures of the modality gap), as a scatter
    of both sides: ``[{subject, method, n_points, chart}]`` (a map with no picture is left out)."""
    from analysis.views.embedding_map import embedding_map_points, embedding_maps

    maps = embedding_maps(con, ds)
    out = []
    for _, row in maps[(maps["kind"] == "pair") & maps["method"].isin(["pca", "tsne"])].iterrows():
        if row["reason"]:
            continue
        pts = embedding_map_points(con, row["result_id"])["points"][["x", "y", "side", "item_id"]]
        out.append({"subject": row["subject"], "method": row["method"], "n_points": int(len(pts)),
                    "chart": pf.gap_picture_chart(pts)})
    return out


def _prompt_comparisons(con, ds) -> list[dict]:
    """TARA's comparison for every pair of one source whose stored prompts differ (what the report can
    tell apart without a user's choice)."""
    return [cv for a, b in pc.prompt_pairs(con, ds) if not (cv := pc.compare_view(con, ds, a, b))["error"]]


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
        parts += [f"<p class='note'>{_e(n)}</p>" for n in m["notes"]]
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
