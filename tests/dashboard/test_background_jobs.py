"""Background jobs (analysis.jobs): import and re-analysis run in a subprocess with the store's own
settings, report progress in a status file, and end done or with a one-line error; the pages show them."""

import json
import os
import shutil
import subprocess
import sys
import time

import duckdb
import pytest

from analysis import jobs
from analysis.storage.store import read_store
from analysis.studies import stored_settings
from analysis.views.store_info import UNTRAINED_ICON
from tests.helpers import app

GOOD_CSV = (b"model,task,metric,value,higher_is_better\n"
            b"videomae-tiny,ssv2,top1,40.0,true\nvit-tiny,ssv2,top1,30.0,true\n"
            b"llama-tiny,ssv2,top1,10.0,true\nall-MiniLM-L6-v2,ssv2,top1,20.0,true\n"
            b"videomae-tiny,depth,rmse,0.5,false\nvit-tiny,depth,rmse,0.7,false\n"
            b"llama-tiny,depth,rmse,0.9,false\nall-MiniLM-L6-v2,depth,rmse,0.8,false\n")


def copy(store, tmp_path):
    out = tmp_path / "store.duckdb"
    shutil.copy(store, out)
    return out


def wait_done(store, limit_s=600) -> dict:
    """The job's final status (a deadline only so a hung job fails the test instead of hanging it)."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        st = jobs.latest(store)
        if st is not None and st["state"] != "running":
            return st
        time.sleep(0.5)
    pytest.fail(f"the job did not finish: {jobs.latest(store)}")


def log_text(store) -> str:
    (job_dir,) = [d for d in jobs.jobs_dir(store).iterdir() if d.is_dir()]
    return (job_dir / "log.txt").read_text()


def test_analyze_job_reuses_the_stores_own_settings(one_model_store, tmp_path):
    store = copy(one_model_store, tmp_path)
    before = read_store(store, stored_settings)
    assert before["k"] == 3 and before["n_boot"] == 0  # the fixture analysed with --k 3 --bootstrap 0
    first = jobs.start(store, "analyze")
    assert first["state"] == "running" and first["kind"] == "analyze"  # returned at once, before the work
    done = wait_done(store)
    assert done["state"] == "done", done
    assert done["message"].startswith("0 result(s) computed")  # same settings: every result reused
    assert done["lines"] >= 2 and done["finished"] >= done["started"]
    text = log_text(store)
    assert "k=3" in text and "n_boot=0" in text  # the settings it ran with are said
    assert read_store(store, stored_settings) == before


def test_import_job_refused_csv_ends_in_one_line_and_imports_nothing(one_model_store, tmp_path):
    store = copy(one_model_store, tmp_path)
    jobs.start(store, "import", csv=b"model,task,metric,value,higher_is_better\nnot-a-model,ssv2,top1,40,true\n")
    done = wait_done(store)
    assert done["state"] == "error"
    assert "\n" not in done["message"] and "the uploaded CSV:2: column 'model': unknown model 'not-a-model'" in done["message"]
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT count(*) FROM downstream_results").fetchall()[0][0] == 0
    con.close()


def write_status(store, name, **status):
    d = jobs.jobs_dir(store) / name
    d.mkdir(parents=True)
    (d / "status.json").write_text(json.dumps({"id": name, "kind": "analyze", "step": "x", "message": "",
                                               "lines": 0, "finished": None, **status}))
    return d


def test_a_job_whose_process_died_is_reported_as_failed(tmp_path):
    store = tmp_path / "s.duckdb"
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()  # reaped: its pid is free
    write_status(store, "20200101-000000-1-analyze", state="running", pid=ended.pid, started=time.time())
    st = jobs.latest(store)
    assert st["state"] == "error" and "stopped without finishing" in st["message"]


def test_a_child_that_never_started_fails_after_the_startup_allowance(tmp_path):
    store = tmp_path / "s.duckdb"
    write_status(store, "20200101-000000-1-analyze", state="running", pid=None, started=time.time())
    assert jobs.latest(store)["state"] == "running"  # just started: the child has a minute to report
    shutil.rmtree(jobs.jobs_dir(store))
    write_status(store, "20200101-000000-2-analyze", state="running", pid=None,
                 started=time.time() - jobs.STARTUP_S - 1)
    assert jobs.latest(store)["state"] == "error"


def test_one_job_at_a_time_per_store(tmp_path):
    store = tmp_path / "s.duckdb"
    write_status(store, "20200101-000000-1-analyze", state="running", pid=os.getpid(), started=time.time())
    again = jobs.start(store, "analyze")  # a live job holds the store: it is returned, nothing new starts
    assert again["id"] == "20200101-000000-1-analyze"
    assert len([d for d in jobs.jobs_dir(store).iterdir() if d.is_dir()]) == 1  # (start.lock is a file)


def test_start_refuses_what_it_cannot_run(tmp_path):
    with pytest.raises(ValueError, match="unknown job kind 'precompute'"):
        jobs.start(tmp_path / "s.duckdb", "precompute")
    with pytest.raises(ValueError, match="needs the CSV"):
        jobs.start(tmp_path / "s.duckdb", "import")


def test_overview_starts_the_analysis_in_the_background_and_shows_its_progress(one_model_store, tmp_path,
                                                                                 monkeypatch):
    store = copy(one_model_store, tmp_path)
    at = app(store, monkeypatch)
    at.button(key="job_analyze").click().run()
    assert not at.exception
    assert any("Background analysis running" in i.value for i in at.info)  # the page did not wait for it
    assert at.button(key="job_analyze").disabled  # no second job while one runs
    wait_done(store)
    at.run()
    assert any("Background analysis done" in s.value for s in at.success)
    assert not at.button(key="job_analyze").disabled


def test_downstream_import_job_then_the_page_shows_the_correlations(demo_like, tmp_path, monkeypatch):
    store = copy(demo_like, tmp_path)
    jobs.start(store, "import", csv=GOOD_CSV)
    done = wait_done(store)
    assert done["state"] == "done", done
    assert "grids " not in log_text(store)  # the store's settings: no grid is recomputed for an import
    at = app(store, monkeypatch, "downstream", {"dataset": "moving_shapes"})
    assert any("Background import and analysis done" in s.value for s in at.success)
    scatter = at.selectbox(key="pick_scatter")
    assert len(scatter.options) > 1
    at.selectbox(key="pick_scatter").set_value(1).run()  # the scatter shown is in the URL
    assert at.query_params["scatter"] == "1"
    again = app(store, monkeypatch, "downstream", dict(at.query_params))
    # no URL notice (the demo store's random-init banner, a Material icon, is expected on every page)
    assert again.selectbox(key="pick_scatter").value == 1 and not [w for w in again.warning if w.icon != UNTRAINED_ICON]
