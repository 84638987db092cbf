"""An analysis setting is checked against what it costs before it is used or saved; a failed one is
never kept, and a bad one saved by an older version is replaced by the default with a note."""

import json

import pytest

import analysis.studies as studies
from analysis.studies import Settings, analyze_store, stored_settings
from analysis.studies.budget import BOOT_BYTES_PER_ITEM, NULL_BYTES_PER_ITEM, StoreShape, memory_problems
from analysis.storage.store import connect
from precompute.cli import main
from tests.stores import write_store

N = 12  # write_store's default items


def _saved(store) -> dict:
    con = connect(store, read_only=True)
    try:
        return stored_settings(con)
    finally:
        con.close()


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


def test_the_largest_value_named_fits_and_one_more_does_not():
    shape = StoreShape(n_items=1000, n_layers=13, dim=64)
    available = 7 * 10**6
    msg = memory_problems(Settings(n_null=10**9), shape, available)["n_null"]
    largest = int(msg.split("pass --null-perms ")[1].split()[0])
    assert largest == available // (NULL_BYTES_PER_ITEM * 1000)
    assert "n_null" not in memory_problems(Settings(n_null=largest), shape, available)
    assert "n_null" in memory_problems(Settings(n_null=largest + 1), shape, available)
    msg = memory_problems(Settings(n_boot=10**9), shape, available)["n_boot"]
    largest = int(msg.split("pass --bootstrap ")[1].split()[0])
    assert largest == available // (BOOT_BYTES_PER_ITEM * 1000)
    assert "n_boot" not in memory_problems(Settings(n_boot=largest), shape, available)
    # the defaults fit a paper-sized dataset in a gigabyte
    assert memory_problems(Settings(), StoreShape(1024, 33, 4096), 2**30) == {}


@pytest.mark.parametrize("flag, name", [("--null-perms", "n_null"), ("--bootstrap", "n_boot")])
def test_a_setting_too_large_for_memory_is_refused_unsaved_and_the_next_analyze_works(tmp_path, capsys, flag, name):
    store = tmp_path / "s.duckdb"
    write_store(store)
    assert main(["analyze", "--store", str(store), "--quiet", "--jobs", "1", "--maps", "0",
                 flag, "1000000000"]) == 2
    err = _one_error_line(capsys)
    assert flag in err and "GiB" in err and f"N = {N}" in err and "or less" in err
    assert name not in _saved(store)
    assert main(["analyze", "--store", str(store), "--quiet", "--jobs", "1", "--maps", "0"]) == 0
    assert _saved(store)[name] == getattr(Settings(), name)


def test_a_k_as_large_as_every_dataset_is_refused_naming_n(tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    write_store(store)
    assert main(["analyze", "--store", str(store), "--quiet", "--jobs", "1", "--k", "1000000"]) == 2
    err = _one_error_line(capsys)
    assert "--k 1000000" in err and f"N = {N}" in err and f"--k {N - 1}" in err
    assert _saved(store) == {}


def test_a_bad_setting_saved_by_an_older_version_is_replaced_with_a_note(tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    write_store(store)
    bad = {**Settings().stored(), "n_null": 10**9, "k": 10**6, "maps": 0}
    con = connect(store, read_only=False)
    try:
        con.execute("INSERT INTO meta VALUES (?, ?)", [studies.SETTINGS_KEY, json.dumps(bad)])
    finally:
        con.close()
    assert main(["analyze", "--store", str(store), "--quiet", "--jobs", "1"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "saved setting" in line]
    assert len(notes) == 2 and any("n_null" in n and "--null-perms" in n for n in notes)
    saved = _saved(store)
    assert (saved["n_null"], saved["k"], saved["maps"]) == (Settings().n_null, Settings().k, 0)


def test_settings_are_not_saved_when_the_analysis_they_configure_fails(tmp_path, monkeypatch):
    store = tmp_path / "s.duckdb"
    write_store(store)

    def fails(*args, **kwargs):
        raise MemoryError("the first study could not allocate")

    monkeypatch.setattr(studies, "run_dataset", fails)
    with pytest.raises(MemoryError):
        analyze_store(store, n_boot=7, jobs=1, log=lambda m: None)
    assert _saved(store).get("n_boot") != 7


def test_a_saved_reference_to_a_removed_model_is_dropped_with_a_note(tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    write_store(store)
    assert main(["analyze", "--store", str(store), "--quiet", "--jobs", "1", "--maps", "0", "--bootstrap", "0",
                 "--reference", "txt"]) == 0
    assert main(["runs", "rm", "--store", str(store), "--model", "txt"]) == 0
    capsys.readouterr()
    assert main(["analyze", "--store", str(store), "--quiet", "--jobs", "1"]) == 0
    assert any("saved references" in line and "'txt'" in line for line in capsys.readouterr().err.splitlines())
    assert _saved(store)["references"] == []
    # one given now is still refused
    assert main(["analyze", "--store", str(store), "--quiet", "--jobs", "1", "--reference", "txt"]) == 2
    assert "unknown --reference" in capsys.readouterr().err


def test_workers_share_the_memory():
    shape = StoreShape(n_items=1000, n_layers=13, dim=64)
    available = 7 * 10**6
    alone = available // (NULL_BYTES_PER_ITEM * 1000)
    assert "n_null" not in memory_problems(Settings(n_null=alone), shape, available)
    msg = memory_problems(Settings(n_null=alone), shape, available, workers=4)["n_null"]
    assert f"pass --null-perms {(available // 4) // (NULL_BYTES_PER_ITEM * 1000)} or less" in msg and "4 --jobs" in msg
