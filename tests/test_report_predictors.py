"""The report's predictor section: the table equals the stored study, the planted signal leads,
fabricated numbers are labelled in HTML, JSON and Markdown, and a store without per-layer results
says why the section is omitted."""

import duckdb

from analysis.storage import results as R
from analysis.views.text import md_escape
from tests.helpers import make_report


def test_report_shows_the_predictor_table(predictor_stores, tmp_path):
    _, data, page = make_report(predictor_stores["full"], tmp_path)
    (sec,) = data["datasets"]
    pred = sec["sections"]["predictors"]
    con = duckdb.connect(str(predictor_stores["full"]), read_only=True)
    payload = R.read_studies(con, study="predictors", dataset="synthetic")[0]["payload"]
    con.close()
    probe = next(t for t in payload["tasks"] if t["task"] == "probe")
    rows = [r for r in pred["table"] if r["task"] == "probe · top1 [linear]"]
    assert [r["signal"] for r in rows] == [s["signal"] for s in probe["signals"]]
    assert [r["ρ across layers"] for r in rows] == [s["rho_layers"] for s in probe["signals"]]
    assert rows[0]["rank"] == 1 and rows[0]["signal"] == "alignment with txt (mutual_knn)"
    assert pred["fabricated"] == ["made-up task (fabricated) · err [demo]"]
    assert "<h3>Predictors</h3>" in page and "alignment with txt (mutual_knn)" in page
    assert "FABRICATED numbers" in page
    md = (tmp_path / "report.md").read_text()
    assert "### Layer predictors" in md and "FABRICATED numbers" in md
    assert f"| 1 | {md_escape('alignment with txt (mutual_knn)')} | {rows[0]['ρ across layers']:.3f} |" in md
    best = {r["model"]: r["truly best layer"] for r in pred["best_layers"] if r["task"] == "probe · top1 [linear]"}
    assert best == {e["model"]: e["best_layer"] for e in probe["models"]}


def test_report_without_per_layer_results_omits_the_section(predictor_stores, tmp_path):
    _, data, page = make_report(predictor_stores["bare"], tmp_path)
    assert "predictors" in data["datasets"][0]["omitted"]
    assert "no per-layer downstream results" in page
