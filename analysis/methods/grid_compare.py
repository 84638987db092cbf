"""Comparing two layer × layer grids: which grids can be compared with a given one, their difference,
and cell labels for grids small enough to read. Pure pandas/numpy; the heatmap page draws the result.

A comparison changes one thing at a time (the budgets, model B, or the metric) so a difference can be
read as the effect of that one change.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: what a comparison may vary → the index columns that change (every other setting stays equal)
VARY = {"budgets": ("n_frames", "n_captions", "n_frames_b"), "model B": ("model_b",), "metric": ("metric",)}
#: the short name of each comparison in URL parameters (``?vs=metric&with_metric=cka``)
VARY_PARAM = {"budgets": "budgets", "model B": "model", "metric": "metric"}
SETTING = ("dataset", "pair_kind", "model_a", "model_b", "metric", "n_frames", "n_captions", "n_frames_b")
#: grids with at most this many layers per side get their values written in the cells
LABEL_MAX_SIDE = 16


def _same(a, b) -> bool:
    if a is None or (isinstance(a, float) and np.isnan(a)):
        return b is None or (isinstance(b, float) and np.isnan(b))
    return a == b


def budget_text(row) -> str:
    """``n_f=4, n_c=2`` (or ``n_f=4, n_f(B)=8`` for two vision models) for one grid-index or run row."""
    parts = []
    if pd.notna(row.get("n_frames")):
        parts.append(f"n_f={int(row['n_frames'])}")
    if pd.notna(row.get("n_captions")):
        parts.append(f"n_c={int(row['n_captions'])}")
    if pd.notna(row.get("n_frames_b")):
        parts.append(f"n_f(B)={int(row['n_frames_b'])}")
    return ", ".join(parts) or "one setting"


def alternatives(index: pd.DataFrame, row, vary: str) -> pd.DataFrame:
    """Rows of the grid ``index`` that differ from ``row`` only in what ``vary`` names (a key of
    :data:`VARY`), with a ``label`` column saying what differs. Empty when there is nothing to compare."""
    if vary not in VARY:
        raise ValueError(f"unknown comparison {vary!r}; expected one of {', '.join(VARY)}")
    keep = [c for c in SETTING if c not in VARY[vary] and c in index.columns]
    if vary == "model B":
        keep = [c for c in keep if c != "n_frames_b"]  # another vision model B may have other frame counts
    mask = np.ones(len(index), dtype=bool)
    for c in keep:
        mask &= np.array([_same(v, row[c]) for v in index[c]], dtype=bool)
    out = index[mask & (index["result_id"] != row["result_id"]).to_numpy()].copy()
    if vary == "budgets":
        out["label"] = [budget_text(r) for _, r in out.iterrows()]
    elif vary == "model B":
        out["label"] = out["model_b"].astype(str) + [f" ({budget_text(r)})" for _, r in out.iterrows()]
    else:
        out["label"] = out["metric"].astype(str)
    return out.drop_duplicates("label").reset_index(drop=True)


def difference(g1: dict, g2: dict) -> dict:
    """``g1 − g2`` cell by cell, as a grid dict the heatmap can draw.

    Shapes: both grids ``(L_a, L_b)``; a cell undefined in either is undefined (NaN) in the difference,
    and a layer degenerate in either grid stays marked (its flags are merged). There is no best cell
    (``best_a = best_b = None``): a difference has no direction to be best in. Raises ``ValueError``
    when the shapes differ (other models or layer counts: compare those side by side).
    """
    a, b = np.asarray(g1["grid"], dtype=float), np.asarray(g2["grid"], dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"a difference needs grids of one shape; these are {a.shape[0]}×{a.shape[1]} and "
                         f"{b.shape[0]}×{b.shape[1]} layers (compare them side by side)")
    with np.errstate(invalid="ignore"):
        diff = a - b
    diff[~(np.isfinite(a) & np.isfinite(b))] = np.nan
    flags = {}
    for side in ("degenerate_a", "degenerate_b"):
        merged = {**((g2.get("flags") or {}).get(side) or {}), **((g1.get("flags") or {}).get(side) or {})}
        if merged:
            flags[side] = merged
    return {"grid": diff, "flags": flags, "best_a": None, "best_b": None, "best_value": None, "ci_low": None,
            "ci_high": None, "n_boot": 0, "n_rows": diff.shape[0], "n_cols": diff.shape[1]}


def shared_domain(*grids: dict) -> list[float] | None:
    """``[min, max]`` over the finite cells of every grid: one colour scale for grids of one metric,
    so equal colours mean equal values side by side. ``None`` when no cell is finite."""
    vals = np.concatenate([np.asarray(g["grid"], dtype=float).ravel() for g in grids])
    vals = vals[np.isfinite(vals)]
    return [float(vals.min()), float(vals.max())] if len(vals) else None


def cell_labels(df: pd.DataFrame, n_rows: int, n_cols: int, *, digits: int = 2, diverging: bool = False,
                max_side: int = LABEL_MAX_SIDE) -> pd.DataFrame:
    """``df`` (a long grid: ``value`` per cell) with ``label`` (the value to ``digits`` decimals, ``""``
    when undefined) and ``dark`` (value in the lower half of the range, so the text is drawn light on a
    dark cell; with ``diverging`` colours, light is far from 0: beyond 60% of the largest |value|).
    Empty when the grid is larger than ``max_side`` layers per side: too small to read."""
    if n_rows > max_side or n_cols > max_side:
        return df.iloc[0:0].assign(label=pd.Series(dtype=str), dark=pd.Series(dtype=bool))
    out = df.copy()
    v = pd.to_numeric(out["value"], errors="coerce")
    finite = v[np.isfinite(v)]
    out["label"] = [f"{x:.{digits}f}" if np.isfinite(x) else "" for x in v]
    if diverging:
        top = finite.abs().max() if len(finite) else 0.0
        out["dark"] = (v.abs() > 0.6 * top).fillna(False).to_numpy(dtype=bool)
    else:
        mid = (finite.min() + finite.max()) / 2 if len(finite) else 0.0
        out["dark"] = (v < mid).fillna(False).to_numpy(dtype=bool)
    return out
