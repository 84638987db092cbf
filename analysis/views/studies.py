"""The model map, downstream and temporal pages' data and charts."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.views.charts import lazy_altair, plot_height, wrapped_title


def model_map_view(payload: dict) -> dict:
    """The model map as tables: ``cells`` one row per (model_a, model_b) with the similarity and the
    pair kind of the two runs compared (``vision_text``, ``vision_vision``, ``text_text``; empty on the
    diagonal), ``order`` the clustering's order, ``coords`` the 2-D map."""
    from analysis.sides import pair_kind

    names = payload["models"]
    S = np.asarray(payload["similarity"])
    order = [names[i] for i in payload["order"]]
    settings = payload["settings"]
    cells = [{"model_a": names[i], "model_b": names[j], "similarity": float(S[i, j]),
              "pair_kind": "" if i == j else pair_kind(settings[names[i]], settings[names[j]])}
             for i in range(len(names)) for j in range(len(names))]
    coords = pd.DataFrame({"model": names, "x": [c[0] for c in payload["coords"]],
                           "y": [c[1] for c in payload["coords"]], "cluster": [str(c) for c in payload["clusters"]],
                           "modality": [payload["settings"][m]["modality"] for m in names]})
    return {"cells": pd.DataFrame(cells), "order": order, "coords": coords}


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


#: the reorder table's interval columns: ``{value}_low`` / ``{value}_high``
REORDER_VALUES = ("positive", "negative", "drop")


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


def reorder_row(e: dict) -> dict:
    """One reorder entry as a table row: the pair, its layers, the three values and their 95%
    intervals (``*_low``/``*_high``, None where there is none), chance ``k/(N−1)``, the interval's
    resamples and its note (why it is missing or how many resamples were skipped)."""
    iv = e.get("intervals")
    n, k = e.get("n_items"), e.get("k")
    row = {"pair": f"{e['vision']} × {e['text']}", "k": k,
           "layers": "" if not e.get("layers") else f"{e['layers'][0]} × {e['layers'][1]}",
           "positive": e.get("positive"), "negative": e.get("negative"), "drop": e.get("drop"),
           "chance": (iv or {}).get("chance", k / (n - 1) if n and k and n > 1 else None)}
    for v in REORDER_VALUES:
        ci = (iv or {}).get(v)
        row[f"{v}_low"], row[f"{v}_high"] = (ci[0], ci[1]) if ci else (None, None)
    row["resamples"] = None if not iv else iv.get("n_valid")
    if e.get("reason"):
        row["note"] = e["reason"]
    else:
        row["note"] = iv.get("reason") or ""
    return row


def reorder_drop_text(df: pd.DataFrame) -> list[str]:
    """One sentence per reorder pair on its drop: the value, its interval and whether the interval
    includes zero (then the probe shows no order effect at this pair), or why there is no interval."""
    out = []
    for r in df.itertuples():
        if r.drop is None or not np.isfinite(r.drop):
            continue
        if r.drop_low is None or not np.isfinite(r.drop_low):
            out.append(f"{r.pair}: drop {r.drop:.3f}; {r.note or 'no interval: not resampled'}.")
            continue
        where = ("includes 0: no evidence at this pair that the text side tells the order apart"
                 if r.drop_low <= 0 <= r.drop_high else
                 "excludes 0: the reordered caption aligns worse" if r.drop_low > 0 else
                 "excludes 0, below it: the reordered caption aligns better")
        out.append(f"{r.pair}: drop {r.drop:.3f}, 95% interval [{r.drop_low:.3f}, {r.drop_high:.3f}] {where}.")
    return out


