"""Nothing stored is lost: report outputs never clobber the store or each other, a --store that is
not a DuckDB file is refused untouched, merges survive SIGKILL at any step and keep run notes."""

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis.storage.schema import embedding_tables
from precompute.cli import main
from tests.helpers import error_matrix
from tests.stores import write_store

REPO = Path(__file__).resolve().parents[1]


def digest(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def one_error_line(err: str, *needles) -> str:
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1, err
    for n in needles:
        assert str(n) in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "s.duckdb"
    write_store(path)
    return path


# ---------------------------------------------------------------- report --out


@pytest.mark.parametrize("out", ["STORE", "x.json", "x.md", "DIR", "DIR/"])
def test_report_out_never_overwrites_the_store_or_its_own_outputs(store, tmp_path, capsys, out):
    (tmp_path / "d").mkdir()
    out = {"STORE": str(store), "DIR": str(tmp_path / "d"), "DIR/": str(tmp_path / "new") + "/"}.get(
        out, str(tmp_path / out))
    before = digest(store)
    assert main(["report", "--store", str(store), "--out", out]) == 2
    one_error_line(capsys.readouterr().err, "--out")
    assert digest(store) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "s.duckdb"]  # nothing written
    assert duckdb.connect(str(store), read_only=True).execute("SELECT count(*) FROM runs").fetchall() == [(2,)]


def test_report_out_of_a_sibling_store_is_refused(store, tmp_path, capsys):
    other = tmp_path / "other.duckdb"
    write_store(other, models=("txt",))
    before = digest(other)
    assert main(["report", "--store", str(store), "--out", str(other)]) == 2
    one_error_line(capsys.readouterr().err, str(other))
    assert digest(other) == before


def test_report_files_are_replaced_whole_or_not_at_all(store, tmp_path, monkeypatch):
    out = tmp_path / "r.html"
    assert main(["report", "--store", str(store), "--out", str(out)]) == 0
    assert json.loads(out.with_suffix(".json").read_text())["datasets"][0]["dataset"] == "toy"
    for s in (".html", ".json", ".md"):  # mark the previous files: a rewrite would change them
        out.with_suffix(s).write_text(out.with_suffix(s).read_text() + f"\n<!-- previous {s} -->")
    old = {s: digest(out.with_suffix(s)) for s in (".html", ".json", ".md")}

    import analysis.report

    def boom(report):
        raise RuntimeError("renderer crashed")

    monkeypatch.setattr(analysis.report, "render_markdown", boom)
    with pytest.raises(RuntimeError):
        main(["report", "--store", str(store), "--out", str(out)])
    assert {s: digest(out.with_suffix(s)) for s in (".html", ".json", ".md")} == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "r.json", "r.md", "s.duckdb"]  # no temp left


# ---------------------------------------------------------------- --store that is not a DuckDB file


def _foreign_file(path: Path, kind: str):
    if kind == "csv":
        path.write_text("model,task,metric,value,higher_is_better\nvis,t,acc,0.5,true\n")
    elif kind == "json":
        path.write_text(json.dumps({"results": [1, 2, 3]}))
    else:
        pq.write_table(pa.table({"a": [1, 2, 3]}), path)


@pytest.mark.parametrize("kind, command", error_matrix(
    ["runs", "analyze", "merge", "downstream", "report", "migrate", "dashboard"], ["csv", "json", "parquet"],
    fast_command="runs", fast_kind="csv"))
def test_store_that_is_another_kind_of_file_is_refused_untouched(store, tmp_path, capsys, monkeypatch, kind, command):
    import precompute.dashboard

    monkeypatch.setattr(precompute.dashboard, "launch", lambda *a, **k: 0)  # never start a server here
    target = tmp_path / f"out.{kind}"
    _foreign_file(target, kind)
    before = digest(target)
    csv = tmp_path / "r.csv"
    csv.write_text("model,task,metric,value,higher_is_better\nvis,t,acc,0.5,true\n")
    argv = {"runs": ["runs", "--store", target], "analyze": ["analyze", "--store", target, "--bootstrap", "0"],
            "merge": ["merge", "--store", target, store],
            "downstream": ["downstream", "import", csv, "--store", target],
            "report": ["report", "--store", target, "--out", tmp_path / "r.html"],
            "migrate": ["migrate", "--store", target], "dashboard": ["dashboard", "--store", target]}[command]
    assert main([str(a) for a in argv]) == 2
    one_error_line(capsys.readouterr().err, str(target), "DuckDB")
    assert digest(target) == before


