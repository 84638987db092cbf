"""Issue #33 item 9: the report marks each verdict status with an inline SVG icon and a word, never an
emoji (a machine without an emoji font drew a tie and a recommendation as the same box)."""

import re
import xml.etree.ElementTree as ET

from analysis.report.html import _SHAPES, _verdicts_html
from analysis.report.markdown import _verdicts_md
from analysis.views.verdicts import VERDICT_BADGES, VERDICT_WORDS

STATUSES = sorted(VERDICT_BADGES)


def report(statuses):
    return {"datasets": [{"dataset": "d", "verdicts": [{"status": s, "sentence": f"model {s} sentence"}
                                                       for s in statuses]}]}


def test_every_status_has_its_own_icon_and_word():
    assert set(_SHAPES) == set(VERDICT_WORDS) == set(STATUSES)
    assert len({body for _, body in _SHAPES.values()}) == len(STATUSES)
    assert len(set(VERDICT_WORDS.values())) == len(STATUSES)


def test_html_marks_are_svg_and_words_without_emoji():
    html = _verdicts_html(report(STATUSES))
    items = re.findall(r"<li>(.*?)</li>", html)
    assert len(items) == len(STATUSES)
    for status, li in zip(STATUSES, items):
        svg = re.search(r"<svg.*?</svg>", li).group(0)
        ET.fromstring(svg)  # well-formed inline SVG
        assert f"<b>{VERDICT_WORDS[status]}</b>" in li
    # no character outside the Basic Multilingual Plane's symbol blocks where emoji live
    assert not re.search("[\u2190-\u2bff\U0001f000-\U0001faff\ufe0f]", html)
    tie, rec = (items[STATUSES.index(s)] for s in ("tie", "recommend"))
    assert re.sub(r"model \w+ sentence", "", tie) != re.sub(r"model \w+ sentence", "", rec)


def test_markdown_summary_says_the_status_in_words():
    lines = _verdicts_md(report(["tie", "recommend"]))
    assert "- **tie**: model tie sentence" in lines and "- **recommended**: model recommend sentence" in lines
