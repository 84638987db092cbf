"""Layer curves of many runs at once, with their intervals where stored, and one run pinned as the
baseline. Plain functions, no Streamlit.

A *run* here is one side of a model at one test-time budget (``n_f`` frames or ``n_c`` captions): the
curves page draws each side (``clip``, ``clip [text]``) at its largest budget; the overlay draws any runs
side by side. Intervals: per-layer
profiles store none; an alignment curve has the 95% bootstrap interval of its grid's best cell at one
layer (:func:`analysis.views.curves.curve_intervals`). A band is drawn where a run has intervals at two or more
layers, an error bar where it has one.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.sides import key_label, legend_title
from analysis.storage import results as R
from analysis.views.charts import lazy_altair, plot_height
from analysis.views.curves import alignment_curves_long, curve_intervals, side_keys
from analysis.views.stored_choices import layer_choices
from analysis.views.layers import last_numbered, layer_label, relative_depth, run_layer_names
from analysis.views.store_info import has_table

COLUMNS = ["run", "run_id", "model", "metric", "layer", "depth", "layer_name", "value", "low", "high",
           "model_label", "budget", "budget_size", "control"]


def _budget(n_frames, n_captions) -> tuple[str, float]:
    """A run's budget as a legend names it (``"n_f 4"``, ``"n_c 2"``, ``""`` for none) and its size."""
    if n_frames is not None and not pd.isna(n_frames):
        return f"n_f {int(n_frames)}", float(n_frames)
    if n_captions is not None and not pd.isna(n_captions):
        return f"n_c {int(n_captions)}", float(n_captions)
    return "", 0.0


def run_label(model: str, n_frames, n_captions, labels: dict | None = None) -> str:
    """A run's name in a legend: ``"model · n_f 4"`` / ``"model · n_c 2"`` (the model by its label)."""
    name = (labels or {}).get(model, model)
    parts = ([f"n_f {int(n_frames)}"] if n_frames is not None and not pd.isna(n_frames) else []) + (
        [f"n_c {int(n_captions)}"] if n_captions is not None and not pd.isna(n_captions) else [])
    return " · ".join([name] + parts)


def run_curves(con, dataset: str, labels: dict | None = None) -> pd.DataFrame:
    """Every run's per-layer curves of a dataset, long: :data:`COLUMNS`, one row per (run, metric,
    layer). Profiles (rankme, lid, ...) for every run and budget; alignment curves for the run each
    side's layer choice was made at, with the best cell's interval (``low, high``) at its layer;
    ``low``/``high`` are NaN elsewhere (no interval stored). ``depth`` is ``layer / last numbered
    layer`` in [0, 1], NaN for a named layer (``default``, ``joint``).

    A run belongs to one side of its model, keyed and labelled as the Curves page keys its curves
    (:func:`analysis.views.curves.side_keys`, :func:`analysis.sides.key_label`): ``model`` is the side
    key (``clip``, ``clip [text]``, ``bert``), ``model_label`` its label (what the overlay colours by),
    ``run`` ``"<side label> · n_f 4"``; a dual encoder's two sides are two colours, never one model
    mixing its towers. ``control``: the run's own model has random-init weights. ``labels``: model
    labels (a side key may carry its own), a dict or its items (hashable, for the dashboard's cache)."""
    labels = dict(labels or {})
    controls = {m for m, ri in con.execute("SELECT model, random_init FROM models").fetchall() if ri}
    run_model = dict(con.execute("SELECT run_id, model FROM runs").fetchall())
    rows = []

    def group(key, model, n_frames, n_captions) -> dict:  # what the chart colours and dashes by
        budget, size = _budget(n_frames, n_captions)
        label = labels.get(key, key_label(key, labels))
        return {"run": run_label(key, n_frames, n_captions, {key: label}), "model": key, "model_label": label,
                "budget": budget, "budget_size": size, "control": model in controls}

    if has_table(con, "result_profiles"):
        names = run_layer_names(con, dataset)
        profiles = R.read_profiles(con, current=True, dataset=dataset)
        keys = side_keys(profiles)
        for r in profiles:
            v = r["layer_values"]
            nm = names.get(r["run_id"], {})
            last = last_numbered(len(v), nm)
            side = group(keys[r["run_id"]], r["model"], r["n_frames"], r["n_captions"])
            for layer, value in enumerate(v):
                rows.append({"run_id": r["run_id"], "metric": r["metric"], "layer": layer,
                             "depth": relative_depth(layer, last, nm), "layer_name": layer_label(layer, nm),
                             "value": float(value) if np.isfinite(value) else np.nan, "low": np.nan, "high": np.nan,
                             **side})
    choices = layer_choices(con, dataset)
    align = alignment_curves_long(choices)
    if len(align):
        iv = curve_intervals(con, dataset).set_index(["model", "metric", "layer"])
        for a in align.itertuples(index=False):  # a.model: the side key the layer choice is stored under
            setting = (choices.get(a.model) or {}).get("setting") or {}
            key = (a.model, a.metric, a.layer)
            low, high = (float(iv.at[key, "low"]), float(iv.at[key, "high"])) if key in iv.index else (np.nan, np.nan)
            model = run_model.get(setting.get("run_id"), a.model)
            rows.append({"run_id": setting.get("run_id") or a.model, "metric": a.metric,
                         "layer": a.layer, "depth": a.depth, "layer_name": a.layer_name,
                         "value": np.nan if a.value is None else float(a.value), "low": low, "high": high,
                         **group(a.model, model, setting.get("n_frames"), setting.get("n_captions"))})
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


