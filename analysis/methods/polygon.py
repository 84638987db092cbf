"""Point-in-polygon for a lasso drawn on a 2-D map: the even-odd rule, vectorised over the points."""

from __future__ import annotations

import numpy as np


def _as_xy(values, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError(f"Expected {name} with shape (n, 2), got shape {arr.shape} instead")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"Expected finite {name}, got NaN or inf")
    return arr


def points_in_polygon(points, polygon) -> np.ndarray:
    """Which points lie inside a closed polygon, by the even-odd rule.

    Args:
        points: float array with shape ``(n, 2)``: x, y of each point.
        polygon: float array with shape ``(m, 2)``: its vertices in order; the last joins the first
            (a repeated first vertex at the end is harmless). Fewer than 3 vertices enclose nothing.

    Returns:
        bool array with shape ``(n,)``.

    Rule: a horizontal ray from the point to ``+x`` crosses the polygon's edges; the point is inside
    when it crosses an odd number of them (the even-odd rule, as SVG's ``fill-rule: evenodd``,
    Plotly's lasso and :meth:`matplotlib.path.Path.contains_points`). A self-intersecting polygon's
    regions enclosed twice (a pentagram's centre) are therefore outside. An edge counts as crossed
    when its endpoints lie on opposite sides of the ray's line, with a vertex on the line counted
    above it (half-open in y), and the crossing is strictly right of the point.

    Points on the boundary: the rule decides them, not a tolerance, so two polygons that share an
    edge count each point of that edge exactly once (they partition the plane). For an axis-aligned
    rectangle this means ``[x0, x1) × [y0, y1)``: the left and bottom edges are in, the right and top
    edges out. A point is never both in and out; a boundary point's side is a convention, not a measure.

    Example:
        >>> points_in_polygon([[0.5, 0.5], [2, 2], [0, 0.5], [1, 0.5]], [[0, 0], [1, 0], [1, 1], [0, 1]])
        array([ True, False,  True, False])
    """
    pts = _as_xy(points, "points")
    poly = _as_xy(polygon, "polygon")
    inside = np.zeros(len(pts), dtype=bool)
    if len(poly) < 3 or len(pts) == 0:
        return inside
    px, py = pts[:, 0], pts[:, 1]
    x0, y0 = poly[:, 0], poly[:, 1]
    x1, y1 = np.roll(x0, -1), np.roll(y0, -1)
    # one edge at a time keeps memory at O(n) for long polygons (at most a few dozen edges in practice)
    for a, b, c, d in zip(x0, y0, x1, y1):
        straddles = (b > py) != (d > py)  # half-open in y: a vertex on the ray counts once, above it
        if not straddles.any():
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            cross_x = a + (py - b) * (c - a) / (d - b)  # d != b wherever straddles holds
        inside ^= straddles & (px < cross_x)
    return inside


def simplify_polygon(polygon, max_vertices: int = 64) -> np.ndarray:
    """At most ``max_vertices`` of a polygon's vertices, evenly spaced along its vertex order, the first
    kept; shape ``(min(m, max_vertices), 2)``. A hand-drawn lasso has hundreds of vertices a few
    pixels apart, so every k-th one keeps its outline to within a few pixels while the URL stays
    short. A repeated closing vertex (equal to the first) is dropped first."""
    poly = _as_xy(polygon, "polygon")
    if max_vertices < 3:
        raise ValueError(f"Expected max_vertices >= 3, got {max_vertices} instead")
    if len(poly) > 1 and np.array_equal(poly[0], poly[-1]):
        poly = poly[:-1]
    if len(poly) <= max_vertices:
        return poly
    keep = np.unique(np.floor(np.arange(max_vertices) * len(poly) / max_vertices).astype(int))
    return poly[keep]
