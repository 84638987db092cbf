"""The Paper figures page's data: DR Fig. 7 (smallest against largest caption budget),
Figs. 11/12 (vision × text matrix of best alignment with its layers, and whether the ranking survives
a change of text encoder), Fig. 2 (alignment against a downstream score by kind of vision input),
and the papers' published numbers beside the user's where the names are mapped.

Every number comes from the result tables (best cells of ``result_grids``, ``downstream_results``);
the science is in :mod:`analysis.methods.paper_figures`; a published number is shown beside, never
mixed in. Untrained (random-init) models are controls: drawn, never part of a fit or a ranking
(unless every model is one: then the figure shows the machinery on them, and says so).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis.methods.downstream import EXACT_P_MAX_MODELS, MIN_CI_MODELS, exact_permutation_p
from analysis.methods.exponent_dimension import dimension_from_exponent
from analysis.methods.paper_figures import KINDS, line_fit, rank_agreement, video_minus_image_offset, vision_kind
from analysis.storage import published as P
from analysis.storage import results as R
from analysis.storage.schema import MODEL_LEVEL
from analysis.views import caption_baseline as cb
from analysis.views import prompt_compare as pc
from analysis.views.charts import chart_title, lazy_altair, wrapped_title
from analysis.views.nuance import collapse_notes
from analysis.views.section import Section
from analysis.sides import pair_names
from analysis.views.store_info import dataset_runs, has_table, model_labels
from analysis.views.text import fmt_number

#: the note every figure carries when only untrained models are there: they are drawn, never fitted
#: or ranked (a line or an agreement over controls alone is no finding about trained encoders)
ALL_CONTROLS = ("every model here is an untrained (random-init) control: the points are drawn, but no line "
                "or ranking is computed over controls only")


def best_cells(con, dataset: str, metric: str) -> pd.DataFrame:
    """Every vision×text best cell of ``dataset`` and ``metric``, one row per (vision model, text model,
    n_f, n_c): ``vision, text, n_frames, n_captions, value, best_a, best_b, why`` (why no best cell),
    the vision model's ``modality``, ``image_mode``, ``kind`` (:data:`KINDS`) and ``control``
    (random init of either model). Only the store's current analysis is read (a grid of an earlier
    analysis under other settings never is); of several rows of one cell, the latest computed is kept."""
    cols = ["vision", "text", "n_frames", "n_captions", "value", "best_a", "best_b", "why", "modality",
            "image_mode", "kind", "control"]
    if not has_table(con, "result_grids"):
        return pd.DataFrame(columns=cols)
    got = R.rows(con, """
        SELECT g.model_a AS vision, g.model_b AS text, g.n_frames, g.n_captions, g.best_value AS value,
               g.best_a, g.best_b, g.flags, m.modality, r.image_mode,
               coalesce(m.random_init, false) OR coalesce(t.random_init, false) AS control
        FROM result_grids g LEFT JOIN models m ON m.model = g.model_a LEFT JOIN models t ON t.model = g.model_b
             LEFT JOIN runs r ON r.run_id = g.run_a
        WHERE g.dataset = ? AND g.metric = ? AND g.pair_kind = 'vision_text' AND """
                  + R.current_clause(con, "result_grids", "g") + """
        ORDER BY g.computed""", [dataset, metric])
    out = {}
    for r in got:
        flags = R.decode("result_grids", {"params": "{}", "flags": r.pop("flags")})["flags"]
        r["why"] = flags.get("best") if r["value"] is None else None
        r["kind"] = vision_kind(r["modality"], r["n_frames"], r["image_mode"])
        out[(r["vision"], r["text"], r["n_frames"], r["n_captions"])] = r  # the latest computed wins
    return pd.DataFrame(list(out.values()), columns=cols)


def figure_choices(con, dataset: str) -> dict:
    """What the page's pickers offer: ``metrics`` with vision×text grids, ``text`` models, downstream
    ``tasks`` (``task · metric`` of whole-model results)."""
    metrics, texts = [], []
    if has_table(con, "result_grids"):
        current = R.current_clause(con, "result_grids")
        metrics = [r[0] for r in con.execute("SELECT DISTINCT metric FROM result_grids WHERE dataset = ? AND "
                                             f"pair_kind = 'vision_text' AND {current} ORDER BY metric",
                                             [dataset]).fetchall()]
        texts = [r[0] for r in con.execute("SELECT DISTINCT model_b FROM result_grids WHERE dataset = ? AND "
                                           f"pair_kind = 'vision_text' AND {current} ORDER BY model_b",
                                           [dataset]).fetchall()]
    tasks = []
    if has_table(con, "downstream_results"):
        tasks = [f"{t} · {m}" for t, m in con.execute(
            "SELECT DISTINCT task, metric FROM downstream_results WHERE layer = ? ORDER BY task, metric",
            [MODEL_LEVEL]).fetchall()]
    return {"metrics": metrics, "text": texts, "tasks": tasks}


def _cell(value, a, b, why) -> str:
    """A matrix cell as DR's Figs. 11/12 print it: ``0.41 (L12/L5)``; no best cell: ``– (why)``."""
    if value is None or not np.isfinite(value):
        return f"– ({why})" if why else "–"
    return f"{value:.2f} (L{int(a)}/L{int(b)})"


