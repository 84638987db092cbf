"""The embedding map's exploring tools: search (:mod:`analysis.views.item_search`), a clicked point's
neighbours, a box selection listed and exported, colour by any metadata field (categorical or
numeric), and a density view for large N. Plain functions, no Streamlit: the page turns widget and
chart-selection values into calls of these.

A chart selection arrives from ``st.altair_chart(..., on_select="rerun")`` as a dict keyed by the
selection's name: a point selection (:data:`PICK`) as a list of the clicked points' fields, an
interval selection (:data:`BOX`) as ``{field: [low, high]}`` per encoded field.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from analysis.views.charts import lazy_altair
from analysis.views.embedding_map import TOOLTIP_TITLES, embedding_map_points, flatten_metadata
from analysis.views.item_search import MAX_QUERY, clean_query, value_text  # noqa: F401  (the search's text rules)
from analysis.views.store_info import query_frame

#: the map's point selection (a click) and interval selection (a drag) as Vega-Lite params
PICK, BOX = "pick", "box"
#: above this many points the map is drawn as binned counts unless points are asked for
DENSITY_THRESHOLD = 5000
#: the density view's most cells per axis
DENSITY_BINS = 40


# ------------------------------------------------------------------------------------------ metadata
def numeric_metadata(metadata: list) -> pd.DataFrame:
    """Numeric item metadata usable as a continuous colour: one float column per field whose present
    values are all numbers (``int``/``float``, not ``bool``) with at least 2 distinct finite values;
    fields as :func:`analysis.views.embedding_map.flatten_metadata` names them
    (``scene.speed`` → ``scene_speed``); a missing value is NaN. ``metadata``: one dict per item."""
    df = pd.DataFrame([flatten_metadata(md) for md in metadata], index=range(len(metadata)))
    keep = {}
    for c in df.columns:
        present = [v for v in df[c] if v is not None and not (isinstance(v, float) and math.isnan(v))]
        if not present or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
            continue
        col = pd.to_numeric(df[c], errors="coerce").astype(float)
        if col[np.isfinite(col)].nunique() >= 2:
            keep[c] = col.where(np.isfinite(col))
    return pd.DataFrame(keep, index=df.index)[sorted(keep)]


def map_points_for_tools(con, result_id) -> dict:
    """:func:`analysis.views.embedding_map.embedding_map_points` with what the tools need on top: ``meta["fields"]``
    (``{field: "nominal" | "quantitative"}``, every metadata field that can colour the map; a numeric
    field is quantitative even when it has few values) and, per point, ``run_id`` and ``layer`` (the
    run and layer its series was embedded at, for its neighbours)."""
    mp = embedding_map_points(con, result_id)
    meta = mp["meta"]
    fields = {c: "nominal" for c in meta.get("colour_fields") or []}
    if mp["reason"]:
        meta["fields"] = fields
        return mp
    pts = mp["points"]
    md = query_frame(con, "SELECT idx, metadata FROM items WHERE dataset = ? ORDER BY idx", [meta["dataset"]])
    nums = numeric_metadata([json.loads(m) if isinstance(m, str) else (m or {}) for m in md["metadata"]])
    nums.index = md["idx"].to_numpy()
    reserved = set(pts.columns) - set(fields)
    for c in nums.columns:
        if c in reserved:
            continue
        pts[c] = nums.loc[pts["idx"], c].to_numpy()
        fields[c] = "quantitative"
    # the map's series are written in the order of its runs (one per side)
    series = list(pd.unique(pts["series"]))
    if len(series) == len(meta["run_ids"]):
        by = {s: (r, int(layer)) for s, r, layer in zip(series, meta["run_ids"], meta["layers"])}
        pts["run_id"] = pts["series"].map(lambda s: by[s][0])
        pts["layer"] = pts["series"].map(lambda s: by[s][1])
    meta["fields"] = dict(sorted(fields.items()))
    return {"points": pts, "meta": meta, "reason": None}


# ------------------------------------------------------------------------------------------ selections
def picked_items(selection, points: pd.DataFrame) -> list[int]:
    """The item indices (``idx``) of the clicked points in a chart selection (``{PICK: [{"idx": 3, ...}]}``),
    in click order, those not on the map dropped."""
    chosen = (selection or {}).get(PICK) or []
    on_map = set(int(i) for i in points["idx"]) if len(points) else set()
    out = []
    for p in chosen:
        try:
            i = int((p or {}).get("idx"))
        except (TypeError, ValueError):
            continue
        if i in on_map and i not in out:
            out.append(i)
    return out


def box_from_selection(selection) -> tuple[float, float, float, float] | None:
    """``(x0, x1, y0, y1)`` (each pair sorted) of a chart's interval selection (``{BOX: {"x": [a, b],
    "y": [c, d]}}``; a density view's cells give ``x0``/``y0`` keys); ``None`` when there is none."""
    box = (selection or {}).get(BOX) or {}
    xs = box.get("x", box.get("x0"))
    ys = box.get("y", box.get("y0"))
    if not xs or not ys or len(xs) != 2 or len(ys) != 2:
        return None
    try:
        x0, x1, y0, y1 = (float(v) for v in (*xs, *ys))
    except (TypeError, ValueError):
        return None
    if not all(np.isfinite([x0, x1, y0, y1])):
        return None
    return min(x0, x1), max(x0, x1), min(y0, y1), max(y0, y1)


