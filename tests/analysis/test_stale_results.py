"""The read-time version check of the result tables (``analysis.views.store_info.stale_results``): a
store's results are read only when the analysis version that wrote them is this one."""

import duckdb
import pytest

from analysis.storage import results as R
from analysis.studies import ANALYSIS_VERSION
from analysis.views.store_info import stale_results
from tests.stores import put_analysis_version, write_store


@pytest.fixture
def store(tmp_path):
    """Two done runs and no results yet."""
    path = tmp_path / "s.duckdb"
    write_store(path)
    return path


def _check(path, *, version=None, with_result=True):
    con = duckdb.connect(str(path))
    try:
        if with_result:
            R.put_study(con, result_id="r1", study="scaling", dataset="toy", subject="vis|txt|mutual_knn",
                        params={}, payload={"any": "shape"}, input_key="x")
        put_analysis_version(con, version)
        return stale_results(con, str(path))
    finally:
        con.close()


def test_results_of_this_analysis_version_are_read(store):
    assert _check(store) is None


def test_results_of_an_older_version_are_refused_with_the_store_and_the_command(store):
    old = ANALYSIS_VERSION - 2
    text = _check(store, version=old)
    assert f"computed by analysis version {old};" in text
    assert f"this LayerScope reads version {ANALYSIS_VERSION}" in text
    assert f"Run `layerscope analyze --store {store}` to recompute them (embeddings are kept)." in text


def test_result_rows_without_a_recorded_version_are_refused(store):
    text = _check(store, version=False)
    assert "older than any LayerScope that records it" in text
    assert f"`layerscope analyze --store {store}`" in text


def test_results_of_a_newer_version_name_both_ways_out(store):
    text = _check(store, version=ANALYSIS_VERSION + 1)
    assert f"newer LayerScope (analysis version {ANALYSIS_VERSION + 1})" in text
    assert "Use that newer LayerScope" in text and f"`layerscope analyze --store {store}`" in text


@pytest.mark.parametrize("version", [ANALYSIS_VERSION - 1, False])
def test_a_store_without_result_rows_has_nothing_stale(store, version):
    assert _check(store, version=version, with_result=False) is None


def test_an_empty_file_is_no_store_and_nothing_stale(tmp_path):
    path = tmp_path / "empty.duckdb"
    con = duckdb.connect(str(path))
    try:
        assert stale_results(con, str(path)) is None
    finally:
        con.close()
