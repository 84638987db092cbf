"""Shared pieces of Altair charts (pages and reports draw them): titles, export names."""

from __future__ import annotations

import re


def lazy_altair():
    import altair as alt  # only pages and reports draw

    return alt


def chart_title(text: str, *, dataset: str | None = None, details=(), labels: dict | None = None,
                models=()) -> dict:
    """A self-describing chart title: the text, then the dataset, budgets and other details, and
    "(random init)" on models with random weights, so an exported PNG/SVG says what it shows."""
    sub = [f"dataset {dataset}"] if dataset else []
    sub += [d for d in details if d]
    # "in", not "endswith": a side's label carries its side after the mark ("clip (random init) [text]")
    untrained = [m for m in models if "(random init)" in (labels or {}).get(m, m)]
    if untrained:
        sub.append(f"random init (untrained weights): {', '.join(untrained)}")
    return {"text": text, "subtitle": sub, "anchor": "start"}  # one subtitle line each: exports stay narrow


def wrapped_title(title: dict | str, width: int = 44) -> dict:
    """``title`` (:func:`chart_title`) with its text and each subtitle broken into lines of at most
    ``width`` characters, so a chart drawn at its own size stays as narrow as its plot: Vega widens a
    chart to its longest title line, and a 100-character line is 650 px, wider than a phone."""
    import textwrap

    def lines(text):
        return [line for part in ([text] if isinstance(text, str) else text)
                for line in (textwrap.wrap(part, width) or [""])]

    title = {"text": title} if isinstance(title, str) else title
    return {**title, "text": lines(title["text"]), "subtitle": lines(title.get("subtitle", []))}


def export_name(kind: str, dataset: str, *parts) -> str:
    """A file name stem for downloads that says what they hold: ``curves_DATASET_METRIC`` (unsafe
    characters replaced)."""
    stem = "_".join(str(x) for x in (kind, dataset, *parts) if x not in (None, ""))
    return re.sub(r"[^A-Za-z0-9._=-]+", "-", stem).strip("-")[:150]


def plot_height(chart, height: int):
    """``chart`` with a plot area ``height`` px tall, whatever its title, legends and axis titles take.

    Streamlit's theme sets ``autosize: fit`` with ``contains: padding``: the whole chart (title, a legend
    below the plot, a long rotated axis title) is fitted into ``height``, so a chart with a legend of
    four rows and a two-line title kept a plot a few pixels tall, and rows of a categorical axis lost
    their labels (tests/dashboard/test_browser_default_views.py reads the drawn axes).
    ``fit-x`` still fits the width to the column; the height is the plot's own."""
    alt = lazy_altair()
    return chart.properties(height=height, autosize=alt.AutoSizeParams(type="fit-x", contains="padding"))
