"""Background jobs (issue #33 item 7): the analyze log's study counter becomes the job's percentage and
ETA, and a running job can be cancelled (its process group killed, the store intact)."""

import os
import time

import duckdb
import pytest

from analysis import jobs
from analysis.studies import STUDY_ORDER, progress_line


def test_progress_lines_round_trip_and_bad_ones_are_ignored():
    assert jobs.parse_progress(progress_line(3, 22, "toy: grids done")) == (3, 22)
    for bad in ("[3/0] x", "[5/4] x", "3/22 x", "note: [1/2] x", ""):
        assert jobs.parse_progress(bad) is None, bad


def test_eta_is_the_mean_pace_times_the_steps_left():
    assert jobs.eta_seconds(1, 4, 10.0) == pytest.approx(30.0)  # 10 s a step, 3 steps left
    assert jobs.eta_seconds(4, 4, 10.0) == 0.0
    assert jobs.eta_seconds(0, 4, 10.0) is None  # no pace before the first step
    assert jobs.progress_text({"progress": [1, 4], "eta_s": 30.0}) == ", 25% (1/4 studies), about 30 s left"
    assert jobs.progress_text({"progress": [1, 4], "eta_s": 600.0}).endswith("about 10 min left")
    assert jobs.progress_text({"progress": None}) == ""


def wait_for(store, pred, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        st = jobs.latest(store)
        if st is not None and pred(st):
            return st
        time.sleep(0.1)
    pytest.fail(f"job status never satisfied the condition: {jobs.latest(store)}")


@pytest.fixture
def raw_store(tmp_path):
    from tests.stores import write_store

    path = tmp_path / "raw.duckdb"
    write_store(path, n=12)
    return path


@pytest.mark.slow  # a real analyze job process (imports, UMAP): ~10 s of CPU
def test_a_finished_job_counted_every_study(raw_store):
    jobs.start(raw_store, "analyze")
    st = wait_for(raw_store, lambda s: s["state"] != "running")
    assert st["state"] == "done", st
    total = len(STUDY_ORDER)  # one dataset
    assert st["progress"] == [total, total]
    log = (jobs.jobs_dir(raw_store) / st["id"] / "log.txt").read_text().splitlines()
    counted = [jobs.parse_progress(line) for line in log if jobs.parse_progress(line)]
    assert counted == [(i, total) for i in range(1, total + 1)]


@pytest.mark.slow  # two real analyze job processes
def test_cancel_kills_the_job_and_keeps_the_store(raw_store):
    con = duckdb.connect(str(raw_store), read_only=True)
    runs_before = con.execute("SELECT * FROM runs ORDER BY run_id").fetchall()
    con.close()
    jobs.start(raw_store, "analyze")
    st = wait_for(raw_store, lambda s: s.get("pid") is not None)
    pid = st["pid"]
    st = jobs.cancel(jobs.jobs_dir(raw_store) / st["id"])
    assert st["state"] == "cancelled" and "cancelled" in st["message"]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert jobs.latest(raw_store)["state"] == "cancelled"  # stays cancelled, not "stopped without finishing"
    con = duckdb.connect(str(raw_store), read_only=True)  # opens: not left damaged or locked
    try:
        assert con.execute("SELECT * FROM runs ORDER BY run_id").fetchall() == runs_before
    finally:
        con.close()
    # a cancelled job does not block the next one
    jobs.start(raw_store, "analyze")
    assert wait_for(raw_store, lambda s: s["state"] != "running" and s["id"] != st["id"])["state"] == "done"


def test_job_folders_sort_in_start_order_across_a_seconds_boundary(monkeypatch):
    # two starts 200 ns apart, on either side of a second's boundary: the later must sort last
    readings = iter([1_796_563_432_999_999_900, 1_796_563_433_000_000_100])
    monkeypatch.setattr(jobs.time, "time_ns", lambda: next(readings))
    first, second = jobs._job_id("analyze"), jobs._job_id("analyze")
    assert sorted([second, first]) == [first, second]
    assert first.split("-")[1] != second.split("-")[1]  # the seconds differ, as the clock said


def test_an_analysis_job_ended_by_sigterm_says_cancelled_and_exits_143(raw_store, tmp_path, monkeypatch):
    """The job's analysis takes SIGTERM (``cancel`` sends it) as its end: the job says it was
    cancelled, not that it failed, and exits as a command ended by SIGTERM does (128 + 15)."""
    import json
    import signal

    from analysis import studies
    from analysis.signals import Terminated

    def terminated(*args, **kwargs):
        raise Terminated()

    monkeypatch.setattr(studies, "analyze_store", terminated)
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "spec.json").write_text(json.dumps({"id": "job", "kind": "analyze", "store": str(raw_store)}))
    assert jobs.run(job_dir) == 128 + signal.SIGTERM
    st = jobs.status(job_dir)
    assert (st["state"], st["message"]) == ("cancelled", jobs.CANCELLED)
    assert st["finished"] is not None
