"""Literal text in Markdown: escaping only what CommonMark (with GFM tables and strikethrough) would read
as syntax where the text lands, so ``19:48 UTC`` and ``LayerScope 0.1.0`` stay as written.

The dashboard's :func:`analysis.views.text.md_escape` also escapes Streamlit's own syntax (``:red[x]``,
``$x$``) and treats every string as the start of a line; a Markdown file needs neither. Here:

- inside a line (:func:`md_inline`): the characters that open inline syntax — backslash, backticks
  (code), ``*`` and ``_`` (emphasis), ``[`` ``]`` (links, and images after ``!``), ``<`` (raw HTML,
  autolinks), ``&`` (entities), ``~`` (strikethrough); line breaks become spaces (a blank line would
  end the paragraph and let the rest start any block);
- at the start of a line or a list item (:func:`md_block`): also what opens a block there — ``#``
  (heading), ``>`` (quote), ``-`` ``+`` (list; ``---``: a rule), ``1.`` / ``1)``, leading blanks;
- in a table cell (:func:`md_cell`): also ``|``;
- GFM's autolink literals (``www.host``, ``https://host``, ``name@host.tld``, GFM §6.9), which GitHub
  and GitLab link after parsing whatever the backslashes: an invisible word joiner
  (:data:`analysis.views.text.WORD_JOINER`) breaks each pattern, as the dashboard does.

Reference: CommonMark 0.31 §2.4 (backslash escapes), §4-5 (blocks), §6 (inlines); GFM §4.10 (tables).
"""

from __future__ import annotations

import re

from analysis.views.text import WORD_JOINER

#: where a GFM autolink literal would start: ``www`` before its dot, ``:`` before ``//``, before ``@``
_AUTOLINK = re.compile(r"(?i)(www)(?=\.)|(:)(?=//)|(?=@)")
_INLINE = re.compile(r"([\\`*_\[\]<&~])")
#: a block marker at a line's start: ATX heading, block quote, bullet, ordered-list number (each but
#: the quote needs a space or the end after it: "0.1.0" and "-x" are text), or a thematic break
_BLOCK_START = re.compile(r"^()(#{1,6}(?=\s|$)|>|[-+*](?=\s|$)|\d{1,9}(?=[.)](?:\s|$))|-(?=[-\s]*$))")


def md_inline(text) -> str:
    """``text`` as literal text anywhere inside a line of Markdown (not at its start)."""
    text = _AUTOLINK.sub(lambda m: (m.group(1) or m.group(2) or "") + WORD_JOINER, " ".join(str(text).splitlines()))
    return _INLINE.sub(r"\\\1", text)


def md_block(text) -> str:
    """``text`` as literal text at the start of a line or of a list item's content."""
    # leading blanks: 4 of them would start an indented code block, and a paragraph drops them anyway
    out = md_inline(text).lstrip()
    m = _BLOCK_START.match(out)
    if not m:
        return out
    lead, mark = m.groups()
    # "1." stays "1" + "\." (a digit cannot be escaped); any other marker gets its backslash before it
    return lead + (mark + "\\" if mark[0].isdigit() else "\\" + mark) + out[m.end():]


def md_cell(text) -> str:
    """``text`` as literal text in a GFM table cell (a ``|`` would end the cell)."""
    return md_block(text).replace("|", "\\|")
