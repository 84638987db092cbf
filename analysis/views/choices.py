"""User choices (URL parameters, widget selections) validated against what the store holds."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Choice:
    value: object
    message: str | None = None  # set when the requested value was refused


def choose(requested, options, name: str, default=None) -> Choice:
    """``requested`` if it is one of ``options`` (compared as text, as URLs carry text), else the
    default with a friendly message. Nothing unvalidated reaches a query."""
    options = list(options)
    if not options:
        return Choice(None, None if requested in (None, "") else f"no {name} is available in this store")
    fallback = default if default in options else options[0]
    if requested is None or requested == "":
        return Choice(fallback)
    for opt in options:
        if str(opt) == str(requested):
            return Choice(opt)
    shown = str(requested)[:60]
    # numpy scalars print as np.int64(1) through repr: show the value as the URL would carry it
    plain = fallback.item() if isinstance(fallback, np.generic) else fallback
    return Choice(fallback, f"unknown {name} {shown!r} in the link; showing {plain!r} instead. "
                            f"Available: {', '.join(map(str, options[:12]))}{' ...' if len(options) > 12 else ''}")


def selection_to_layers(selection, n_rows: int, n_cols: int, default: tuple[int, int]) -> tuple[int, int]:
    """Layer pair from an Altair point selection on the heatmap (``{"layer_a": [..], "layer_b": [..]}``
    or a list of such points); anything malformed or out of range gives ``default``."""
    point = selection
    if isinstance(selection, dict) and "selection" in selection:
        point = selection["selection"]
    if isinstance(point, dict):
        for v in point.values():  # {"cell": [{"layer_a": 3, "layer_b": 5}]}
            if isinstance(v, list) and v and isinstance(v[0], dict):
                point = v[0]
                break
    if isinstance(point, list) and point:
        point = point[0]
    if not isinstance(point, dict):
        return default
    try:
        a, b = int(str(point.get("layer_a"))), int(str(point.get("layer_b")))
    except (TypeError, ValueError):
        return default
    if 0 <= a < n_rows and 0 <= b < n_cols:
        return a, b
    return default


def layers_from_params(la, lb, n_rows: int, n_cols: int, default: tuple[int, int]) -> tuple[int, int]:
    """Layer pair from URL text; anything that is not an in-range integer pair gives ``default``."""
    return selection_to_layers({"layer_a": la, "layer_b": lb}, n_rows, n_cols, default)