def _layers(cell) -> str:
    """``L12/L5``: the best cell's layers (vision/text), or why there is no best cell."""
    if cell["value"] is None or not np.isfinite(cell["value"]):
        return cell["why"] or "no best cell"
    return f"L{int(cell['best_a'])}/L{int(cell['best_b'])}"


def _voters(frame: pd.DataFrame) -> tuple[pd.Series, list[str]]:
    """Which rows take part in a fit or a ranking: trained models only (none when all are controls)."""
    if len(frame) and frame["control"].astype(bool).all():
        return pd.Series(False, index=frame.index), [ALL_CONTROLS]
    return ~frame["control"].astype(bool), []


def _at_largest_frames(cells: pd.DataFrame) -> pd.DataFrame:
    """Each vision model's cells at its largest n_f (DR's matrices use each model's richest input)."""
    if not len(cells):
        return cells
    top = cells.groupby("vision")["n_frames"].transform(lambda s: s.fillna(0).max())
    return cells[cells["n_frames"].fillna(0) == top]


def published_rows(con, dataset: str, *, model: str | None, text_model: str | None = None, metrics=None) -> list[dict]:
    """Published numbers that speak of the store's ``model`` (None: figure-wide) on ``dataset`` against
    ``text_model``, through the user's name mapping: ``[{paper, model, dataset, setting, metric, value,
    source}]`` (empty when nothing is mapped)."""
    names = P.paper_names(con)
    if not names["dataset"]:
        return []
    rows = P.matching(P.load_published(), names, model=model, dataset=dataset, text_model=text_model, metrics=metrics)
    return [{"paper": p.paper, "model": p.model, "dataset": p.dataset, "setting": p.setting, "metric": p.metric,
             "value": p.value, "source": p.source} for p in rows]


# ---------------------------------------------------------------- DR Fig. 7
def fig7_view(con, dataset: str, metric: str, text_model: str) -> dict:
    """DR Fig. 7: each vision model's best alignment with ``text_model`` at the smallest n_c (x)
    against the largest (y), both at the largest n_f the model has at both budgets; the
    least-squares line and Pearson r (:func:`line_fit`) over the trained models. ``published``: DR's
    line (y = 1.6x − 0.018, r = 0.998, n_c 1 vs 10) when the dataset is mapped, with ``setting_match``
    (the store's budgets are 1 and 10 too). ``error`` says why there is no figure."""
    cells = best_cells(con, dataset, metric)
    cells = cells[cells["text"] == text_model]
    budgets = sorted(int(c) for c in cells["n_captions"].dropna().unique())
    out = {"text_model": text_model, "metric": metric, "points": pd.DataFrame(), "fit": None, "notes": [],
           "published": [], "n_c": (budgets[0], budgets[-1]) if budgets else None, "error": None}
    if len(budgets) < 2:
        out["error"] = (f"{text_model} has {'one caption budget' if budgets else 'no grids'} here: Fig. 7 compares the "
                        "smallest and the largest n_c (precompute the text model at several --captions)")
        return out
    lo, hi = budgets[0], budgets[-1]
    points = []
    for vision, g in cells.groupby("vision"):
        both = set(g.loc[g["n_captions"] == lo, "n_frames"].fillna(0)) & set(g.loc[g["n_captions"] == hi, "n_frames"].fillna(0))
        if not both:
            out["notes"].append(f"{vision}: no n_f with both n_c {lo} and {hi}; left out")
            continue
        nf = max(both)
        at = g[g["n_frames"].fillna(0) == nf]
        x, y = (at[at["n_captions"] == c].iloc[0] for c in (lo, hi))
        points.append({"vision": vision, "n_frames": None if nf == 0 else int(nf), "kind": x["kind"],
                       "control": bool(x["control"]), "x": x["value"], "y": y["value"],
                       "layers_x": _layers(x), "layers_y": _layers(y)})
    pts = pd.DataFrame(points)
    if not len(pts):
        out["error"] = "no vision model has grids at both caption budgets"
        return out
    voters, notes = _voters(pts)
    out["notes"] += notes
    pts["in_fit"] = voters & pts["x"].notna() & pts["y"].notna()
    out["points"] = pts
    fx, fy = pts.loc[pts["in_fit"], "x"].astype(float), pts.loc[pts["in_fit"], "y"].astype(float)
    fit = line_fit(fx, fy)
    out["fit"] = {**fit, **_r_uncertainty(fx, fy, fit)}
    pub = {p["metric"]: p for p in published_rows(con, dataset, model=None, metrics=("fig7_slope", "fig7_intercept", "fig7_r"))}
    if pub:
        out["published"] = list(pub.values())
        out["setting_match"] = (lo, hi) == (1, 10)
    return out


