"""The Temporal probes page's data and charts: Test of Time, first-neighbour types, reorder negatives
and the arrow of time."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.grid import NoBestCell, best_cell
from analysis.views.charts import lazy_altair, plot_height
from analysis.views.nuance import collapse_notes, pair_label, same_space_studies
from analysis.views.section import Section
from analysis.views.store_info import study


#: the reorder table's interval columns: ``{value}_low`` / ``{value}_high``
REORDER_VALUES = ("positive", "negative", "drop")


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
        row["note"] = (iv or {}).get("reason") or ""
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


def _pick(values, layers, higher_is_better=True) -> dict:
    """The best entry of a per-layer curve (never on an undefined value; a flat curve has none) and
    the last entry, as ``{"best_layer", "best", "last_layer", "last", "note"}``."""
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


#: the temporal section's probes: with none of them the section is omitted
_PROBES = ("test_of_time", "reorder", "arrow_of_time", "chiral", "time_reversal", "chiral_gallery", "negation",
           "same_space")


def temporal_data(con, ds) -> dict:
    """The temporal section's data: Test of Time, reorder negatives, arrow of time, and where video
    and text share a space, chiral choice (V2T), time reversal (T2V), chiral-gallery mAP, negated
    queries and the same-space summary (best layer by text-to-video mAP, modality gap there), with
    the study's ``notes``; each probe's list empty when the dataset has none."""
    tp = study(con, "temporal", ds) or {}
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
                    for e in tp.get(key, [])]
    # one query per action (TARA's protocol) under the setting's name; the item-query variant labelled
    out["chiral_gallery"] = [{"video": e["video"], "text": e["text"], "space": e["space"],
                              "n_queries": e.get("n_queries"), "n_item_queries": e.get("n_item_queries"),
                              "queries": e["queries"],
                              "settings": {s: _pick(v, e["layers_a"]) for s, v in e["map"].items()},
                              "settings_item_queries": {s: _pick(v, e["layers_a"])
                                                        for s, v in e["map_item_queries"].items()}}
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
    return out


#: why the section is empty
OMITTED = "no temporal probes for this dataset"

#: the captions of the section's two reorder charts
REORDER_CAPTIONS = ("reorder negatives: positive vs negative at the positive's best layer pair (95% paired bootstrap "
                    "intervals over items, conditional on the pair; dashed: chance k/(N−1))",
                    "reorder negatives: drop = positive − negative (95% interval; rule at 0)")


def section(con, dataset, *, models=None, references=None) -> Section:
    """The Temporal probes page's section: ``data`` the probes' numbers (:func:`temporal_data`; None
    when the dataset has none), ``charts`` the two reorder charts (:func:`reorder_charts`, 360 px
    wide), ``notes`` the study's notes, one line per reason (kept when the section is omitted).
    ``models`` and ``references`` are accepted for the report's loop and not used: every probed pair
    is shown."""
    data = temporal_data(con, dataset)
    notes = tuple(collapse_notes(data["notes"]))
    if not any(data[k] for k in _PROBES):
        return Section(None, notes=notes, omitted=OMITTED)
    reorder = temporal_view({"reorder": data["reorder"]})["reorder"]
    return Section(data, charts=tuple((title, chart.properties(width=360))
                                      for chart, title in zip(reorder_charts(reorder), REORDER_CAPTIONS)),
                   notes=notes)
