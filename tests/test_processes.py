"""Processes against real kills: analysis workers die with their parent, the dashboard's server dies
with its launcher, a busy port is replaced, and a killed precompute reads `interrupted`."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from precompute.synthetic.store import write_sweep
from tests.stores import result_tables, write_store

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "precompute.cli"]


def children(pid: int) -> set[int]:
    """Live processes whose parent is ``pid`` (read from /proc)."""
    out = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            out.add(int(entry))
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(condition, timeout: float, step: float = 0.1):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(step)
    return condition()


@pytest.mark.slow
def test_kill_9_of_an_analyze_parent_leaves_no_worker_and_the_rerun_equals_an_uninterrupted_one(tmp_path):
    store = tmp_path / "s.duckdb"
    write_sweep(store, video=["v1", "v2"], text=["t1", "t2"], frames=(1, 2, 4), captions=(1, 2),
                n_items=96, n_layers=5, dim=16)
    whole = tmp_path / "whole.duckdb"
    shutil.copy(store, whole)
    args = ["analyze", "--jobs", "2", "--bootstrap", "20", "--quiet", "--maps", "0"]
    proc = subprocess.Popen([*CLI, *args[:1], "--store", str(store), *args[1:]], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    workers = wait_for(lambda: children(proc.pid) if proc.poll() is None else {-1}, timeout=120, step=0.05)
    assert workers and -1 not in workers, "analyze finished (or failed) before it started its workers"
    time.sleep(0.5)  # let the workers open the store
    workers = children(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    survivors = wait_for(lambda: not any(alive(w) for w in workers), timeout=5)
    assert survivors, f"workers {[w for w in workers if alive(w)]} outlived their parent by more than 5 s"

    # the store is free again, and finishing the analysis gives what one uninterrupted run stores
    for path in (store, whole):
        r = subprocess.run([*CLI, *args[:1], "--store", str(path), *args[1:]], cwd=REPO, capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, r.stderr
    assert result_tables(store) == result_tables(whole)


@pytest.mark.slow  # a real writer process, killed
def test_a_killed_precompute_run_reads_interrupted_with_how_to_resume(tmp_path):
    """A real writer process killed with SIGTERM mid-run: `runs` says interrupted (not running)."""
    store = tmp_path / "s.duckdb"
    script = f"""
import sys, time
import numpy as np
from precompute.batch.writer import StoreWriter
from tests.stores import manifest, model_info
w = StoreWriter({str(store)!r})
w.put_dataset("toy", manifest(8))
w.put_model("vis", model_info("vis"))
w.start_run("r1", model="vis", dataset="toy", modality="video", n_frames=2, n_captions=None, variant="original",
            image_mode=None, pooling="mean", dtype="float32", device="cpu", n_items=8, n_layers=3, dim=8, config={{}})
w.write_batch("r1", 0, np.ones((3, 4, 8), np.float32), n_done=4, n_items=8)
print("ready", flush=True)
time.sleep(120)
"""
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    busy = subprocess.run([*CLI, "runs", "--store", str(store)], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "LAYERSCOPE_LOCK_WAIT_S": "0.2"})
    assert busy.returncode == 2 and "in use" in busy.stderr  # while it writes, the store is not read
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    r = subprocess.run([*CLI, "runs", "--store", str(store)], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    row = [line for line in r.stdout.splitlines() if "r1" in line.split()]  # (the run id is a column)
    assert row and " interrupted " in row[0] and "4/8" in row[0] and " running " not in row[0]
    assert "1 interrupted" in r.stdout and "rerun the same precompute command to resume" in r.stdout


def _serves(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1) as resp:
            return resp.status == 200
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_dashboard_takes_the_next_free_port_and_kill_term_of_the_launcher_leaves_no_server(tmp_path):
    store = tmp_path / "s.duckdb"
    write_store(store)
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    busy = blocker.getsockname()[1]
    try:
        proc = subprocess.Popen([*CLI, "dashboard", "--store", str(store), "--port", str(busy)], cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        first = proc.stderr.readline()
        url = proc.stderr.readline()
        assert f"port {busy} is in use" in first
        port = int(url.split("http://127.0.0.1:")[1].split()[0])
        assert port != busy
        assert wait_for(lambda: _serves(port), timeout=90, step=0.5), "the dashboard never served"
        server = children(proc.pid)
        assert server
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        assert wait_for(lambda: not any(alive(p) for p in server), timeout=10), "the server outlived its launcher"
        assert not _serves(port)
    finally:
        blocker.close()
        if proc.poll() is None:
            proc.kill()


@pytest.mark.slow
def test_kill_9_of_the_dashboard_launcher_leaves_no_server(tmp_path):
    store = tmp_path / "s.duckdb"
    write_store(store)
    port = _free_port()
    proc = subprocess.Popen([*CLI, "dashboard", "--store", str(store), "--port", str(port)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: _serves(port), timeout=90, step=0.5), "the dashboard never served"
        server = children(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert wait_for(lambda: not any(alive(p) for p in server), timeout=10), "the server outlived its launcher"
    finally:
        if proc.poll() is None:
            proc.kill()
