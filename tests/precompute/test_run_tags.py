"""Run tags (issue #34 item 12b): `runs tag` / `runs untag`, shown by `runs`, filtered by `runs --tag`;
kept in the run_tags table; they follow a run through `runs rename` and go with it on `runs rm`;
bad requests change nothing; a reader holding the store (a dashboard) is waited for."""

import hashlib
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from precompute.cli import main
from tests.stores import write_store

REPO = Path(__file__).resolve().parents[2]


def digest(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def tags(store) -> list:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute("SELECT run_id, tag FROM run_tags ORDER BY run_id, tag").fetchall()
    finally:
        con.close()


def listed(capsys, store, *extra) -> dict:
    """``{run_id: tags column}`` of `layerscope runs` output."""
    assert main(["runs", "--store", str(store), *extra]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines[0].split()
    rows = [l.split() for l in lines[1:] if l.strip() and not l.startswith(("\n",)) and len(l.split()) == len(header)]
    return {r[header.index("run_id")]: r[header.index("tags")] for r in rows}


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "s.duckdb"
    ids = write_store(path)
    return path, ids


def test_tag_list_filter_untag(store, capsys):
    path, ids = store
    assert main(["runs", "tag", "--store", str(path), ids["vis"], "baseline", "v2", "baseline"]) == 0
    assert main(["runs", "tag", "--store", str(path), ids["txt"], "v2"]) == 0
    capsys.readouterr()
    assert tags(path) == sorted([(ids["vis"], "baseline"), (ids["vis"], "v2"), (ids["txt"], "v2")])
    assert listed(capsys, path) == {ids["vis"]: "baseline,v2", ids["txt"]: "v2"}
    assert listed(capsys, path, "--tag", "v2") == {ids["vis"]: "baseline,v2", ids["txt"]: "v2"}
    assert listed(capsys, path, "--tag", "v2", "--tag", "baseline") == {ids["vis"]: "baseline,v2"}
    assert main(["runs", "untag", "--store", str(path), ids["vis"], "v2"]) == 0
    capsys.readouterr()
    assert listed(capsys, path) == {ids["vis"]: "baseline", ids["txt"]: "v2"}
    assert main(["runs", "--store", str(path), "--tag", "nope"]) == 0
    assert "no run has tag(s) nope" in capsys.readouterr().out


def test_tags_follow_a_rename_and_go_with_a_removed_run(store, capsys):
    path, ids = store
    assert main(["runs", "tag", "--store", str(path), ids["vis"], "keep"]) == 0
    assert main(["runs", "tag", "--store", str(path), ids["txt"], "drop"]) == 0
    assert main(["runs", "rename", "--store", str(path), "vis", "video-model"]) == 0
    con = duckdb.connect(str(path), read_only=True)
    (new_id,) = con.execute("SELECT run_id FROM runs WHERE model = 'video-model'").fetchone()
    con.close()
    assert new_id != ids["vis"] and (new_id, "keep") in tags(path)
    assert main(["runs", "rm", "--store", str(path), ids["txt"]]) == 0
    assert tags(path) == [(new_id, "keep")]


@pytest.mark.parametrize("args, message", [
    (["RUN", "has space"], "not tags"), (["RUN", "a,b"], "not tags"), (["RUN", ""], "not tags"),
    (["nosuchrun", "x"], "has no run(s) nosuchrun"),
])
def test_bad_requests_change_nothing(store, capsys, args, message):
    path, ids = store
    args = [ids["vis"] if a == "RUN" else a for a in args]
    before = digest(path)
    assert main(["runs", "tag", "--store", str(path), *args]) == 2
    lines = [l for l in capsys.readouterr().err.splitlines() if l.strip()]
    assert len(lines) == 1 and message in lines[0], lines
    assert digest(path) == before


def test_a_store_from_before_tags_lists_and_gains_the_table(tmp_path, capsys):
    path = tmp_path / "old.duckdb"
    ids = write_store(path)
    con = duckdb.connect(str(path))
    con.execute("DROP TABLE run_tags")  # as a store written before run tags
    con.close()
    assert set(listed(capsys, path).values()) == {"-"}
    assert main(["runs", "tag", "--store", str(path), ids["vis"], "old"]) == 0
    assert tags(path) == [(ids["vis"], "old")]


def test_tagging_waits_for_a_reader_holding_the_store(store, capsys):
    path, ids = store
    # a dashboard-like reader: holds a read-only connection for 1.5 s
    reader = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1], "
                               "read_only=True); print('open', flush=True); time.sleep(1.5); c.close()", str(path)],
                              stdout=subprocess.PIPE, text=True)
    assert reader.stdout.readline().strip() == "open"
    t0 = time.monotonic()
    assert main(["runs", "tag", "--store", str(path), ids["vis"], "busy"]) == 0
    reader.wait(timeout=30)
    assert (ids["vis"], "busy") in tags(path)
    assert time.monotonic() - t0 < 30


def test_merge_carries_tags_of_the_runs_it_copies(tmp_path):
    src = tmp_path / "src.duckdb"
    ids = write_store(src)
    assert main(["runs", "tag", "--store", str(src), ids["vis"], "from-src"]) == 0
    target = tmp_path / "t.duckdb"
    assert main(["merge", "--store", str(target), str(src)]) == 0
    assert tags(target) == [(ids["vis"], "from-src")]
