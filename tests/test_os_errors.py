"""OS errors are told as what they are: a full disk at commit is a full disk (the store is intact),
a file other than the store is named as that file, and a closed output pipe is not an error."""

import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest

from analysis.storage.store import load_embeddings, store_error, transaction
from precompute.cli import main
from precompute.batch.writer import StoreWriter
from tests.stores import write_store

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "precompute.cli"]


class FullDiskAtCommit:
    """A connection whose COMMIT fails as DuckDB's does on a full disk: the transaction is rolled
    back and an IOException raised, so a later ROLLBACK finds no transaction."""

    def __init__(self, con):
        self.con = con

    def execute(self, sql, *args):
        if sql == "COMMIT":
            self.con.execute("ROLLBACK")
            raise duckdb.IOException("Could not write file \"s.duckdb.wal\": No space left on device")
        return self.con.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self.con, name)


def test_transaction_raises_the_commits_own_error_not_the_rollbacks(tmp_path):
    con = duckdb.connect(str(tmp_path / "t.duckdb"))
    con.execute("CREATE TABLE t (x INT)")
    with pytest.raises(duckdb.IOException, match="No space left on device"):
        with transaction(FullDiskAtCommit(con)):
            con.execute("INSERT INTO t VALUES (1)")
    assert con.execute("SELECT count(*) FROM t").fetchone()[0] == 0  # nothing half-written
    with transaction(con):
        con.execute("INSERT INTO t VALUES (2)")
    assert con.execute("SELECT x FROM t").fetchall() == [(2,)]


def test_a_full_disk_at_a_batch_commit_is_reported_as_a_full_disk_and_the_store_is_kept(tmp_path):
    store = tmp_path / "s.duckdb"
    ids = write_store(store, n=8)
    w = StoreWriter(store)
    run = ids["vis"]
    before = load_embeddings(w.con, model="vis", dataset="toy", n_frames=2)
    w.con = FullDiskAtCommit(w.con)
    with pytest.raises(duckdb.Error) as caught:
        w.write_batch(run, 0, np.zeros((3, 8, 8), np.float32), n_done=8, n_items=8)
    message = str(store_error(store, caught.value))
    assert "disk is full" in message and "committed work is kept" in message and "damaged" not in message
    w.con.con.close()
    np.testing.assert_array_equal(load_embeddings(store, model="vis", dataset="toy", n_frames=2), before)


def test_a_report_path_that_cannot_be_written_is_named_not_the_store(tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    write_store(store)
    assert main(["report", "--store", str(store), "--out", "/proc/nope/r.html"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("layerscope report: error: /proc/nope") and "store" not in err


@pytest.mark.slow  # the CLI in another process
def test_output_to_a_full_device_says_the_output(tmp_path):
    with open("/dev/full", "w") as full:
        r = subprocess.run([*CLI, "models"], cwd=REPO, stdout=full, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 2
    assert r.stderr.strip() == "layerscope models: error: cannot write the output: No space left on device"


def test_a_closed_output_pipe_ends_quietly(tmp_path):
    store = tmp_path / "s.duckdb"
    write_store(store)
    proc = subprocess.Popen([*CLI, "runs", "--store", str(store)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # like `| head -0`: the reader is gone before the first line
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0 and err == ""
