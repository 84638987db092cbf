"""bench/busy.py: the spinning processes of ``--busy N`` run during the block and never outlive it,
whether it ends normally, by an exception, or by its process being killed."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import busy  # noqa: E402


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def wait_gone(pid: int, seconds: float = 5.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.02)
    return False


def test_spinners_run_during_the_block_and_are_stopped_after_it():
    with busy.busy(2) as procs:
        pids = [p.pid for p in procs]
        assert len(pids) == 2 and all(alive(pid) for pid in pids)
    assert not any(alive(pid) for pid in pids)


def test_spinners_are_stopped_when_the_block_raises():
    with pytest.raises(KeyboardInterrupt):
        with busy.busy(1) as procs:
            pid = procs[0].pid
            raise KeyboardInterrupt
    assert not alive(pid)


def test_no_spinner_when_quiet():
    with busy.busy(0) as procs:
        assert procs == []
    assert busy.conditions(0) == [("quiet", 0)]
    assert busy.conditions(2) == [("quiet", 0), ("busy 2", 2)]


def test_a_spinner_stops_by_itself_when_its_parent_is_killed():
    # a parent that starts one spinner, prints its pid and then hangs: SIGKILL runs no cleanup
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO)!r})
        from bench import busy
        with busy.busy(1) as procs:
            print(procs[0].pid, flush=True)
            time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(parent.stdout.readline())
        assert alive(pid)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert wait_gone(pid), f"spinner {pid} outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