def _r_uncertainty(x, y, fit: dict) -> dict:
    """What a line's Pearson r over a few models can claim: ``p`` (two-sided; an exact permutation test
    up to :data:`EXACT_P_MAX_MODELS` models, scipy's above), ``p_method``, and ``ci_note`` (no interval
    below :data:`MIN_CI_MODELS` models, where resampling 3 or 4 models gives a handful of values)."""
    if fit.get("r") is None:
        return {"p": None, "p_method": None, "ci_note": ""}
    keep = np.isfinite(np.asarray(x, float)) & np.isfinite(np.asarray(y, float))
    x, y = np.asarray(x, float)[keep], np.asarray(y, float)[keep]
    if len(x) <= EXACT_P_MAX_MODELS:
        p, method = exact_permutation_p(x, y), "exact permutation"
    else:
        from scipy import stats

        p, method = float(stats.pearsonr(x, y)[1]), "t test"
    return {"p": float(p), "p_method": method, "ci_note": "no interval below 5 models" if len(x) < MIN_CI_MODELS else ""}


def fig7_text(fv: dict) -> str:
    """One sentence on the fit (and DR's published line beside it, when the names are mapped)."""
    if fv.get("error"):
        return fv["error"]
    fit, (lo, hi) = fv["fit"], fv["n_c"]
    if fit["error"]:
        own = f"No line: {fit['error']}."
    else:
        b = fit["intercept"]
        # r over a few models says little without its p (an exact test at n = 3 cannot go below 1/3)
        sure = (f", {fit['p_method']} p = {fit['p']:.3g}" if fit.get("p") is not None else "") + (
            f"; {fit['ci_note']}" if fit.get("ci_note") else "")
        own = (f"Least squares over {fit['n']} model(s): y = {fit['slope']:.3g}x {'−' if b < 0 else '+'} {abs(b):.3g}, "
               f"Pearson r = {fmt_number(fit['r']) if fit['r'] is not None else '— (' + fit['r_error'] + ')'}{sure} "
               f"(x: n_c {lo}, y: n_c {hi}).")
    pub = {p["metric"]: p["value"] for p in fv.get("published", [])}
    if pub:
        own += (f" DR Fig. 7 (published, n_c 1 vs 10): y = {pub.get('fig7_slope'):g}x − {abs(pub.get('fig7_intercept')):g}, "
                f"r = {pub.get('fig7_r'):g}" + ("" if fv.get("setting_match") else
                                                  f"; the paper's budgets differ from these (n_c {lo} vs {hi})") + ".")
    return own


def fig7_chart(fv: dict, *, title=None):
    """Scatter of Fig. 7 with the fitted line (and DR's published one, dashed, when shown)."""
    alt = lazy_altair()
    pts = fv["points"].assign(marker=lambda d: d["kind"].map(lambda k: KINDS.get(k, k)),
                              weights=lambda d: d["control"].map(lambda c: "random init" if c else "trained"))
    pts = pts[pts["x"].notna() & pts["y"].notna()]
    lo, hi = fv["n_c"]
    layers = [alt.Chart(pts).mark_point(filled=True, size=80).encode(
        x=alt.X("x:Q", title=f"best alignment, n_c = {lo}", scale=alt.Scale(zero=False)),
        y=alt.Y("y:Q", title=f"best alignment, n_c = {hi}", scale=alt.Scale(zero=False)),
        # each label's glyph is its marker (the default shape order drew "▲ video model" as a circle)
        shape=alt.Shape("marker:N", title="vision input", scale=_marker_scale(alt), legend=alt.Legend(orient="bottom", columns=1)),
        color=alt.Color("weights:N", title="weights", scale=alt.Scale(domain=["trained", "random init"]),
                        legend=alt.Legend(orient="top", columns=1)),
        tooltip=["vision", "n_frames", alt.Tooltip("x:Q", format=".3f"), alt.Tooltip("y:Q", format=".3f"),
                 "layers_x", "layers_y", "in_fit"])]
    lines = []
    xs = np.array([pts["x"].min(), pts["x"].max()]) if len(pts) else np.array([])
    fit = fv.get("fit") or {}
    if len(xs) and not fit.get("error"):
        lines += [{"x": float(x), "y": fit["slope"] * float(x) + fit["intercept"], "line": "least squares (this store)"}
                  for x in xs]
    pub = {p["metric"]: p["value"] for p in fv.get("published", [])}
    if len(xs) and {"fig7_slope", "fig7_intercept"} <= set(pub):
        lines += [{"x": float(x), "y": pub["fig7_slope"] * float(x) + pub["fig7_intercept"],
                   "line": "DR Fig. 7 (published)"} for x in xs]
    if lines:
        layers.append(alt.Chart(pd.DataFrame(lines)).mark_line().encode(
            x="x:Q", y="y:Q", strokeDash=alt.StrokeDash("line:N", title="line", legend=alt.Legend(orient="top", columns=1))))
    # "pad": the plot keeps its 260 × 260 (fitted into its width with the legends, it was 130 px wide);
    # legends above and below (side by side, three were 720 px) and the title wrapped keep the chart
    # inside a phone's column
    chart = alt.layer(*layers).properties(width=260, height=260, autosize=alt.AutoSizeParams(type="pad"))
    return chart.properties(title=wrapped_title(title)) if title else chart


def _marker_scale(alt):
    """The shapes of :data:`KINDS`' labels, in their order: ■ square, ● circle, ▲ triangle."""
    return alt.Scale(domain=list(KINDS.values()), range=["square", "circle", "triangle-up"])


