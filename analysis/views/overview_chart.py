"""The Overview's one chart: each model's pick against its last layer, as the paired gain the verdict
tests, with its 95% interval, the zero line (no gain: the null of the test) and the practical margin.

The rows come from :func:`analysis.views.verdicts.verdicts`; nothing is recomputed here.
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.methods.layer_selection import PRACTICAL_MARGIN

#: how each row's interval reads, in the chart's legend
INTERVAL_KINDS = ("excludes 0", "includes 0", "no interval", "pick is the last layer")

_COLUMNS = ["dataset", "model", "status", "metric", "layer", "last_layer", "gain", "gain_low", "gain_high",
            "interval", "note"]


def _finite(x) -> float | None:
    return float(x) if x is not None and math.isfinite(float(x)) else None


def _row(dataset: str, v: dict) -> dict:
    """One verdict line as a chart row: ``gain`` = relative paired gain of the lead metric at the pick
    over the last layer (+ = the pick is better), ``gain_low``/``gain_high`` its 95% paired-bootstrap
    interval (:func:`analysis.methods.layer_selection.paired_gain`), ``None`` where undefined."""
    vd = v["verdict"]
    row = dict(dataset=dataset, model=v["label"], status=vd.status, metric=vd.lead,
               layer=vd.layer, last_layer=vd.last_layer, gain=None, gain_low=None,
               gain_high=None, interval=None, note=None)
    if vd.layer is None:  # no pick at all: nothing to draw, the reason is said in the line
        row["note"] = f"no layer picked ({vd.status})"
        return row
    if vd.layer == vd.last_layer:
        return {**row, "gain": 0.0, "interval": "pick is the last layer"}
    cmp = vd.vs_last or {}
    gain = _finite(cmp.get("gain"))
    if gain is None:
        row["note"] = ("the last layer is degenerate or undefined" if not cmp
                       else "the last layer scores 0: no relative gain")
        return row
    lo, hi = _finite(cmp.get("gain_low")), _finite(cmp.get("gain_high"))
    kind = "no interval" if lo is None or hi is None else ("excludes 0" if lo > 0 or hi < 0 else "includes 0")
    return {**row, "gain": gain, "gain_low": lo, "gain_high": hi, "interval": kind}


def gain_table(by_dataset: dict[str, list[dict]]) -> pd.DataFrame:
    """Rows of the Overview chart, one per (dataset, model) verdict.

    Args:
        by_dataset: dataset -> :func:`analysis.views.verdicts.verdicts` of it.
    Returns:
        columns ``dataset, model, status, metric, layer, last_layer, gain, gain_low, gain_high,
        interval, note``; ``gain`` is a fraction (0.1 = +10%), ``None`` when it cannot be drawn
        (``note`` says why); ``interval`` is one of :data:`INTERVAL_KINDS`.
    """
    rows = [_row(ds, v) for ds, found in by_dataset.items() for v in found]
    return pd.DataFrame(rows, columns=_COLUMNS)


def _all_last(rows: pd.DataFrame) -> bool:
    """Whether every row's pick is its model's last layer (a gain of 0 by definition, no interval)."""
    return bool((rows["interval"] == "pick is the last layer").all())


def gain_note(table: pd.DataFrame) -> str:
    """One line on what the chart cannot draw: ``""`` when every row is drawn; the whole answer when no
    row is (an empty store, or no pick anywhere), each distinct reason once with its count."""
    if not len(table):
        return "No layer verdict yet: the chart needs per-layer results (`layerscope analyze`)."
    undrawn = table[table["gain"].isna()]
    drawn = table[table["gain"].notna()]
    if len(drawn) and _all_last(drawn) and not len(undrawn):
        return "Every model's pick is its last layer: no gain over it to draw."
    if not len(undrawn):
        return ""
    counts = undrawn["note"].fillna("undefined").value_counts()
    parts = "; ".join(f"{n} × {why}" if n > 1 else why for why, n in counts.items())
    if len(undrawn) == len(table):
        return f"Nothing to draw: no model has a gain over its last layer ({parts})."
    return f"{len(undrawn)} of {len(table)} model(s) not drawn: {parts}."


def gain_chart(table: pd.DataFrame, *, margin: float = PRACTICAL_MARGIN, height_per_row: int = 32):
    """Each model's gain over its last layer (x, percent) with its 95% paired-bootstrap interval as a
    bar, a dashed zero line (no gain: the test's null), a dotted line at ``+margin`` (the practical
    margin a recommendation also needs), and the point's fill saying whether the interval excludes
    zero; ``None`` when no row has a gain."""
    from analysis.views.charts import lazy_altair, plot_height

    alt = lazy_altair()
    d = table[table["gain"].notna()].copy()
    if not len(d) or _all_last(d):  # nothing but zeros without intervals: gain_note says it in a sentence
        return None
    # controls (random-init weights) after the trained models, grey and faded: a control's gain is no result
    d["control"] = d["status"] == "control"
    d = d.sort_values("control", kind="stable")
    d["row"] = [f"{m} · {ds}" if table["dataset"].nunique() > 1 else m for m, ds in zip(d["model"], d["dataset"])]
    d["pick"] = [f"layer {int(a)} vs last {int(b)}" for a, b in zip(d["layer"], d["last_layer"])]
    ends = [*d["gain"], *d["gain_low"].dropna(), *d["gain_high"].dropna(), 0.0, margin]
    span = max(abs(min(ends)), abs(max(ends))) * 1.1 or 1.0
    scale = alt.Scale(domain=[-span, span])
    # "model · dataset" in two lines: the legends start where the plot does, after these labels
    y = alt.Y("row:N", title=None, sort=list(d["row"]), axis=alt.Axis(labelLimit=0, labelOverlap=False,
                                                                   labelExpr="split(datum.label, ' · ')"))
    # a legend starts at the plot's left edge, after the model names, and the axis title is centred on the
    # plot: one legend entry per row, one legend above, the title in two lines ending at the plot's right
    # edge, so a phone's column holds them
    x = alt.X("gain:Q", title=["gain of the pick over the last layer", "(95% paired interval)"], scale=scale,
              axis=alt.Axis(format="+%", labelAngle=0, titleLimit=0, titleAnchor="end"))
    tips = [alt.Tooltip("model:N"), alt.Tooltip("dataset:N"), alt.Tooltip("pick:N", title="layers"),
            alt.Tooltip("metric:N", title="lead metric"), alt.Tooltip("status:N", title="verdict"),
            alt.Tooltip("gain:Q", format="+.1%"), alt.Tooltip("gain_low:Q", format="+.1%", title="95% CI low"),
            alt.Tooltip("gain_high:Q", format="+.1%", title="95% CI high"), alt.Tooltip("interval:N")]
    fill = alt.Fill("interval:N", title="interval", scale=alt.Scale(
        domain=list(INTERVAL_KINDS), range=["#1f77b4", "white", "#bbbbbb", "#2ca02c"]),
        legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=0, columns=1))
    lines = pd.DataFrame({"gain": [0.0, margin], "line": ["no gain (null)", f"practical margin {margin:.0%}"]})
    rules = alt.Chart(lines).mark_rule(color="gray").encode(
        x=alt.X("gain:Q", scale=scale), strokeDash=alt.StrokeDash("line:N", title=None, scale=alt.Scale(
            domain=list(lines["line"]), range=[[4, 4], [1, 3]]), legend=alt.Legend(orient="top", direction="vertical", labelLimit=0, columns=1)))
    base = alt.Chart(d)
    ink = alt.condition("datum.control", alt.value("#999999"), alt.value("#1f77b4"))
    faded = alt.condition("datum.control", alt.value(0.5), alt.value(1.0))
    bars = base.mark_rule(strokeWidth=2).encode(
        x=alt.X("gain_low:Q", scale=scale), x2="gain_high:Q", y=y, color=ink, opacity=faded, tooltip=tips)
    points = base.mark_point(size=90, filled=False, strokeWidth=2).encode(
        x=x, y=y, fill=fill, stroke=ink, opacity=faded, tooltip=tips)
    # one model still gets a readable chart (its axis and legend need about 120 px)
    # the plot's own height: every row keeps its label whatever the legends below take
    return plot_height(alt.layer(rules, bars, points), max(120, height_per_row * len(d)))
