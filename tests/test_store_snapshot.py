"""A store a writer holds can still be read as it was last saved: :func:`analysis.storage.store.snapshot`
copies the file (what DuckDB last checkpointed; a commit still in the write-ahead log is the writer's
until it checkpoints), so the dashboard draws the stored results while an analysis runs for hours."""

import subprocess
import sys

import pytest

from analysis.storage.store import StoreBusy, read_store, snapshot
from tests.stores import write_store

pytestmark = pytest.mark.slow  # another process holds the store

#: a writer that commits a change (into its write-ahead log), then holds the store until killed
HOLDER = ("import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); c.execute('UPDATE models SET params = 7'); "
          "print('writing', flush=True); time.sleep(60)")


def models(con):
    return sorted(con.execute("SELECT model, params FROM models").fetchall())


def test_a_held_store_reads_from_a_snapshot_of_what_was_saved_before(tmp_path):
    store = tmp_path / "s.duckdb"
    write_store(store, models=("vis", "txt"))
    before = read_store(store, models)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(store)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "writing"
        with pytest.raises(StoreBusy):
            read_store(store, models, wait=0)
        copy = snapshot(store)
        assert copy != store and read_store(copy, models) == before  # the saved rows, not the writer's
        assert snapshot(store) == copy  # the file unchanged: the same copy, not another
    finally:
        holder.kill()
        holder.wait()
    assert [p for _, p in read_store(store, models)] == [7, 7]  # the writer's commit, replayed
