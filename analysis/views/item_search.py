"""Searching a dataset's items: every caption and every metadata value, as a literal substring or a
regular expression. Plain functions, no Streamlit.

A map shows one shortened caption per point (what its side embedded); a search reads the items
themselves (:func:`item_records`), so a phrase from any caption, however long, or a metadata value
finds its item. A regular expression comes from a link as well as from the box, so it runs under a
time budget (the ``regex`` package's ``timeout``; Python's ``re`` cannot stop a runaway pattern) and
a bad one gives one line, never an exception.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import pandas as pd

from analysis.views.embedding_map import flatten_metadata
from analysis.views.store_info import query_frame

#: a search text longer than this is cut (a pasted paragraph is not a query)
MAX_QUERY = 200
#: seconds a regular expression may spend over all items before the search stops with a message
REGEX_SECONDS = 0.5
#: the columns of a search's matches
FOUND_COLUMNS = ["idx", "item_id", "caption", "matched"]


def clean_query(text) -> str:
    """A search text as matched: stripped, control characters dropped, at most :data:`MAX_QUERY` long."""
    text = "".join(ch for ch in str(text or "") if ch.isprintable())
    return text.strip()[:MAX_QUERY]


def value_text(value) -> str:
    """A metadata value as searched and exported: a list as its items joined by ``", "``, a nested
    dict as JSON, ``None`` as ``""``, anything else as ``str``."""
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return ", ".join(value_text(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def item_records(con, dataset: str) -> pd.DataFrame:
    """Every item of ``dataset``: ``idx, item_id, video, captions`` (the full list, as stored) and
    ``metadata`` (``{field: text}``, flattened as
    :func:`analysis.views.embedding_map.flatten_metadata` names the fields, values by :func:`value_text`),
    in item order."""
    df = query_frame(con, "SELECT idx, item_id, video, captions, metadata FROM items WHERE dataset = ? ORDER BY idx",
             [dataset])
    df["captions"] = [[str(c) for c in (list(c) if c is not None else [])] for c in df["captions"]]
    df["metadata"] = [{k: value_text(v) for k, v in flatten_metadata(
        json.loads(m) if isinstance(m, str) else (m or {})).items()} for m in df["metadata"]]
    return df


@dataclass(frozen=True)
class SearchResult:
    found: pd.DataFrame  #: one row per matching item: FOUND_COLUMNS, in item order
    message: str | None  #: why nothing was searched (a bad or runaway expression), else None


def _matcher(query: str, regex: bool):
    """``(match(text) -> bool, message)``; ``match`` is None when the expression does not compile."""
    if not regex:
        q = query.casefold()
        return (lambda text: q in text.casefold()), None
    import regex as rx

    try:
        pattern = rx.compile(query, rx.IGNORECASE | rx.V0)
    except rx.error as exc:
        return None, f"not a regular expression: {query[:60]!r} ({exc}); nothing searched"
    deadline = time.monotonic() + REGEX_SECONDS
    return (lambda text: pattern.search(text, timeout=max(deadline - time.monotonic(), 1e-3)) is not None), None


def _first_match(row, match) -> tuple[str, str] | None:
    """Where ``row`` first matches and the caption to show: ``("item id" | "caption N" (1-based) | a
    metadata field, the matching caption or else the first)``; None when nowhere."""
    first = (row.captions or [""])[0]
    if match(str(row.item_id)):
        return "item id", first
    for n, caption in enumerate(row.captions, start=1):
        if match(caption):
            return f"caption {n}", caption
    for field, value in (row.metadata or {}).items():
        if match(value_text(value)):
            return field, first
    return None


def search_items(records: pd.DataFrame, query, *, regex: bool = False, only=None) -> SearchResult:
    """The items of ``records`` (:func:`item_records`) whose id, any caption or any metadata value
    contains ``query`` (case-insensitive; a literal substring, or with ``regex`` a regular expression
    searched anywhere in the text). ``only``: item ``idx`` to search among (the items a map draws).
    Each match shows the caption that matched, else the first, whole, and ``matched``: where it
    matched first. An empty query finds nothing; a bad expression, or one that runs past
    :data:`REGEX_SECONDS`, finds nothing with a one-line message."""
    query = clean_query(query)
    empty = pd.DataFrame(columns=FOUND_COLUMNS)
    if not query or records.empty:
        return SearchResult(empty, None)
    match, message = _matcher(query, regex)
    if match is None:
        return SearchResult(empty, message)
    rows = records if only is None else records[records["idx"].isin(set(int(i) for i in only))]
    out = []
    try:
        for row in rows.itertuples(index=False):
            hit = _first_match(row, match)
            if hit is not None:
                out.append((int(row.idx), str(row.item_id), hit[1], hit[0]))
    except TimeoutError:
        return SearchResult(empty, f"the regular expression {query[:60]!r} took too long (over {REGEX_SECONDS} s "
                                   "on these items); nothing found. Try a simpler one.")
    return SearchResult(pd.DataFrame(out, columns=FOUND_COLUMNS), None)


#: a metadata field filters the items when it has between 2 and this many distinct values
MAX_FILTER_LEVELS = 50


def filter_fields(records: pd.DataFrame, max_levels: int = MAX_FILTER_LEVELS) -> dict[str, list[str]]:
    """``{field: its distinct values, sorted}`` of every metadata field of ``records``
    (:func:`item_records`) with 2..``max_levels`` distinct values, a missing value as ``""``."""
    fields = sorted({f for md in records["metadata"] for f in (md or {})})
    out = {}
    for f in fields:
        values = sorted({value_text((md or {}).get(f)) for md in records["metadata"]})
        if 2 <= len(values) <= max_levels:
            out[f] = values
    return out


def filter_items(records: pd.DataFrame, field: str | None, values) -> set[int] | None:
    """The ``idx`` of the items whose ``field`` (as :func:`value_text` writes it, missing as ``""``) is
    one of ``values``; ``None`` (no filter) when no field or no value is chosen."""
    values = set(str(v) for v in (values or []))
    if not field or not values:
        return None
    return {int(i) for i, md in zip(records["idx"], records["metadata"])
            if value_text((md or {}).get(field)) in values}
