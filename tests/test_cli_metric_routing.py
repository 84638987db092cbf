"""``analyze --metric`` takes any registry metric: pairwise ones pick the grids, the others are said
to be computed where their data exists (and really are), unknown names get a close match."""

import duckdb
import pytest

from analysis.registry import REGISTRY, route_metrics
from analysis.methods.same_space import METRICS as SAME_SPACE_METRICS
from analysis.studies.profiles import PROFILE_METRICS
from precompute.cli import main
from tests.stores import write_store

#: registry same-space / unpaired metric -> the names the same_space study stores it under
STORED_AS = {"recall_at_k": ("recall@1_v2t", "recall@5_t2v", "recall@10_v2t"), "mean_ap": ("map_v2t", "map_t2v"),
             "median_rank": ("median_rank_v2t", "median_rank_t2v"), "modality_gap": ("modality_gap",),
             "alignment": ("alignment",), "mmd": ("mmd",), "frechet": ("frechet",)}


def test_every_kind_has_a_place_where_analyze_computes_it():
    for name, spec in REGISTRY.items():
        if spec.kind == "single":
            assert name in PROFILE_METRICS
        elif spec.kind in ("same_space", "unpaired"):
            assert set(STORED_AS[name]) <= set(SAME_SPACE_METRICS), name
    grids, notes = route_metrics(["cka", "recall_at_k", "rankme", "mmd", "cka"])
    assert grids == ("cka",) and len(notes) == 3
    assert "same_space" in notes[0] and "result_profiles" in notes[1] and "unpaired" in notes[2]


def test_unknown_metric_gets_a_close_match(tmp_path, capsys):
    write_store(tmp_path / "s.duckdb")
    assert main(["analyze", "--store", str(tmp_path / "s.duckdb"), "--metric", "recal_at_k", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "Did you mean 'recall_at_k'" in err and err.count("\n") == 1


@pytest.mark.parametrize("given,grid_metrics", [(["recall_at_k", "cka"], ["cka"]), (["uniformity"], ["mutual_knn"])])
def test_non_pairwise_metrics_are_noted_and_grids_take_the_pairwise_ones(tmp_path, capsys, given, grid_metrics):
    store = tmp_path / "s.duckdb"
    write_store(store, n=12)
    args = ["analyze", "--store", str(store), "--k", "3", "--bootstrap", "0", "--jobs", "1", "--quiet"]
    assert main(args + ["--metric", "mutual_knn"]) == 0  # the store's saved setting
    capsys.readouterr()
    assert main(args + [x for m in given for x in ("--metric", m)]) == 0
    err = capsys.readouterr().err
    assert f"note: {given[0]} is a {REGISTRY[given[0]].kind} metric" in err
    con = duckdb.connect(str(store), read_only=True)
    metrics = {r[0] for r in con.execute("SELECT DISTINCT metric FROM result_grids").fetchall()}
    con.close()
    assert set(grid_metrics) <= metrics
