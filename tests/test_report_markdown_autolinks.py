"""report.md never makes a link of a name: GFM (GitHub, GitLab) links bare ``www.x``, ``https://x``
and ``a@x.y`` after parsing, whatever the backslashes, so the escaped text must not hold one of those
patterns (GFM spec 0.29 §6.9, written out here), while it still shows the name as written."""

import html
import re

import pytest

from analysis.report.md_escape import md_block, md_cell, md_inline
from analysis.views.text import WORD_JOINER
from tests.hostile import render

#: GFM §6.9 extended autolinks: www., http(s)://, and email addresses
GFM_AUTOLINKS = (re.compile(r"(?i)www\.[\w-]+"), re.compile(r"(?i)https?://[\w-]"),
                 re.compile(r"[\w.+-]+@[\w-]+\.[\w.-]*\w"))

NAMES = ["https://evil.example/model", "see www.evil.example now", "mail me@evil.example", "ftp http://a.b c",
         "org/model-7b (http://x.io)", "WWW.EVIL.EXAMPLE"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("escape", [md_inline, md_block, md_cell])
def test_a_url_in_a_name_is_shown_but_never_a_link(name, escape):
    out = escape(name)
    assert not any(p.search(out) for p in GFM_AUTOLINKS), out
    shown = render(f"x {out}" if escape is md_inline else out).replace(WORD_JOINER, "")
    assert html.escape(name, quote=True) in shown and "<a " not in shown
