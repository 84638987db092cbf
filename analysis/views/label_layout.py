"""Labels beside points without overlap: a greedy placement for small scatter maps (the model map).

Each label is a box of about ``char_px`` pixels per character by ``line_px`` pixels. Points are taken in
order; each label tries positions around its point at growing distances (above, below, right, left,
then the diagonals) and takes the first whose box overlaps no label placed before, no point marker and
stays inside the plot. A label that finds no place is not drawn (its point keeps the name in its
tooltip), so the result never has two overlapping labels. Cf. Imhof's cartographic label placement;
this is its simplest greedy form, enough for tens of points.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Box:
    """An axis-aligned box in pixels: ``x0 < x1``, ``y0 < y1`` (y grows downward, as on screen)."""

    x0: float
    y0: float
    x1: float
    y1: float

    def overlaps(self, other: "Box") -> bool:
        """True when the two boxes share interior area (touching edges do not count)."""
        return self.x0 < other.x1 and other.x0 < self.x1 and self.y0 < other.y1 and other.y0 < self.y1

    def inside(self, width: float, height: float) -> bool:
        return self.x0 >= 0 and self.y0 >= 0 and self.x1 <= width and self.y1 <= height


def _candidates(px: float, py: float, w: float, h: float, gaps) -> list[Box]:
    out = []
    for g in gaps:
        centres = [(px, py - g - h / 2), (px, py + g + h / 2), (px + g + w / 2, py), (px - g - w / 2, py),
                   (px + g + w / 2, py - g - h / 2), (px - g - w / 2, py - g - h / 2),
                   (px + g + w / 2, py + g + h / 2), (px - g - w / 2, py + g + h / 2)]
        out += [Box(cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2) for cx, cy in centres]
    return out


def place_labels(points_px: np.ndarray, texts, *, width: float, height: float, char_px: float = 7.0,
                 line_px: float = 14.0, marker_px: float = 8.0, gaps=(10, 16, 24, 36, 52)) -> list[Box | None]:
    """Label boxes for points already in pixel coordinates.

    Args:
        points_px: ``(n, 2)`` point centres in pixels (x right, y down).
        texts: ``n`` labels.
        width, height: the plot area in pixels; boxes stay inside it.
        char_px, line_px: a label's box is ``char_px · len(text) + 4`` by ``line_px`` pixels.
        marker_px: half the side of the square a point's marker covers (no label covers a marker).
        gaps: distances from the point tried in turn.
    Returns:
        ``n`` boxes (``None``: no free place; the label is left off). No two boxes overlap, none covers
        a marker, all lie inside ``[0, width] × [0, height]``.
    """
    pts = np.asarray(points_px, dtype=float).reshape(-1, 2)
    texts = [str(t) for t in texts]
    if len(texts) != len(pts):
        raise ValueError(f"{len(texts)} labels for {len(pts)} points")
    markers = [Box(x - marker_px, y - marker_px, x + marker_px, y + marker_px) for x, y in pts]
    placed: list[Box] = []
    out: list[Box | None] = []
    for (x, y), text in zip(pts, texts):
        w, h = char_px * len(text) + 4, line_px
        found = next((b for b in _candidates(x, y, w, h, gaps) if b.inside(width, height)
                      and not any(b.overlaps(o) for o in placed) and not any(b.overlaps(m) for m in markers)), None)
        out.append(found)
        if found is not None:
            placed.append(found)
    return out


def label_positions(x, y, texts, *, domain_x, domain_y, side: float, **kwargs) -> list[tuple[float, float] | None]:
    """:func:`place_labels` for a square chart of ``side`` pixels whose axes span ``domain_x`` and
    ``domain_y`` (data units, y upward): each label's centre back in data units, or ``None``."""
    (x0, x1), (y0, y1) = domain_x, domain_y
    px = (np.asarray(x, dtype=float) - x0) / (x1 - x0) * side
    py = (y1 - np.asarray(y, dtype=float)) / (y1 - y0) * side  # screen y grows downward
    boxes = place_labels(np.column_stack([px, py]), texts, width=side, height=side, **kwargs)
    return [None if b is None else (x0 + (b.x0 + b.x1) / 2 / side * (x1 - x0),
                                    y1 - (b.y0 + b.y1) / 2 / side * (y1 - y0)) for b in boxes]
