"""The scaling page's data and panels: subjects, fitted laws, intervals, budgets."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.sides import pair_names
from analysis.storage import results as R
from analysis.methods.scaling import FORMS, predict_from_params, undetermined_params
from analysis.views.charts import lazy_altair, chart_title, plot_height
from analysis.views.paper_figures import add_dimension_and_published, published_scaling
from analysis.views.metric_help import baseline_rules, baselines, chance_level, metric_help
from analysis.views.section import Section, section_models
from analysis.views.store_info import dataset_runs, has_table, model_labels
from analysis.views.text import fmt_number


def scaling_subjects(con, dataset) -> list[str]:
    if not has_table(con, "result_studies"):
        return []
    return [s["subject"] for s in R.read_studies(con, current=True, study="scaling", dataset=dataset)]


def subject_pairs(con, dataset, subjects=None) -> dict[str, str]:
    """``{subject: "A × B"}``: how every caption, title, note and picker names the two models of each
    scaling subject (``"<vision>|<text>|<metric>"``; ``subjects``, None: every stored one) — each
    model's label (:func:`analysis.views.store_info.model_labels`) and, for a model with both a vision
    and a text run on ``dataset``, its side (:func:`analysis.sides.pair_names`): a dual encoder scored
    against its own captions reads ``clip (random init) [image] × clip (random init) [text]``, not the
    same name twice. The dataset's runs are read once for all subjects."""
    subjects = scaling_subjects(con, dataset) if subjects is None else list(subjects)
    labels = model_labels(con)
    runs = dataset_runs(con, dataset)
    return {s: " × ".join(pair_names(*s.split("|")[:2], runs, labels)) for s in subjects}


