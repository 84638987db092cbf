"""The shuffled-pairing null where people read it: heatmap cells past its 95th percentile, the best
cell's sentence, the layer curves' dotted rules and the report's tables (issue #29, item 5)."""

from __future__ import annotations

import json

import duckdb
import numpy as np
import pytest

from analysis.storage import results as R
from analysis.views.curves import curves_chart
from analysis.views.heatmap import best_cell_text, beyond_null_cells, grid_long
from analysis.views.null import curve_null_levels, null_levels_text
from analysis.report import build_report, render_html, render_markdown
from analysis.studies import analyze_store
from tests.helpers import quiet
from tests.stores import write_store


def _g(grid, null, flags=None):
    return {"grid": np.asarray(grid, dtype=float), "metric": "mutual_knn", "best_a": 0, "best_b": 1,
            "best_value": 0.5, "ci_low": None, "ci_high": None, "n_boot": 0,
            "flags": {**(flags or {}), **({"null": null} if null else {})}}


def test_cells_past_the_null_s_95th_percentile_are_marked_and_degenerate_ones_never():
    null = {"p": 0.01, "q95": 0.25, "n_perm": 200, "grouped": False}
    g = _g([[0.1, 0.5], [0.3, np.nan]], null)
    np.testing.assert_array_equal(beyond_null_cells(g), [[False, True], [True, False]])
    long = grid_long(_g([[0.1, 0.5], [0.3, 0.4]], null, {"degenerate_a": {"1": "collapsed"}}))
    assert long.set_index(["layer_a", "layer_b"])["beyond_null"].to_dict() == {
        (0, 0): False, (0, 1): True, (1, 0): False, (1, 1): False}
    assert not beyond_null_cells(_g([[0.1, 0.5]], None)).any()  # no null stored: nothing marked


def test_the_best_cell_sentence_gives_the_verdict_p_and_the_null_percentile():
    beyond = best_cell_text(_g([[0.1, 0.5]], {"p": 1 / 201, "q95": 0.25, "n_perm": 200, "grouped": False}),
                                  "vid", "txt")
    assert "beyond chance: p = 0.005" in beyond and "95th percentile 0.250" in beyond and "200 shuffled" in beyond
    none = best_cell_text(_g([[0.1, 0.5]], {"p": 0.3, "q95": 0.6, "n_perm": 200, "grouped": True}), "vid", "txt")
    # a grouped null stored without its kind was a within-group one: named as such
    assert "no fine-grained alignment within sources beyond chance: p = 0.300" in none and "within-group" in none
    assert "chance" not in best_cell_text(_g([[0.1, 0.5]], None), "vid", "txt")


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    path = tmp_path_factory.mktemp("null_views") / "s.duckdb"
    write_store(path, n=30)
    analyze_store(path, k=3, metrics=("mutual_knn",), n_boot=0, n_null=30, maps=0, log=quiet)
    return path


def test_layer_curves_draw_each_model_s_null_from_its_source_grid(analysed):
    con = duckdb.connect(str(analysed), read_only=True)
    levels = curve_null_levels(con, "toy")
    (g,) = R.read_grids(con, metric="mutual_knn")
    con.close()
    stored = g["flags"]["null"]
    assert len(levels) >= 1
    for r in levels.itertuples():
        assert r.metric.startswith("alignment with ")
        assert (r.q95, r.p, r.n_perm, r.grouped) == (stored["q95"], stored["p"], 30, False)
    data = levels.assign(layer=0, depth=0.0, value=levels["q95"])[["model", "metric", "layer", "depth", "value"]]
    spec = curves_chart(data, "alignment", labels={}, null_levels=levels).to_dict()
    rules = [layer for layer in spec["layer"] if layer["mark"].get("strokeDash") == [2, 3]]
    assert len(rules) == 1 and rules[0]["encoding"]["y"]["field"] == "q95"
    assert "p = " in null_levels_text(levels, {})


def test_the_report_shows_each_best_cell_s_null(analysed):
    con = duckdb.connect(str(analysed), read_only=True)
    report = build_report(con, store=str(analysed))
    (g,) = R.read_grids(con, metric="mutual_knn")
    con.close()
    entries = [a for d in report["datasets"] for m in d["sections"]["summary"]["models"]
               for a in m["alignment"].values()]
    assert entries and all(a["null"] == g["flags"]["null"] for a in entries)
    json.dumps(report, default=str)  # the JSON beside the HTML carries it
    assert "shuffled null (p, 95th pct.)" in render_markdown(report)
    page = render_html(report)
    assert "shuffled null (p, 95th pct.)" in page and f"{g['flags']['null']['n_perm']} shuffled pairings" in page