@pytest.mark.slow  # builds a tiny BERT
def test_precompute_into_a_csv_is_refused_before_any_model_runs(tmp_path, capsys):
    from precompute.synthetic import tiny_models
    from tests.precompute.helpers import make_dataset

    data = make_dataset(tmp_path / "data", n=3, captions=1)
    model = tiny_models.build_bert(tmp_path / "bert")
    target = tmp_path / "results.csv"
    target.write_text("a,b\n1,2\n")
    assert main(["precompute", "--store", str(target), "--manifest", str(data), "--dataset", "d",
                 "--model", str(model), "--captions", "1", "--quiet"]) == 2
    one_error_line(capsys.readouterr().err, str(target), "not a DuckDB")
    assert target.read_text() == "a,b\n1,2\n"


# ---------------------------------------------------------------- merge: crash safety and notes


def dump(path) -> dict:
    """Every row of every table, sorted: two stores are equal iff their dumps are."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        tables = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables "
                                            "ORDER BY table_name").fetchall()]
        out = {}
        for t in tables:
            rows = con.execute(f"SELECT * FROM {t}").fetchall()
            out[t] = sorted(rows, key=repr)
        return out
    finally:
        con.close()


KILLER = r"""
import os, signal, sys
import precompute.upkeep.merge as M
kill_at, target, sources = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
count = [0]

class Counting:
    # the target connection, killing this process (SIGKILL: no cleanup at all) at its kill_at-th statement
    def __init__(self, con):
        self._con = con
    def __getattr__(self, name):
        attr = getattr(self._con, name)
        if name not in ("execute", "sql", "register", "executemany"):
            return attr
        def call(*a, **k):
            count[0] += 1
            if count[0] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return attr(*a, **k)
        return call

real = M.connect
def connect(path, read_only=True, **kw):
    con = real(path, read_only=read_only, **kw)
    return con if read_only else Counting(con)