# ---------------------------------------------------------------- DR Figs. 11/12
def fig11_view(con, dataset: str, metric: str, budget: str = "smallest") -> dict:
    """DR Figs. 11/12: vision models (rows, each at its largest n_f) × text models (columns) at the
    ``smallest`` or ``largest`` n_c of the store, each cell the best alignment and its layers
    (``0.41 (L12/L5)``), and the rank agreement of the vision models across text encoders
    (Kendall's τ-b per pair, Kendall's W over all) on the trained models scored by every encoder.
    Returns ``cells`` (long), ``table`` (the printed matrix), ``agreement``, ``n_c``, ``notes``, ``error``."""
    if budget not in ("smallest", "largest"):
        raise ValueError(f"budget {budget!r}: expected smallest or largest")
    cells = best_cells(con, dataset, metric)
    out = {"metric": metric, "budget": budget, "cells": pd.DataFrame(), "table": pd.DataFrame(), "agreement": None,
           "notes": [], "n_c": None, "error": None}
    budgets = sorted(int(c) for c in cells["n_captions"].dropna().unique())
    if not budgets:
        out["error"] = f"no vision×text grids of {metric} in {dataset} (run `layerscope analyze`)"
        return out
    n_c = budgets[0] if budget == "smallest" else budgets[-1]
    out["n_c"] = n_c
    at = _at_largest_frames(cells[cells["n_captions"] == n_c]).copy()
    at["cell"] = [_cell(v, a, b, w) for v, a, b, w in zip(at["value"], at["best_a"], at["best_b"], at["why"])]
    out["cells"] = at
    table = at.pivot(index="vision", columns="text", values="cell").fillna("not computed")
    out["table"] = table.reset_index()
    values = at.pivot(index="vision", columns="text", values="value")
    control = at.groupby("vision")["control"].any()
    voters, notes = _voters(pd.DataFrame({"control": control}))
    out["notes"] += notes
    values = values.loc[voters[voters].index.intersection(values.index)]
    complete = values.dropna()
    dropped = sorted(set(values.index) - set(complete.index))
    if dropped:
        out["notes"].append("left out of the ranking (no best cell against every text encoder): " + ", ".join(dropped))
    out["agreement"] = rank_agreement(complete.to_numpy(dtype=float), [str(c) for c in complete.columns])
    out["ranked_models"] = list(complete.index)
    return out


def agreement_text(av: dict) -> str:
    ag = av.get("agreement")
    if not ag:
        return av.get("error") or ""
    w = ag["w"]
    head = (f"Kendall's W = {w['w']:.3f} over {w['n']} vision models × {w['m']} text encoders (1: every text encoder "
            "ranks the vision models alike; 0: no agreement)." if w["w"] is not None else f"No Kendall's W: {w['error']}.")
    if w["w"] is not None and w.get("p") is not None:
        how = (f"exact permutation p = {w['p']:.3g} over all {w['n_perm']:,} orderings" if w["p_method"] == "exact permutation"
               else f"permutation p = {w['p']:.3g} ({w['n_perm']:,} draws)")
        head += f" Against text encoders that rank the models independently: {how}; W itself has no interval."
    return head


def agreement_frame(av: dict) -> pd.DataFrame:
    ag = av.get("agreement") or {"pairs": []}
    return pd.DataFrame([{"text encoder a": p["a"], "text encoder b": p["b"],
                          "Kendall τ-b": (fmt_number(p["tau"]) + (f" (exact p = {p['p']:.3g})" if p.get("p") is not None else "")
                                          if p["tau"] is not None else f"— ({p['why']})")}
                         for p in ag["pairs"]], columns=["text encoder a", "text encoder b", "Kendall τ-b"])


def fig11_chart(av: dict, *, title=None):
    alt = lazy_altair()
    cells = av["cells"].assign(value=lambda d: pd.to_numeric(d["value"], errors="coerce"))
    base = alt.Chart(cells).encode(x=alt.X("text:N", title="text model"), y=alt.Y("vision:N", title="vision model"))
    heat = base.mark_rect().encode(color=alt.Color("value:Q", title=av["metric"], scale=alt.Scale(scheme="viridis"),
                                                   legend=alt.Legend(orient="bottom")),
                                   tooltip=["vision", "text", "n_frames", "n_captions", "cell"])
    text = base.mark_text(fontSize=10, color="white").encode(text="cell:N")
    # drawn at its own size (``pad``): Streamlit's ``fit`` squeezed title, axes and legend into the plot's
    # box and left the cells 0 px; 72 px holds "0.41 (L12/L5)" at 10 px, so three columns with the legend
    # below fit a phone's column
    chart = alt.layer(heat, text).properties(
        width=72 * max(1, cells["text"].nunique()), height=32 * max(1, cells["vision"].nunique()),
        autosize=alt.AutoSizeParams(type="pad"))
    return chart.properties(title=wrapped_title(title)) if title else chart


# ---------------------------------------------------------------- DR Fig. 2
#: the frames of DR Fig. 2's ● points (image models on video)
DR_FIG2_FRAMES = 8