def box_param(box) -> str:
    """A box as URL text ``x0,x1,y0,y1`` (9 significant digits: the round trip keeps every point inside)."""
    return ",".join(f"{v:.9g}" for v in box)


def parse_box(text) -> tuple[tuple[float, float, float, float] | None, str | None]:
    """``(box, message)`` from URL text ``x0,x1,y0,y1``; ``(None, None)`` when absent, ``(None, why)``
    when the text is not four finite numbers."""
    if text is None or str(text).strip() == "":
        return None, None
    parts = str(text).split(",")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if len(values) != 4 or not all(np.isfinite(values)):
        return None, f"box {str(text)[:60]!r} in the link is not four numbers x0,x1,y0,y1; no box is shown"
    x0, x1, y0, y1 = values
    return (min(x0, x1), max(x0, x1), min(y0, y1), max(y0, y1)), None


def points_in_box(points: pd.DataFrame, box) -> pd.DataFrame:
    """The points inside ``box`` ``(x0, x1, y0, y1)``, edges included."""
    if box is None or points.empty:
        return points.iloc[0:0]
    x0, x1, y0, y1 = box
    inside = points["x"].between(x0, x1) & points["y"].between(y0, y1)
    return points[inside]


#: the first columns of an exported selection; ``caption_1`` ... and the metadata fields follow
EXPORT_COLUMNS = ["item_id", "series", "run_id", "layer", "x", "y"]


def selection_table(points: pd.DataFrame, records: pd.DataFrame) -> pd.DataFrame:
    """The selected points as a table to list and export, one row per point (an item on a two-sided
    map has two): :data:`EXPORT_COLUMNS` (``run_id``/``layer``: the run and layer the point's series
    embeds; x, y are map coordinates, which have no units), then every caption of the item whole
    (``caption_1``, ``caption_2``, ...; a map shows one, shortened) and every metadata field of
    ``records`` (:func:`analysis.views.item_search.item_records`) as text, a field named like one of
    the columns before it prefixed ``metadata_``; a field an item lacks is empty."""
    info = records.set_index("idx")
    out = pd.DataFrame({c: points[c].to_numpy() if c in points else None for c in EXPORT_COLUMNS})
    captions = [list(info.at[int(i), "captions"]) for i in points["idx"]]
    for n in range(max((len(c) for c in captions), default=0)):
        out[f"caption_{n + 1}"] = [c[n] if n < len(c) else "" for c in captions]
    metadata = [info.at[int(i), "metadata"] or {} for i in points["idx"]]
    for field in sorted({f for md in metadata for f in md}):
        name = f"metadata_{field}" if field in out.columns else field
        out[name] = [value_text(md.get(field)) for md in metadata]
    return out.reset_index(drop=True)


def selection_csv(points: pd.DataFrame, records: pd.DataFrame) -> bytes:
    """:func:`selection_table` as UTF-8 CSV."""
    return selection_table(points, records).to_csv(index=False).encode("utf-8")


