"""A background job started with a relative store path (the dashboard run from the user's folder)
finds its job folder and store: the child runs in the packages' folder, so it gets absolute paths.
Regression test for issue #46."""

import time

import pytest

from analysis import jobs
from tests.stores import write_store


@pytest.mark.slow
def test_a_job_on_a_relative_store_path_runs_to_the_end(tmp_path, monkeypatch):
    write_store(tmp_path / "s.duckdb")
    monkeypatch.chdir(tmp_path)
    first = jobs.start("s.duckdb", "import", csv=b"model,task,metric,value,higher_is_better\nvis,ssv2,top1,40,true\n")
    assert first["state"] == "running"
    end = time.monotonic() + 300
    while (st := jobs.latest("s.duckdb"))["state"] == "running" and time.monotonic() < end:
        time.sleep(0.5)
    assert st["state"] == "done", st
