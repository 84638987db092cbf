"""A running dashboard never blocks the commands that write the store, and shows their results on
refresh; a writer waits briefly for a reader's read, then names the process holding the store.

DuckDB locks the store file per process (one writer, or any number of readers): these tests use
real separate processes."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from precompute.cli import main
from tests.stores import write_store

pytestmark = pytest.mark.slow  # other processes hold the store: a dashboard, busy readers, waits

REPO = Path(__file__).resolve().parents[1]

DASHBOARD = r"""
import os, sys
from streamlit.testing.v1 import AppTest
at = AppTest.from_file(os.path.join(sys.argv[1], "app.py"), default_timeout=120)
at.run()
assert not at.exception, [e.value for e in at.exception]
print(json.dumps({"models": at.metric[1].value, "runs": at.metric[2].value}), flush=True)
sys.stdin.readline()  # the test writes the store now; this process keeps its dashboard session open
at.run()  # a refresh
assert not at.exception, [e.value for e in at.exception]
print(json.dumps({"models": at.metric[1].value, "runs": at.metric[2].value,
                  "grids": any("analysis results" in m.value for m in at.markdown)}), flush=True)
""".replace("import os, sys", "import json, os, sys")


def test_open_dashboard_does_not_block_writers_and_shows_new_results_on_refresh(tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    write_store(store, models=("vis",))
    dash = subprocess.Popen([sys.executable, "-c", DASHBOARD, str(REPO)], cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "LAYERSCOPE_STORE": str(store)})
    try:
        first = json.loads(dash.stdout.readline() or "null")
        assert first == {"models": "1", "runs": "1 / 1"}, dash.stderr.read() if first is None else first
        # precompute (the store writer), analyze and downstream import while the dashboard is open
        write_store(store, models=("txt",))
        assert main(["analyze", "--store", str(store), "--k", "3", "--bootstrap", "0"]) == 0
        csv = tmp_path / "r.csv"
        csv.write_text("model,task,metric,value,higher_is_better\nvis,t,acc,0.5,true\ntxt,t,acc,0.7,true\n")
        assert main(["downstream", "import", str(csv), "--store", str(store)]) == 0
        assert "in use" not in capsys.readouterr().err
        dash.stdin.write("\n")
        dash.stdin.flush()
        second = json.loads(dash.stdout.readline() or "null")
        assert second is not None, dash.stderr.read()
        assert (second["models"], second["runs"]) == ("2", "2 / 2")
        assert not second["grids"]  # "no analysis results yet" is gone: the grids are seen
    finally:
        dash.kill()
        dash.wait()
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT count(*) FROM downstream_results").fetchall() == [(2,)]
    con.close()


BUSY_READER = r"""
import sys, time
import duckdb
store, seconds = sys.argv[1], float(sys.argv[2])
end, reads, seen = time.time() + seconds, 0, set()
print("start", flush=True)
while time.time() < end:
    try:  # what a dashboard with many users does: open read-only, read a little, close
        con = duckdb.connect(store, read_only=True)
    except duckdb.IOException:
        time.sleep(0.01)  # a writer holds the store for a moment
        continue
    seen.add(con.execute("SELECT count(*) FROM models").fetchall()[0][0])
    time.sleep(0.03)  # a slow read: a writer finds the lock taken more than half the time
    con.close()
    reads += 1
    time.sleep(0.02)
print(reads, sorted(seen), flush=True)
"""


def test_writers_wait_for_a_busy_reader_instead_of_failing(tmp_path):
    store = tmp_path / "s.duckdb"
    write_store(store, models=("vis",))
    reader = subprocess.Popen([sys.executable, "-c", BUSY_READER, str(store), "8"], cwd=REPO, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert reader.stdout.readline().strip() == "start"
        time.sleep(0.3)
        write_store(store, models=("txt",))  # each writer connect meets the reader's lock ~60% of the time
        csv = tmp_path / "r.csv"
        csv.write_text("model,task,metric,value,higher_is_better\nvis,t,acc,0.5,true\n")
        for _ in range(8):
            assert main(["downstream", "import", str(csv), "--store", str(store)]) == 0
        reads, seen = reader.stdout.readline().split(" ", 1)
        assert reader.wait(timeout=60) == 0
    finally:
        reader.kill()
    assert int(reads) > 10 and seen.strip() == "[1, 2]"  # the reader kept reading and saw the new model


def test_a_store_held_too_long_names_the_process_holding_it(tmp_path, capsys, monkeypatch):
    store = tmp_path / "s.duckdb"
    write_store(store, models=("vis",))
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
                               "print('locked', flush=True); time.sleep(60)", str(store), "holder-marker"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        monkeypatch.setenv("LAYERSCOPE_LOCK_WAIT_S", "0.5")
        t0 = time.monotonic()
        assert main(["runs", "--store", str(store)]) == 2
        waited = time.monotonic() - t0
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        assert "in use by another process" in err and f"PID {holder.pid}" in err and "holder-marker" in err, err
        assert str(store) in err
        assert 0.3 < waited < 10  # it retried for about the configured wait, then gave up
    finally:
        holder.kill()
        holder.wait()


def test_lock_wait_zero_fails_at_once(tmp_path, capsys, monkeypatch):
    store = tmp_path / "s.duckdb"
    write_store(store, models=("vis",))
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1], "
                               "read_only=True); print('reading', flush=True); time.sleep(60)", str(store)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "reading"
        monkeypatch.setenv("LAYERSCOPE_LOCK_WAIT_S", "0")
        csv = tmp_path / "r.csv"
        csv.write_text("model,task,metric,value,higher_is_better\nvis,t,acc,0.5,true\n")
        assert main(["downstream", "import", str(csv), "--store", str(store)]) == 2
        err = capsys.readouterr().err
        assert "in use by another process" in err and f"PID {holder.pid}" in err
    finally:
        holder.kill()
        holder.wait()


def test_dashboard_shows_the_last_results_while_a_writer_holds_the_store(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    store = tmp_path / "s.duckdb"
    write_store(store, models=("vis",))
    monkeypatch.setenv("LAYERSCOPE_STORE", str(store))
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    at.run()
    assert not at.exception and at.metric[1].value == "1"
    # a long writer: changes the store, then keeps it locked (as precompute does for a whole run)
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
                               "c.execute(\"UPDATE models SET params = 7\"); print('writing', flush=True); "
                               "time.sleep(60)", str(store)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "writing"
        t0 = time.monotonic()
        at.run()
        assert time.monotonic() - t0 < 60
        assert not at.exception, [e.value for e in at.exception]
        assert at.metric[1].value == "1"  # the results read before
        assert any("being written by another process" in c.value for c in at.caption)
    finally:
        holder.kill()
        holder.wait()
    write_store(store, models=("txt",))
    at.run()
    assert not at.exception and at.metric[1].value == "2"
    assert not any("being written" in c.value for c in at.caption)
