"""Issue #31 in the report: DR Figs. 7, 11/12 and 2 with their hand-worked numbers, and DR's Table 1
beside the fitted scaling law once the names are mapped (tests.stores.write_paper_store: no demo)."""

import json

import duckdb
import numpy as np
import pytest

from analysis.report import build_report, render_html, render_markdown, scaling_rows, to_json
from precompute.cli import main
from tests.stores import write_paper_store


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    path = tmp_path_factory.mktemp("report") / "paper.duckdb"
    write_paper_store(path)
    for args in (["vmae", "VideoMAEv2-H"], ["gemma", "Gemma-2-9b-it"], ["--dataset", "mine", "VATEX"]):
        assert main(["papers", "map", "--store", str(path), *args]) == 0
    con = duckdb.connect(str(path), read_only=True)
    try:
        return build_report(con, store=str(path))
    finally:
        con.close()


def test_the_report_holds_each_figure_with_its_numbers(report):
    (d,) = report["datasets"]
    sec = d["sections"]["paper_figures"]
    fig7 = {f["text_model"]: f for f in sec["fig7"]}
    x, y = [0.25, 0.20, 0.18, 0.12], [0.39, 0.31, 0.27, 0.18]  # the trained models, gemma, n_c 1 and 10
    slope, intercept = np.polyfit(x, y, 1)
    assert fig7["gemma"]["fit"]["slope"] == pytest.approx(slope) and fig7["gemma"]["fit"]["intercept"] == pytest.approx(intercept)
    assert {p["metric"] for p in fig7["gemma"]["published"]} == {"fig7_slope", "fig7_intercept", "fig7_r"}
    smallest = next(m for m in sec["fig11"] if m["budget"] == "smallest")
    assert smallest["agreement"]["w"]["w"] == pytest.approx(0.9)
    fig2 = next(f for f in sec["fig2"] if f["text_model"] == "gemma")
    # two ● points: no line through them, so no offset (any two points lie on a line)
    assert fig2["offset"]["offset"] is None and "at least 3" in fig2["offset"]["error"]
    assert sum(sect == "paper_figures" for sect, _, _ in d["charts"]) >= 4
    json.loads(to_json(report))  # the JSON holds every number


def test_the_scaling_table_has_d_v_and_table_1_beside_the_fit(report):
    (d,) = report["datasets"]
    (row,) = scaling_rows(d["sections"]["scaling"])
    assert float(row["d_v = 2/α"]) == pytest.approx(2 / row["α"], rel=2e-3)
    assert "α 0.750" in row["DR Table 1 (published)"] and "R² 0.979" in row["DR Table 1 (published)"]


def test_html_and_markdown_show_the_section(report):
    html, md = render_html(report), render_markdown(report)
    assert "Paper figures" in html and "a line needs at least 3" in html and "0.25 (L12/L5)" in html
    assert "Kendall's W = 0.900" in md and "DR Fig. 7 (published" in md