def scaling_view(con, dataset, subject) -> dict:
    """Points (degenerate ones marked); the curves of :func:`drawn_forms` (DR's saturating law, and
    the held-out-best form beside it when that is another one; ``curves`` with each one's own R²,
    ``drawn`` their forms, ``held_out_best``) on a dense n_f/n_c range, one ``form`` label per curve;
    the saturating law's parameter table with intervals, blank where the data do not determine a
    parameter (``undetermined``: ``{parameter: why}``: never a number the data do not support); the fit's status, and
    every form's held-out error."""
    (s,) = R.read_studies(con, current=True, study="scaling", dataset=dataset, subject=subject)
    p = s["payload"]
    n = len(p["scores"])
    points = pd.DataFrame({"n_frames": p["n_frames"], "n_captions": p["n_captions"], "score": p["scores"],
                           "degenerate": p.get("degenerate", [False] * n)})
    score = pd.to_numeric(points["score"], errors="coerce").astype(float)  # stored NaN comes back as null
    points["score"] = score.where(np.isfinite(score), None)
    # each point is a grid's best cell: its stored bootstrap interval is the point's error bar
    model_a, model_b, metric = subject.split("|")
    cis = {}
    for g in R.read_grids(con, current=True, dataset=dataset, metric=metric) if has_table(con, "result_grids") else []:
        if (g["model_a"], g["model_b"]) == (model_a, model_b) and g.get("ci_low") is not None:
            cis[(float(g["n_frames"] or 0), float(g["n_captions"] or 0))] = (g["ci_low"], g["ci_high"], g["n_boot"])
    got = [cis.get((float(f), float(c)), (None, None, None)) for f, c in zip(points["n_frames"], points["n_captions"])]
    points["ci_low"], points["ci_high"] = [x[0] for x in got], [x[1] for x in got]
    points["n_boot"] = [x[2] for x in got]
    row = con.execute("SELECT n_items FROM datasets WHERE dataset = ?", [dataset]).fetchall()
    n_items = int(row[0][0]) if row else None
    hib = p.get("higher_is_better") is not False
    fit = p.get("fit") or {}
    best = p.get("drawn") or ("saturating" if fit else None)  # stored: the lowest held-out error
    drawn = drawn_forms(p)
    blank = undetermined_params("saturating", fit.get("params") or {}, fit.get("status"), fit.get("reason"),
                                bounds=p.get("bounds"), rmse=fit.get("rmse")) if fit.get("params") else {}
    out = {"points": points, "error": p.get("error"), "fit": p.get("fit"), "forms": p.get("forms", []),
           "intervals": p.get("intervals"), "params": s["params"], "drawn": [c["form"] for c in drawn],
           "held_out_best": best, "curves": drawn, "undetermined": blank, "notes": p.get("notes", []),
           "bounds": p.get("bounds"),
           "status": fit.get("status"), "reason": fit.get("reason"),
           "intervals_detail": p.get("intervals_detail"), "metric": metric, "n_items": n_items,
           "intervals_n_boot": p.get("intervals_n_boot"),
           "chance": chance_level(metric, n_items, chance_params(s["params"]))}
    if drawn:
        good = points[~points["degenerate"]]
        dense_f = np.geomspace(1, max(good["n_frames"]), 40)
        dense_c = np.geomspace(1, max(good["n_captions"]), 40)

        def curve(c, f, n):
            return float(predict_from_params(c["form"], c["params"], f, n, higher_is_better=hib))

        out["curve_vs_frames"] = pd.DataFrame([{"n_frames": f, "n_captions": n, "score": curve(c, f, n),
                                                "form": c["label"]}
                                               for c in drawn for n in sorted(good["n_captions"].unique())
                                               for f in dense_f])
        out["curve_vs_captions"] = pd.DataFrame([{"n_frames": f, "n_captions": n, "score": curve(c, f, n),
                                                  "form": c["label"]}
                                                 for c in drawn for f in sorted(good["n_frames"].unique())
                                                 for n in dense_c])
        # d_v = 2/α beside α, and DR's Table 1 beside the fit where the user mapped the names
        out["table"] = add_dimension_and_published(
            pd.DataFrame(saturating_param_rows(fit["params"], p.get("intervals"), blank)), fit["params"],
            p.get("intervals"), blank, published_scaling(con, dataset, model_a, model_b, metric), r2=fit.get("r2"))
        out["held_out"] = pd.DataFrame([{"form": f["form"], "formula": f["formula"],
                                         "drawn": "yes" if f["form"] in out["drawn"] else "",
                                         "held-out best": "yes" if f.get("best") else "",
                                         "status": f.get("status") or "", "r2": fmt_number(f.get("r2")),
                                         "loo_rmse": fmt_number(f.get("loo_rmse")),
                                         "extrapolation_rmse": fmt_number((f.get("extrapolation") or {}).get("rmse")),
                                         "note": f.get("error") or f.get("reason")
                                         or (f.get("extrapolation") or {}).get("error") or ""}
                                        for f in p.get("forms", [])])
    return out


#: DR's law, the one every scaling chart draws and names first
SATURATING_TITLE = "DR's saturating law S∞ − (C_f·n_f^−α + C_c·n_c^−β)"


def drawn_forms(payload: dict) -> list[dict]:
    """The curves a scaling chart draws, from a stored scaling payload: DR's saturating law first
    (whenever it was fitted), then the form with the lowest held-out error when that is another
    one. Each: ``form``, ``formula``, ``params``, ``r2`` (in-sample R² of *that* form's own fit),
    ``status``, ``reason``, ``held_out_best``, ``name`` and ``label`` (the legend entry, naming the
    form and its R²)."""
    fit = payload.get("fit") or {}
    if not fit.get("params"):
        return []
    forms = {f["form"]: f for f in payload.get("forms", [])}
    best = payload.get("drawn") or "saturating"
    law = {"form": "saturating", "formula": FORMS["saturating"].formula, "params": fit["params"], "r2": fit.get("r2"),
           "status": fit.get("status"), "reason": fit.get("reason"), "held_out_best": best == "saturating"}
    out = [law]
    other = forms.get(best) if best != "saturating" else None
    if other and other.get("params"):
        out.append({"form": best, "formula": other["formula"], "params": other["params"], "r2": other.get("r2"),
                    "status": other.get("status"), "reason": other.get("reason"), "held_out_best": True})
    for c in out:
        c["name"] = name = curve_name(c["form"])
        c["label"] = f"{name}{' (held-out best)' if c['held_out_best'] else ''}, R² {fmt_number(c['r2'])}"
    return out


