"""The pages of a store whose last ``layerscope analyze`` was interrupted say so first, name the
command that finishes it, and show the studies it finished; once it has finished, they stop saying so."""

import shutil

from analysis.studies import analyze_store
from tests.helpers import app, quiet
from tests.stores import stopped_analysis, write_store


def _texts(at) -> list[str]:
    """Every line of text the page shows, as shown (without the Markdown escapes)."""
    return [e.value.replace("\\", "") for kind in ("warning", "markdown", "info", "caption") for e in getattr(at, kind)]


def test_the_overview_says_the_analysis_was_interrupted_and_how_to_finish_it(tmp_path, monkeypatch):
    runs = tmp_path / "runs.duckdb"
    write_store(runs)
    analyze_store(runs, log=quiet, k=3, n_boot=0, maps=0, n_null=0, jobs=1)  # saves the settings
    store = tmp_path / "store.duckdb"
    shutil.copy(runs, store)
    # a new analysis version cleared the caches: the next analyze is a first one, interrupted
    import duckdb

    con = duckdb.connect(str(store))
    con.execute("DELETE FROM result_grids; DELETE FROM result_profiles; DELETE FROM result_studies; "
                "DELETE FROM result_current")
    con.close()
    stopped_analysis(store, "scaling")
    command = f"layerscope analyze --store {store}"

    at = app(store, monkeypatch)
    top = [w.value.replace("\\", "") for w in at.warning if "did not finish" in w.value][0]
    assert "interrupted during scaling of dataset toy" in top and command in top
    assert "studies it completed (profiles, grids, probes)" in top
    assert not any("no analysis results yet" in t for t in _texts(at))
    assert command in [c.value for c in at.code]  # under "What is missing", with its background button
    assert at.button(key="job_analyze")

    heatmap = app(store, monkeypatch, page="heatmap")  # the grids it finished are shown, under the same note
    assert any("did not finish" in w.value for w in heatmap.warning)
    assert heatmap.get("vega_lite_chart")

    analyze_store(store, log=quiet)
    at = app(store, monkeypatch)
    assert not any("did not finish" in t for t in _texts(at))
