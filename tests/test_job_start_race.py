"""The dashboard's "one job at a time" holds when several pages start a job at the same moment
(issue #34 item 9): starts racing in threads and in processes make exactly one job."""

import multiprocessing
import threading

import pytest

from analysis import jobs


class FakeChild:
    """Stands in for the job's subprocess: alive until the test ends (no analysis is run)."""

    _next = [10_000_000]

    def __init__(self, *args, **kwargs):
        FakeChild._next[0] += 1
        self.pid = FakeChild._next[0]

    def poll(self):
        return None


def slow_check(real_latest):
    """``jobs.latest`` that takes 50 ms after reading, as a loaded machine may: it widens the window
    between the check and the creation so that a start without a lock loses the race every time."""
    import time

    def latest(store):
        out = real_latest(store)
        time.sleep(0.05)
        return out
    return latest


def job_dirs(store):
    return sorted(d.name for d in jobs.jobs_dir(store).iterdir() if d.is_dir())


@pytest.fixture
def no_children(monkeypatch):
    monkeypatch.setattr(jobs.subprocess, "Popen", FakeChild)
    monkeypatch.setattr(jobs, "latest", slow_check(jobs.latest))


def test_simultaneous_starts_in_threads_make_one_job(tmp_path, no_children):
    store = tmp_path / "s.duckdb"
    store.write_bytes(b"")  # start() never opens the store itself
    n = 8
    barrier = threading.Barrier(n)
    out = [None] * n

    def go(i):
        barrier.wait()
        out[i] = jobs.start(store, "analyze")

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (only,) = job_dirs(store)
    assert {o["id"] for o in out} == {only}  # every caller got the one running job


def _start_in_process(store, barrier, queue):
    jobs.subprocess.Popen = FakeChild  # this process's copy of the module
    jobs.latest = slow_check(jobs.latest)
    barrier.wait()
    queue.put(jobs.start(store, "analyze")["id"])


def test_simultaneous_starts_in_processes_make_one_job(tmp_path):
    store = tmp_path / "s.duckdb"
    store.write_bytes(b"")
    ctx = multiprocessing.get_context("fork")
    n = 4
    barrier, queue = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_start_in_process, args=(str(store), barrier, queue)) for _ in range(n)]
    for p in procs:
        p.start()
    ids = [queue.get(timeout=60) for _ in range(n)]
    for p in procs:
        p.join(timeout=60)
    (only,) = job_dirs(store)
    # the first job's pid is None until its (fake) child writes one: the others see a job starting
    # within STARTUP_S, which counts as running, and return it
    assert set(ids) == {only}
