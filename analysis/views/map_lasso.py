"""The embedding map's lasso: the map drawn with Plotly (Streamlit reports a lasso only from
``st.plotly_chart``), the lasso's polygon as URL text and back, and the items inside it. Plain
functions, no Streamlit.

A selection arrives from ``st.plotly_chart(..., on_select="rerun")`` as ``{"points": [...],
"point_indices": [...], "box": [...], "lasso": [{"xref", "yref", "x": [...], "y": [...]}]}``: the lasso's
vertices in data (map) coordinates; a click gives ``points`` (each with its ``customdata``) and no lasso.
The items are always recomputed from the polygon (:func:`analysis.methods.polygon.points_in_polygon`),
never taken from the chart's list, so a copied link selects the same items in a fresh session.
"""

from __future__ import annotations

import html
import math

import numpy as np
import pandas as pd

from analysis.methods.polygon import points_in_polygon, simplify_polygon
from analysis.views.embedding_map import TOOLTIP_TITLES
from analysis.views.embedding_tools import DENSITY_THRESHOLD

#: the most vertices a lasso keeps in the URL (a longer one is thinned, :func:`simplify_polygon`)
MAX_VERTICES = 64
#: a link's lasso may hold a few more (hand-edited); anything longer is refused rather than thinned
MAX_LINK_VERTICES = 256
#: Vega-Lite's default categorical scheme (tableau10), so a series keeps its colour across the two maps
TABLEAU10 = ["#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2", "#ff9da6",
             "#9d755d", "#bab0ac"]


def lasso_from_selection(selection) -> np.ndarray | None:
    """The last lasso of a Plotly chart selection as vertices ``(m, 2)`` (map coordinates), at most
    :data:`MAX_VERTICES` of them; ``None`` when the selection holds no lasso of 3 or more finite vertices."""
    lassos = (selection or {}).get("lasso") or []
    if not lassos:
        return None
    last = lassos[-1] or {}
    try:
        poly = np.column_stack([np.asarray(last.get("x") or [], float), np.asarray(last.get("y") or [], float)])
    except (TypeError, ValueError):
        return None
    if len(poly) < 3 or not np.all(np.isfinite(poly)):
        return None
    return simplify_polygon(poly, MAX_VERTICES)


def clicked_idx(selection) -> int | None:
    """The ``idx`` of the last clicked point of a Plotly selection without a lasso or box (every trace
    of :func:`lasso_figure` carries ``idx`` first in its ``customdata``); ``None`` when none."""
    sel = selection or {}
    if sel.get("lasso") or sel.get("box"):
        return None
    for p in reversed(sel.get("points") or []):
        data = (p or {}).get("customdata")
        try:
            return int(data[0] if isinstance(data, (list, tuple)) else data)
        except (TypeError, ValueError, IndexError):
            continue
    return None


def decimals_for(points: pd.DataFrame) -> int:
    """Decimals a vertex keeps in the URL: about 1/5,000 of the map's larger extent (under a pixel on
    any screen), 0 to 9."""
    if points.empty:
        return 3
    span = max(float(np.ptp(points["x"].to_numpy(float))), float(np.ptp(points["y"].to_numpy(float))), 1e-9)
    return int(np.clip(4 - math.floor(math.log10(span)), 0, 9))


def lasso_param(polygon, decimals: int = 3) -> str:
    """A polygon as URL text ``x1,y1;x2,y2;...`` with ``decimals`` decimals (``-0`` written ``0``)."""
    def num(v):
        text = f"{round(float(v), decimals):.{decimals}f}".rstrip("0").rstrip(".") if decimals else f"{v:.0f}"
        return "0" if text in ("-0", "") else text
    return ";".join(f"{num(x)},{num(y)}" for x, y in np.asarray(polygon, float))


def parse_lasso(text) -> tuple[np.ndarray | None, str | None]:
    """``(polygon, message)`` from URL text ``x1,y1;x2,y2;...``: vertices ``(m, 2)``; ``(None, None)``
    when absent; ``(None, why)`` when the text is not 3 to :data:`MAX_LINK_VERTICES` pairs of finite numbers."""
    if text is None or str(text).strip() == "":
        return None, None
    why = (f"lasso {str(text)[:60]!r} in the link is not 3 to {MAX_LINK_VERTICES} points x,y separated by ';'; "
           "no lasso is shown")
    pairs = [p for p in str(text).strip().strip(";").split(";")]
    if not 3 <= len(pairs) <= MAX_LINK_VERTICES:
        return None, why
    try:
        poly = np.array([[float(v) for v in p.split(",")] for p in pairs], dtype=float)
    except ValueError:
        return None, why
    if poly.ndim != 2 or poly.shape[1] != 2 or not np.all(np.isfinite(poly)):
        return None, why
    return poly, None


