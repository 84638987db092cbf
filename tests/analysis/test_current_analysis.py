"""The dashboard and the report read the store's current analysis, never a mix of two.

Result tables are caches keyed by settings: re-analysing a store with another ``--k``, ``--clamp`` or
``--knn`` leaves the earlier rows beside the new ones. Every view's numbers on such a store must equal
those of a copy of the same runs analysed only once, with the second settings: the expected values
come from that independent analysis, not from the views' own output on the mixed store.
"""

import datetime as dt
import json
import math
import shutil

import duckdb
import numpy as np
import pandas as pd
import pytest

from analysis.views.curves import curve_intervals, profiles_long
from analysis.views.stored_choices import layer_choices
from analysis.views.embedding_map import embedding_maps
from analysis.views.heatmap import grid_by_id, grid_index
from analysis.views.nuance import same_space_studies
from analysis.views.null import curve_null_levels
from analysis.views.scaling import scaling_subjects, scaling_view
from analysis.views.store_info import dataset_context, overview, study
from analysis.views.verdicts import verdicts
from analysis.report import build_report
from analysis.methods.verdict import Verdict
from analysis.storage import results as R
from analysis.studies import analyze_store
from analysis.views import paper_figures as PF
from precompute.synthetic.store import write_sweep
from tests.helpers import quiet
from tests.stores import analysed_copy

DS = "synthetic"
#: what both analyses share (small and quick: no maps, few resamples and shuffles, but each view has
#: something to show: intervals, nulls, a k-free metric whose grids both analyses reuse)
BASE = dict(metrics=("mutual_knn", "cka"), n_boot=10, maps=0, n_null=10)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The runs, never analysed: 40 items, 3 layers, two video and two text models at two budgets."""
    path = tmp_path_factory.mktemp("current") / "runs.duckdb"
    write_sweep(path, video=["v1", "v2"], text=["t1", "t2"], frames=(1, 2), captions=(1, 2), n_items=40,
                n_layers=3, dim=12)
    return path


@pytest.fixture(scope="module")
def first(runs, tmp_path_factory):
    """The runs analysed once with the defaults of :data:`BASE` (k = 10, exact search, clamp off)."""
    return analysed_copy(runs, tmp_path_factory.mktemp("current") / "first.duckdb", **BASE)


@pytest.fixture(scope="module")
def small(runs, tmp_path_factory):
    """The runs analysed as cheaply as can be (one metric, no resamples, shuffles or maps)."""
    return analysed_copy(runs, tmp_path_factory.mktemp("current") / "small.duckdb", metrics=("mutual_knn",),
                         n_boot=0, maps=0, n_null=0)


def _plain(x):
    """A view's output as comparable plain data (frames as records, NaN as a string, floats rounded
    to 12 digits so only a real difference shows; ``computed`` stamps left out)."""
    if isinstance(x, Verdict):
        return _plain(x.to_dict())
    if isinstance(x, pd.DataFrame):
        return _plain(x.to_dict("records"))
    if isinstance(x, pd.Series):
        return _plain(x.tolist())
    if isinstance(x, dict):  # (when a row was computed is no number of the analysis)
        return {str(k): _plain(v) for k, v in x.items() if k != "computed"}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.ndarray):
        return _plain(x.tolist())
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return "nan" if math.isnan(x) else round(float(x), 12)
    if x is None or x is pd.NA or x is pd.NaT or isinstance(x, str):
        return None if x is pd.NA or x is pd.NaT else x
    if isinstance(x, (pd.Timestamp, dt.datetime)):
        return str(x)
    raise TypeError(f"no plain form for {type(x).__name__}")


def _snapshot(path) -> dict:
    """Every view's numbers for the dataset, and the report without its time stamp."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        index = grid_index(con)
        report = build_report(con, store="STORE")
        report.pop("generated")
        out = {
            "context": dataset_context(con, DS),
            "model_map": study(con, "model_map", DS),
            "temporal": study(con, "temporal", DS),
            "layer_choices": layer_choices(con, DS),
            "profiles": profiles_long(con, DS),
            "curve_intervals": curve_intervals(con, DS),
            "null": curve_null_levels(con, DS),
            "verdicts": verdicts(con, DS),
            "scaling": {s: scaling_view(con, DS, s) for s in scaling_subjects(con, DS)},
            "grid_index": index,
            "grids": [grid_by_id(con, rid) for rid in index["result_id"]],
            "best_cells": {m: PF.best_cells(con, DS, m) for m in ("mutual_knn", "cka")},
            "figure_choices": PF.figure_choices(con, DS),
            "same_space": same_space_studies(con, DS),
            "missing": overview(con, "STORE")["missing"],
            "report": json.loads(json.dumps(report, default=str)),
        }
        return _plain(out)
    finally:
        con.close()


