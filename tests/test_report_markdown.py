"""report.md escapes only what Markdown reads as syntax where the text lands (issue #34 item 19):
times and versions stay as written, hostile names stay text (checked by rendering with markdown-it-py,
an independent CommonMark library); the best-alignment table names its metric; RankMe held down by
the number of items (RankMe <= min(N, d)) is said so."""

import html
import re

import pytest

from analysis.report.md_escape import md_block, md_cell, md_inline
from analysis.views.text import WORD_JOINER
from precompute.cli import main
from tests import stores
from tests.hostile import HOSTILE, assert_inert, render
from tests.stores import write_store

PLAIN = ["2026-12-02 19:48 UTC", "LayerScope 0.1.0", "0.1.0", "a.b-c/d (e), f: g! 3+4=7", "-x", "1.5 items",
         "data/demo.duckdb"]
ODD = ["---", "- - -", "    indented", "> quote", "+ plus", "2) two", "###### h6", "#hash", "a\\b", "&amp;"]


def shown(text: str) -> str:
    """What a renderer must show for ``text``: its lines joined by spaces, HTML-escaped as markdown-it does."""
    return html.escape(" ".join(text.splitlines()), quote=True)


@pytest.mark.parametrize("text", PLAIN)
def test_plain_text_is_not_escaped(text):
    assert md_inline(text) == text
    assert md_block(text) == text
    assert md_cell(text) == text


@pytest.mark.parametrize("text", HOSTILE + ODD + PLAIN)
def test_inside_a_line_the_text_is_shown_as_written(text):
    out = assert_inert(f"x {md_inline(text)} y", strict=True).replace(WORD_JOINER, "")  # invisible
    assert out == f"<p>x {shown(text)} y</p>\n"


@pytest.mark.parametrize("text", HOSTILE + ODD + PLAIN)
def test_at_a_line_start_and_in_a_list_item_the_text_is_shown_as_written(text):
    expected = shown(text).strip()
    assert render(md_block(text)).replace(WORD_JOINER, "") == f"<p>{expected}</p>\n"
    assert render(f"- {md_block(text)}").replace(WORD_JOINER, "") == f"<ul>\n<li>{expected}</li>\n</ul>\n"


@pytest.mark.parametrize("text", HOSTILE + ODD + PLAIN)
def test_in_a_table_cell_the_text_is_shown_as_written(text):
    out = render(f"| a | b |\n|---|---|\n| {md_cell(text)} | z |\n").replace(WORD_JOINER, "")
    assert f"<td>{shown(text).strip()}</td>\n<td>z</td>" in out, out


@pytest.fixture(scope="module")
def small_n_store(tmp_path_factory):
    """12 items embedded in 32 dimensions by a video model (RankMe <= min(12, 32) = 12), and in 6 by a
    text model (its bound is its width, not the data)."""
    saved = dict(stores.MODELS)
    stores.MODELS["vis"] = ("video", 3, 32)
    try:
        store = tmp_path_factory.mktemp("rep") / "s.duckdb"
        write_store(store, n=12)
    finally:
        stores.MODELS.clear()
        stores.MODELS.update(saved)
    assert main(["analyze", "--store", str(store), "--k", "3", "--bootstrap", "0", "--quiet", "--jobs", "1"]) == 0
    return store


@pytest.fixture(scope="module")
def report_md(small_n_store, tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "r.html"
    assert main(["report", "--store", str(small_n_store), "--out", str(out)]) == 0
    return out.with_suffix(".md").read_text(), out.read_text()


def test_report_md_keeps_times_and_versions_as_written(report_md):
    from analysis import __version__

    md, _ = report_md
    line = next(l for l in md.splitlines() if l.startswith("Store "))
    assert re.search(r"generated \d{4}-\d\d-\d\d \d\d:\d\d UTC, LayerScope " + re.escape(__version__) + r"\.$", line), line
    assert "\\" not in line.split("generated")[1]
    assert_inert(md)


def test_best_alignment_table_names_its_metric(report_md):
    md, page = report_md
    rendered = render(md)
    assert "<th>best alignment (mutual_knn)</th>" in rendered
    assert "<th>best alignment (mutual_knn)</th>" in page


def test_rankme_bound_by_the_number_of_items_is_said(small_n_store, report_md):
    import duckdb

    md, page = report_md
    con = duckdb.connect(str(small_n_store), read_only=True)
    rankme = {m: v for m, v in con.execute("SELECT model, layer_values FROM result_profiles WHERE metric = 'rankme'")
              .fetchall()}
    con.close()
    # the bound itself: exp of an entropy over at most min(N, d) singular values
    assert max(rankme["vis"]) <= 12 + 1e-6 and max(rankme["txt"]) <= 6 + 1e-6
    # 12 Gaussian points in 32 dimensions fill nearly all 12: the bound binds for vis, not for txt
    assert max(rankme["vis"]) > 0.8 * 12
    notes = [l for l in md.splitlines() if l.startswith("RankMe is at most min(N, d)")]
    assert len(notes) == 1 and "N = 12" in notes[0] and "vis" in notes[0] and "txt" not in notes[0]
    assert "RankMe is at most min(N, d), here N = 12 items" in page
    # the Curves page says the same sentence under its RankMe chart: the report says it once, in the summary
    assert md.count("RankMe is at most min(N, d)") == 1 and page.count("RankMe is at most min(N, d)") == 1