def curve_name(form: str) -> str:
    """A drawn curve's name in legends and sentences: ``"DR's saturating law"``, or ``"log-linear form"``
    for ``form`` ``"log_linear"`` (underscores as hyphens)."""
    return "DR's saturating law" if form == "saturating" else f"{form.replace('_', '-')} form"


def saturating_param_rows(params: dict, intervals: dict | None, blank: dict[str, str]) -> list[dict]:
    """The saturating law's parameter table: ``parameter, value, low, high, note``; a parameter the
    data do not determine (``blank``, from :func:`analysis.methods.scaling.undetermined_params`) is an empty
    cell with the reason in ``note``, its interval too (never a number)."""
    rows = []
    for name in FORMS["saturating"].params:
        lo, hi = (intervals or {}).get(name, (None, None))
        why = blank.get(name)
        rows.append({"parameter": name, "value": "" if why else fmt_number(params.get(name)),
                     "low": "" if why else fmt_number(lo), "high": "" if why else fmt_number(hi),
                     "note": f"not determined: {why}" if why else ""})
    return rows


def scaling_heading(sv: dict) -> str:
    """What a scaling chart's title says it draws: DR's saturating law, and the held-out-best form
    beside it when that is another one (the page and the report title their charts with it). ``sv``: a
    :func:`scaling_view` or a :func:`scaling_entry` (only its ``curves``' forms are read)."""
    others = [c["form"].replace("_", "-") for c in sv.get("curves", []) if c["form"] != "saturating"]
    if not sv.get("curves"):
        return "no law fitted"
    return SATURATING_TITLE + (f", and the held-out-best {others[0]} form" if others else "")


def scaling_fit_lines(sv: dict) -> list[str]:
    """One sentence per drawn curve: which form, its own in-sample R², and why it is drawn. ``sv``: a
    :func:`scaling_view` or a :func:`scaling_entry` (the page renders the section's entries)."""
    n = (sv.get("fit") or {}).get("n_points")
    lines = []
    for c in sv.get("curves", []):
        why = ("DR's law, drawn by default" if c["form"] == "saturating" else "drawn beside it")
        best = "; lowest held-out error" if c["held_out_best"] else ""
        lines.append(f"{curve_name(c['form'])} {c['formula']}: R² = {fmt_number(c['r2'])} in sample on {n} grid "
                     f"points ({why}{best})")
    return lines