def fig2_view(con, dataset: str, metric: str, text_model: str, task: str) -> dict:
    """DR Fig. 2: each vision run kind's best alignment with ``text_model`` at the smallest n_c (x: the
    paper's single caption) against the model's whole-model downstream result on ``task``
    (``"task · metric"``; y): ■ an image model on one frame, ● on its largest n_f, ▲ a video model
    at its largest n_f; the "video − image" offset (:func:`video_minus_image_offset`: ▲ points above
    the least-squares line of the ● points, in the task's units). A model with downstream results
    under several settings uses the empty setting, else the first (named in ``notes``)."""
    out = {"points": pd.DataFrame(), "offset": None, "notes": [], "published": [], "error": None, "task": task,
           "text_model": text_model, "metric": metric}
    name, _, task_metric = task.partition(" · ")
    cells = best_cells(con, dataset, metric)
    cells = cells[cells["text"] == text_model]
    if not len(cells):
        out["error"] = f"no vision×text grids of {metric} with {text_model} in {dataset}"
        return out
    n_c = int(cells["n_captions"].min())
    cells = cells[cells["n_captions"] == n_c]
    down = {}
    if has_table(con, "downstream_results"):
        for r in R.rows(con, "SELECT model, setting, value, higher_is_better FROM downstream_results WHERE task = ? AND "
                             "metric = ? AND layer = ? ORDER BY setting", [name, task_metric, MODEL_LEVEL]):
            if r["model"] in down:
                out["notes"].append(f"{r['model']}: several settings; using {down[r['model']]['setting'] or 'the empty one'!r}")
                continue
            down[r["model"]] = r
    points, shared = [], []
    for (vision, kind), g in cells.groupby(["vision", "kind"]):
        frames = g["n_frames"].fillna(0)
        if kind == "image_on_video" and (frames == DR_FIG2_FRAMES).any():
            row = g.loc[(frames == DR_FIG2_FRAMES).idxmax()]  # DR's ● points: image models on 8 frames
        else:
            row = g.loc[frames.idxmax()] if kind != "image_on_image" else g.loc[frames.idxmin()]
        if kind == "image_on_video" and row["n_frames"] != DR_FIG2_FRAMES:
            out["notes"].append(f"{vision} ●: n_f = {int(row['n_frames'] or 0)} (DR's ● points use {DR_FIG2_FRAMES} "
                                "frames, not stored here)")
        if vision not in down:
            continue
        if kind in ("image_on_image", "image_on_video"):
            shared.append(vision)
        points.append({"vision": vision, "kind": kind, "marker": KINDS.get(kind, kind), "n_frames": row["n_frames"],
                       "alignment": row["value"], "score": down[vision]["value"], "control": bool(row["control"]),
                       "layers": _layers(row)})
    pts = pd.DataFrame(points)
    if not len(pts):
        out["error"] = f"no vision model has both a grid with {text_model} and a whole-model result on {task}"
        return out
    for vision in sorted({v for v in shared if shared.count(v) > 1}):
        out["notes"].append(f"{vision}: ■ and ● share one downstream value (the store holds one whole-model "
                            "result per model and task, not one per input)")
    voters, notes = _voters(pts)
    out["notes"] += notes
    pts["in_fit"] = voters
    out["points"], out["n_c"] = pts, n_c
    use = pts[pts["in_fit"]]
    out["offset"] = video_minus_image_offset(use["alignment"].astype(float), use["score"].astype(float), use["kind"])
    # DR's offset is in retrieval accuracy: beside an offset on another task it is another quantity
    if "retrieval" in task.lower():
        out["published"] = published_rows(con, dataset, model=None, text_model=text_model,
                                          metrics=("fig2_video_minus_image",))
    return out


def fig2_text(fv: dict) -> str:
    if fv.get("error"):
        return fv["error"]
    off = fv["offset"]
    line = off["line"]
    own = (f"avg. video − image = {off['offset']:+.4g} ({off['n_target']} ▲ video model(s) against the line of "
           f"{off['n_reference']} ● image-on-video point(s): y = {line['slope']:.3g}x + {line['intercept']:.3g})."
           if off["offset"] is not None else f"No video − image offset: {off['error']}.")
    for p in fv.get("published", []):
        own += f" DR Fig. 2 (published, Kinetics-400/SSv2 retrieval): {p['value']:+g}."
    return own


def fig2_chart(fv: dict, *, title=None):
    alt = lazy_altair()
    pts = fv["points"]
    chart = alt.Chart(pts).mark_point(filled=True, size=90).encode(
        x=alt.X("alignment:Q", title=f"best alignment with {fv['text_model']} (n_c = {fv.get('n_c')})",
                scale=alt.Scale(zero=False)),
        y=alt.Y("score:Q", title=fv["task"], scale=alt.Scale(zero=False)),
        shape=alt.Shape("marker:N", title="vision input", scale=_marker_scale(alt)),
        color=alt.Color("marker:N", title="vision input"),
        tooltip=["vision", "marker", "n_frames", alt.Tooltip("alignment:Q", format=".3f"),
                 alt.Tooltip("score:Q", format=".4g"), "layers", "in_fit"])
    layers = [chart]
    line = (fv.get("offset") or {}).get("line") or {}
    if len(pts) and not line.get("error") and line.get("slope") is not None:
        xs = [float(pts["alignment"].min()), float(pts["alignment"].max())]
        layers.append(alt.Chart(pd.DataFrame({"alignment": xs, "score": [line["slope"] * x + line["intercept"] for x in xs]}))
                      .mark_line(strokeDash=[4, 3], color="gray").encode(x="alignment:Q", y="score:Q"))
    out = alt.layer(*layers).properties(width=420, height=320)
    return out.properties(title=title) if title else out


