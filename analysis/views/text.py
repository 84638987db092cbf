"""Text for Markdown-rendering elements and numbers on screen: escaping and formatting."""

from __future__ import annotations

import re

import numpy as np


#: characters that open Markdown inline syntax anywhere in a line: code, emphasis, links and images,
#: raw HTML and autolinks, entities, tables, strikethrough, Streamlit's $maths$ and :directives:
_MD_INLINE = re.compile(r"([\\`*_\[\]<>&|~$:!#])")


#: GFM's autolink literals (``www.host``, ``https://host``, ``name@host.tld``) become links after
#: parsing, so no backslash escape stops them: an invisible WORD JOINER (U+2060) between ``www`` and
#: its dot, between ``:`` and ``//``, and before ``@`` breaks each pattern and shows nothing
_AUTOLINK = re.compile(r"(?i)(www)(?=\.)|(:)(?=//)|(?=@)")
WORD_JOINER = "\u2060"


#: what starts a block at the start of a line: list items, headings (``#`` is escaped anyway), setext
#: underlines, block quotes, ordered list numbers
_MD_LEADING = re.compile(r"^(\s*)([-+=]|\d+(?=[.)]))")


def md_escape(text) -> str:
    """``text`` as literal text inside Markdown (CommonMark, GFM tables, Streamlit's markdown).

    Model, dataset and item names, captions and URL parameters are user strings: rendered as
    Markdown, ``![x](http://host/x.png)`` makes the browser fetch a remote image, ``[a](javascript:..)``
    is a link and ``<script>`` raw HTML. CommonMark lets a backslash escape any ASCII punctuation,
    so each character that can open inline syntax is escaped (``<`` becomes ``\\<``, shown as
    ``<``), as is a line start that would begin a list; line breaks become spaces. Plain words,
    ``-``, ``.`` and ``/`` inside a line stay as they are, so messages remain readable as source.
    GitHub-flavoured Markdown (Streamlit's) also links bare ``www.x``, ``https://x`` and ``a@x.y``
    after parsing, which no escape prevents: an invisible word joiner (:data:`WORD_JOINER`) breaks
    those patterns, so a link in a URL parameter is shown, never clickable.
    """
    text = _AUTOLINK.sub(lambda m: (m.group(1) or m.group(2) or "") + WORD_JOINER, " ".join(str(text).splitlines()))
    text = _MD_INLINE.sub(r"\\\1", text)
    m = _MD_LEADING.match(text)
    if m:
        lead, mark = m.groups()
        text = lead + (mark + "\\" if mark[0].isdigit() else "\\" + mark) + text[m.end():]
    return text


def fmt_number(v, digits: int = 3) -> str:
    """A number for people: 3 significant decimals, scientific only when tiny or huge, '—' for none."""
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "—"
    v = float(v)
    if v != 0 and (abs(v) < 10 ** -digits or abs(v) >= 1e6):
        return f"{v:.{digits}g}"
    return f"{v:.{digits}f}"
