"""Every command answers a damaged, foreign, immutable or full store, and bad flags or files, with
one line naming the file or flag at fault: no traceback, and nothing stored is changed."""

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import duckdb
import numpy as np
import pytest

from precompute.cli import main
from tests.helpers import error_matrix
from tests.stores import write_store


def digest(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def one_line(capsys, *needles) -> str:
    err = capsys.readouterr().err
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for n in needles:
        assert str(n) in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def good_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("good") / "good.duckdb"
    write_store(path, n=40)
    return path


def damaged(kind: str, good: Path, tmp_path: Path) -> Path:
    path = tmp_path / f"{kind}.duckdb"
    if kind == "truncated":  # the header survives, the blocks do not (a copy cut short)
        shutil.copy(good, path)
        with open(path, "r+b") as fh:
            fh.truncate(os.path.getsize(good) // 5)
    elif kind == "random":
        path.write_bytes(np.random.default_rng(0).integers(0, 256, 50_000, dtype=np.uint8).tobytes())
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "text":
        path.write_text("this is not a database\n" * 100)
    elif kind == "corrupt_blocks":  # the header survives, the middle is overwritten
        shutil.copy(good, path)
        size = os.path.getsize(path)
        with open(path, "r+b") as fh:
            fh.seek(size // 3)
            fh.write(np.random.default_rng(1).integers(0, 256, size // 3, dtype=np.uint8).tobytes())
    elif kind == "schema_text":  # meta.schema_version that is not a number
        shutil.copy(good, path)
        con = duckdb.connect(str(path))
        con.execute("UPDATE meta SET value = 'three' WHERE key = 'schema_version'")
        con.close()
    return path


COMMANDS = {
    "runs": lambda s, t: ["runs", "--store", s],
    "analyze": lambda s, t: ["analyze", "--store", s, "--bootstrap", "0"],
    "report": lambda s, t: ["report", "--store", s, "--out", t / "r.html"],
    "merge_source": lambda s, t: ["merge", "--store", t / "target.duckdb", s],
    "merge_target": lambda s, t: ["merge", "--store", s, t / "src.duckdb"],
    "migrate": lambda s, t: ["migrate", "--store", s],
    "downstream": lambda s, t: ["downstream", "import", t / "r.csv", "--store", s],
    "dashboard": lambda s, t: ["dashboard", "--store", s],
}


DAMAGES = ["truncated", "random", "empty", "text", "corrupt_blocks", "schema_text"]


@pytest.mark.parametrize("kind, command", error_matrix(COMMANDS, DAMAGES, fast_command="runs", fast_kind="truncated"))
def test_damaged_store_gives_one_line_for_every_command(good_store, tmp_path, capsys, monkeypatch, kind, command):
    import precompute.dashboard

    monkeypatch.setattr(precompute.dashboard, "launch", lambda *a, **k: 0)  # never start a server here
    store = damaged(kind, good_store, tmp_path)
    write_store(tmp_path / "src.duckdb", n=6)
    (tmp_path / "r.csv").write_text("model,task,metric,value,higher_is_better\nvis,t,acc,0.5,true\n")
    before = digest(store)
    rc = main([str(a) for a in COMMANDS[command](store, tmp_path)])
    if kind == "corrupt_blocks" and rc == 0:
        # DuckDB reads only the blocks a command needs: a command that never touches the damaged
        # ones may succeed, but it must not have changed the file
        capsys.readouterr()
    else:
        assert rc == 2
        one_line(capsys, store.name)
    if command != "merge_target" or kind != "corrupt_blocks":
        assert digest(store) == before
    assert not (tmp_path / "r.html").exists()


@pytest.mark.slow  # builds a tiny BERT
def test_precompute_into_a_damaged_store_gives_one_line(good_store, tmp_path, capsys):
    from precompute.synthetic import tiny_models
    from tests.precompute.helpers import make_dataset

    store = damaged("truncated", good_store, tmp_path)
    data = make_dataset(tmp_path / "data", n=3, captions=1)
    model = tiny_models.build_bert(tmp_path / "bert")
    assert main(["precompute", "--store", str(store), "--manifest", str(data), "--dataset", "toy",
                 "--model", str(model), "--captions", "1", "--quiet"]) == 2
    one_line(capsys, store.name, "damaged")


@pytest.fixture
def immutable(tmp_path):
    """A store the OS refuses to change even for root (chattr +i)."""
    path = tmp_path / "frozen.duckdb"
    write_store(path, n=8)
    r = subprocess.run(["chattr", "+i", str(path)], capture_output=True)
    if r.returncode != 0:
        pytest.fail(f"chattr +i is needed for this test on this filesystem: {r.stderr!r}")
    yield path
    subprocess.run(["chattr", "-i", str(path)])


@pytest.mark.parametrize("command", ["analyze", "downstream", "merge_target", "migrate"])
def test_immutable_store_refuses_writes_in_one_line_and_still_reads(immutable, tmp_path, capsys, command):
    write_store(tmp_path / "src.duckdb", n=6, dataset="other")
    (tmp_path / "r.csv").write_text("model,task,metric,value,higher_is_better\nvis,t,acc,0.5,true\n")
    before = digest(immutable)
    rc = main([str(a) for a in COMMANDS[command](immutable, tmp_path)])
    if command == "migrate":  # already at the current version: nothing to write, and it says so
        assert rc == 0
    else:
        assert rc == 2
        one_line(capsys, immutable.name, "cannot be opened for writing")
    assert digest(immutable) == before
    assert main(["runs", "--store", str(immutable)]) == 0  # reading still works
    assert main(["report", "--store", str(immutable), "--out", str(tmp_path / "r.html")]) == 0


def test_full_disk_while_writing_gives_one_line_and_keeps_the_store(tmp_path, capsys, monkeypatch):
    """A full disk surfaces as DuckDB's IO error at the write; simulated at the import's INSERT."""
    import analysis.storage.downstream_import as di

    store = tmp_path / "s.duckdb"
    write_store(store, n=8)
    (tmp_path / "r.csv").write_text("model,task,metric,value,higher_is_better\nvis,t,acc,0.5,true\n")
    real = di.connect

    class FullDisk:
        def __init__(self, con):
            self._con = con

        def __getattr__(self, name):
            return getattr(self._con, name)

        def execute(self, sql, *args):
            if sql.startswith("INSERT INTO downstream_results"):
                raise duckdb.IOException(f'Could not write file "{store}.wal": No space left on device')
            return self._con.execute(sql, *args)

    monkeypatch.setattr(di, "connect", lambda *a, **k: FullDisk(real(*a, **k)))
    assert main(["downstream", "import", str(tmp_path / "r.csv"), "--store", str(store)]) == 2
    one_line(capsys, store.name, "disk is full")
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT count(*) FROM downstream_results").fetchall() == [(0,)]
    assert con.execute("SELECT count(*) FROM runs").fetchall() == [(2,)]
    con.close()


def test_merging_a_store_into_its_own_source_is_refused(tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    write_store(store, n=8)
    before = digest(store)
    for src in (store, tmp_path / "." / "s.duckdb"):
        assert main(["merge", "--store", str(store), str(src)]) == 2
        one_line(capsys, "cannot be merged into itself")
    link = tmp_path / "link.duckdb"
    link.symlink_to(store)
    assert main(["merge", "--store", str(store), str(link)]) == 2
    one_line(capsys, "itself")
    assert digest(store) == before


@pytest.mark.parametrize("port", ["99999", "0", "-1"])
def test_dashboard_port_out_of_range_is_one_line(good_store, capsys, monkeypatch, port):
    import precompute.dashboard

    launched = []
    monkeypatch.setattr(precompute.dashboard, "launch", lambda *a, **k: launched.append(a) or 0)
    assert main(["dashboard", "--store", str(good_store), "--port", port]) == 2
    one_line(capsys, f"--port {port}")
    assert not launched


def test_report_out_a_directory_is_one_line(good_store, tmp_path, capsys):
    assert main(["report", "--store", str(good_store), "--out", str(tmp_path)]) == 2
    one_line(capsys, "is a directory")


@pytest.mark.parametrize("name, html, json_, md", [
    ("rep", "rep.html", "rep.json", "rep.md"),  # no suffix: a browser must know the file for HTML
    ("rep.HTML", "rep.HTML", "rep.json", "rep.md"),
    ("rep.htm", "rep.htm", "rep.json", "rep.md"),
    ("rep.v2", "rep.v2.html", "rep.v2.json", "rep.v2.md"),
])
def test_report_out_names_its_three_files(good_store, tmp_path, capsys, name, html, json_, md):
    assert main(["report", "--store", str(good_store), "--out", str(tmp_path / name)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir() if p != good_store and p.suffix != ".wal") == \
        sorted([html, json_, md])
    assert (tmp_path / html).read_text().lstrip().lower().startswith("<!doctype html")
    assert str(tmp_path / html) in capsys.readouterr().out


@pytest.mark.parametrize("suffix", [".json", ".md", ".MD"])
def test_report_out_named_like_its_json_or_markdown_is_one_line(good_store, tmp_path, capsys, suffix):
    assert main(["report", "--store", str(good_store), "--out", str(tmp_path / f"r{suffix}")]) == 2
    one_line(capsys, "over each other")
    assert not list(tmp_path.glob("r.*"))


# ---------------------------------------------------------------- downstream CSVs, flags


def test_downstream_csv_with_a_bom_imports(tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    write_store(store, n=8)
    csv = tmp_path / "excel.csv"
    csv.write_bytes("\ufeffmodel,task,metric,value,higher_is_better\r\nvis,ssv2,top1,0.5,true\r\n"
                    "txt,ssv2,top1,0.25,true\r\n".encode("utf-8"))
    assert main(["downstream", "import", str(csv), "--store", str(store)]) == 0
    con = duckdb.connect(str(store), read_only=True)
    assert sorted(con.execute("SELECT model, task, value FROM downstream_results").fetchall()) == \
        [("txt", "ssv2", 0.25), ("vis", "ssv2", 0.5)]
    con.close()


def test_downstream_csv_that_is_not_utf8_is_one_line(tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    write_store(store, n=8)
    csv = tmp_path / "latin1.csv"
    csv.write_bytes("model,task,metric,value,higher_is_better\nvis,détection,top1,0.5,true\n".encode("latin-1"))
    assert main(["downstream", "import", str(csv), "--store", str(store)]) == 2
    one_line(capsys, csv.name, "UTF-8", "line 2")
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT count(*) FROM downstream_results").fetchall() == [(0,)]
    con.close()


@pytest.mark.parametrize("flag,value", [("--bootstrap", "-5"), ("--k", "0"), ("--bootstrap", "x")])
def test_negative_counts_are_refused(good_store, capsys, flag, value):
    with pytest.raises(SystemExit) as exc:
        main(["analyze", "--store", str(good_store), flag, value])
    assert exc.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err


def test_bootstrap_zero_means_off(tmp_path):
    store = tmp_path / "s.duckdb"
    write_store(store, n=12)
    assert main(["analyze", "--store", str(store), "--k", "3", "--bootstrap", "0"]) == 0
    con = duckdb.connect(str(store), read_only=True)
    assert {r[0] for r in con.execute("SELECT n_boot FROM result_grids").fetchall()} == {0}
    con.close()


def test_store_in_a_folder_that_cannot_exist_is_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    write_store(tmp_path / "src.duckdb", n=6)
    # merge creates its target (analyze refuses a missing store: tests/test_damaged_runs.py)
    assert main(["merge", "--store", str(tmp_path / "file" / "s.duckdb"), str(tmp_path / "src.duckdb")]) == 2
    one_line(capsys, "cannot create its folder")
