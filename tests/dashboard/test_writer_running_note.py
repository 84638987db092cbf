"""Issue #33, item 7: while another process writes the store, the page says so once (not once per
view) and keeps the random-init banner."""

import subprocess
import sys
import time

import pytest

from analysis.views.store_info import UNTRAINED_ICON
from tests.helpers import app


@pytest.fixture()
def named_store(tmp_path):
    from tests.stores import write_named_layers_store

    path = tmp_path / "named.duckdb"
    write_named_layers_store(path)
    return path


@pytest.mark.slow  # a writer process holds the store while the page reruns
def test_a_writer_is_noted_once_and_the_banner_stays(named_store, monkeypatch):
    # the heatmap reads five views: each falls back to the results read before
    at = app(named_store, monkeypatch, "heatmap", {"dataset": "pairs"})
    assert any(w.icon == UNTRAINED_ICON for w in at.warning)
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
                               "c.execute('CREATE TABLE IF NOT EXISTS _hold (x INT)'); print('writing', flush=True); "
                               "time.sleep(60)", str(named_store)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "writing"
        monkeypatch.setenv("LAYERSCOPE_LOCK_WAIT_S", "0")
        t0 = time.monotonic()
        at.run()
        assert time.monotonic() - t0 < 60
        assert not at.exception, [e.value for e in at.exception]
        notes = [c.value for c in at.caption if "being written by another process" in c.value]
        assert len(notes) == 1, notes
        assert any(w.icon == UNTRAINED_ICON for w in at.warning)  # still a control's numbers
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow  # a real analyze job process
def test_the_last_job_outcome_stays_when_nothing_is_missing(named_store, monkeypatch):
    from analysis import jobs

    at = app(named_store, monkeypatch)
    assert any("Every run is done and analysed" in s.value for s in at.success)  # nothing missing: no button
    jobs.start(named_store, "analyze")
    end = time.monotonic() + 300
    while jobs.latest(named_store)["state"] == "running" and time.monotonic() < end:
        time.sleep(0.5)
    assert jobs.latest(named_store)["state"] == "done"
    at.run()
    assert any("Background analysis done" in s.value for s in at.success)