def points_in_lasso(points: pd.DataFrame, polygon) -> pd.DataFrame:
    """The points (rows with ``x``, ``y``) inside ``polygon`` by the even-odd rule
    (:func:`analysis.methods.polygon.points_in_polygon`, which documents the boundary)."""
    if polygon is None or points.empty:
        return points.iloc[0:0]
    inside = points_in_polygon(points[["x", "y"]].to_numpy(float), polygon)
    return points[inside]


def _hover(points: pd.DataFrame, fields) -> tuple[np.ndarray, str]:
    """``customdata`` (``idx`` first, then each hover field as escaped text) and its hover template."""
    cols = [points["idx"].to_numpy()] + [np.array([html.escape("" if v is None else str(v)) for v in points[f]],
                                                  dtype=object) if f in points else np.full(len(points), "")
                                         for f in fields]
    data = np.column_stack(cols) if len(points) else np.empty((0, len(cols)), dtype=object)
    lines = [f"{html.escape(TOOLTIP_TITLES.get(f, f))}: %{{customdata[{n + 1}]}}" for n, f in enumerate(fields)]
    return data, "<br>".join(lines) + "<extra></extra>"


def _point_traces(go, points: pd.DataFrame, colour: str, kind: str, fields, two_sided: bool) -> list:
    """The points, one trace per colour value (a legend entry each) or one on a viridis scale."""
    scatter = go.Scattergl if len(points) > DENSITY_THRESHOLD else go.Scatter  # WebGL only where SVG would crawl
    symbols = {"text": "square"} if two_sided and colour != "series" else {}
    marker = dict(size=8, opacity=0.75)
    if kind == "quantitative":
        data, template = _hover(points, fields)
        return [scatter(x=points["x"], y=points["y"], mode="markers", customdata=data, hovertemplate=template,
                        name=colour, showlegend=False,
                        marker={**marker, "color": points[colour], "colorscale": "Viridis",
                                "colorbar": {"title": {"text": colour}, "orientation": "h", "y": -0.12},
                                "symbol": [symbols.get(s, "circle") for s in points["side"]]})]
    traces = []
    values = points[colour].astype(str)
    for n, value in enumerate(sorted(values.unique())):  # Vega-Lite sorts a nominal domain the same way
        part = points[values == value]
        data, template = _hover(part, fields)
        traces.append(scatter(x=part["x"], y=part["y"], mode="markers", customdata=data, hovertemplate=template,
                              name=value, marker={**marker, "color": TABLEAU10[n % len(TABLEAU10)],
                                                  "symbol": [symbols.get(s, "circle") for s in part["side"]]}))
    return traces


def lasso_figure(points: pd.DataFrame, *, colour: str = "series", kind: str = "nominal", two_sided: bool = False,
                 tooltip_fields=("series", "item_id", "caption"), highlight=(), focus=(), marked=(), lasso=None,
                 height: int = 560):
    """The embedding map as a Plotly figure for a lasso: the same points, colours (tableau10 by value, a
    ``quantitative`` field on viridis) and hover fields as
    :func:`analysis.views.embedding_tools.explore_chart` (no frame on hover: Plotly's hover is text),
    the same rings (``highlight`` black, ``marked`` orange, ``focus`` red, its first wider), no axes
    (map coordinates have no units), drag mode lasso. ``lasso``: a polygon ``(m, 2)`` (from the link)
    outlined dashed. Every trace's ``customdata`` starts with the point's ``idx`` (a click names its item)."""
    import plotly.graph_objects as go

    fields = [f for f in tooltip_fields if f != "image"]
    traces = _point_traces(go, points, colour, kind, fields, two_sided) if len(points) else []
    focus = list(focus)
    for ids, ring, size in ((highlight, "black", 15), (list(marked), "#ff7f0e", 18), (focus[1:], "#d62728", 15),
                            (focus[:1], "#d62728", 22)):
        part = points[points["idx"].isin(list(ids))] if len(ids) else points.iloc[0:0]
        if len(part):
            data, template = _hover(part, ["item_id", "caption"])
            traces.append(go.Scatter(x=part["x"], y=part["y"], mode="markers", customdata=data,
                                     hovertemplate=template, showlegend=False,
                                     marker={"symbol": "circle-open", "size": size, "color": ring,
                                             "line": {"width": 2}}))
    if lasso is not None and len(points):
        # the outline is clipped to the points' extent, as the box's is: a hand-edited link (say ±1e9)
        # would otherwise shrink every point into one
        xs = np.clip(np.append(lasso[:, 0], lasso[0, 0]), points["x"].min(), points["x"].max())
        ys = np.clip(np.append(lasso[:, 1], lasso[0, 1]), points["y"].min(), points["y"].max())
        traces.append(go.Scatter(x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
                                 line={"color": "#555", "dash": "dash", "width": 1}))
    fig = go.Figure(traces)
    axis = {"visible": False, "showgrid": False, "zeroline": False}
    fig.update_layout(height=height, dragmode="lasso", clickmode="event+select", xaxis=axis,
                      yaxis=axis, margin={"l": 10, "r": 10, "t": 10, "b": 10},
                      legend={"orientation": "h", "y": -0.05}, plot_bgcolor="white")
    return fig