# ------------------------------------------------------------------------------------------ density
def _edges(values: np.ndarray, bins: int) -> np.ndarray:
    lo, hi = float(np.min(values)), float(np.max(values))
    if hi - lo <= 1e-12 * max(1.0, abs(lo)):  # a flat axis: one cell-width around the value
        lo, hi = lo - 0.5, hi + 0.5
    return np.linspace(lo, hi, bins + 1)


def density_bins(n_points: int) -> int:
    """Cells per axis for ``n_points``: about four points per cell on average, from 5 to
    :data:`DENSITY_BINS` (a few dozen points on a 40 × 40 grid would be one point per cell)."""
    return int(np.clip(round(np.sqrt(max(n_points, 1) / 4)), 5, DENSITY_BINS))


def density_cells(points: pd.DataFrame, bins: int | None = None) -> pd.DataFrame:
    """Points counted on a ``bins × bins`` grid over the map's extent: one row per non-empty cell,
    ``x0, x1, y0, y1, count`` (cells are half-open ``[x0, x1)`` except the last, which holds the
    maximum, as :func:`numpy.histogram2d`); the counts sum to the number of points. A flat axis (all
    points at one coordinate) gets one unit of width around it. ``bins``: :func:`density_bins` when ``None``."""
    cols = ["x0", "x1", "y0", "y1", "count"]
    if points.empty:
        return pd.DataFrame(columns=cols)
    x, y = points["x"].to_numpy(float), points["y"].to_numpy(float)
    bins = density_bins(len(x)) if bins is None else int(bins)
    ex, ey = _edges(x, bins), _edges(y, bins)
    counts, _, _ = np.histogram2d(x, y, bins=[ex, ey])
    i, j = np.nonzero(counts)
    return pd.DataFrame({"x0": ex[i], "x1": ex[i + 1], "y0": ey[j], "y1": ey[j + 1],
                         "count": counts[i, j].astype(int)}, columns=cols)


def selection_modes(density: bool) -> list[str]:
    """The chart's selections Streamlit reports: a click and a drag on points, a drag only on the
    density view (no point is drawn to click)."""
    return [BOX] if density else [PICK, BOX]


def use_density(n_points: int, requested: bool) -> bool:
    """The density view is drawn when asked for or when the map has more than :data:`DENSITY_THRESHOLD` points."""
    return bool(requested) or n_points > DENSITY_THRESHOLD


