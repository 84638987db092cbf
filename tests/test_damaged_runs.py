"""Damaged runs and stores (issue #34 item 8): a done run holding NaN is left out of ``analyze``
(named, counted, with advice that works) while the rest is analysed; an all-zero layer is named with
its run; a store with a damaged block is refused before anything is written to it; a version-2 store
with a missing block does not come out of ``migrate`` with its runs ``done``; a mistyped ``--store``
is refused as missing and no empty store is left behind."""

import hashlib
import json
import os
import shutil
from pathlib import Path

import duckdb
import numpy as np
import pytest

from analysis.storage.schema import embedding_tables
from precompute.cli import main
from tests import stores
from tests.stores import downgrade_to_v2, write_store


def digest(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture
def three_models(monkeypatch):
    # a second vision model, so that leaving one out still leaves a vision x text pair to analyse
    monkeypatch.setitem(stores.MODELS, "vis2", ("video", 3, 8))
    return ("vis", "vis2", "txt")


def set_rows(store, run_id, dim, *, value: str, where: str) -> int:
    """Overwrite every float of the run's rows matching ``where`` with ``value``; returns the rows."""
    con = duckdb.connect(str(store))
    table = embedding_tables(con)[dim]
    n = con.execute(f"SELECT count(*) FROM {table} WHERE run_id = ? AND {where}", [run_id]).fetchall()[0][0]
    con.execute(f"UPDATE {table} SET vec = list_transform(vec, lambda x: {value}::FLOAT)::FLOAT[{dim}] "
                f"WHERE run_id = ? AND {where}", [run_id])
    con.close()
    return n


def result_runs(store) -> set:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return {r for row in con.execute("SELECT run_a, run_b FROM result_grids").fetchall() for r in row} | {
            r[0] for r in con.execute("SELECT run_id FROM result_profiles").fetchall()}
    finally:
        con.close()


def test_a_done_run_with_nan_is_left_out_and_the_rest_is_analysed(tmp_path, capsys, three_models):
    store = tmp_path / "s.duckdb"
    ids = write_store(store, models=three_models)
    # items 0, 1, 2 of layer 1 only: three damaged items, however many layers each touches
    set_rows(store, ids["vis2"], 8, value="'nan'", where="idx < 3 AND layer = 1")
    set_rows(store, ids["vis2"], 8, value="'inf'", where="idx = 1 AND layer = 2")
    assert main(["analyze", "--store", str(store), "--bootstrap", "0", "--quiet", "--jobs", "1"]) == 0
    err = capsys.readouterr().err
    (line,) = [l for l in err.splitlines() if ids["vis2"] in l]
    assert "vis2" in line and "3 of 12 items" in line and "NaN" in line
    assert f"layerscope runs rm --store {store} {ids['vis2']}" in line
    analysed = result_runs(store)
    assert ids["vis2"] not in analysed
    assert {ids["vis"], ids["txt"]} <= analysed


def test_nothing_left_to_analyse_is_an_error(tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    ids = write_store(store)
    for model, dim in (("vis", 8), ("txt", 6)):
        set_rows(store, ids[model], dim, value="'nan'", where="idx = 5")
    assert main(["analyze", "--store", str(store), "--bootstrap", "0", "--quiet", "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert "nothing could be analysed" in err.splitlines()[-1]
    assert ids["vis"] in err and ids["txt"] in err


def test_an_all_zero_layer_is_named_with_its_run_and_analysis_goes_on(tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    ids = write_store(store)
    set_rows(store, ids["vis"], 8, value="0", where="layer = 1")
    assert main(["analyze", "--store", str(store), "--bootstrap", "0", "--quiet", "--jobs", "1"]) == 0
    err = capsys.readouterr().err
    assert "X is all zeros" not in err
    con = duckdb.connect(str(store), read_only=True)
    rows = con.execute("SELECT metric, layer_values, flags FROM result_profiles WHERE run_id = ?",
                       [ids["vis"]]).fetchall()
    con.close()
    got = {m: (v, json.loads(f)) for m, v, f in rows}
    for metric in ("rankme", "uniformity"):
        values, flags = got[metric]
        # RankMe (entropy of σ/Σσ) and uniformity (of directions) are undefined when every row is 0
        assert np.isnan(values[1]), (metric, values)
        assert np.isfinite(values[0]) and np.isfinite(values[2])
        assert "zero" in flags["1"]
    (note,) = [l for l in err.splitlines() if "zero" in l and ids["vis"] in l]
    assert "layer 1" in note and "vis" in note


# ---------------------------------------------------------------- a damaged block: nothing written

BLOCK = 256 * 1024  # DuckDB's block size: each block has its own checksum


@pytest.mark.slow  # one analyze per block of the file
def test_analyze_refuses_a_damaged_block_before_writing_anything(tmp_path, capsys):
    good = tmp_path / "good.duckdb"
    write_store(good, n=40)
    con = duckdb.connect(str(good))
    con.execute("CHECKPOINT")
    con.close()
    size = os.path.getsize(good)
    refused = 0
    for block in range(1, size // BLOCK + 1):
        store = tmp_path / "c.duckdb"
        shutil.copy(good, store)
        with open(store, "r+b") as fh:  # 4 KiB of noise a little past the block's checksum
            fh.seek(block * BLOCK + 4096)
            fh.write(np.random.default_rng(block).integers(0, 256, 4096, dtype=np.uint8).tobytes())
        before = digest(store)
        rc = main(["analyze", "--store", str(store), "--bootstrap", "0", "--quiet", "--jobs", "1"])
        err = capsys.readouterr().err
        if rc != 0:  # refused: one line, the file exactly as it was
            refused += 1
            assert "damaged" in err and digest(store) == before, (block, err)
        store.unlink()
        for wal in tmp_path.glob("c.duckdb.*"):
            wal.unlink()
    assert refused >= 3  # the test damaged blocks that hold data, not only free space


def test_analyze_reads_every_block_before_writing(tmp_path, monkeypatch):
    """The fast version of the test above: the first statement that could write comes after the
    check that reads every table (checked by recording the order of the two)."""
    import analysis.studies as studies
    from analysis.storage import integrity

    store = tmp_path / "s.duckdb"
    write_store(store)
    order = []
    real_scan, real_create = integrity.scan_store, studies.create_all
    monkeypatch.setattr(studies, "scan_store", lambda *a, **k: (order.append("scan"), real_scan(*a, **k))[1])
    monkeypatch.setattr(studies, "create_all", lambda *a, **k: (order.append("write"), real_create(*a, **k))[1])
    studies.analyze_store(store, studies.AnalyzeOptions(n_boot=0, jobs=1), log=lambda m: None)
    assert order[:2] == ["scan", "write"]


# ---------------------------------------------------------------- migrate of a v2 store with a hole


def test_migrate_of_a_v2_store_with_a_missing_block_leaves_that_run_unfinished(tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    ids = write_store(store)  # 12 items in batches of 4
    downgrade_to_v2(store, drop=(ids["vis"], 1, 4))
    assert main(["migrate", "--store", str(store)]) == 0
    out = capsys.readouterr()
    assert ids["vis"] in out.out + out.err and "missing" in (out.out + out.err)
    con = duckdb.connect(str(store), read_only=True)
    runs = {r[0]: r[1:] for r in con.execute("SELECT run_id, status, n_done, config FROM runs").fetchall()}
    con.close()
    status, n_done, config = runs[ids["vis"]]
    # items 4..7 of layer 1 are gone: the run holds its first 4 items whole, and resumes there
    assert (status, n_done) == ("running", 4)
    assert "missing" in json.loads(config)["incomplete"]
    assert runs[ids["txt"]][:2] == ("done", 12)
    assert main(["runs", "--store", str(store)]) == 0
    assert "interrupted" in capsys.readouterr().out


# ---------------------------------------------------------------- a mistyped --store


def _csv(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("model,task,metric,value,higher_is_better\nvis,t,acc,0.5,true\n")
    return path


MISSING = {
    "analyze": lambda s, t: ["analyze", "--store", s, "--bootstrap", "0", "--quiet"],
    "map": lambda s, t: ["map", "--store", s, "--dataset", "toy", "--model", "vis", "--layer", "1"],
    "downstream": lambda s, t: ["downstream", "import", str(_csv(t)), "--store", s],
    "report": lambda s, t: ["report", "--store", s, "--out", str(t / "r.html")],
    "runs": lambda s, t: ["runs", "--store", s],
    "runs_rm": lambda s, t: ["runs", "rm", "--store", s, "abc"],
    "runs_rename": lambda s, t: ["runs", "rename", "--store", s, "a", "b"],
    "migrate": lambda s, t: ["migrate", "--store", s],
    "dashboard": lambda s, t: ["dashboard", "--store", s, "--port", "1"],  # refused before any server starts
}


@pytest.mark.parametrize("command", sorted(MISSING))
def test_a_missing_store_is_named_and_not_created(tmp_path, capsys, command):
    store = tmp_path / "typo.duckdb"
    assert main(MISSING[command](str(store), tmp_path)) == 2
    lines = [l for l in capsys.readouterr().err.splitlines() if l.strip()]
    assert len(lines) == 1 and f"store {store} does not exist" in lines[0], lines
    assert not any(p.name.startswith("typo") for p in tmp_path.iterdir())