def scaling_panels(sv: dict, *, title: dict | None = None):
    """The two scaling panels of :func:`scaling_view` — score against n_f (one colour per n_c) and
    against n_c (one colour per n_f) — as separate charts, so each has its own colour scale and
    legend and each fits its column. Points carry their best cell's stored 95% bootstrap interval as
    an error bar; the drawn law's curves, the chance level, the fitted ceiling S∞ (when the fit is
    trusted) and bounds near the data are drawn. Returns ``(panel_frames, panel_captions, export)``,
    ``export`` being both stacked with independent colours and the title, for PNG/SVG."""
    alt = lazy_altair()
    pts = sv["points"][sv["points"]["score"].notna()]
    fit = sv.get("fit") or {}
    rules = []
    if sv.get("chance") is not None:
        rules.append((sv["chance"], "chance"))
    s_inf = (fit.get("params") or {}).get("s_inf")
    if s_inf is not None and sv.get("status") in (None, "ok") and "s_inf" not in sv.get("undetermined", {}):
        rules.append((s_inf, f"fitted ceiling S∞ {fmt_number(s_inf)}"))
    rules += [r for r in baselines(sv.get("metric", ""), pts["score"]) if "bound" in r[1]]
    panels = []
    for x, other, x_title, other_title, curve in (
            ("n_frames", "n_captions", "frames n_f", "n_c", sv.get("curve_vs_frames")),
            ("n_captions", "n_frames", "captions n_c", "n_f", sv.get("curve_vs_captions"))):
        color = alt.Color(f"{other}:O", title=other_title, scale=alt.Scale(scheme="tableau10"),
                          legend=alt.Legend(orient="bottom", direction="horizontal"))
        # the data's own range (a "nice" log axis would run on to the next power of ten)
        budgets = sorted(float(v) for v in pts[x].unique())
        xs = alt.X(f"{x}:Q", title=x_title, axis=alt.Axis(values=budgets) if budgets else alt.Undefined,
                   scale=alt.Scale(type="log", nice=False, padding=14,
                                   domain=[budgets[0], budgets[-1]] if budgets else alt.Undefined))
        # every mark that can be hovered (points and their error bars) names the score and rounds the
        # interval to 3 significant digits: a raw tooltip would show 12-digit floats and no score
        tips = [alt.Tooltip("n_frames:Q", format=".3g", title="n_f"), alt.Tooltip("n_captions:Q", format=".3g",
                                                                               title="n_c"),
                alt.Tooltip("score:Q", format=".3g", title=sv.get("metric") or "score"),
                alt.Tooltip("ci_low:Q", format=".3g", title="95% CI low"),
                alt.Tooltip("ci_high:Q", format=".3g", title="95% CI high"), alt.Tooltip("n_boot:Q", title="resamples")]
        layers = [alt.Chart(pts).mark_point(filled=True, size=70).encode(
            x=xs, y=alt.Y("score:Q", title=sv.get("metric") or "score", scale=alt.Scale(zero=False)), color=color,
            tooltip=tips)]
        bars = pts[pts["ci_low"].notna()]
        if len(bars):
            layers.append(alt.Chart(bars).mark_rule().encode(x=f"{x}:Q", y="ci_low:Q", y2="ci_high:Q", color=color,
                                                             tooltip=tips))
        if curve is not None and len(curve):
            # one dash per form, named with its own R² in the legend (DR's law solid, listed first)
            dash = alt.StrokeDash("form:N", title="curve", sort=list(dict.fromkeys(curve["form"])),
                                  # above the plot: beside the budget legend below, it passed a phone's width
                                  legend=alt.Legend(orient="top", direction="vertical", labelLimit=400))
            layers.append(alt.Chart(curve).mark_line().encode(
                x=f"{x}:Q", y="score:Q", color=color, strokeDash=dash,
                tooltip=[alt.Tooltip("n_frames:Q", format=".3g", title="n_f"),
                         alt.Tooltip("n_captions:Q", format=".3g", title="n_c"),
                         alt.Tooltip("score:Q", format=".3g", title="law"), alt.Tooltip("form:N", title="curve")]))
        layers += baseline_rules(rules, "score")
        panels.append(alt.layer(*layers).properties(height=240))
    export = alt.vconcat(*(p.properties(width=520) for p in panels)).resolve_scale(color="independent")
    # on the page, each panel's plot keeps its 240 px whatever the legends above and below take
    panels = [plot_height(p, 240) for p in panels]
    return panels[0], panels[1], (export.properties(title=title) if title else export)


def scaling_title(sv: dict, subject: str, *, dataset: str, labels: dict, pair: str) -> dict:
    """The scaling page's chart title of one subject (``a|b|metric``): the metric of the best layer
    pair, the models as ``pair`` names them (:func:`subject_pairs`: labels, and a dual encoder's
    sides), the saturating law's heading, the dataset and the budgets (``labels``: model -> label, for
    the random-init line). ``sv``: a :func:`scaling_view` or a :func:`scaling_entry` (the same title
    from either)."""
    a, b, metric = subject.split("|")
    return chart_title(f"{metric} of the best layer pair: {pair}; "
                       f"{scaling_heading(sv)}", dataset=dataset, details=budget_lists(points_table(sv)),
                       labels=labels, models=[a, b])