# ------------------------------------------------------------------------------------------ chart
def explore_chart(points: pd.DataFrame, *, colour: str = "series", kind: str = "nominal", two_sided: bool = False,
                  connect: bool = False, tooltip_fields=("series", "item_id", "caption"), highlight=(),
                  focus=(), marked=(), density: bool = False, box=None, height: int = 560, selectable: bool = True):
    """The embedding map with its tools (points coloured by
    ``colour``, a ``quantitative`` field on a continuous scale, no axes: UMAP coordinates have no
    units), with a click selection :data:`PICK` (by ``idx``) and a drag selection :data:`BOX` (on x
    and y); ``highlight`` (item ``idx``, e.g. search matches) ringed in black, ``focus`` (a clicked
    item, ringed wider, then its neighbours) ringed in red, ``marked`` (a selection made on another map)
    ringed in orange; ``selectable=False`` draws no selections (a linked map follows the main one).
    ``density``: binned counts (:func:`density_cells`) instead
    of points, the rings still drawn; a click then selects nothing (no point is drawn). ``box``
    ``(x0, x1, y0, y1)`` (a box from the link) is outlined dashed, within the points' extent."""
    alt = lazy_altair()
    pick = alt.selection_point(name=PICK, fields=["idx"], on="click", clear="dblclick")
    brush = alt.selection_interval(name=BOX, encodings=["x", "y"])
    params = [pick, brush] if selectable else []
    # UMAP coordinates have no origin: the scales fit the points, not zero
    x = alt.X("x:Q", title=None, axis=None, scale=alt.Scale(zero=False))
    y = alt.Y("y:Q", title=None, axis=None, scale=alt.Scale(zero=False))
    legend = alt.Legend(orient="bottom", labelLimit=0, titleLimit=0,
                        columns=1 if colour == "series" else 3)
    layers = []
    if density:
        cells = density_cells(points)
        layers.append(alt.Chart(cells).mark_rect().encode(
            x=alt.X("x0:Q", title=None, axis=None, scale=alt.Scale(zero=False)), x2="x1:Q",
            y=alt.Y("y0:Q", title=None, axis=None, scale=alt.Scale(zero=False)), y2="y1:Q",
            color=alt.Color("count:Q", title="points per cell", scale=alt.Scale(scheme="blues", domainMin=0),
                            legend=alt.Legend(orient="bottom", format="d")),
            tooltip=[alt.Tooltip("count:Q", title="points")]).add_params(*params[1:]))
    else:
        tips = [alt.Tooltip(f"{f}:{'Q' if f == colour and kind == 'quantitative' else 'N'}",
                            title=TOOLTIP_TITLES.get(f, f)) for f in tooltip_fields]
        if kind == "quantitative":
            color = alt.Color(f"{colour}:Q", title=colour, scale=alt.Scale(scheme="viridis"),
                              legend=alt.Legend(orient="bottom", titleLimit=0))
        else:
            color = alt.Color(f"{colour}:N", title=None if colour == "series" else colour, legend=legend)
        encoding = dict(x=x, y=y, tooltip=tips, color=color)
        if colour != "series" and two_sided:
            encoding["shape"] = alt.Shape("side:N", title="side", legend=legend)
        base = alt.Chart(points)
        if connect and two_sided:
            layers.append(base.mark_line(opacity=0.15, color="gray").encode(x=x, y=y, detail="idx:N"))
        layers.append(base.mark_point(size=50, opacity=0.75, filled=True).encode(**encoding).add_params(*params))
    focus = list(focus)
    # search matches in black, another map's selection in orange, the clicked item (a wider ring) and its
    # neighbours in red
    for ids, colour_ring, size in ((highlight, "black", 220), (list(marked), "#ff7f0e", 320),
                                   (focus[1:], "#d62728", 220), (focus[:1], "#d62728", 480)):
        ring = points[points["idx"].isin(list(ids))] if len(ids) else points.iloc[0:0]
        if len(ring):
            layers.append(alt.Chart(ring).mark_point(size=size, filled=False, strokeWidth=2, color=colour_ring)
                          .encode(x=x, y=y, tooltip=[alt.Tooltip("item_id:N", title="item"),
                                                     alt.Tooltip("caption:N", title="caption")]))
    if box is not None and len(points):
        # the outline is clipped to the points' extent: it shares the map's scales, and a box from a
        # hand-edited link (say ±1e9) would otherwise shrink every point into one
        x0, x1 = np.clip(box[:2], points["x"].min(), points["x"].max())
        y0, y1 = np.clip(box[2:], points["y"].min(), points["y"].max())
        layers.append(alt.Chart(pd.DataFrame({"x": [x0], "x2": [x1], "y": [y0], "y2": [y1]})).mark_rect(
            fill=None, stroke="#555", strokeDash=[4, 3]).encode(x=x, x2="x2:Q", y=y, y2="y2:Q"))
    return alt.layer(*layers).properties(height=height)


def neighbour_rows(nn: pd.DataFrame, items: pd.DataFrame) -> pd.DataFrame:
    """A neighbours table (:func:`analysis.views.neighbours.neighbours`: ``rank, idx, cosine``) with each
    neighbour's ``item_id``, first ``caption`` and ``video`` from the dataset's items
    (:func:`analysis.views.neighbours.items`: every item, also those a sampled map does not draw)."""
    info = items.set_index("idx")
    out = nn.assign(item_id=info.loc[nn["idx"], "item_id"].to_numpy(),
                    caption=[(list(c) or [""])[0] if c is not None else "" for c in info.loc[nn["idx"], "captions"]],
                    video=info.loc[nn["idx"], "video"].to_numpy())
    return out[["rank", "idx", "item_id", "cosine", "caption", "video"]].reset_index(drop=True)
