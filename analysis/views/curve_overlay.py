"""Layer curves of many runs at once, with their intervals where stored, and one run pinned as the
baseline. Plain functions, no Streamlit.

A *run* here is one model at one test-time budget (``n_f`` frames or ``n_c`` captions): the curves page
draws each model at its largest budget; the overlay draws any runs side by side. Intervals: per-layer
profiles store none; an alignment curve has the 95% bootstrap interval of its grid's best cell at one
layer (:func:`analysis.views.curve_intervals`). A band is drawn where a run has intervals at two or more
layers, an error bar where it has one.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.storage import results as R
from analysis.views.charts import _alt, plot_height
from analysis.views.curves import alignment_curves_long, curve_intervals, layer_choices
from analysis.views.layers import last_numbered, layer_label, relative_depth, run_layer_names
from analysis.views.store_info import has_table

COLUMNS = ["run", "run_id", "model", "metric", "layer", "depth", "layer_name", "value", "low", "high"]


def run_label(model: str, n_frames, n_captions, labels: dict | None = None) -> str:
    """A run's name in a legend: ``"model · n_f 4"`` / ``"model · n_c 2"`` (the model by its label)."""
    name = (labels or {}).get(model, model)
    parts = ([f"n_f {int(n_frames)}"] if n_frames is not None and not pd.isna(n_frames) else []) + (
        [f"n_c {int(n_captions)}"] if n_captions is not None and not pd.isna(n_captions) else [])
    return " · ".join([name] + parts)


def run_curves(con, dataset: str, labels: dict | None = None) -> pd.DataFrame:
    """Every run's per-layer curves of a dataset, long: :data:`COLUMNS`, one row per (run, metric,
    layer). Profiles (rankme, lid, ...) for every run and budget; alignment curves for the run each
    model's layer choice was made at, with the best cell's interval (``low, high``) at its layer;
    ``low``/``high`` are NaN elsewhere (no interval stored). ``depth`` is ``layer / last numbered
    layer`` in [0, 1], NaN for a named layer (``default``, ``joint``). ``labels``: model labels, a dict
    or its items (hashable, for the dashboard's cache)."""
    labels = dict(labels or {})
    rows = []
    if has_table(con, "result_profiles"):
        names = run_layer_names(con, dataset)
        for r in R.read_profiles(con, current=True, dataset=dataset):
            v = r["layer_values"]
            nm = names.get(r["run_id"], {})
            last = last_numbered(len(v), nm)
            label = run_label(r["model"], r["n_frames"], r["n_captions"], labels)
            for layer, value in enumerate(v):
                rows.append({"run": label, "run_id": r["run_id"], "model": r["model"], "metric": r["metric"],
                             "layer": layer, "depth": relative_depth(layer, last, nm),
                             "layer_name": layer_label(layer, nm),
                             "value": float(value) if np.isfinite(value) else np.nan, "low": np.nan, "high": np.nan})
    choices = layer_choices(con, dataset)
    align = alignment_curves_long(choices)
    if len(align):
        iv = curve_intervals(con, dataset).set_index(["model", "metric", "layer"])
        for a in align.itertuples(index=False):
            setting = (choices.get(a.model) or {}).get("setting") or {}
            key = (a.model, a.metric, a.layer)
            low, high = (float(iv.at[key, "low"]), float(iv.at[key, "high"])) if key in iv.index else (np.nan, np.nan)
            rows.append({"run": run_label(a.model, setting.get("n_frames"), setting.get("n_captions"), labels),
                         "run_id": setting.get("run_id") or a.model, "model": a.model, "metric": a.metric,
                         "layer": a.layer, "depth": a.depth, "layer_name": a.layer_name,
                         "value": np.nan if a.value is None else float(a.value), "low": low, "high": high})
    out = pd.DataFrame(rows, columns=COLUMNS)
    out["depth"] = pd.to_numeric(out["depth"], errors="coerce")
    return out


