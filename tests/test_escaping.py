"""User strings stay text: hostile model, dataset, item and caption names, and URL parameters, in
report.md and in every dashboard element that renders Markdown. Checked by rendering with an
independent CommonMark library (markdown-it-py): no image, link, script or raw HTML may come out."""

import html

import pytest

from precompute.cli import main
from tests.helpers import app
from tests.hostile import (CAPTION, DATASET, HOSTILE, IMAGE, ITEM, JSLINK, NAMES, SCRIPT, assert_inert,
                           markdown_sources, render)
from tests.stores import write_store

PAGES = ["overview", "heatmap", "curves", "scaling", "model_map", "downstream", "temporal", "neighbours"]


@pytest.mark.parametrize("text", HOSTILE)
def test_md_escape_keeps_every_character_as_text(text):
    from analysis.views.text import md_escape

    from analysis.views.text import WORD_JOINER

    out = assert_inert(md_escape(text), strict=True)
    # the rendered paragraph shows exactly the input (line breaks become spaces), but for the invisible
    # word joiners that keep GFM from linking "https://", "www." and "a@b.c"
    assert out.replace(WORD_JOINER, "") == f"<p>{html.escape(' '.join(text.splitlines()).strip(), quote=True)}</p>\n"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    store = tmp_path_factory.mktemp("hostile") / "h.duckdb"
    write_store(store, n=16, names=NAMES, dataset=DATASET, item_prefix=ITEM, caption=CAPTION)
    assert main(["analyze", "--store", str(store), "--k", "3", "--bootstrap", "0"]) == 0
    return store


def test_report_markdown_renders_names_and_captions_as_text(hostile, tmp_path):
    out = tmp_path / "r.html"
    assert main(["report", "--store", str(hostile), "--out", str(out)]) == 0
    from analysis.views.text import WORD_JOINER

    md = out.with_suffix(".md").read_text()
    rendered = assert_inert(md).replace(WORD_JOINER, "")  # the joiners that stop GFM autolinks are invisible
    assert html.escape(DATASET) in rendered  # shown, as text
    assert html.escape(SCRIPT) in rendered and html.escape(IMAGE, quote=False) in rendered


@pytest.mark.parametrize("page", PAGES)
def test_dashboard_pages_render_hostile_names_as_text(hostile, monkeypatch, page):
    at = app(hostile, monkeypatch, page)
    sources = markdown_sources(at)
    assert sources
    for md in sources:
        assert_inert(md)
    if page == "neighbours":  # the item and its captions are shown, escaped
        shown = " ".join(render(m) for m in sources)
        assert html.escape(ITEM + "0", quote=True) in shown


@pytest.mark.parametrize("page", ["heatmap", "neighbours"])
@pytest.mark.parametrize("value", [IMAGE, JSLINK, SCRIPT, ":red[x] $y$"])
def test_url_parameters_are_text_in_messages(hostile, monkeypatch, page, value):
    params = {p: value for p in ("dataset", "a", "b", "metric", "nf", "nc", "pair", "item")}
    at = app(hostile, monkeypatch, page, params)
    for md in markdown_sources(at):
        assert_inert(md)
    if page != "overview":
        assert any("unknown" in w.value for w in at.warning)  # refused, and said so
