"""The shuffled-pairing null of a grid's best cell on screen: reading it, in words, as curve levels."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.null import beyond_chance, null_kind, null_label
# one reading of a grid row's null (``flags["null"]``), the verdicts study's, so page and verdict agree
from analysis.studies.verdicts import grid_null
from analysis.views.stored_choices import curve_sources
from analysis.views.text import fmt_number


def grid_null_within(g: dict) -> dict | None:
    """The within-group null stored beside a grouped grid's default one (``flags["null_within"]``:
    fine-grained alignment within sources), or None. ``g``: a grid row as the storage readers return
    it (``flags`` decoded to a dict), as :func:`grid_null` reads it."""
    null = (g.get("flags") or {}).get("null_within")
    return null if isinstance(null, dict) and null.get("p") is not None else None


def null_text(null: dict | None, within: dict | None = None) -> str:
    """One clause on a best cell against its shuffled-pairing null, named by kind: the verdict, p,
    and the null's 95th percentile ("" without a null). ``p <= NULL_ALPHA`` (0.05): beyond what the
    grid maximum reaches under random pairings (between-group shuffles when items have a ``group``);
    else "no alignment beyond chance". ``within``: the within-group null, said after it as
    fine-grained alignment within sources (the best cell is a maximum: the null counts the selection)."""
    if not null:
        return ""
    how = f"{null['n_perm']} {null_label(null)}"
    claim = "fine-grained alignment within sources" if null_kind(null) == "within" else "alignment"
    verdict = ("beyond chance" if beyond_chance(null) else f"no {claim} beyond chance")
    out = (f"{verdict}: p = {fmt_number(null['p'])} against the grid maximum under {how} "
           f"(its 95th percentile {fmt_number(null['q95'])})")
    if within:
        out += (f"; fine-grained alignment within sources: p = {fmt_number(within['p'])} under {within['n_perm']} "
                f"within-group shuffles ({'beyond' if beyond_chance(within) else 'not beyond'} chance)")
    return out


def curve_null_levels(con, dataset) -> pd.DataFrame:
    """The shuffled-pairing null of each alignment curve's source grid: per model and curve, the
    null's 95th percentile ``q95`` of the grid maximum (a rule the curve's peak must clear), ``p`` of
    the best cell, ``n_perm`` and ``grouped``. The curve is a row maximum, whose own null lies at or
    below the grid maximum's, so the rule is conservative for layers other than the best."""
    rows = []
    for model, _, metric, g, _ in curve_sources(con, dataset):
        null = grid_null(g)
        if null is not None and null.get("q95") is not None and np.isfinite(null["q95"]):
            rows.append({"model": model, "metric": metric, "q95": float(null["q95"]), "p": float(null["p"]),
                         "n_perm": int(null["n_perm"]), "grouped": bool(null.get("grouped")),
                         "kind": null_kind(null)})
    return pd.DataFrame(rows, columns=["model", "metric", "q95", "p", "n_perm", "grouped", "kind"])


def null_levels_text(nulls: pd.DataFrame, labels: dict) -> str:
    """A caption for the dotted null rules of the layer curves: what they are and each model's p."""
    parts = [f"{labels.get(r.model, r.model)}: p = {fmt_number(r.p)}"
             + (f" ({null_label({'kind': r.kind})})" if r.kind != "plain" else "")
             for r in nulls.itertuples()]
    return ("Dotted rules: each model's shuffled-pairing null, the 95th percentile of its grid's best value when "
            "the items are paired at random (the maximum over all layer pairs, so it already counts the "
            f"selection); a peak below its rule is no alignment beyond chance. Best cells: {'; '.join(parts)}.")