# ---------------------------------------------------------------- published numbers beside the scaling law
#: scaling parameters as the published CSV names them
SCALING_METRICS = ("s_inf", "c_f", "c_c", "alpha", "beta", "r2")


#: the alignment metric DR's Table 1 fits (a CKA or CKNNA fit is another quantity: no paper column)
PUBLISHED_SCALING_METRIC = "mutual_knn"


def published_scaling(con, dataset: str, vision: str, text: str, metric: str = PUBLISHED_SCALING_METRIC
                      ) -> dict[str, dict]:
    """``{parameter: {value, source}}`` of DR's Table 1 for the store's ``vision`` × ``text`` pair on
    ``dataset``, through the user's name mapping (empty when unmapped, not in the paper, or when the
    store's fit is of another ``metric`` than Table 1's mutual k-NN)."""
    if metric != PUBLISHED_SCALING_METRIC:
        return {}
    return {p["metric"]: {"value": p["value"], "source": p["source"]}
            for p in published_rows(con, dataset, model=vision, text_model=text, metrics=SCALING_METRICS)}


def add_dimension_and_published(table: pd.DataFrame, params: dict, intervals: dict | None, blank: dict,
                                published: dict, r2=None) -> pd.DataFrame:
    """The scaling parameter table with a ``d_v = 2/α`` row (its interval from α's with the ends
    swapped; blank with the reason where α is not determined) and, where DR's Table 1 has the pair
    (mapped names), ``paper`` and ``paper source`` columns beside the fitted values."""
    lo, hi = (intervals or {}).get("alpha", (None, None))
    d = dimension_from_exponent(params.get("alpha"), lo, hi, undetermined=blank.get("alpha"))
    row = {"parameter": "d_v = 2/α", "value": fmt_number(d["value"]) if d["value"] is not None else "",
           "low": fmt_number(d["low"]) if d["low"] is not None else "",
           "high": fmt_number(d["high"]) if d["high"] is not None else "", "note": d["note"]}
    out = pd.concat([table, pd.DataFrame([row])], ignore_index=True)
    if published:
        dv = (published.get("alpha") or {}).get("value")
        paper = {**{k: v["value"] for k, v in published.items()}, "d_v = 2/α": 2.0 / dv if dv else None}
        src = {**{k: v["source"] for k, v in published.items()}}
        out["paper"] = [fmt_number(paper[p]) if paper.get(p) is not None else "" for p in out["parameter"]]
        out["paper source"] = [src.get(p, "from DR's α" if p == "d_v = 2/α" and dv else "") for p in out["parameter"]]
        if "r2" in published:
            out = pd.concat([out, pd.DataFrame([{"parameter": "R²", "value": fmt_number(r2), "low": "", "high": "",
                                                 "note": "", "paper": fmt_number(published["r2"]["value"]),
                                                 "paper source": published["r2"]["source"]}])], ignore_index=True)
    return out


def published_table(con) -> pd.DataFrame:
    """The whole published table (for the page's reference section) with the user's mapped names."""
    names = P.paper_names(con)
    back = {kind: {} for kind in names}
    for kind, m in names.items():
        for store_name, paper_name in m.items():
            back[kind].setdefault(paper_name, []).append(store_name)
    rows = [{"paper": p.paper, "model": p.model, "dataset": p.dataset, "setting": p.setting, "metric": p.metric,
             "value": p.value, "source": p.source,
             "your model": ", ".join(back.get("model", {}).get(p.model, [])),
             "your dataset": ", ".join(back.get("dataset", {}).get(p.dataset, []))} for p in P.load_published()]
    return pd.DataFrame(rows)


def gap_picture_chart(pts):
    """A two-sided map by PCA or t-SNE (TARA's picture of the modality gap): both sides' points
    (``x``, ``y``, ``side``, ``item_id``), coloured by side, axes hidden (only the layout reads)."""
    alt = lazy_altair()
    return alt.Chart(pts).mark_point(filled=True, opacity=0.7).encode(
        x=alt.X("x:Q", axis=None), y=alt.Y("y:Q", axis=None), color=alt.Color("side:N", title="side"),
        tooltip=["side", "item_id"]).properties(width=360, height=300)


#: the metric DR's figures use, when the store has it
FIGURE_METRIC = "mutual_knn"

#: why the section is empty, naming the commands that fill it
OMITTED = "no vision×text grids (needs vision and text runs, then `layerscope analyze`)"


#: the section's figures in the report's order; a page's ``figure=`` names one (the page's table of
#: published numbers is no chart: it stays on the page)
FIGURES = ("gap_maps", "prompts", "fig7", "fig11", "fig2", "fig8")


