"""Results of another analysis version are refused at read time: every page that reads result tables
says which version wrote them and the command that recomputes them, and stops without reading a
payload; Neighbours (embeddings only) keeps working; after ``analyze`` the pages read them again."""


import pytest

from analysis.studies import ANALYSIS_VERSION, analyze_store
from tests.helpers import app, charts
from tests.stores import copy_with_analysis_version

#: every page that reads ``layerscope analyze``'s result tables (all but Neighbours)
RESULT_PAGES = ["overview", "heatmap", "curves", "scaling", "model_map", "downstream", "temporal", "predictors",
                "embedding_map", "paper_figures"]
OLD = ANALYSIS_VERSION - 2


def _copy(store, tmp_path, version):
    """A copy of ``store`` whose results are recorded as written by ``version`` (False: no record)."""
    return copy_with_analysis_version(store, tmp_path / "stale.duckdb", version)


@pytest.fixture(scope="module")
def stale_store(dashboard_store, tmp_path_factory):
    return _copy(dashboard_store, tmp_path_factory.mktemp("stale"), OLD)


def _refusal(at) -> str:
    (err,) = [e.value for e in at.error]
    return err.replace("\\", "")  # md_escape's backslashes


@pytest.mark.parametrize("page", RESULT_PAGES)
def test_a_page_of_results_names_the_version_and_the_command_and_reads_nothing(stale_store, monkeypatch, page):
    at = app(stale_store, monkeypatch, page, {"dataset": "moving_shapes"})
    err = _refusal(at)
    assert f"computed by analysis version {OLD}; this LayerScope reads version {ANALYSIS_VERSION}" in err
    assert f"`layerscope analyze --store {stale_store}`" in err and "embeddings are kept" in err
    assert not charts(at) and not at.dataframe  # stopped before any result was drawn
    assert any(b.label.startswith("Recompute them now") for b in at.button)


def test_neighbours_reads_embeddings_only_and_keeps_working(stale_store, monkeypatch):
    at = app(stale_store, monkeypatch, "neighbours", {"dataset": "moving_shapes"})
    assert not at.error
    assert len(at.dataframe) >= 2  # one neighbour table per model shown (the first three by default)


@pytest.mark.parametrize("page", ["overview", "heatmap"])
def test_result_rows_without_a_recorded_version_are_refused_too(dashboard_store, tmp_path, monkeypatch, page):
    store = _copy(dashboard_store, tmp_path, False)
    err = _refusal(app(store, monkeypatch, page))
    assert "older than any LayerScope that records it" in err and f"layerscope analyze --store {store}" in err


def test_after_analyze_every_page_reads_the_results_again(dashboard_store, tmp_path, monkeypatch):
    store = _copy(dashboard_store, tmp_path, OLD)
    analyze_store(store, log=lambda m: None)  # the store's own settings; every result recomputed
    for page in RESULT_PAGES:
        at = app(store, monkeypatch, page, {"dataset": "moving_shapes"})
        assert not at.error, (page, [e.value for e in at.error])
    assert len(charts(app(store, monkeypatch, "heatmap", {"dataset": "moving_shapes"}))) == 1