def _row_count(path) -> int:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return sum(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in R.RESULT_TABLES)
    finally:
        con.close()


def _check_second_analysis(runs, first, tmp_path, monkeypatch, second: dict):
    mixed, fresh = tmp_path / "mixed.duckdb", tmp_path / "fresh.duckdb"
    shutil.copy(first, mixed)
    shutil.copy(runs, fresh)
    analyze_store(mixed, log=quiet, **second)  # the rest of BASE comes from the store's saved settings
    analyze_store(fresh, log=quiet, **BASE, **second)
    # the mixed store holds both analyses' rows: what the views must not mix
    assert _row_count(mixed) > _row_count(fresh)
    expected = _snapshot(fresh)
    got = _snapshot(mixed)
    assert expected["grid_index"] and expected["layer_choices"] and expected["scaling"] and expected["verdicts"]
    for name in expected:  # one view at a time, so a failure names it
        assert got[name] == expected[name], name
    # the test can fail: read without the current analysis's list, the mixed store's views differ
    monkeypatch.setattr(R, "current_clause", lambda con, table, alias="": "TRUE")
    try:
        unfiltered = _snapshot(mixed)
    except ValueError:  # or they fail outright (the scaling view finds two rows of one subject)
        unfiltered = None
    assert unfiltered != expected
    return expected


@pytest.mark.slow  # three analyses and three reports: ~10 s of CPU (the rule itself is tested fast below)
def test_views_after_k_10_then_5_equal_a_store_analysed_with_k_5_only(runs, first, tmp_path, monkeypatch):
    expected = _check_second_analysis(runs, first, tmp_path, monkeypatch, dict(k=5))
    assert expected["context"] == {"n_items": 40, "k": 5}  # chance baselines at the current k


@pytest.mark.slow
def test_views_after_clamp_off_then_feature_equal_a_store_analysed_with_feature_only(
        runs, first, tmp_path, monkeypatch):
    _check_second_analysis(runs, first, tmp_path, monkeypatch, dict(clamp="feature"))


@pytest.mark.slow
def test_views_after_exact_then_ann_search_equal_a_store_analysed_with_ann_only(runs, first, tmp_path, monkeypatch):
    pytest.importorskip("faiss", reason="--knn ann needs faiss-cpu (an optional dependency)")
    _check_second_analysis(runs, first, tmp_path, monkeypatch, dict(knn="ann"))


@pytest.mark.slow  # three analyses
def test_analysing_one_dataset_keeps_the_other_datasets_current_rows(first, tmp_path):
    """``analyze --dataset A`` replaces A's list only: B's rows of its own (earlier) analysis stay
    current, and A shows its new analysis only."""
    store = tmp_path / "two.duckdb"
    shutil.copy(first, store)
    write_sweep(store, video=["v3"], text=["t3"], frames=(1,), captions=(1,), n_items=30, n_layers=3, dim=12,
                dataset="other")
    analyze_store(store, log=quiet)  # both datasets at k = 10
    analyze_store(store, k=5, datasets=(DS,), log=quiet)
    con = duckdb.connect(str(store), read_only=True)
    try:
        assert dataset_context(con, DS)["k"] == 5
        assert dataset_context(con, "other")["k"] == 10
        ks = {(g["dataset"], g["params"].get("k")) for g in R.read_grids(con, current=True, metric="mutual_knn")}
        assert ks == {(DS, 5), ("other", 10)}
        every = {(g["dataset"], g["params"].get("k")) for g in R.read_grids(con, metric="mutual_knn")}
        assert every == {(DS, 5), (DS, 10), ("other", 10)}  # the cache keeps the earlier rows
    finally:
        con.close()


def test_rows_no_analysis_listed_are_never_read(small, tmp_path):
    """Rows no analysis listed (an interrupted study's written batches, say) are never read: with the
    last analysis recorded as finished, the readers see no result and the Overview names the command.
    (tests/analysis/test_interrupted_analysis.py: what an interrupted analysis lists and says.)"""
    store = tmp_path / "unlisted.duckdb"
    shutil.copy(small, store)
    con = duckdb.connect(str(store))
    try:
        n = con.execute("SELECT count(*) FROM result_grids").fetchone()[0]
        assert n and len(R.read_grids(con, current=True)) == n  # the analysis listed every row it made
        con.execute("DELETE FROM result_current")
        assert R.read_grids(con, current=True) == [] and R.read_studies(con, current=True) == []
        assert len(grid_index(con)) == 0
        assert any(m["what"].startswith("no analysis results yet") for m in overview(con)["missing"])
    finally:
        con.close()