M.connect = connect
M.merge_stores(target, sources, log=lambda m: None)
print(count[0])
"""


def _merge_subprocess(kill_at, target, sources):
    return subprocess.run([sys.executable, "-c", KILLER, str(kill_at), str(target), *map(str, sources)],
                          cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ})


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("shards")
    paths = []
    for i in range(3):
        paths.append(root / f"shard{i}.duckdb")
        write_store(paths[-1], n=180, shard=(i, 3), batch=20)
    return paths


@pytest.mark.slow  # six merges in subprocesses, five of them killed
def test_merge_killed_at_any_statement_then_rerun_equals_an_uninterrupted_merge(shards, tmp_path):
    whole = tmp_path / "whole.duckdb"
    r = _merge_subprocess(0, whole, shards)
    assert r.returncode == 0, r.stderr
    n_statements = int(r.stdout.split()[-1])
    reference = dump(whole)
    assert len(reference["items"]) == 180
    con = duckdb.connect(str(whole), read_only=True)
    tables = embedding_tables(con)
    con.close()
    assert sum(len(reference[t]) for t in tables.values()) == 180 * (3 + 2)
    rng = np.random.default_rng(0)
    kill_points = sorted({n_statements // 2, *rng.integers(1, n_statements + 1, size=4).tolist()})
    for k in kill_points:
        target = tmp_path / f"killed{k}.duckdb"
        r = _merge_subprocess(k, target, shards)
        assert r.returncode == -signal.SIGKILL, (k, r.stderr)
        assert main(["merge", "--store", str(target), *map(str, shards)]) == 0
        got = dump(target)
        assert got.keys() == reference.keys(), k
        for table in reference:
            assert got[table] == reference[table], (k, table)


def test_merge_repairs_items_left_short_by_an_old_interrupted_merge(shards, tmp_path, capsys):
    target = tmp_path / "t.duckdb"
    assert main(["merge", "--store", str(target), *map(str, shards)]) == 0
    reference = dump(target)
    con = duckdb.connect(str(target))
    con.execute("DELETE FROM items WHERE idx >= 120")  # what a kill during the old row-by-row copy left
    con.close()
    assert main(["merge", "--store", str(target), *map(str, shards)]) == 0
    assert "had 120 of 180 items" in capsys.readouterr().err
    assert dump(target) == reference


def test_merge_keeps_every_shards_run_notes(tmp_path):
    notes = {"short_videos": {"item1": {"frames": 3, "handled": "repeats frames"},
                              "item7": {"frames": 2, "handled": "repeats frames"}},
             "fewer_captions": {"item8": {"have": 1, "asked": 2}}}
    shard_paths = []
    for i in range(2):
        shard_paths.append(tmp_path / f"s{i}.duckdb")
        write_store(shard_paths[-1], n=10, shard=(i, 2), notes=notes, models=("vis",))
    # each shard holds only the notes of its own items (0..4 and 5..9)
    con = duckdb.connect(str(shard_paths[0]), read_only=True)
    assert json.loads(con.execute("SELECT config FROM runs").fetchall()[0][0])["notes"] == \
        {"short_videos": {"item1": notes["short_videos"]["item1"]}}
    con.close()
    merged = tmp_path / "m.duckdb"
    assert main(["merge", "--store", str(merged), *map(str, shard_paths)]) == 0
    con = duckdb.connect(str(merged), read_only=True)
    (config,) = con.execute("SELECT config FROM runs").fetchall()[0]
    con.close()
    assert json.loads(config)["notes"] == notes


def test_unsharded_run_copied_by_merge_keeps_its_notes(tmp_path):
    notes = {"short_videos": {"item2": {"frames": 3, "handled": "repeats frames"}}}
    src = tmp_path / "src.duckdb"
    write_store(src, n=6, notes=notes, models=("vis",))
    merged = tmp_path / "m.duckdb"
    assert main(["merge", "--store", str(merged), str(src)]) == 0
    con = duckdb.connect(str(merged), read_only=True)
    assert json.loads(con.execute("SELECT config FROM runs").fetchall()[0][0])["notes"] == notes
    con.close()


def test_a_schema_3_store_is_refused_then_migrated_to_4_and_analysed(tmp_path, capsys):
    from analysis.storage.schema import SCHEMA_VERSION
    from analysis.studies import analyze_store
    from precompute.synthetic.store import write_sweep

    store = tmp_path / "v3.duckdb"
    write_sweep(store, video=["v"], text=["t"], frames=(1,), captions=(1,), n_items=24, n_layers=3, dim=8)
    analyze_store(store, k=3, metrics=("mutual_knn",), n_boot=0, log=lambda m: None)
    con = duckdb.connect(str(store))  # what a schema-3 store looks like: no flags columns
    con.execute("ALTER TABLE result_grids DROP COLUMN flags")
    con.execute("ALTER TABLE result_profiles DROP COLUMN flags")
    con.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    grids_before = con.execute("SELECT result_id, grid_values FROM result_grids ORDER BY result_id").fetchall()
    con.close()
    assert main(["runs", "--store", str(store)]) == 2
    assert "layerscope migrate" in capsys.readouterr().err
    assert main(["migrate", "--store", str(store)]) == 0
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall() == [(str(SCHEMA_VERSION),)]
    cols = {r[0] for r in con.execute("SELECT column_name FROM information_schema.columns "
                                      "WHERE table_name = 'result_grids'").fetchall()}
    assert "flags" in cols
    assert con.execute("SELECT result_id, grid_values FROM result_grids ORDER BY result_id").fetchall() == grids_before
    con.close()
    out = analyze_store(store, log=lambda m: None)  # the cached results are reused as they are
    assert out["computed"] == 0 and out["skipped"] > 0
