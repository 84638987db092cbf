"""Busy cores beside a benchmark: ``--busy N`` runs each measurement quiet and with N spinning
processes, so a route that wins only on an idle machine shows it in the same run.

Users run LayerScope next to their training jobs: a thread pool that spin-waits (OpenMP's default,
OpenBLAS's after each product) wins on an idle machine and loses its cores as soon as anything else
runs. :func:`busy` starts ``N`` CPU-bound processes (each one pure-Python loop, no memory traffic)
and stops them when the block ends, however it ends (an exception, Ctrl-C); each spinner also stops
by itself within milliseconds once its parent is gone (killed, even by SIGKILL), so none is ever
left running. :func:`conditions` lists the runs a ``--busy`` option asks for.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time

#: a spinner: a pure-Python loop that checks every ~10 ms whether its parent is still there
SPIN = """
import os
parent = os.getppid()
while os.getppid() == parent:
    for _ in range(100_000):
        pass
"""
#: seconds for the spinners to start (an interpreter without site: ~20 ms) before the block runs
START_S = 0.2


def add_argument(parser) -> None:
    """The ``--busy N`` option (0, the default: quiet only)."""
    parser.add_argument("--busy", type=int, default=0, metavar="N",
                        help="also measure with N spinning processes beside (one per core to take), and print "
                             "quiet and busy figures side by side")


def conditions(n: int) -> list[tuple[str, int]]:
    """``[("quiet", 0)]``, plus ``("busy N", N)`` when ``n > 0``: the runs ``--busy n`` asks for."""
    return [("quiet", 0)] + ([(f"busy {n}", n)] if n > 0 else [])


@contextlib.contextmanager
def busy(n: int):
    """``n`` spinning processes for the duration of the block (none when ``n <= 0``); yields them."""
    procs = []
    try:
        for _ in range(max(0, n)):
            procs.append(subprocess.Popen([sys.executable, "-S", "-c", SPIN], stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        if procs:
            time.sleep(START_S)
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