def section(con, dataset, *, models=None, references=None, figure=None, metric=None, text=None, budget=None,
            task=None, baseline_pair=None, n_frames=None, prompt_pair=None) -> Section:
    """DR's and TARA's figures on this store: ``data`` ``{metric, fig7, fig11, fig2, fig8, prompts,
    gap_maps}`` (each figure's numbers and its sentence, a list per figure drawn), ``charts`` one
    ``(caption, chart)`` per figure drawn, each with the title the Paper figures page gives it, and
    ``notes`` each drawn Fig. 7, 11/12 or 2's notes, one line per reason, chart after chart, and
    ``chart_notes`` the same notes chart by chart (a figure's notes are about its chart alone).

    The page's choices narrow it; None (the report's choice) draws every figure the store allows:
    ``figure`` one of :data:`FIGURES`; ``metric`` (:data:`FIGURE_METRIC` when stored, else the first);
    ``text`` the text model of Figs. 7 and 2 (every one); ``budget`` Figs. 11/12's ``smallest`` or
    ``largest`` n_c (both); ``task`` Fig. 2's ``"task · metric"`` (every one); ``baseline_pair``
    Fig. 8's ``(vision, text)`` (every pair with a long-caption baseline) and ``n_frames`` its chart's
    n_f (the largest); ``prompt_pair`` TARA's ``(a, b)`` (every pair of one source whose prompts
    differ). ``models`` and ``references`` are accepted for the report's loop and not used: a figure
    ranks every model against every text model. Omitted (:data:`OMITTED`) when none of the chosen
    figures has anything to draw from."""
    if figure is not None and figure not in FIGURES:
        raise ValueError(f"figure {figure!r}: expected one of {', '.join(FIGURES)}")
    wanted = FIGURES if figure is None else (figure,)
    choices = figure_choices(con, dataset)
    gaps = _gap_pictures(con, dataset) if "gap_maps" in wanted else []
    prompts = _prompt_comparisons(con, dataset, prompt_pair) if "prompts" in wanted else []
    by_metric = {"fig7", "fig11", "fig2", "fig8"} & set(wanted)
    if not (choices["metrics"] and by_metric) and not prompts and not gaps:
        return Section(None, omitted=OMITTED)
    if metric is None:
        metric = FIGURE_METRIC if FIGURE_METRIC in choices["metrics"] or not choices["metrics"] else choices["metrics"][0]
    scope = _Figures(con, dataset, metric, model_labels(con))
    texts = choices["text"] if text is None else [text]
    parts = {"gap_maps": lambda: _gap_part(gaps), "prompts": lambda: _prompts_part(scope, prompts),
             "fig7": lambda: _fig7_part(scope, texts),
             "fig11": lambda: _fig11_part(scope, ("smallest", "largest") if budget is None else (budget,)),
             "fig2": lambda: _fig2_part(scope, choices["tasks"] if task is None else [task], texts),
             "fig8": lambda: _fig8_part(scope, cb.baseline_choices(con, dataset)["pairs"] if baseline_pair is None
                                        else [tuple(baseline_pair)], n_frames)}
    sec = {"metric": metric, "fig7": [], "fig11": [], "fig2": [], "fig8": [], "prompts": [], "gap_maps": []}
    charts, chart_notes = [], []
    for name in wanted:
        sec[name], drawn, said = parts[name]()
        charts += drawn
        chart_notes += said
    return Section(sec, charts=tuple(charts), notes=tuple(n for said in chart_notes for n in said),
                   chart_notes=tuple(map(tuple, chart_notes)))


@dataclass(frozen=True)
class _Figures:
    """What every figure of one section is drawn from."""
    con: Any
    dataset: str
    metric: str     #: the alignment metric every figure reads
    labels: dict    #: model → label ("(random init)" included), as the titles name models


def _titled(scope: _Figures, text: str, models) -> dict:
    """A figure's chart title (:func:`chart_title`): ``text``, the dataset and the untrained ``models``."""
    return chart_title(text, dataset=scope.dataset, labels=scope.labels, models=list(models))


def _gap_part(gaps) -> tuple[list, list, list]:
    """TARA's pictures of the gap: ``(entries, [(caption, chart)], [[note] per chart])`` as every part
    returns."""
    return ([{"subject": m["subject"], "method": m["method"], "n_points": m["n_points"]} for m in gaps],
            [(f"TARA's picture of the gap ({m['method'].upper()}): {m['subject']}", m["chart"]) for m in gaps],
            [[] for _ in gaps])


def _prompts_part(scope: _Figures, prompts) -> tuple[list, list, list]:
    """TARA's prompt comparisons, each titled with both models' labels."""
    entries, charts = [], []
    for cv in prompts:
        a, b = cv["a"], cv["b"]
        entries.append({"a": a, "b": b, "sentence": pc.compare_text(cv), "prompts": cv["prompts"],
                        "table": cv["table"].to_dict(orient="records")})
        title = _titled(scope, f"modality gap per layer: {scope.labels.get(a, a)} against {scope.labels.get(b, b)}",
                        [a, b])
        charts.append((f"TARA: modality gap per layer, {a} against {b}", pc.compare_chart(cv, title=title)))
    return entries, charts, [[] for _ in charts]


