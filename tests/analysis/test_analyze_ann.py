"""`analyze --knn ann`: approximate neighbour lists for the k-NN metrics, their measured recall kept
on every grid; exact results keep their keys."""

import duckdb
import numpy as np
import pytest

from analysis.storage import results as R
from analysis.studies import analyze_store
from precompute.synthetic.store import write_sweep

SHAPE = dict(frames=(1, 2), captions=(1,), n_items=40, n_layers=3, dim=12)


def quiet(_msg):
    pass


def _grids(path):
    con = duckdb.connect(str(path), read_only=True)
    rows = R.read_grids(con)
    con.close()
    return {(g["run_a"], g["run_b"], g["metric"]): g for g in rows}


@pytest.mark.slow  # exact and approximate analyses of one store
def test_ann_grids_carry_their_recall_and_equal_exact_where_recall_is_one(tmp_path):
    exact, ann = tmp_path / "exact.duckdb", tmp_path / "ann.duckdb"
    for p in (exact, ann):
        write_sweep(p, video=["v1"], text=["t1"], **SHAPE)
    analyze_store(exact, metrics=("mutual_knn", "cka"), n_boot=0, maps=0, log=quiet)
    out = analyze_store(ann, metrics=("mutual_knn", "cka"), n_boot=0, maps=0, knn="ann", log=quiet)
    assert out["settings"]["knn"] == "ann"
    ge, ga = _grids(exact), _grids(ann)
    assert ge.keys() == ga.keys()
    compared = 0
    for key, g in ga.items():
        if key[2] == "cka":  # not a k-NN metric: same parameters, no neighbour flags
            assert g["params"] == ge[key]["params"] and "knn" not in g["flags"]
            continue
        assert g["params"] == {**ge[key]["params"], "knn": "ann"} and "knn" not in ge[key]["params"]
        info = g["flags"]["knn"]
        assert info["knn"] == "ann" and 0.0 <= info["knn_recall_min"] <= 1.0
        assert len(info["knn_recall"]) == g["n_rows"] + g["n_cols"]
        if info["knn_recall_min"] == 1.0:  # every sampled list exact: the same counts as the exact search
            np.testing.assert_array_equal(g["grid"], ge[key]["grid"])
            compared += 1
    assert compared  # 40 items: faiss probes every cell, so the lists are exact


def test_the_search_is_a_stored_setting_and_a_bad_one_is_named(tmp_path):
    path = tmp_path / "s.duckdb"
    write_sweep(path, video=["v1"], text=["t1"], **SHAPE)
    analyze_store(path, metrics=("mutual_knn",), n_boot=0, maps=0, knn="ann", log=quiet)
    again = analyze_store(path, log=quiet)
    assert again["settings"]["knn"] == "ann" and again["computed_by_study"].get("grids", 0) == 0
    with pytest.raises(ValueError, match="--knn must be one of exact, ann"):
        analyze_store(path, knn="hnsw", log=quiet)


def test_model_map_reads_the_approximate_grids_instead_of_searching_again(tmp_path, monkeypatch):
    """With --knn ann the model map takes the grids study's stored (approximate) mutual k-NN grids;
    it used to ask for ``k`` alone, which named the exact grid, missed the stored rows and ran the
    exact search again for every pair of models (hours at N = 100k)."""
    from analysis.studies.engine import Engine

    asked = []
    grid = Engine.grid

    def recording(self, a, b, metric, **params):
        asked.append((metric, params))
        return grid(self, a, b, metric, **params)

    monkeypatch.setattr(Engine, "grid", recording)
    path = tmp_path / "m.duckdb"
    write_sweep(path, video=["v1", "v2"], text=["t1"], **SHAPE)
    out = analyze_store(path, metrics=("mutual_knn",), n_boot=0, maps=0, knn="ann", log=quiet)
    assert out["computed_by_study"].get("model_map", 0) == 1
    assert asked and all(p.get("knn") == "ann" for m, p in asked if m == "mutual_knn"), asked


@pytest.mark.slow  # exact and approximate analyses of one store
def test_exact_and_approximate_model_maps_are_kept_apart(tmp_path):
    """The model map reads the mutual k-NN grids of the analysis' search, so its key and parameters
    name the search when approximate: an ``--knn ann`` analysis after an exact one adds its own map
    instead of overwriting (or being mistaken for) the exact one, and the exact key is unchanged."""
    path = tmp_path / "s.duckdb"
    write_sweep(path, video=["v1", "v2"], text=["t1"], **SHAPE)
    analyze_store(path, metrics=("mutual_knn",), n_boot=0, maps=0, log=quiet)
    con = duckdb.connect(str(path), read_only=True)
    (exact,) = R.read_studies(con, study="model_map")
    con.close()
    assert exact["params"] == {"k": 10, "metric": "mutual_knn"}
    analyze_store(path, knn="ann", log=quiet)
    con = duckdb.connect(str(path), read_only=True)
    maps = {r["result_id"]: r for r in R.read_studies(con, study="model_map")}
    con.close()
    assert len(maps) == 2 and maps[exact["result_id"]]["payload"] == exact["payload"]
    (ann,) = [r for rid, r in maps.items() if rid != exact["result_id"]]
    assert ann["params"] == {"k": 10, "metric": "mutual_knn", "knn": "ann"}
