"""The commands that read result payloads (``layerscope report``, ``layerscope downstream export``)
refuse results written by another analysis version, naming the store and the command that recomputes
them; after ``analyze`` they read them again."""


import pytest

from analysis.studies import ANALYSIS_VERSION, analyze_store
from precompute.cli import main
from tests.helpers import make_report, one_line_error
from tests.stores import copy_with_analysis_version, write_store

OLD = ANALYSIS_VERSION - 2


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    """Two models on 12 items, analysed (k=3, no resamples)."""
    path = tmp_path_factory.mktemp("analysed") / "s.duckdb"
    write_store(path)
    analyze_store(path, k=3, n_boot=0, log=lambda m: None)
    return path


def _stale(store, tmp_path, version=OLD):
    return copy_with_analysis_version(store, tmp_path / "stale.duckdb", version)


def test_report_refuses_results_of_an_older_version(analysed, tmp_path, capsys):
    store = _stale(analysed, tmp_path)
    assert main(["report", "--store", str(store), "--out", str(tmp_path / "r.html")]) == 2
    one_line_error(capsys, "layerscope report: error:", str(store), f"analysis version {OLD}",
                   f"reads version {ANALYSIS_VERSION}", f"`layerscope analyze --store {store}`")
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "r.json").exists()


def test_report_refuses_result_rows_without_a_recorded_version(analysed, tmp_path, capsys):
    store = _stale(analysed, tmp_path, version=False)
    assert main(["report", "--store", str(store), "--out", str(tmp_path / "r.html")]) == 2
    one_line_error(capsys, "older than any LayerScope that records it", f"`layerscope analyze --store {store}`")


def test_downstream_export_refuses_results_of_an_older_version(analysed, tmp_path, capsys):
    store = _stale(analysed, tmp_path)
    assert main(["downstream", "export", "--store", str(store), "--out", str(tmp_path / "d.csv")]) == 2
    one_line_error(capsys, "layerscope downstream: error:", f"analysis version {OLD}",
                   f"`layerscope analyze --store {store}`")
    assert not (tmp_path / "d.csv").exists()


def test_after_analyze_the_report_reads_the_results_again(analysed, tmp_path):
    store = _stale(analysed, tmp_path)
    analyze_store(store, log=lambda m: None)  # the store's own settings
    _, data, _ = make_report(store, tmp_path)
    assert [d["dataset"] for d in data["datasets"]] == ["toy"]
    assert main(["downstream", "export", "--store", str(store), "--out", str(tmp_path / "d.csv")]) == 0
