"""Options that could be read two ways are refused or read one way, in one line: a store given twice,
a run id named twice, a manifest that is a folder, a lock wait that is not a number."""

from analysis.storage.store import list_runs
from precompute.cli import main
from tests.precompute.helpers import write_sweep
from tests.helpers import one_line_error as _one_line
from tests.stores import write_store


def test_runs_rm_with_two_different_stores_is_refused_and_removes_nothing(tmp_path, capsys):
    a, b = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    ids = write_store(a)
    write_store(b)
    run_id = ids["vis"]
    assert main(["runs", "--store", str(a), "rm", "--store", str(b), run_id]) == 2
    _one_line(capsys, "--store is given twice", str(a), str(b))
    assert run_id in {r["run_id"] for r in list_runs(a)} and run_id in {r["run_id"] for r in list_runs(b)}
    # the same store said twice is one store
    assert main(["runs", "--store", str(a), "rm", "--store", str(a), run_id]) == 0


def test_runs_rm_counts_a_run_named_twice_once(tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    ids = write_store(store)
    assert main(["runs", "rm", "--store", str(store), ids["vis"], ids["vis"]]) == 0
    assert "removed 1 run(s)" in capsys.readouterr().out
    assert [r["run_id"] for r in list_runs(store)] == [ids["txt"]]


def test_a_sweep_manifest_that_is_a_folder_is_called_a_folder(tmp_path, capsys):
    (tmp_path / "data").mkdir()
    path = write_sweep(tmp_path / "sweep.toml", manifest="data", models=["some/model"])
    assert main(["sweep", "plan", str(path), "--store", str(tmp_path / "s.duckdb")]) == 2
    err = capsys.readouterr().err
    assert "is a folder, not a manifest file" in err and "does not exist" not in err


def test_a_lock_wait_that_is_not_a_number_is_named(tmp_path, capsys, monkeypatch):
    store = tmp_path / "s.duckdb"
    write_store(store)
    for bad in ("abc", "-1", "nan"):
        monkeypatch.setenv("LAYERSCOPE_LOCK_WAIT_S", bad)
        assert main(["runs", "--store", str(store)]) == 2
        _one_line(capsys, f"LAYERSCOPE_LOCK_WAIT_S={bad!r}", "seconds")
    monkeypatch.setenv("LAYERSCOPE_LOCK_WAIT_S", "0.5")
    assert main(["runs", "--store", str(store)]) == 0