def test_a_store_without_the_list_table_reads_no_rows(small, tmp_path):
    """A store opened read-only since before ``result_current`` existed has no such table: no row is
    current, and reading says so instead of failing on the missing table."""
    store = tmp_path / "old.duckdb"
    shutil.copy(small, store)
    con = duckdb.connect(str(store))
    try:
        con.execute("DROP TABLE result_current")
        assert R.current_clause(con, "result_grids") == "FALSE"
        assert R.read_grids(con, current=True) == [] and len(grid_index(con)) == 0
    finally:
        con.close()


def test_current_clause_refuses_what_is_not_a_result_table_or_an_alias(tmp_path):
    from analysis.storage.schema import create_all

    con = duckdb.connect(str(tmp_path / "s.duckdb"))
    try:
        create_all(con, "s")
        with pytest.raises(ValueError, match="'runs' is not a result table"):
            R.current_clause(con, "runs")
        with pytest.raises(ValueError, match="alias must be an identifier"):
            R.current_clause(con, "result_grids", "g; DROP TABLE runs")
    finally:
        con.close()


def test_a_map_asked_for_after_the_analysis_is_part_of_it(small, tmp_path):
    """``layerscope map`` computes with the saved settings: its map joins the current analysis (the
    Embedding map page lists it) and stays there after the next ``analyze``."""
    from analysis.studies.embedding_map import request_map

    store = tmp_path / "map.duckdb"
    shutil.copy(small, store)
    got = request_map(store, dataset=DS, model="t1", layer=1, method="pca", log=quiet)
    assert got["computed"] and got["reason"] is None

    def listed():
        con = duckdb.connect(str(store), read_only=True)
        try:
            return list(embedding_maps(con, DS)["subject"])
        finally:
            con.close()

    assert listed() == [got["subject"]]
    analyze_store(store, log=quiet)
    assert listed() == [got["subject"]]


def _grid_row(rid, dataset, k, best):
    return {"result_id": rid, "dataset": dataset, "pair_kind": "vision_text", "model_a": "v", "model_b": "t",
            "run_a": "ra", "run_b": "rb", "n_frames": 1, "n_captions": 1, "n_frames_b": None,
            "metric": "mutual_knn", "params": {"k": k}, "grid": np.full((2, 2), best), "best_a": 1, "best_b": 1,
            "best_value": best, "ci_low": None, "ci_high": None, "n_boot": 0, "flags": {}, "input_key": "i"}


def test_record_current_replaces_the_analysed_datasets_lists_only(tmp_path):
    """The rule on handmade rows: two analyses of dataset ``a`` (k = 10, then k = 5) and one of ``b``;
    the readers with ``current=True`` and the heatmap index see the last list of each dataset."""
    from analysis.storage.schema import create_all

    con = duckdb.connect(str(tmp_path / "s.duckdb"))
    try:
        create_all(con, "s")
        con.execute("INSERT INTO datasets (dataset, n_items) VALUES ('a', 40), ('b', 30)")
        rows = [_grid_row("a10", "a", 10, 0.5), _grid_row("a5", "a", 5, 0.25), _grid_row("b10", "b", 10, 0.75)]
        R.replace_rows(con, {"result_grids": [R.grid_row(**r) for r in rows]})
        assert R.read_grids(con, current=True) == []  # nothing recorded yet: no row is current
        R.record_current(con, {"result_grids": {"a10", "b10"}}, ["a", "b"])
        R.record_current(con, {"result_grids": {"a5"}}, ["a"])
        assert {g["result_id"] for g in R.read_grids(con, current=True)} == {"a5", "b10"}
        assert [g["best_value"] for g in R.read_grids(con, current=True, dataset="a")] == [0.25]
        assert dataset_context(con, "a") == {"n_items": 40, "k": 5}
        assert dataset_context(con, "b") == {"n_items": 30, "k": 10}
        assert sorted(grid_index(con)["result_id"]) == ["a5", "b10"]
        R.record_current(con, {"result_grids": set()}, ["a"])  # an analysis of a that made no grid
        assert dataset_context(con, "a")["k"] is None
        assert len(R.read_grids(con)) == 3  # the cache keeps every row
    finally:
        con.close()
