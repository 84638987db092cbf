"""The heatmap page's data and charts: grid index, one grid in long form, near-best cells, the best cell in
words, and the heatmap itself (the page draws it, the report embeds the same spec)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.methods import grid_compare
from analysis.storage import results as R
from analysis.registry import REGISTRY
from analysis.sides import run_pair_names
from analysis.null import null_kind, null_label
from analysis.views.null import grid_null, grid_null_within, null_text
from analysis.views.store_info import dataset_context, dataset_runs, has_table, model_labels, query_frame
from analysis.views.charts import lazy_altair
from analysis.views.layers import axis_label_expr, run_layer_names
from analysis.views.section import Section, section_models, section_references
from analysis.views.metric_help import chance_level
from analysis.views.text import fmt_number


def grid_index(con) -> pd.DataFrame:
    """One row per grid of the store's current analysis: what can be picked, with its two runs
    (``run_a``, ``run_b``: what names each model's side, :func:`grid_names`)."""
    if not has_table(con, "result_grids"):
        return pd.DataFrame(columns=["dataset", "pair_kind", "model_a", "model_b", "metric", "n_frames",
                                     "n_captions", "n_frames_b", "result_id", "run_a", "run_b"])
    return query_frame(con, "SELECT dataset, pair_kind, model_a, model_b, metric, n_frames, n_captions, n_frames_b, "
                    f"result_id, run_a, run_b FROM result_grids WHERE {R.current_clause(con, 'result_grids')} "
                    "ORDER BY dataset, model_a, model_b, metric, n_frames, n_captions")


#: each pair kind a grid can have, in the order the heatmap offers them, with its words
PAIR_KINDS = {"vision_text": "vision × text", "vision_vision": "vision × vision", "text_text": "text × text"}
#: per pair kind, the budgets that tell its grids of one model pair apart: ``(index column, label,
#: URL parameter)``, picked in this order (same-modality pairs share one budget, so text×text has one)
BUDGET_PICKERS = {
    "vision_text": (("n_frames", "Frames n_f", "nf"), ("n_captions", "Captions n_c", "nc")),
    "vision_vision": (("n_frames", "Frames n_f", "nf"), ("n_frames_b", "Frames n_f of B", "nfb")),
    "text_text": (("n_captions", "Captions n_c", "nc"),),
}


def pair_kinds(index: pd.DataFrame) -> list[str]:
    """The pair kinds :func:`grid_index` holds, in :data:`PAIR_KINDS` order (vision×text first: the
    default view); a kind the code does not know (a newer store) goes last, by name."""
    have = set(index["pair_kind"].dropna()) if "pair_kind" in index else set()
    return [k for k in PAIR_KINDS if k in have] + sorted(have - set(PAIR_KINDS))


def pair_kind_label(kind: str) -> str:
    """``"text × text"`` for ``"text_text"``; an unknown kind as stored."""
    return PAIR_KINDS.get(kind, str(kind))


def budget_pickers(kind: str) -> tuple:
    """:data:`BUDGET_PICKERS` of ``kind``; an unknown kind gets every budget column a grid has."""
    return BUDGET_PICKERS.get(kind, (("n_frames", "Frames n_f", "nf"), ("n_captions", "Captions n_c", "nc"),
                                     ("n_frames_b", "Frames n_f of B", "nfb")))


def grid_by_id(con, result_id) -> dict:
    (g,) = R.read_grids(con, result_id=result_id)
    return g


def grid_long(g: dict) -> pd.DataFrame:
    """Long table of a grid for a heatmap: layer_a, layer_b, value, best flag, interval text,
    ``degenerate`` (the cell sits on a degenerate layer of either model: marked, never best) with
    ``note`` saying why (the reason travels from analyze in ``flags``), and ``near_best``
    (:func:`near_best_cells`)."""
    G = g["grid"]
    flags = g.get("flags") or {}
    deg_a = {int(k): v for k, v in (flags.get("degenerate_a") or {}).items()}
    deg_b = {int(k): v for k, v in (flags.get("degenerate_b") or {}).items()}
    a, b = np.meshgrid(np.arange(G.shape[0]), np.arange(G.shape[1]), indexing="ij")
    df = pd.DataFrame({"layer_a": a.ravel(), "layer_b": b.ravel(), "value": G.ravel()})
    df["value"] = df["value"].where(np.isfinite(df["value"]), None)
    df["best"] = (df["layer_a"] == g["best_a"]) & (df["layer_b"] == g["best_b"])
    df["degenerate"] = df["layer_a"].isin(list(deg_a)) | df["layer_b"].isin(list(deg_b))
    df["note"] = [("; ".join(x for x in (f"A layer {i}: {deg_a[i]}" if i in deg_a else "",
                                          f"B layer {j}: {deg_b[j]}" if j in deg_b else "") if x)
                   or ("undefined" if v is None else ""))
                  for i, j, v in zip(df["layer_a"], df["layer_b"], df["value"])]
    df["interval"] = ""
    if g.get("ci_low") is not None and g["best_a"] is not None:
        df.loc[df["best"], "interval"] = f"[{g['ci_low']:.3f}, {g['ci_high']:.3f}] ({g['n_boot']} resamples)"
    near = near_best_cells(g)
    df["near_best"] = near.ravel() & ~df["degenerate"].to_numpy()
    df.loc[df["near_best"], "note"] = "within the best cell's 95% interval: not distinguishable from it by that interval"
    df["beyond_null"] = beyond_null_cells(g).ravel() & ~df["degenerate"].to_numpy()
    return df


def beyond_null_cells(g: dict) -> np.ndarray:
    """``(n_rows, n_cols)`` bool: finite cells past the shuffled-pairing null's 95th percentile
    (above it when higher is better, below when lower is): values the grid maximum reaches under
    random item pairings less than 5% of the time. All False without a stored null."""
    G = np.asarray(g["grid"], dtype=np.float64)
    null = grid_null(g)
    if null is None or null.get("q95") is None or not np.isfinite(null["q95"]):
        return np.zeros(G.shape, dtype=bool)
    spec = REGISTRY.get(g.get("metric"))
    with np.errstate(invalid="ignore"):
        out = G < null["q95"] if spec is not None and spec.higher_is_better is False else G > null["q95"]
    return out & np.isfinite(G)


def null_rule_text(g: dict, n_beyond: int) -> str:
    """The heatmap's caption for its null rule: which cells are outlined and the best cell's verdict."""
    null = grid_null(g)
    return (f"White dotted outline: {n_beyond} cell(s) past {fmt_number(null['q95'])}, the 95th percentile of this "
            f"grid's best value when the items are paired at random ({null['n_perm']} shuffles"
            f"{'' if null_kind(null) == 'plain' else ' — ' + null_label(null)}; the "
            f"maximum over all layer pairs, so the selection is counted). Best cell: "
            f"{null_text(null, grid_null_within(g))}.")


def near_best_cells(g: dict) -> np.ndarray:
    """``(n_rows, n_cols)`` bool: cells other than the best whose value lies inside the best cell's
    bootstrap interval, on the metric's better side of its bound (``value >= ci_low`` when higher is
    better, ``value <= ci_high`` when lower is better). Only the best cell's interval is computed
    (per-cell intervals would cost a bootstrap per cell), so this is the overlap test the stored data
    allow: such a cell cannot be told apart from the best by that interval. All False when the grid
    has no best cell or no interval; NaN cells are never near-best."""
    G = np.asarray(g["grid"], dtype=np.float64)
    out = np.zeros(G.shape, dtype=bool)
    if g.get("best_a") is None or g.get("ci_low") is None or g.get("ci_high") is None:
        return out
    spec = REGISTRY.get(g.get("metric"))
    lower_better = spec is not None and spec.higher_is_better is False
    with np.errstate(invalid="ignore"):
        out = (G <= float(g["ci_high"])) if lower_better else (G >= float(g["ci_low"]))
    out &= np.isfinite(G)
    out[int(g["best_a"]), int(g["best_b"])] = False
    return out


def selected_cell_text(g: dict, layer_a: int, layer_b: int) -> str:
    """What is known of the uncertainty of the selected cell's value: the stored 95% interval when it is
    the best cell, else that none was computed (only the best cell is resampled), with the best cell's
    interval for scale; why the best cell has none when it has none."""
    iv = (f"95% CI {fmt_number(g['ci_low'])}–{fmt_number(g['ci_high'])} ({g['n_boot']} resamples)"
          if g.get("ci_low") is not None else None)
    if (layer_a, layer_b) == (g.get("best_a"), g.get("best_b")):
        return f"{iv}: the best cell's interval" if iv else f"no interval: {(g.get('flags') or {}).get('interval', 'none stored')}"
    return ("no interval for this cell: only the best cell is resampled" + (f" (its {iv})" if iv else ""))


def best_cell_text(g: dict, model_a: str, model_b: str) -> str:
    """One sentence on the grid's best cell, or why it has none (flat or degenerate grid)."""
    flags = g.get("flags") or {}
    if g.get("best_a") is None:
        return f"no best cell — {flags.get('best', 'no cell could be scored')}"
    text = (f"best cell: layer {g['best_a']} of {model_a} × layer {g['best_b']} of {model_b} = "
            f"{fmt_number(g['best_value'])}")
    if g.get("ci_low") is not None:
        text += f" (95% CI {fmt_number(g['ci_low'])}–{fmt_number(g['ci_high'])}, {g['n_boot']} resamples)"
    elif flags.get("interval"):
        text += f" (no interval: {flags['interval']})"
    if grid_null(g):
        text += f"; {null_text(grid_null(g), grid_null_within(g))}"
    elif flags.get("null_skipped"):
        text += f"; {flags['null_skipped']}"
    n_deg = len(flags.get("degenerate_a") or {}) + len(flags.get("degenerate_b") or {})
    if n_deg:
        text += f"; {n_deg} degenerate layer(s) marked and excluded"
    if flags.get("best_caveat"):
        text += f". Caveat: {flags['best_caveat']}"
    if (flags.get("knn") or {}).get("recall_low"):
        text += f". Caveat: {flags['knn']['recall_low']}"
    return text


#: the name of the heatmap's click selection (a cell's layer pair): the page reads the event by it
CELL = "cell"


def grid_names(g, runs, labels: dict) -> tuple[str, str]:
    """The grid's two models as a person reads them (:func:`analysis.sides.run_pair_names`): its rows'
    and columns' runs (``run_a``, ``run_b`` of a grid or a grid-index row) looked up among ``runs`` (the
    dataset's done runs, :func:`analysis.views.store_info.dataset_runs`), so a dual encoder's image
    tower against its own text tower reads ``clip [image] × clip [text]``; ``labels``: model -> label
    (``{}``: plain names, as the axes write them). A grid whose runs are not among ``runs`` names its
    models by their labels alone."""
    by_id = {r["run_id"]: r for r in runs}
    run_a, run_b = by_id.get(g.get("run_a")), by_id.get(g.get("run_b"))
    if run_a is None or run_b is None:
        return labels.get(g["model_a"], g["model_a"]), labels.get(g["model_b"], g["model_b"])
    return run_pair_names(run_a, run_b, runs, labels)


def grid_title(g, labels: dict, runs) -> str:
    """``A × B · metric · n_f=4, n_c=2`` for a grid or a grid-index row, models by their labels and
    sides (:func:`grid_names` among ``runs``, the dataset's done runs)."""
    a, b = grid_names(g, runs, labels)
    return f"{a} × {b} · {g['metric']} · {grid_compare.budget_text(g)}"


def grid_chance(g: dict, n_items) -> float | None:
    """The grid's metric on unrelated spaces of ``n_items`` items (its parameters but ``n_boot``)."""
    return chance_level(g["metric"], n_items, {k: v for k, v in (g.get("params") or {}).items() if k != "n_boot"})


def grid_chart(g: dict, *, labels: dict, runs, layer_names: dict, n_items, select: bool = True, domain=None):
    """The heatmap page's chart of one stored grid (:func:`heat_chart` on :func:`grid_long`), titled
    by :func:`grid_title`, its axes naming each model's side (:func:`grid_names` among ``runs``, the
    dataset's done runs), with the metric's chance level; the report embeds this same chart."""
    return heat_chart(grid_long(g), g, grid_title(g, labels, runs), g["metric"], *grid_names(g, runs, {}),
                      layer_names=layer_names, select=select, domain=domain, chance=grid_chance(g, n_items))


def heat_chart(frame, grid, title, color_title, a_name, b_name, *, layer_names: dict, select=False, domain=None,
               diverging=False, chance=None):
    """One heatmap: viridis values (or red–blue around 0 for a difference), undefined cells grey,
    degenerate ones crossed out, the best cell outlined, values written in the cells of small grids;
    ``chance`` (the metric's value on unrelated spaces) in the legend's title and the chart's subtitle.
    ``frame``: :func:`grid_long` of ``grid``; ``layer_names``: ``{run_id: {index: name}}`` (a named
    layer is written by its name); ``select``: a click selects a cell (:data:`CELL`)."""
    alt = lazy_altair()
    value_title = str(color_title)
    if chance is not None:
        color_title = [color_title, f"chance {fmt_number(chance)}"]
        title = {"text": title, "subtitle": [f"chance level (unrelated spaces): {fmt_number(chance)}"],
                 "anchor": "start"}
    labelled = grid_compare.cell_labels(frame, grid["n_rows"], grid["n_cols"], diverging=diverging)
    frame = labelled if len(labelled) else frame  # one dataset for every layer of the chart
    base = alt.Chart(frame).encode(
        x=alt.X("layer_b:O", title=f"{b_name} layer", axis=alt.Axis(
            labelAngle=0, titleLimit=0, labelExpr=axis_label_expr(layer_names.get(grid.get("run_b"))))),
        y=alt.Y("layer_a:O", title=f"{a_name} layer", sort="descending", axis=alt.Axis(
            titleLimit=0, labelExpr=axis_label_expr(layer_names.get(grid.get("run_a"))))))
    # tooltips name the models' layers and the metric, not the data's field names
    tips = [alt.Tooltip("layer_a:O", title=f"{a_name} layer"), alt.Tooltip("layer_b:O", title=f"{b_name} layer"),
            alt.Tooltip("value:Q", format=".4f", title=value_title), alt.Tooltip("interval:N", title="95% interval"),
            alt.Tooltip("note:N", title="note")]
    scale = (alt.Scale(scheme="redblue", domainMid=0, reverse=True) if diverging else
             alt.Scale(scheme="viridis", **({"domain": domain} if domain else {})))
    heat = base.transform_filter("isValid(datum.value)").mark_rect().encode(
        color=alt.Color("value:Q", title=color_title, scale=scale, legend=alt.Legend(titleLimit=0)), tooltip=tips)
    if select:
        cell = alt.selection_point(name=CELL, fields=["layer_a", "layer_b"], on="click")
        heat = heat.encode(opacity=alt.condition(cell, alt.value(1.0), alt.value(0.55))).add_params(cell)
    # undefined cells stay visible (grey) and degenerate ones are crossed out: marked, never dropped
    undefined = base.transform_filter("!isValid(datum.value)").mark_rect(color="#c8c8c8").encode(tooltip=tips)
    crossed = base.transform_filter(alt.datum.degenerate).mark_text(text="×", color="#d62728", fontSize=14).encode(
        tooltip=tips)
    best = base.transform_filter(alt.datum.best).mark_rect(fill=None, stroke="#ff4b4b", strokeWidth=3)
    layers = [heat, undefined, crossed]
    if "beyond_null" in frame and frame["beyond_null"].any():  # past the shuffled null's 95th percentile
        layers.append(base.transform_filter(alt.datum.beyond_null).mark_rect(
            fill=None, stroke="white", strokeWidth=1, strokeDash=[2, 2]).encode(tooltip=tips))
    layers.append(best)
    if "near_best" in frame and frame["near_best"].any():  # inside the best cell's interval: a dashed outline
        layers.append(base.transform_filter(alt.datum.near_best).mark_rect(
            fill=None, stroke="#ff4b4b", strokeWidth=1.5, strokeDash=[3, 2]).encode(tooltip=tips))
    if len(labelled):  # degenerate cells keep their cross, not a number
        layers.append(base.transform_filter("datum.label != '' && !datum.degenerate").mark_text(fontSize=10).encode(
            text="label:N", color=alt.condition(alt.datum.dark, alt.value("white"), alt.value("black")),
            tooltip=tips))
    return alt.layer(*layers).properties(height=420, title=title)


#: why the report's heatmap section is empty, naming the command that would fill it
OMITTED = ("no vision×text or text×text grids for the chosen models against a text reference (run "
                    "`layerscope analyze`; a text×text grid needs two text models at one n_c)")
#: a grid's pair kind in words, as the section's chart titles and the report's tables write it
KIND_WORDS = {"vision_text": "vision×text", "vision_vision": "vision×vision", "text_text": "text×text"}


def best_grid(grids, m, ref):
    """The mutual k-NN grid that joins model ``m`` to reference ``ref``, at the largest setting stored,
    or None: ``m``'s vision side × ``ref``'s text (vision×text), else the two text models' grid
    (text×text, either orientation: a text-only store's heatmaps), else ``ref``'s vision side × ``m``'s
    text. The last is the only grid of a text model and a reference with both sides (a dual encoder,
    an MLLM) when the two share no caption budget: text×text pairs need equal budgets
    (:func:`analysis.studies.grids.same_budget_pairs`), vision×text pairs do not."""
    def cands(ok):
        return [g for g in grids if g["metric"] == "mutual_knn" and ok(g, g["pair_kind"])]

    for ok in (lambda g, kind: kind == "vision_text" and (g["model_a"], g["model_b"]) == (m, ref),
               lambda g, kind: kind == "text_text" and {g["model_a"], g["model_b"]} == {m, ref},
               lambda g, kind: kind == "vision_text" and (g["model_a"], g["model_b"]) == (ref, m)):
        found = cands(ok)
        if found:
            return max(found, key=lambda g: ((g["n_frames"] or 0), (g["n_captions"] or 0)))
    return None


def heat_grids(grids, chosen, refs) -> list[dict]:
    """Each chosen model against each reference at its largest setting; a text×text grid (each
    model's against the other) once."""
    heat = []
    for m in chosen:
        for ref in refs:
            g = best_grid(grids, m, ref) if m != ref else None
            if g is not None and all(h["result_id"] != g["result_id"] for h in heat):
                heat.append(g)
    return heat


def grid_entry(g: dict) -> dict:
    """A stored grid as the report keeps it (JSON-able): its pair, metric and budgets, the ``(n_rows,
    n_cols)`` values as nested lists, the best cell ``[layer_a, layer_b]``, its value and 95% interval
    ``[low, high]``, and the flags (degenerate layers, why no best cell or interval)."""
    return {"pair_kind": g["pair_kind"], "model_a": g["model_a"], "model_b": g["model_b"],
            "metric": g["metric"], "n_frames": g["n_frames"], "n_captions": g["n_captions"],
            "grid": g["grid"].tolist(), "best": [g["best_a"], g["best_b"]], "best_value": g["best_value"],
            "ci": [g["ci_low"], g["ci_high"]], "flags": g.get("flags") or {}}


def section(con, dataset, *, models=None, references=None, result_ids=None, domain=None) -> Section:
    """The heatmap's section: one :func:`grid_chart` per grid, titled
    ``"A × B (kind, metric, budgets)"`` (the models by their labels and sides, :func:`grid_names`), with :func:`grid_entry` of each as ``data`` (a list).

    By default the report's grids: each of ``models`` (None: every model) against each of
    ``references`` (None: the dataset's text models) at its largest setting (:func:`heat_grids`).
    ``result_ids``: the stored grids to show instead, in that order (the page's pick); ``domain``:
    ``(min, max)`` of a colour scale shared with another grid (None: each grid its own).
    Omitted (:data:`OMITTED`) when there is no grid to show."""
    if result_ids is not None:
        heat = [g for rid in result_ids for g in R.read_grids(con, result_id=rid)]
    else:
        grids = R.read_grids(con, current=True, dataset=dataset) if has_table(con, "result_grids") else []
        heat = heat_grids(grids, section_models(con, models), section_references(con, dataset, references))
    if not heat:
        return Section(None, omitted=OMITTED)
    data = [grid_entry(g) for g in heat]
    labels, layer_names = model_labels(con), run_layer_names(con, dataset)
    runs = dataset_runs(con, dataset)
    n_items = dataset_context(con, dataset)["n_items"]
    charts = tuple(("{} × {} ({}, {}, {})".format(*grid_names(g, runs, labels), KIND_WORDS.get(h["pair_kind"], h["pair_kind"]),
                                                 h["metric"], grid_compare.budget_text(h)),
                    grid_chart(g, labels=labels, runs=runs, layer_names=layer_names, n_items=n_items,
                               domain=list(domain) if domain else None))
                   for g, h in zip(heat, data))
    return Section(data, charts=charts)
