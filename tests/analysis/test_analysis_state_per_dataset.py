"""Each dataset's state is that of the last ``layerscope analyze`` that analysed it: an analysis of
dataset beta that stopped stays said (with the studies it finished there) after an analysis of alpha
finishes, until an analysis of beta finishes; a store whose record is in the single-analysis format
(one analysis, no ``"earlier"``) reads as it did.

The expected rows come from an independent, uninterrupted analysis of a copy of the same runs."""

import json
import shutil

import duckdb
import pytest

from analysis.storage import last_analysis
from analysis.studies import analyze_store
from analysis.views.store_info import overview, unfinished_analysis
from tests.helpers import quiet
from tests.stores import (CHEAP_ANALYSIS, analysed_copy, current_rows, read_store, result_tables, rows_of_studies,
                          stopped_analysis, write_store)

#: small and quick, but every study runs (k < 12 items)
CHEAP = CHEAP_ANALYSIS


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Datasets alpha and beta, each two models (video, text) on 12 items, never analysed."""
    path = tmp_path_factory.mktemp("per_dataset") / "runs.duckdb"
    write_store(path, dataset="alpha")
    write_store(path, dataset="beta", seed=1)
    return path


@pytest.fixture(scope="module")
def whole(runs, tmp_path_factory):
    """The runs analysed once, uninterrupted, with :data:`CHEAP`."""
    return analysed_copy(runs, tmp_path_factory.mktemp("per_dataset") / "whole.duckdb", **CHEAP)


@pytest.fixture(scope="module")
def beta_stopped(runs, tmp_path_factory):
    """``analyze --dataset beta`` interrupted as scaling starts, then ``analyze --dataset alpha``
    finished."""
    path = tmp_path_factory.mktemp("per_dataset") / "beta_stopped.duckdb"
    shutil.copy(runs, path)
    stopped_analysis(path, "scaling", datasets=("beta",), **CHEAP)
    analyze_store(path, log=quiet, datasets=("alpha",), **CHEAP)
    return path


def _copy(store, tmp_path):
    out = tmp_path / "store.duckdb"
    shutil.copy(store, out)
    return out


def test_an_interrupted_dataset_stays_said_after_another_finishes_until_its_own_analysis_finishes(
        beta_stopped, whole, tmp_path):
    store = _copy(beta_stopped, tmp_path)
    command = f"layerscope analyze --store {store}"
    state = read_store(store, lambda con: last_analysis.by_dataset(last_analysis.read_all(con)))
    assert (state["alpha"].state, state["alpha"].datasets) == ("finished", ("alpha",))
    assert (state["beta"].state, state["beta"].study, state["beta"].datasets) == ("interrupted", "scaling", ("beta",))
    # alpha shows its complete analysis, beta the three studies it finished: as the uninterrupted
    # analysis has them
    assert read_store(store, current_rows, "alpha") == read_store(whole, current_rows, "alpha")
    expected = read_store(whole, rows_of_studies, ("profiles", "grids", "probes"), "beta")
    assert read_store(store, current_rows, "beta") == expected
    said = read_store(store, unfinished_analysis, str(store))
    assert said.datasets == ("beta",)
    for needle in ("An earlier `layerscope analyze` of this store", "the last to analyse dataset beta, did not finish",
                   "it was interrupted during scaling of dataset beta",
                   "The results shown are those of the studies it completed (profiles, grids, probes)"):
        assert needle in said.sentence, said.sentence
    assert "alpha" not in said.sentence
    # alpha's analysis saved the settings beta's was given: the plain command finishes beta
    assert said.command == command and said.sentence.endswith(said.resume)
    missing = read_store(store, overview, str(store))["missing"]
    assert missing[0] == {"what": f"the last `layerscope analyze` of dataset beta did not finish. {said.resume}",
                          "command": command}

    analyze_store(store, log=quiet, datasets=("beta",), **CHEAP)
    assert read_store(store, unfinished_analysis, str(store)) is None
    assert result_tables(store) == result_tables(whole)
    assert read_store(store, current_rows) == read_store(whole, current_rows)


def test_an_analysis_of_every_dataset_never_shows_an_unfinished_datasets_rows_as_complete(beta_stopped, whole,
                                                                                         tmp_path):
    """beta's rows are a part of an analysis: a later analysis stopped before reaching beta shows none
    of them rather than call them beta's previous complete analysis (alpha's stays shown, whole)."""
    store = _copy(beta_stopped, tmp_path)
    stopped_analysis(store, "profiles", **CHEAP)  # alpha first: stopped before any study of beta
    said = read_store(store, unfinished_analysis, str(store))
    assert said.datasets == ("alpha", "beta") and "An earlier" not in said.sentence
    assert "Dataset alpha: the results shown are its previous complete analysis's" in said.sentence, said.sentence
    assert "Dataset beta: no results are shown: it completed no study of it." in said.sentence, said.sentence
    assert read_store(store, current_rows, "alpha") == read_store(whole, current_rows, "alpha")
    assert read_store(store, current_rows, "beta") == {"result_grids": [], "result_profiles": [], "result_studies": []}


#: a record as LayerScope wrote it before each dataset's state was kept: one analysis, no "earlier"
SINGLE = {"state": "interrupted", "started": "2025-01-02 03:04:05", "datasets": ["beta"], "settings": {"k": 3},
          "kept": [], "finished": {"beta": ["profiles", "grids", "probes"]}, "complete": [], "dataset": "beta",
          "study": "scaling", "ended": "2025-01-02 03:05:06", "error": None}


def test_a_record_in_the_single_analysis_format_reads_as_before(whole, tmp_path):
    store = _copy(whole, tmp_path)
    con = duckdb.connect(str(store))
    try:
        con.execute("UPDATE meta SET value = ? WHERE key = ?", [json.dumps(SINGLE), last_analysis.KEY])
    finally:
        con.close()
    command = f"layerscope analyze --store {store}"
    resume = f"Run `{command}` again to finish it: it reuses every result already stored and computes the rest."
    said = read_store(store, unfinished_analysis, str(store))
    assert said.sentence == (
        "The last `layerscope analyze` of this store (started 2025-01-02 03:04:05 UTC) did not finish: it was "
        "interrupted during scaling of dataset beta at 2025-01-02 03:05:06 UTC. The results shown are those of "
        "the studies it completed (profiles, grids, probes); the 10 others have none yet (scaling, model map, "
        "downstream, same space, predictors, temporal, caption baseline, layer choice, verdicts, embedding map). "
        + resume)
    assert (said.resume, said.command, said.datasets) == (resume, command, ("beta",))
    assert read_store(store, overview, str(store))["missing"][0] == {
        "what": f"the last `layerscope analyze` did not finish. {resume}", "command": command}

    # a finished analysis of alpha keeps beta's state on record, under "earlier"
    analyze_store(store, log=quiet, datasets=("alpha",), **CHEAP)
    value = json.loads(read_store(store, lambda con: con.execute(
        "SELECT value FROM meta WHERE key = ?", [last_analysis.KEY]).fetchone()[0]))
    assert (value["state"], value["datasets"]) == ("finished", ["alpha"])
    assert value["earlier"] == [SINGLE]
    said = read_store(store, unfinished_analysis, str(store))
    assert said.datasets == ("beta",) and "interrupted during scaling of dataset beta" in said.sentence
    analyze_store(store, log=quiet, datasets=("beta",), **CHEAP)
    assert read_store(store, unfinished_analysis, str(store)) is None
    assert read_store(store, current_rows) == read_store(whole, current_rows)
