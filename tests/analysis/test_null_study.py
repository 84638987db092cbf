"""The grids study stores each best cell's shuffled-pairing null (issue #29, item 5): the keys the
verdicts read, the value of a brute-force recomputation, grouped shuffles from the manifest's
``group`` field, and no null at ``n_null = 0``."""

from __future__ import annotations

import json

import duckdb
import numpy as np
import pytest

from analysis.storage import results as R
from analysis.metrics.knn import mutual_knn
from analysis.null import pairing_permutations
from analysis.storage.store import load_embeddings
from analysis.studies import analyze_store
from tests.helpers import quiet
from tests.stores import write_store

N = 30


def _grid(path, metric="mutual_knn"):
    con = duckdb.connect(str(path), read_only=True)
    (g,) = R.read_grids(con, metric=metric)
    con.close()
    return g


def _brute_p(path, g, perms, k):
    """p of the stored best value against the grid maximum of fresh mutual k-NN on permuted rows."""
    V = load_embeddings(path, model="vis", dataset="toy", n_frames=2)
    T = load_embeddings(path, model="txt", dataset="toy", n_captions=1)
    maxima = np.array([max(mutual_knn(V[a], T[b][p], k=k) for a in range(len(V)) for b in range(len(T)))
                       for p in perms])
    return (1 + np.count_nonzero(maxima >= g["best_value"])) / (1 + len(perms)), np.quantile(maxima, 0.95)


def test_each_best_cell_stores_its_null_as_a_brute_force_recomputation_gives_it(tmp_path):
    path = tmp_path / "s.duckdb"
    write_store(path, n=N)
    analyze_store(path, k=3, metrics=("mutual_knn",), n_boot=0, n_null=40, maps=0, log=quiet)
    g = _grid(path)
    null = g["flags"]["null"]
    assert set(null) == {"p", "q95", "n_perm", "grouped", "kind"}
    assert null["n_perm"] == 40 and null["grouped"] is False and null["kind"] == "plain"
    p, q95 = _brute_p(path, g, pairing_permutations(N, 40, seed=0), k=3)
    assert null["p"] == pytest.approx(p) and null["q95"] == pytest.approx(q95)


def test_the_manifest_group_field_makes_the_shuffles_grouped_and_changes_the_input_key(tmp_path):
    path = tmp_path / "s.duckdb"
    write_store(path, n=N)
    analyze_store(path, k=3, metrics=("mutual_knn",), n_boot=0, n_null=40, maps=0, log=quiet)
    con = duckdb.connect(str(path))
    for i in range(N):  # pairs of items from one source; the last two items have none
        md = {"i": i} if i >= N - 2 else {"i": i, "group": f"scene{i // 2}"}
        con.execute("UPDATE items SET metadata = ? WHERE idx = ?", [json.dumps(md), i])
    con.close()
    out = analyze_store(path, log=quiet)  # the groups are an input: the grid is recomputed
    assert out["computed_by_study"]["grids"] == 1
    g = _grid(path)
    assert g["flags"]["null"]["grouped"] is True
    groups = np.array([f"g:scene{i // 2}" for i in range(N - 2)] + [f"item:{N - 2}", f"item:{N - 1}"])
    p, q95 = _brute_p(path, g, pairing_permutations(N, 40, seed=0, groups=groups), k=3)
    assert g["flags"]["null"]["p"] == pytest.approx(p) and g["flags"]["null"]["q95"] == pytest.approx(q95)


def test_no_null_when_switched_off(tmp_path):
    path = tmp_path / "s.duckdb"
    write_store(path, n=N)
    out = analyze_store(path, k=3, metrics=("cka",), n_boot=0, n_null=0, maps=0, log=quiet)
    assert out["settings"]["n_null"] == 0
    assert "null" not in _grid(path, "cka")["flags"]


def test_the_cli_takes_null_perms_and_refuses_a_negative_count(tmp_path, capsys):
    from precompute.cli import main

    path = tmp_path / "s.duckdb"
    write_store(path, n=N)
    assert main(["analyze", "--store", str(path), "--k", "3", "--metric", "mutual_knn", "--bootstrap", "0",
                 "--null-perms", "7", "--maps", "0", "--quiet", "--jobs", "1"]) == 0
    assert "null perms=7" in capsys.readouterr().out
    assert _grid(path)["flags"]["null"]["n_perm"] == 7
    with pytest.raises(SystemExit):
        main(["analyze", "--store", str(path), "--null-perms", "-1"])


def test_cka_without_a_packed_kernel_stores_why_it_has_no_null(tmp_path, monkeypatch):
    from analysis.metrics import kernel as kernel_mod

    monkeypatch.setattr(kernel_mod, "GRAM_CACHE_MAX_N", N - 1)  # as at N > 1024: blocks rebuilt per call
    path = tmp_path / "s.duckdb"
    write_store(path, n=N)
    analyze_store(path, k=3, metrics=("cka",), n_boot=0, n_null=10, null_metrics=("cka",), maps=0, log=quiet)
    flags = _grid(path, "cka")["flags"]
    assert "null" not in flags and "keeps no packed kernel" in flags["null_skipped"]


def test_cka_carries_its_null_only_when_asked_and_says_why_not_otherwise(tmp_path):
    path = tmp_path / "s.duckdb"
    write_store(path, n=N)
    analyze_store(path, k=3, metrics=("cka", "mutual_knn"), n_boot=0, n_null=10, maps=0, log=quiet)
    assert "null" in _grid(path, "mutual_knn")["flags"]
    flags = _grid(path, "cka")["flags"]
    assert "null" not in flags and "--null-metric" in flags["null_skipped"]
    analyze_store(path, null_metrics=("mutual_knn", "cka"), log=quiet)  # a changed setting recomputes the CKA grid with its null
    flags = _grid(path, "cka")["flags"]
    assert flags["null"]["n_perm"] == 10 and "null_skipped" not in flags


def test_the_null_sits_on_each_model_pairs_largest_setting_unless_every_budget_is_asked(tmp_path):
    from precompute.synthetic.store import write_sweep

    path = tmp_path / "sweep.duckdb"
    write_sweep(path, video=["v"], text=["t"], frames=(1, 4), captions=(1, 2), n_items=30, n_layers=3, dim=8)
    analyze_store(path, k=3, metrics=("mutual_knn",), n_boot=0, n_null=10, maps=0, log=quiet)
    con = duckdb.connect(str(path), read_only=True)
    rows = con.execute("SELECT n_frames, n_captions, flags FROM result_grids").fetchall()
    con.close()
    by_budget = {(f, c): json.loads(fl) for f, c, fl in rows}
    assert set(by_budget) == {(1, 1), (1, 2), (4, 1), (4, 2)}
    assert by_budget[(4, 2)]["null"]["n_perm"] == 10  # the largest setting of both models
    for budget in ((1, 1), (1, 2), (4, 1)):
        assert "null" not in by_budget[budget] and "--null-budgets all" in by_budget[budget]["null_skipped"]
    analyze_store(path, null_budgets="all", log=quiet)
    con = duckdb.connect(str(path), read_only=True)
    flags = [json.loads(fl) for (fl,) in con.execute("SELECT flags FROM result_grids").fetchall()]
    con.close()
    assert len(flags) == 4 and all(f["null"]["n_perm"] == 10 for f in flags)
