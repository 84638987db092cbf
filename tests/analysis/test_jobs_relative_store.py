"""A background job started on a relative store path runs on that store (the child process works in
another folder, so the path is made absolute before it is handed over)."""

import time

from analysis import jobs
from analysis.studies import stored_settings
from analysis.storage.store import read_store
from tests.stores import write_store


def test_an_analyze_job_on_a_relative_store_path_finishes_on_that_store(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_store(tmp_path / "s.duckdb")
    jobs.start("s.duckdb", "analyze")
    end = time.monotonic() + 300  # a deadline only so a hung job fails the test instead of hanging it
    while (st := jobs.latest("s.duckdb"))["state"] == "running" and time.monotonic() < end:
        time.sleep(0.5)
    assert st["state"] == "done", st
    assert read_store(tmp_path / "s.duckdb", stored_settings)  # the analysis ran on this store
