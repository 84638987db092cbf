"""What a name the user gives may hold: model and dataset names, and run tags.

A name is printed in tables, logs, reports and the dashboard, one per line or cell, and a model name
may be followed by a side (``"clip [text]"``, :mod:`analysis.sides`). So a name is refused when it
is empty, holds a control character (a newline would split every line it is printed on), is longer
than :data:`MAX_NAME` characters, or (a model) holds ``[`` or ``]``: a one-sided model stored as
``"alpha [text]"`` would be read everywhere as the caption side of a model ``alpha``
(:func:`analysis.sides.split_side`). Every way a model name enters a store (precompute, a sweep file,
import-embeddings, merge, rename) asks :func:`name_problem` before it writes anything.
"""

from __future__ import annotations

import re

#: characters a model or dataset name may have (a hub id with its organisation is well under this)
MAX_NAME = 200
#: characters a run tag may have (it is one word of the `runs` listing's tags column)
MAX_TAG = 64


def name_problem(value, *, kind: str = "model") -> str | None:
    """Why ``value`` cannot be a ``kind`` (``"model"`` or ``"dataset"``) name, or None."""
    if not isinstance(value, str) or not value.strip():
        return "it is empty"
    if any(not c.isprintable() for c in value):
        return "it holds a control character (a newline or tab would break every line it is printed on)"
    if len(value) > MAX_NAME:
        return f"it has {len(value):,} characters; at most {MAX_NAME}"
    if value != value.strip():
        return "it starts or ends with a space"
    if kind == "model" and ("[" in value or "]" in value):
        return ("a bracketed suffix is how LayerScope names a dual encoder's sides (\"clip [text]\" is clip's "
                "caption side), so a model named so would be read as a side of another model; choose a name "
                f"without '[' and ']' (e.g. {plain_name(value)!r})")
    return None


def plain_name(value: str) -> str:
    """``value`` without side brackets, a name to suggest in their place: ``"alpha [text]"`` ->
    ``"alpha-text"``.

    >>> plain_name("alpha [text]"), plain_name("[x]y")
    ('alpha-text', 'xy')
    """
    out = re.sub(r"\s*\]\s*", "", re.sub(r"\s*\[\s*", "-", value)).strip("- ")
    return out or "model"


def check_name(value, *, kind: str = "model", flag: str = "--name") -> str:
    """``value`` when it can be a ``kind`` name, else a ValueError naming the flag and why."""
    why = name_problem(value, kind=kind)
    if why:
        shown = value if len(str(value)) <= 60 else f"{str(value)[:40]}…"
        raise ValueError(f"{flag} {shown!r} is not a {kind} name: {why}")
    return value
