"""`layerscope runs rm` and `runs rename`: what goes, what stays, what is refused, and that a renamed
model's runs are still found done by a precompute under the new name."""

import json

import duckdb
import numpy as np
import pytest

from analysis.storage.store import list_runs, load_embeddings
from precompute.cli import main
from precompute.batch.writer import identity_of, run_id_for
from tests.precompute.helpers import make_dataset
from tests.stores import write_store


def _count(store, sql, args=()):
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute(sql, list(args)).fetchone()[0]
    finally:
        con.close()


def _analysed(tmp_path):
    store = tmp_path / "s.duckdb"
    ids = write_store(store, models=("vis", "txt"))
    assert main(["analyze", "--store", str(store), "--quiet", "--jobs", "1", "--maps", "0", "--bootstrap", "0"]) == 0
    return store, ids


def test_rm_removes_a_runs_vectors_and_the_results_that_read_it_and_nothing_else(tmp_path, capsys):
    store, ids = _analysed(tmp_path)
    keep = load_embeddings(store, model="txt", dataset="toy", n_captions=1)
    assert _count(store, "SELECT count(*) FROM result_grids") > 0
    assert main(["runs", "rm", "--store", str(store), ids["vis"]]) == 0
    assert "removed 1 run(s) (36 vectors)" in capsys.readouterr().out  # 3 layers x 12 items
    assert [r["run_id"] for r in list_runs(store)] == [ids["txt"]]
    assert _count(store, "SELECT count(*) FROM embeddings_8") == 0
    assert _count(store, "SELECT count(*) FROM result_grids") == 0  # every grid read the removed run
    assert _count(store, "SELECT count(*) FROM result_profiles WHERE run_id = ?", [ids["vis"]]) == 0
    assert _count(store, "SELECT count(*) FROM result_profiles WHERE run_id = ?", [ids["txt"]]) > 0
    np.testing.assert_array_equal(load_embeddings(store, model="txt", dataset="toy", n_captions=1), keep)
    assert _count(store, "SELECT count(*) FROM models WHERE model = 'vis'") == 1  # a run, not the model


def test_rm_model_removes_the_model_and_its_downstream_results(tmp_path, capsys):
    store, ids = _analysed(tmp_path)
    csv = tmp_path / "d.csv"
    csv.write_text("model,task,metric,value,higher_is_better\nvis,ssv2,top1,0.5,true\ntxt,ssv2,top1,0.4,true\n")
    assert main(["downstream", "import", str(csv), "--store", str(store)]) == 0
    assert main(["runs", "rm", "--store", str(store), "--model", "vis"]) == 0
    assert "1 downstream result(s)" in capsys.readouterr().out
    assert _count(store, "SELECT count(*) FROM models WHERE model = 'vis'") == 0
    assert _count(store, "SELECT count(*) FROM downstream_results WHERE model = 'vis'") == 0
    assert _count(store, "SELECT count(*) FROM downstream_results WHERE model = 'txt'") == 1


@pytest.mark.parametrize("args, message", [
    (["rm", "rnope"], "has no run(s) rnope"),
    (["rm", "--model", "nope"], "has no model 'nope'"),
    (["rm"], "name the runs to remove"),
    (["rename", "vis", "txt"], "already has a model 'txt'"),
    (["rename", "nope", "x"], "has no model 'nope'"),
    (["rename", "vis", "clip [text]"], "is not a model name"),
])
def test_bad_requests_change_nothing(tmp_path, capsys, args, message):
    store, _ = _analysed(tmp_path)
    before = {t: _count(store, f"SELECT count(*) FROM {t}") for t in ("runs", "models", "result_grids")}
    capsys.readouterr()
    assert main(["runs", args[0], "--store", str(store), *args[1:]]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and err.count("\n") == 0
    assert {t: _count(store, f"SELECT count(*) FROM {t}") for t in before} == before


def test_a_store_that_does_not_exist_is_not_created(tmp_path, capsys):
    missing = tmp_path / "typo.duckdb"
    assert main(["runs", "rm", "--store", str(missing), "r1"]) == 2
    assert "does not exist" in capsys.readouterr().err and not missing.exists()


def test_rename_follows_everywhere_and_the_next_analysis_and_report_name_only_the_new(tmp_path, capsys):
    store, ids = _analysed(tmp_path)
    assert main(["runs", "rename", "--store", str(store), "txt", "minilm"]) == 0
    assert {r["model"] for r in list_runs(store)} == {"vis", "minilm"}
    assert _count(store, "SELECT count(*) FROM models WHERE model = 'txt'") == 0
    assert _count(store, "SELECT count(*) FROM result_grids WHERE model_b = 'txt'") == 0
    assert main(["analyze", "--store", str(store), "--quiet", "--jobs", "1", "--maps", "0", "--bootstrap", "0"]) == 0
    assert _count(store, "SELECT count(*) FROM result_grids WHERE model_b = 'minilm'") > 0
    out = tmp_path / "r.html"
    assert main(["report", "--store", str(store), "--out", str(out)]) == 0
    text = out.with_suffix(".json").read_text()
    assert "minilm" in text and '"txt"' not in text and "txt [" not in text


@pytest.mark.slow
def test_a_renamed_models_runs_are_found_done_under_the_new_name(tmp_path, tiny, capsys):
    store = tmp_path / "s.duckdb"
    data = make_dataset(tmp_path / "data", n=4, captions=2)
    args = ["precompute", "--store", str(store), "--manifest", str(data), "--dataset", "toy", "--model", tiny["bert"],
            "--captions", "1", "--quiet"]
    assert main([*args, "--name", "old"]) == 0
    before = {r["variant"]: load_embeddings(store, model="old", dataset="toy", n_captions=1, variant=r["variant"])
              for r in list_runs(store)}
    assert main(["runs", "rename", "--store", str(store), "old", "new"]) == 0
    con = duckdb.connect(str(store), read_only=True)
    for run_id, config in con.execute("SELECT run_id, config FROM runs").fetchall():
        assert run_id == run_id_for(identity_of(json.loads(config)))  # the id still hashes the identity
    con.close()
    capsys.readouterr()
    assert main([*args, "--name", "new"]) == 0
    assert "0 run(s) computed" in capsys.readouterr().out
    for variant, X in before.items():
        np.testing.assert_array_equal(load_embeddings(store, model="new", dataset="toy", n_captions=1,
                                                      variant=variant), X)
