"""The Downstream page's data and charts: whole-model downstream results correlated with each score
across models (the table, one scatter per correlation, Pearson R per layer on relative depth)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.views.charts import lazy_altair
from analysis.views.section import Section
from analysis.views.store_info import study


def downstream_view(payload: dict) -> dict:
    """The downstream study as tables: ``table`` one row per (task, score) with the pair kind of an
    alignment score and the models left out with their reason; ``curves`` one row per (task, curve,
    depth) with the models used there and those left out (their layer has no value)."""
    rows = payload.get("rows", [])
    table = pd.DataFrame([{**{k: r.get(k) for k in ("task", "task_metric", "score", "n", "pearson_r", "pearson_p",
                                                     "spearman_rho", "spearman_p", "r_ci", "rho_ci")},
                           "pair kind": r.get("pair_kind") or "",
                           "task direction": ("higher is better" if r.get("higher_is_better", True)
                                              else "lower is better"),
                           "higher score goes with": ("" if r.get("better") is None
                                                      else "better results" if r["better"] else "worse results"),
                           "left out": "; ".join(f"{m}: {why}" for m, why in sorted((r.get("excluded") or {}).items())),
                           "error": r.get("error") or ""}
                          for r in rows if "score" in r])
    curves = pd.DataFrame([{"task": r["task"], "curve": r["curve"], "depth": d, "r": v,
                            "models": (r.get("n_models") or [None] * len(r["depth"]))[i],
                            "left out": ", ".join(f"{e['model']} (layer {e['layer']})"
                                                  for e in (r.get("excluded") or [[]] * len(r["depth"]))[i])}
                           for r in rows if "curve" in r and "depth" in r
                           for i, (d, v) in enumerate(zip(r["depth"], r["r"]))])
    return {"table": table, "curves": curves, "rows": [r for r in rows if "score" in r]}


def scatter_frame(row: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Points and the least-squares line of one downstream correlation."""
    df = pd.DataFrame({"model": row["models"], "score": row["x"], "result": row["y"]})
    line = pd.DataFrame()
    if len(df) >= 2 and np.ptp(df["score"]) > 0:
        slope, intercept = np.polyfit(df["score"], df["result"], 1)
        xs = np.linspace(df["score"].min(), df["score"].max(), 20)
        line = pd.DataFrame({"score": xs, "result": slope * xs + intercept})
    return df, line


#: fewest models for a least-squares line on a downstream scatter: below it the line says nothing
MIN_LINE_N = 5


def fit_line_verdict(row: dict, min_n: int = MIN_LINE_N) -> tuple[bool, str]:
    """Whether a downstream scatter may draw its least-squares line, and the note when not: only with
    at least ``min_n`` models AND a 95% bootstrap interval of Pearson R (``row["r_ci"]``) that excludes
    0; otherwise the points alone, saying why (a line through points whose R may be 0 asserts a trend
    the data do not show)."""
    n = int(row.get("n") or len(row.get("x") or []))
    ci = row.get("r_ci")
    if n < min_n:
        return False, f"No fitted line: {n} model(s), fewer than {min_n}; points only."
    if not ci or ci[0] is None or ci[1] is None:
        return False, "No fitted line: R has no interval (the bootstrap was off); points only."
    if ci[0] <= 0 <= ci[1]:
        return False, f"No fitted line: R's 95% interval [{ci[0]:.2f}, {ci[1]:.2f}] includes 0; points only."
    return True, ""


def scatter_chart(row: dict, height: int = 360):
    """One score against one task's results across models (a row of :func:`downstream_view`), with
    the least-squares line where :func:`fit_line_verdict` allows one."""
    alt = lazy_altair()
    pts, line = scatter_frame(row)
    chart = alt.Chart(pts).mark_circle(size=120).encode(x=alt.X("score:Q", title=row["score"]),
                                                        y=alt.Y("result:Q", title=f"{row['task']} {row['task_metric']}"),
                                                        tooltip=["model", "score", "result"])
    draw_line, _ = fit_line_verdict(row)
    if draw_line and len(line):
        chart = chart + alt.Chart(line).mark_line(color="#ff4b4b").encode(x="score:Q", y="result:Q")
    return chart.properties(height=height)


def layer_r_chart(curves: pd.DataFrame, height: int = 300):
    """Pearson R of each layer's score with each task across models, on relative depth
    (:func:`downstream_view`'s ``curves``)."""
    alt = lazy_altair()
    curve = alt.Chart(curves).encode(
        x=alt.X("depth:Q", title="relative depth"), y=alt.Y("r:Q", title="Pearson R"), color="task:N",
        tooltip=["task", "curve", "depth", "r", "models", "left out"])
    # dashes on the line layer only: a line with point=True draws its legend as dots, hiding the dash style
    curve = curve.mark_line().encode(strokeDash="curve:N") + curve.mark_point(filled=True, size=30)
    return curve.properties(height=height)


#: the downstream table's columns, as the study stores them
DOWNSTREAM_COLUMNS = ("task", "task_metric", "score", "n", "pearson_r", "pearson_p", "spearman_rho", "spearman_p",
                      "p_method", "r_ci", "rho_ci", "ci_note", "higher_is_better", "better", "error")

#: why the section is empty, naming the commands that fill it
OMITTED = ("no downstream results (import them with `layerscope downstream import results.csv`, then "
           "`layerscope analyze`)")


def section(con, dataset, *, models=None, references=None) -> Section:
    """The Downstream page's section: each imported whole-model downstream result against each score
    across models, one dict per (task, score) with the keys of :data:`DOWNSTREAM_COLUMNS` (``data``;
    None when the dataset has no downstream study). No charts: the page's scatter and per-layer R are
    drawn for a chosen correlation. ``models`` and ``references`` are accepted for the report's loop
    and not used: a correlation across models stands on every model the study used."""
    payload = study(con, "downstream", dataset)
    if not payload:
        return Section(None, omitted=OMITTED)
    return Section([{k: r.get(k) for k in DOWNSTREAM_COLUMNS} for r in payload["rows"] if "score" in r])