#: a scaling point's columns, in :func:`scaling_view`'s order (a :func:`scaling_entry` stores them as records)
POINT_COLUMNS = ("n_frames", "n_captions", "score", "degenerate", "ci_low", "ci_high", "n_boot")


def points_table(sv: dict) -> pd.DataFrame:
    """A subject's grid points as a table with :data:`POINT_COLUMNS` (one row per (n_f, n_c) budget:
    its best cell's score, whether it is degenerate, its 95% interval and resample count), from a
    :func:`scaling_view` (already a table) or a :func:`scaling_entry` (its records; no points: no rows,
    the columns kept)."""
    points = sv["points"]
    return points if isinstance(points, pd.DataFrame) else pd.DataFrame(points, columns=list(POINT_COLUMNS))


def scaling_uncertainty_text(sv: dict) -> str:
    """What the scaling panels show of uncertainty and baselines, and what was not computed."""
    pts = sv["points"]
    with_ci = pts["ci_low"].notna().sum() if "ci_low" in pts else 0
    boots = sorted({int(b) for b in pts.get("n_boot", pd.Series(dtype=float)).dropna()})
    parts = []
    if with_ci:
        parts.append(f"Error bars: each point's 95% bootstrap interval (its grid's best cell, {', '.join(map(str, boots))} "
                     f"item resamples; {with_ci} of {len(pts)} points).")
    else:
        parts.append("No error bars: the grids' bootstrap was off or undefined.")
    if sv.get("intervals"):
        parts.append(f"The parameter intervals in the table come from {sv.get('intervals_n_boot') or 'the'} refits on "
                     "item resamples; no band is drawn around the curve (per-parameter intervals do not make one).")
    if sv.get("chance") is not None:
        parts.append(f"Chance (unrelated spaces) = {fmt_number(sv['chance'])} at N = {sv['n_items']}.")
    return " ".join(parts)


def s_inf_text(sv: dict, pair: str) -> str:
    """Why the fitted ceiling S∞ is missing from the panels of ``pair`` (the two models as
    :func:`subject_pairs` names them, ``"A × B"``: the sentence names them, so it reads once under
    their panels and not as any other pair's), or ``""`` when it is drawn or there is no fit: the rule
    of :func:`scaling_panels`."""
    if (sv.get("fit") or {}).get("params") and sv.get("status") not in (None, "ok"):
        return f"S∞ is not drawn on the {pair} panels: the fit cannot determine it here."
    return ""


def budget_lists(points: pd.DataFrame) -> list[str]:
    """``["n_f 1, 2, 4", "n_c 1, 2"]``: the budgets a scaling chart spans."""
    return [f"{name} {', '.join(str(int(x)) for x in sorted(points[col].dropna().unique()))}"
            for col, name in (("n_frames", "n_f"), ("n_captions", "n_c")) if col in points]


#: why the report's scaling section is empty, naming the command that would fill it
OMITTED = ("no scaling fits (needs vision×text pairs at several n_f and n_c settings, then "
                   "`layerscope analyze`)")