def _fig7_part(scope: _Figures, texts) -> tuple[list, list, list]:
    """DR Fig. 7 against each of ``texts`` (an entry even without a chart: its sentence says why)."""
    entries, charts, notes = [], [], []
    for text in texts:
        fv = fig7_view(scope.con, scope.dataset, scope.metric, text)
        entries.append({"text_model": text, "sentence": fig7_text(fv), "notes": fv["notes"],
                        "points": fv["points"].to_dict(orient="records") if len(fv["points"]) else [],
                        "fit": fv["fit"], "published": fv["published"]})
        if not fv["error"]:
            lo, hi = fv["n_c"]
            title = _titled(scope, f"{scope.metric}: n_c {lo} against n_c {hi}, text model "
                                   f"{scope.labels.get(text, text)}", fv["points"]["vision"])
            charts.append((f"DR Fig. 7: {scope.metric}, n_c {lo} against {hi}, text model {text}",
                           fig7_chart(fv, title=title)))
            notes.append(collapse_notes(fv["notes"]))
    return entries, charts, notes


def _fig11_part(scope: _Figures, budgets) -> tuple[list, list, list]:
    """DR Figs. 11/12 at each caption budget of ``budgets`` that has grids."""
    entries, charts, notes = [], [], []
    for budget in budgets:
        av = fig11_view(scope.con, scope.dataset, scope.metric, budget)
        if av["error"]:
            continue
        entries.append({"budget": budget, "n_c": av["n_c"], "table": av["table"].to_dict(orient="records"),
                        "agreement": av["agreement"], "sentence": agreement_text(av),
                        "pairs": agreement_frame(av).to_dict(orient="records"), "notes": av["notes"]})
        title = _titled(scope, f"{scope.metric} at n_c {av['n_c']}, each vision model at its largest n_f; cell: best "
                               "value (vision layer/text layer)",
                        sorted(set(av["cells"]["vision"]) | set(av["cells"]["text"])))
        charts.append((f"DR Figs. 11/12: {scope.metric} at n_c {av['n_c']}, best value (vision layer/text layer)",
                       fig11_chart(av, title=title)))
        notes.append(collapse_notes(av["notes"]))
    return entries, charts, notes


def _fig2_part(scope: _Figures, tasks, texts) -> tuple[list, list, list]:
    """DR Fig. 2 for each downstream task of ``tasks`` and text model of ``texts`` with a figure."""
    entries, charts, notes = [], [], []
    for task in tasks:
        for text in texts:
            fv = fig2_view(scope.con, scope.dataset, scope.metric, text, task)
            if fv["error"]:
                continue
            entries.append({"task": task, "text_model": text, "sentence": fig2_text(fv), "offset": fv["offset"],
                            "published": fv["published"], "notes": fv["notes"]})
            title = _titled(scope, f"{task} against {scope.metric} with {scope.labels.get(text, text)} "
                                   f"(n_c {fv['n_c']})", fv["points"]["vision"])
            charts.append((f"DR Fig. 2: {task} against {scope.metric} with {text}", fig2_chart(fv, title=title)))
            notes.append(collapse_notes(fv["notes"]))
    return entries, charts, notes


def _fig8_part(scope: _Figures, pairs, n_frames=None) -> tuple[list, list, list]:
    """DR Fig. 8 of each ``(vision, text)`` of ``pairs``: a sentence per frame budget, the chart at
    ``n_frames`` (None: the largest budget with a baseline)."""
    entries, charts = [], []
    runs = dataset_runs(scope.con, scope.dataset)  # a dual encoder scored against its own captions: both sides named
    for vision, text in pairs:
        fv = cb.fig8_view(scope.con, scope.dataset, scope.metric, vision, text)
        budgets = [] if fv["error"] else cb.frame_budgets(fv)
        if n_frames is not None and budgets and int(n_frames) not in budgets:
            raise ValueError(f"{vision} × {text}: no long-caption baseline at n_f = {n_frames}; stored: {budgets}")
        entries += [{"vision": vision, "text_model": text, "n_frames": n_f, "sentence": cb.fig8_text(fv, n_f)}
                    for n_f in budgets]
        if budgets:
            n_f = budgets[0] if n_frames is None else int(n_frames)
            title = _titled(scope, f"{scope.metric}: {' × '.join(pair_names(vision, text, runs, scope.labels))}"
                                   f" at n_f {n_f}; dashed: the long original caption", [vision, text])
            charts.append((f"DR Fig. 8: {scope.metric}, {' × '.join(pair_names(vision, text, runs, {}))} at n_f "
                           f"{n_f}; dashed: the long original caption", cb.fig8_chart(fv, n_f, title=title)))
    return entries, charts, [[] for _ in charts]


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
                    "chart": gap_picture_chart(pts)})
    return out


def _prompt_comparisons(con, ds, pair=None) -> list[dict]:
    """TARA's comparison of ``pair`` ``(a, b)``, or (None) of every pair of one source whose stored
    prompts differ (what the report can tell apart without a user's choice); a pair that cannot be
    compared is left out (the page says why from :func:`analysis.views.prompt_compare.compare_view`)."""
    pairs = pc.prompt_pairs(con, ds) if pair is None else [tuple(pair)]
    return [cv for a, b in pairs if not (cv := pc.compare_view(con, ds, a, b))["error"]]