def reorder_charts(df: pd.DataFrame, *, row: int = 30) -> list:
    """The reorder probe's two charts: positive and negative alignment as grouped bars, one row per
    pair (names stay whole and upright at any width), with their 95% intervals as error bars and
    chance ``k/(N−1)`` as a dashed rule; then the drop (positive − negative) per pair as a point with
    its interval and a rule at 0. Each plot is ``row`` px a pair (:func:`plot_height`). Rows without
    a value are not drawn (their note says why); an empty list when no pair has one."""
    from analysis.views.charts import plot_height

    alt = lazy_altair()
    df = df[df["positive"].notna()] if len(df) else df
    if not len(df):
        return []
    long = pd.concat([pd.DataFrame({"pair": df["pair"], "layers": df["layers"], "k": df["k"], "captions": v,
                                    "alignment": df[v], "ci_low": df[f"{v}_low"], "ci_high": df[f"{v}_high"],
                                    "note": df["note"]}) for v in ("positive", "negative")], ignore_index=True)
    pairs = list(dict.fromkeys(df["pair"]))
    y = alt.Y("pair:N", title=None, sort=pairs, axis=alt.Axis(labelLimit=0))
    tips = ["pair", "layers", "k", "captions", alt.Tooltip("alignment:Q", format=".3f"),
            alt.Tooltip("ci_low:Q", format=".3f", title="95% CI low"),
            alt.Tooltip("ci_high:Q", format=".3f", title="95% CI high"), "note"]
    base = alt.Chart(long).encode(y=y, yOffset=alt.YOffset("captions:N", sort=["positive", "negative"]))
    bars = base.mark_bar().encode(x=alt.X("alignment:Q", title="mutual k-NN at the pair"),
                                  color=alt.Color("captions:N", sort=["positive", "negative"],
                                                  legend=alt.Legend(orient="bottom", title=None)), tooltip=tips)
    # short caps: a cap as wide as the bar's band reads as another rule
    errors = base.transform_filter("isValid(datum.ci_low)").mark_errorbar(ticks={"size": 8}, color="black").encode(
        x=alt.X("ci_low:Q", title="mutual k-NN at the pair"), x2="ci_high:Q")
    chance = pd.DataFrame({"chance": sorted(set(df["chance"].dropna()))})
    chance["what"] = [f"chance k/(N−1) = {c:.3f}" for c in chance["chance"]]
    layers = [bars, errors]
    if len(chance):
        layers.append(alt.Chart(chance).mark_rule(strokeDash=[4, 4], color="gray").encode(
            x="chance:Q", tooltip=[alt.Tooltip("what:N", title="rule")]))
    out = [plot_height(alt.layer(*layers), row * len(pairs))]
    drop = df[["pair", "layers", "drop", "drop_low", "drop_high", "note"]]
    dbase = alt.Chart(drop).encode(y=y)
    dtips = ["pair", "layers", alt.Tooltip("drop:Q", format=".3f"), alt.Tooltip("drop_low:Q", format=".3f",
                                                                                  title="95% CI low"),
             alt.Tooltip("drop_high:Q", format=".3f", title="95% CI high"), "note"]
    zero = alt.Chart(pd.DataFrame({"zero": [0.0], "what": ["no drop"]})).mark_rule(color="gray").encode(
        x="zero:Q", tooltip=[alt.Tooltip("what:N", title="rule")])
    out.append(plot_height(alt.layer(
        dbase.transform_filter("isValid(datum.drop_low)").mark_errorbar(ticks={"size": 8}, thickness=2).encode(
            x=alt.X("drop_low:Q", title="drop (positive − negative)"), x2="drop_high:Q"),
        dbase.mark_point(filled=True, size=70).encode(x=alt.X("drop:Q", title="drop (positive − negative)"),
                                                      tooltip=dtips),
        zero), max(60, (row * 2 // 3) * len(pairs))))
    return out


def temporal_view(payload: dict) -> dict:
    """Long tables of the temporal probes; undefined values stay as rows with a note (never dropped)."""
    tot = []
    types = []
    types_missing = []  # pairs without a k = 1 best layer pair, so without first-neighbour types
    for e in payload.get("test_of_time", []):
        for k, v in e["alignment"].items():
            tot.append({"pair": f"{e['vision']} × {e['text']}", "k": int(k), "alignment": v["value"],
                        "note": v.get("reason") or ""})
        for space in ("vision", "text"):
            for t, share in (e["first_neighbours"].get(space) or {}).items():
                types.append({"pair": f"{e['vision']} × {e['text']}", "space": space, "type": t, "share": share,
                              "model": e[space]})
        if e["first_neighbours"].get("reason"):
            types_missing.append(f"{e['vision']} × {e['text']}: {e['first_neighbours']['reason']}")
    reorder = [reorder_row(e) for e in payload.get("reorder", [])]
    arrow = [{"model": e["vision"], "n_frames": e["n_frames"], "layer": l,
              "depth": l / max(1, len(e["per_layer"]) - 1),
              "arrow_of_time": v if v is not None and np.isfinite(v) else None,
              "note": (e.get("reasons") or {}).get(str(l), "")}
             for e in payload.get("arrow_of_time", []) for l, v in enumerate(e["per_layer"])]
    return {"tot": pd.DataFrame(tot), "types": pd.DataFrame(types), "reorder": pd.DataFrame(reorder),
            "arrow": pd.DataFrame(arrow), "chiral": payload.get("chiral", []), "notes": payload.get("notes", []),
            "types_missing": types_missing}


def tot_chart(tot: pd.DataFrame, *, n_items: int | None, height: int = 260):
    """Test of Time alignment (y) at k = 1, 2, 3 (x), one bar per vision × text pair, with mutual k-NN's
    chance level k/(N−1) at each k as a black tick (``n_items`` N; none when unknown): a bar is read
    against it. ``tot``: :func:`temporal_view`'s ``tot`` rows."""
    alt = lazy_altair()
    bars = alt.Chart(tot).mark_bar().encode(
        x=alt.X("k:O", axis=alt.Axis(labelAngle=0)), y=alt.Y("alignment:Q"), xOffset="pair:N",
        color=alt.Color("pair:N", legend=alt.Legend(orient="bottom", columns=1, labelLimit=0)),
        tooltip=["pair", "k", "alignment"])
    layers = [bars]
    if n_items and n_items > 1:
        ks = sorted(int(k) for k in tot["k"].unique())
        chance = pd.DataFrame({"k": ks, "chance": [k / (n_items - 1) for k in ks],
                               "level": ["chance k/(N−1)"] * len(ks)})
        layers.append(alt.Chart(chance).mark_tick(color="black", thickness=2).encode(
            x="k:O", y="chance:Q", tooltip=[alt.Tooltip("chance:Q", format=".3f", title="chance k/(N−1)")]))
    return plot_height(alt.layer(*layers), height)


#: facet labels above each row, horizontal, never on top of each other
def _row_header(alt):
    return alt.Header(labelAngle=0, labelOrient="top", labelAnchor="start", labelAlign="left", labelLimit=600,
                      title=None)


def first_neighbour_types_chart(types: pd.DataFrame):
    """The share of each first-neighbour type per model, one row per pair (:func:`temporal_view`'s ``types``)."""
    alt = lazy_altair()
    return alt.Chart(types).mark_bar().encode(
        y=alt.Y("model:N", title=None), x=alt.X("share:Q", stack="normalize"), color="type:N",
        row=alt.Row("pair:N", header=_row_header(alt)), tooltip=["model", "space", "type", "share"]).properties(
        height=80).resolve_scale(y="independent")  # each row lists its own two models, not every model of the page


def arrow_chart(arrow: pd.DataFrame, height: int = 280):
    """Arrow of time per layer on relative depth, a dash per n_f (:func:`temporal_view`'s ``arrow``)."""
    alt = lazy_altair()
    return alt.Chart(arrow).mark_line(point=True).encode(
        x=alt.X("depth:Q", title="relative depth"), y=alt.Y("arrow_of_time:Q"), color="model:N",
        strokeDash="n_frames:N", tooltip=["model", "n_frames", "layer", "arrow_of_time"]).properties(height=height)


def tot_uncertainty_text(n_items: int | None) -> str:
    """What the Test of Time bars can claim: no interval (one best-of-grid value on all items, biased up
    by the choice of its layers) and the chance ticks."""
    chance = (f"Black ticks: chance, k/(N−1) with N = {n_items} items. " if n_items and n_items > 1 else "")
    return (chance + "No interval: each bar is the best layer pair's value on all items, computed once (a maximum "
            "over the grid, so it sits a little above what a fixed layer pair would score).")


def arrow_uncertainty_text(n_items: int | None) -> str:
    """How to read the arrow-of-time values and what they cannot claim: each is one ratio over all the
    videos (:func:`analysis.methods.temporal.arrow_of_time`), computed once, with no interval."""
    over = f"all {n_items} videos" if n_items else "all videos"
    return (f"0: reversal does not move a video; 1: it moves it as far as another video is. No interval: each "
            f"point is one ratio over {over}, computed once; differences between layers or models are not tested.")


def model_map_title(payload: dict, *, dataset: str, labels: dict) -> dict:
    """The model map's chart title: what it shows, the dataset, and each model's largest budget."""
    from analysis.views.charts import chart_title

    budgets = sorted({f"n_f {v['n_frames']}" for v in payload["settings"].values() if v.get("n_frames")}
                     | {f"n_c {v['n_captions']}" for v in payload["settings"].values() if v.get("n_captions")})
    return chart_title("Best-layer mutual k-NN between models", dataset=dataset,
                       details=["each model at its largest budget: " + ", ".join(budgets)] if budgets else [],
                       labels=labels, models=payload["models"])


#: why the model map is empty
MODEL_MAP_OMITTED = "no model map (needs at least two models, then `layerscope analyze`)"


def model_map_section(con, dataset) -> "Section":
    """The Model map page's section: the stored study (``data``), the similarity matrix and the 2-D map
    (:func:`model_map_charts`, titled by :func:`model_map_title`), and a note naming the model pairs
    no layer pair of which could be scored (placed as unrelated on the map)."""
    from analysis.views.nuance import collapse_notes
    from analysis.views.section import Section
    from analysis.views.store_info import model_labels, study

    payload = study(con, "model_map", dataset)
    if not payload:
        return Section(None, omitted=MODEL_MAP_OMITTED)
    labels = model_labels(con)
    heat, scatter = model_map_charts(model_map_view(payload), labels=labels,
                                     title=model_map_title(payload, dataset=dataset, labels=labels))
    notes = ()
    if payload.get("undefined_pairs"):
        notes = ("No layer pair of these models could be scored (degenerate layers); they are placed as unrelated "
                 "(similarity 0) on the map: " + "; ".join(collapse_notes(
                     [f"{' × '.join(p['models'])}: {p['reason']}" for p in payload["undefined_pairs"]])),)
    return Section(payload, charts=(("model × model best-layer alignment", heat),
                                    ("the models on a 2-D map (classical MDS of 1 − similarity)", scatter)),
                   notes=notes)


def model_map_charts(mv: dict, *, labels: dict, title: dict | None = None):
    """The model map's two charts: the similarity matrix (values written in the cells while the
    matrix is small enough to read) and the 2-D map with one shape per modality, one colour per
    cluster, and equal scales on both axes (a distance on the map means the same either way).
    Model names carry "(random init)". Returns ``(matrix, map)``."""
    alt = lazy_altair()
    cells = mv["cells"].assign(model_a=mv["cells"]["model_a"].map(lambda m: labels.get(m, m)),
                               model_b=mv["cells"]["model_b"].map(lambda m: labels.get(m, m)))
    order = [labels.get(m, m) for m in mv["order"]]
    # whole names: "(random init)" was cut to "(rando…" at the default label limit, so no limit
    base = alt.Chart(cells).encode(x=alt.X("model_b:N", sort=order, title=None, axis=alt.Axis(labelLimit=0)),
                                   y=alt.Y("model_a:N", sort=order, title=None, axis=alt.Axis(labelLimit=0)))
    heat = base.mark_rect().encode(color=alt.Color("similarity:Q", scale=alt.Scale(scheme="viridis"),
                                                   title="mutual k-NN", legend=alt.Legend(orient="bottom")),
                                   tooltip=["model_a", "model_b", alt.Tooltip("similarity:Q", format=".3f"),
                                            alt.Tooltip("pair_kind:N", title="pair kind")])
    if len(order) <= 10:
        heat = heat + base.mark_text(fontSize=11).encode(
            text=alt.Text("similarity:Q", format=".2f"),
            color=alt.condition(alt.datum.similarity > 0.5 * float(cells["similarity"].max() or 1),
                                alt.value("black"), alt.value("white")))
    coords = mv["coords"].assign(model=mv["coords"]["model"].map(lambda m: labels.get(m, m)))
    half = max(float(np.ptp(coords["x"])), float(np.ptp(coords["y"])), 1e-9) / 2 * 1.25
    cx, cy = float(coords["x"].mean()) if len(coords) else 0.0, float(coords["y"].mean()) if len(coords) else 0.0
    dom_x, dom_y = [cx - half, cx + half], [cy - half, cy + half]
    sx = alt.Scale(domain=dom_x, nice=False, zero=False)
    sy = alt.Scale(domain=dom_y, nice=False, zero=False)
    points = alt.Chart(coords).mark_point(filled=True, size=220, opacity=0.9).encode(
        x=alt.X("x:Q", title="MDS 1", scale=sx), y=alt.Y("y:Q", title="MDS 2", scale=sy),
        color=alt.Color("cluster:N", title="cluster", legend=alt.Legend(orient="bottom")),
        shape=alt.Shape("modality:N", title="modality", legend=alt.Legend(orient="top")),
        tooltip=["model", "modality", "cluster"])
    side = 260  # with the legends above and below, the map and its axes fit a phone's column
    # labels placed beside their points without overlapping each other or a marker; one that finds no
    # free place is left off (the point's tooltip names it)
    from analysis.views.label_layout import label_positions

    spots = label_positions(coords["x"], coords["y"], coords["model"], domain_x=dom_x, domain_y=dom_y,
                            side=side)
    coords_l = coords.assign(lx=[s[0] if s else None for s in spots], ly=[s[1] if s else None for s in spots])
    names = alt.Chart(coords_l[coords_l["lx"].notna()]).mark_text(
        fontSize=11, align="center", baseline="middle").encode(x=alt.X("lx:Q", scale=sx), y=alt.Y("ly:Q", scale=sy),
                                                               text="model:N")
    # "pad": the plot is exactly side × side and the names, legends and titles go around it. Under
    # Streamlit's default fit they came out of the 380 px, which left a 220 px map whose labels (placed
    # for 380 px) overlapped, and 22 px matrix cells. One legend above, one below, titles wrapped: a
    # phone's column holds the charts (beside them, the map was 541 px wide)
    pad = alt.AutoSizeParams(type="pad")
    cell = min(300, max(120, 30 * len(order)))
    matrix = heat.properties(width=cell, height=cell, autosize=pad)
    mapped = (points + names).properties(width=side, height=side, autosize=pad)  # square, same span: equal scales
    if title:
        matrix = matrix.properties(title=wrapped_title(title))
        mapped = mapped.properties(title=wrapped_title({**title, "text": "2-D map (classical MDS of 1 − similarity)"}))
    return matrix, mapped