def section(con, dataset, *, models=None, references=None, subjects=None) -> Section:
    """The scaling section: ``data`` a list of :func:`scaling_entry`, ``charts`` the two panels of
    :func:`scaling_panels` of each subject drawn, captioned ``"scaling: A × B, against n_f"`` (the pair as
    :func:`subject_pairs` names it: each model by its label, a dual encoder's sides named) and
    ``"… against n_c"``, and ``notes`` the sentences read under each subject's panels
    (:func:`scaling_uncertainty_text`, :func:`s_inf_text` when S∞ is missing, then the metric's help),
    subject after subject; ``chart_notes`` ties them to the subject's second panel (the page prints
    them under the pair, after both). The page renders
    all of it (its heading, fit lines, warnings, tables and download from the entry): one read per subject.

    ``subjects``: the page's picks (``"a|b|metric"``, any metric), each drawn even with no fitted law
    (its points alone: the page shows what was asked for). None: the report's choice, the mutual k-NN
    fit of each of ``models`` (None: every model) against its partner, drawn only where a law is.
    ``references`` is accepted for the common section signature (each fit's partner was fixed by the
    analysis). Omitted (:data:`OMITTED`) when no subject is left. Raises ValueError naming the stored
    subjects for an unknown one."""
    stored = scaling_subjects(con, dataset)
    if subjects is None:
        chosen = section_models(con, models)
        picked = [s for s in stored if s.split("|")[0] in chosen and s.split("|")[2] == "mutual_knn"]
    else:
        unknown = [s for s in subjects if s not in stored]
        if unknown:
            raise ValueError(f"{dataset}: no scaling fit of {unknown}; stored: {', '.join(stored) or 'none'}")
        picked = list(subjects)
    labels = model_labels(con)
    pairs = subject_pairs(con, dataset, picked)
    fits, charts, chart_notes = [], [], []
    for subject in picked:
        metric = subject.split("|")[2]
        pair = pairs[subject]  # as the captions, the title and the notes under the panels name it
        sv = scaling_view(con, dataset, subject)
        fits.append(scaling_entry(subject, sv, pair=pair))
        if subjects is None and "curve_vs_frames" not in sv:
            continue
        by_frames, by_captions, _ = scaling_panels(sv, title=scaling_title(sv, subject, dataset=dataset,
                                                                          labels=labels, pair=pair))
        charts += [(f"scaling: {pair}, against {what}", chart)
                   for what, chart in (("n_f", by_frames), ("n_c", by_captions))]
        said = (scaling_uncertainty_text(sv), s_inf_text(sv, pair),
                metric_help(metric, sv["n_items"], chance_params(sv["params"])))
        chart_notes += [(), tuple(n for n in said if n)]
    if not fits:
        return Section(None, omitted=OMITTED)
    return Section(fits, charts=tuple(charts), notes=tuple(n for said in chart_notes for n in said),
                   chart_notes=tuple(chart_notes))


def chance_params(params: dict) -> dict:
    """A scaling study's ``params`` that set its metric's chance level (``k``; the resample count is not one)."""
    return {k: v for k, v in params.items() if k != "n_boot"}


def stacked_export(by_frames, by_captions, title: dict | None = None):
    """The two panels of a :class:`~analysis.views.section.Section` stacked for a PNG/SVG download,
    each 520 px wide with its own colour scale, under ``title`` (:func:`scaling_title`): the export of
    :func:`scaling_panels`, composed from the drawn panels rather than built again."""
    alt = lazy_altair()
    panels = []
    for panel in (by_frames, by_captions):
        panel = panel.properties(width=520)
        # the page's autosize (:func:`plot_height`) fits a panel into its column; an export has its own size
        panel.autosize = alt.Undefined
        panels.append(panel)
    export = alt.vconcat(*panels).resolve_scale(color="independent")
    return export.properties(title=title) if title else export


def scaling_entry(subject: str, sv: dict, *, pair: str | None = None) -> dict:
    """A scaling subject as the report stores it (JSON, HTML and Markdown tables read it), ``pair``
    (:func:`subject_pairs`: how its two models are named; None: not named, the tables fall back on
    the subject's model names) beside it: the
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
    return {"subject": subject, "pair": pair, "fit": fit, "intervals": intervals, "curves": curves,
            "drawn": [c["form"] for c in curves], "held_out_best": sv.get("held_out_best"),
            "error": sv.get("error"), "status": sv.get("status"), "reason": sv.get("reason"),
            "notes": sv.get("notes"), "points": sv["points"].to_dict(orient="records"),
            "held_out": sv["held_out"].to_dict(orient="records") if "held_out" in sv else [],
            # the page's parameter table: d_v = 2/α, and DR's Table 1 beside the fit where names are mapped
            "parameter_table": sv["table"].to_dict(orient="records") if "table" in sv else []}