def default_runs(data: pd.DataFrame) -> list[str]:
    """The runs an overlay starts with: each trained model side (``model``: ``clip``, ``clip [text]``) at
    its smallest and its largest budget (one run when it has one), in ``run`` order; controls (random
    init) only when every model is one. A dual encoder's sides are picked apart: its towers' budgets
    (``n_f``, ``n_c``) are different axes, so one side's smallest beside the other's largest compares
    nothing. All runs at once (23 for RankMe on the demo) drew ~10 repeating colours nobody could tell
    apart; the picker adds the rest."""
    d = _grouped(data)
    if d.empty:
        return []
    d = d[~d["control"]] if (~d["control"]).any() else d
    keep = set()
    for _, runs in d.drop_duplicates("run_id").groupby("model"):
        runs = runs.sort_values("budget_size")
        keep |= {runs["run_id"].iloc[0], runs["run_id"].iloc[-1]}
    return [r for r in d.drop_duplicates("run_id").sort_values("run")["run_id"] if r in keep]


def _grouped(data: pd.DataFrame) -> pd.DataFrame:
    """``data`` with the grouping columns (a frame built without them: the model, the run as budget)."""
    defaults = {"model_label": data.get("model"), "budget": data.get("run"), "budget_size": 0.0, "control": False}
    return data.assign(**{c: v for c, v in defaults.items() if c not in data})


#: dash patterns for budgets, smallest budget solid: up to six budgets stay apart
DASHES = [[1, 0], [8, 4], [2, 3], [12, 3, 2, 3], [4, 2], [1, 5]]


def overlay_chart(data: pd.DataFrame, metric: str, *, baseline: str | None = None, difference: bool = False,
                  height: int = 380):
    """Many runs' curves of one metric on relative depth in [0, 1]: colour = model side (``model_label``:
    a dual encoder's towers are two colours; the legend says "side" then, "model" when every run is of a
    one-sided model, :func:`analysis.sides.legend_title`), dash = budget (so a side's budgets read as one family and
    20 runs need no 20 colours), legends below and untruncated;
    a shaded band between ``low`` and ``high`` where a run has intervals at two or more layers and an
    error bar where at one; the ``baseline`` run drawn black and dashed. With ``difference`` the curves
    are :func:`difference_to_baseline` and the baseline is the dashed zero line. Named layers (no depth)
    are left out of the overlay."""
    alt = lazy_altair()
    d = _grouped(data[data["depth"].notna()])
    if difference and baseline is not None:
        d = difference_to_baseline(d, baseline)
    ytitle = f"{metric} minus {baseline}" if difference and baseline else metric
    # a short title that fits a phone's width (the page's caption says what 0 and 1 are)
    x = alt.X("depth:Q", title="relative depth (0 → 1)",
              scale=alt.Scale(domain=[0, 1]), axis=alt.Axis(values=[0, 0.25, 0.5, 0.75, 1], format=".2~f", labelAngle=0,
                                                              titleLimit=0))
    y = alt.Y("value:Q", title=ytitle, scale=alt.Scale(zero=False), axis=alt.Axis(titleLimit=0))
    others = d[d["run"] != baseline] if baseline is not None else d
    models = sorted(others["model_label"].unique())
    budgets = list(others.sort_values("budget_size")["budget"].drop_duplicates())
    # one model side per legend row: long "(random init)" names stay whole at 390 px; titled by what the
    # colours are (a dual encoder's towers are two colours: sides)
    keys = others["model"] if "model" in others else others["model_label"]
    color = alt.Color("model_label:N", title=legend_title(keys.dropna().unique()), scale=alt.Scale(domain=models),
                      legend=alt.Legend(orient="bottom", labelLimit=0, titleLimit=0, columns=1))
    dash = alt.StrokeDash("budget:N", title="budget", scale=alt.Scale(domain=budgets, range=DASHES[:max(1, len(budgets))]),
                          legend=alt.Legend(orient="bottom", labelLimit=0, titleLimit=0))
    tips = [alt.Tooltip("run:N"), alt.Tooltip("layer_name:N", title="layer"),
            alt.Tooltip("value:Q", format=".4g", title=ytitle), alt.Tooltip("low:Q", format=".4g", title="95% CI low"),
            alt.Tooltip("high:Q", format=".4g", title="95% CI high")]
    layers = []
    bands, bars = interval_rows(d, baseline)
    if len(bands):
        layers.append(alt.Chart(bands).mark_area(opacity=0.2).encode(x=x, y="low:Q", y2="high:Q", color=color,
                                                                     detail="run:N"))
    layers.append(alt.Chart(others).mark_line(point=True).encode(x=x, y=y, color=color, strokeDash=dash,
                                                                 detail="run:N", tooltip=tips))
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
    return plot_height(alt.layer(*layers), height)  # the legends below add to it


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
