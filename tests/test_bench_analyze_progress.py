"""bench/analyze.py prints each round's figures as soon as they are measured (issue #47: a run cut
short by a timeout printed nothing). The benchmark runs in its own process on a tiny sweep with more
rounds than it is given time for; its first figures must reach the pipe while it still runs."""

import os
import re
import selectors
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # runs the benchmark in another process (a tiny analysis, ~10 s)

REPO = Path(__file__).resolve().parents[1]
FIGURE = re.compile(r"^round 1/500, (quiet|busy 1), 1 text models \(\d+ runs\): floor \d+\.\d\d s, "
                    r"analyze \d+\.\d\d s, analyze/floor \d+\.\d\d×$")


def read_lines_until(proc, want: int, seconds: float) -> list[str]:
    """Lines of ``proc``'s stdout until ``want`` of them match :data:`FIGURE` or ``seconds`` pass."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    lines, end = [], time.monotonic() + seconds
    while sum(bool(FIGURE.match(line)) for line in lines) < want and time.monotonic() < end:
        if sel.select(timeout=0.5):
            line = proc.stdout.readline()
            if not line:  # the process ended
                break
            lines.append(line.rstrip("\n"))
    return lines


def test_a_run_cut_short_has_already_printed_each_condition_s_figures():
    args = ["--shape", "small", "--items", "40", "--layers", "2", "--dim", "8", "--video", "1", "--text", "1",
            "--no-growth", "--null-perms", "0", "--repeat", "500", "--busy", "1"]
    # block-buffered when piped, as under a CI job's timeout: only a flush brings a line out early
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.Popen([sys.executable, str(REPO / "bench" / "analyze.py"), *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        lines = read_lines_until(proc, 2, 120)
        still_running = proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
    assert still_running, "the benchmark ended before its 500 rounds: the test measures nothing"
    assert lines, "the benchmark printed nothing in 120 s while it ran"
    assert lines[0].startswith("sweep (small shape): 1 video models, N=40, L=2, d=8"), lines
    assert [line.split(",")[1].strip() for line in lines if FIGURE.match(line)] == ["quiet", "busy 1"], lines