def difference_to_baseline(data: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Each run's curve minus the ``baseline`` run's (same metric), on relative depth: the baseline's
    value at each point's depth by linear interpolation between its numbered layers (exact where the
    depths coincide, as for two budgets of one model; ``NaN`` outside the baseline's depth range or
    where either value is undefined). ``low``/``high`` move with the value (the baseline is taken as
    fixed: its own uncertainty is not added). Named layers (no depth) are dropped. Raises
    ``ValueError`` when ``baseline`` is not among the runs."""
    if baseline not in set(data["run"]):
        raise ValueError(f"baseline run {baseline!r} is not among the overlaid runs")
    numbered = data[data["depth"].notna()]
    base = numbered[(numbered["run"] == baseline) & numbered["value"].notna()].sort_values("depth")
    if base.empty:
        return numbered.assign(value=np.nan, low=np.nan, high=np.nan)
    ref = np.interp(numbered["depth"].to_numpy(float), base["depth"].to_numpy(float), base["value"].to_numpy(float),
                    left=np.nan, right=np.nan)
    return numbered.assign(value=numbered["value"] - ref, low=numbered["low"] - ref, high=numbered["high"] - ref)


def overlay_chart(data: pd.DataFrame, metric: str, *, baseline: str | None = None, difference: bool = False,
                  height: int = 380):
    """Many runs' curves of one metric on relative depth in [0, 1]: one line per run (legend below,
    labels untruncated), a shaded band between ``low`` and ``high`` where a run has intervals at two or
    more layers and an error bar where at one; the ``baseline`` run drawn black and dashed. With
    ``difference`` the curves are :func:`difference_to_baseline` and the baseline is the dashed zero
    line. Named layers (no depth) are left out of the overlay."""
    alt = _alt()
    d = data[data["depth"].notna()]
    if difference and baseline is not None:
        d = difference_to_baseline(d, baseline)
    ytitle = f"{metric} minus {baseline}" if difference and baseline else metric
    x = alt.X("depth:Q", title="relative depth (0 = embeddings, 1 = last numbered layer)",
              scale=alt.Scale(domain=[0, 1]), axis=alt.Axis(values=[0, 0.25, 0.5, 0.75, 1], format=".2~f", labelAngle=0,
                                                              titleLimit=0))
    y = alt.Y("value:Q", title=ytitle, scale=alt.Scale(zero=False), axis=alt.Axis(titleLimit=0))
    others = d[d["run"] != baseline] if baseline is not None else d
    runs = sorted(others["run"].unique())
    color = alt.Color("run:N", title="run", scale=alt.Scale(domain=runs),
                      legend=alt.Legend(orient="bottom", labelLimit=0, titleLimit=0, columns=2))
    tips = [alt.Tooltip("run:N"), alt.Tooltip("layer_name:N", title="layer"),
            alt.Tooltip("value:Q", format=".4g", title=ytitle), alt.Tooltip("low:Q", format=".4g", title="95% CI low"),
            alt.Tooltip("high:Q", format=".4g", title="95% CI high")]
    layers = []
    bands, bars = interval_rows(d, baseline)
    if len(bands):
        layers.append(alt.Chart(bands).mark_area(opacity=0.2).encode(x=x, y="low:Q", y2="high:Q", color=color,
                                                                     detail="run:N"))
    layers.append(alt.Chart(others).mark_line(point=True).encode(x=x, y=y, color=color, tooltip=tips))
    if len(bars):
        layers.append(alt.Chart(bars).mark_rule(strokeWidth=2).encode(x=x, y="low:Q", y2="high:Q", color=color,
                                                                      tooltip=tips))
    if baseline is not None:
        if difference:
            layers.append(alt.Chart(pd.DataFrame({"value": [0.0], "run": [baseline]})).mark_rule(
                color="black", strokeDash=[6, 4]).encode(y="value:Q", tooltip=[alt.Tooltip("run:N", title="baseline")]))
        else:
            base = d[d["run"] == baseline]
            layers.append(alt.Chart(base).mark_line(color="black", strokeDash=[6, 4], point=False).encode(
                x=x, y=y, tooltip=tips))
    return plot_height(alt.layer(*layers), height)  # the two-column legend below adds to it


def interval_rows(data: pd.DataFrame, baseline: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows :func:`overlay_chart` draws an interval for, as ``(bands, bars)``: a run (not the
    baseline, numbered layers only) with intervals at two or more layers gets a shaded band, one with an
    interval at a single layer an error bar."""
    d = data[data["depth"].notna()] if len(data) else data
    if baseline is not None and len(d):
        d = d[d["run"] != baseline]
    with_iv = d[d["low"].notna() & d["high"].notna()] if len(d) else d
    if not len(with_iv):
        return with_iv, with_iv
    counts = with_iv.groupby("run")["layer"].transform("count")
    return with_iv[counts >= 2], with_iv[counts == 1]


def overlay_text(data: pd.DataFrame, baseline: str | None, difference: bool) -> str:
    """The overlay's caption: which intervals are drawn, as bands or bars (only the kind drawn is named:
    a caption promised bands where every run had one interval, drawn as a bar), and what the
    baseline line means."""
    bands, bars = interval_rows(data, baseline) if len(data) else (data, data)
    parts = []
    if len(bands) or len(bars):
        kinds = ([f"shaded bands ({bands['run'].nunique()} run(s) with intervals at several layers)"] if len(bands)
                 else []) + ([f"error bars ({bars['run'].nunique()} run(s) with an interval at one layer)"]
                             if len(bars) else [])
        parts.append(f"95% bootstrap intervals where stored, drawn as {' and '.join(kinds)}; other values are "
                     "point estimates")
    else:
        parts.append("no interval is stored for these curves (per-layer profiles have none): point estimates only")
    if baseline and difference:
        parts.append(f"each curve minus the baseline {baseline} at the same relative depth (interpolated between "
                     "its layers; the dashed line is zero; the baseline's own uncertainty is not added)")
    elif baseline:
        parts.append(f"dashed black: the baseline {baseline}")
    return "Overlay: " + "; ".join(parts) + "."
