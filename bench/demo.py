"""Benchmark: where ``layerscope demo`` spends its time, from a fresh clone's state.

Runs the demo in a fresh interpreter (``--no-dashboard``), with a new data folder and store and an
empty numba cache (a fresh clone compiles the k-NN kernels on its first analysis), and prints the
demo's per-stage table (generate, model builds and loads, precompute per dataset, downstream,
analyze), the interpreter's start and imports before the demo's timer starts, and the whole wall
time against the issue's 60 s target (issue #32; the target is for a quiet 2-core machine: on a
loaded one read the shares and the CPU column, not the seconds: each stage's CPU seconds in the
demo's own process, every thread, which other work slows far less than wall time; the analysis's
worker processes and the warm-up child are not in it). The CPU seconds of the demo and every
process it waited for (the kernel warm-up, the analysis workers) bound what a quiet 2-core machine
would take: at least CPU / 2, at most CPU.

``--compare-threads 2`` runs it a second time, in the same invocation, with that many torch threads
while embedding (the demo uses ``precompute.demo.DEMO_TORCH_THREADS``) and prints the precompute
stages' ratio, so the demo's choice can be checked on the machine at hand.

Usage: python bench/demo.py [--small] [--compare-threads N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 60.0

#: the child: the demo through the CLI's own function, its stage rows written as JSON
CHILD = """
import json, sys
import precompute.demo as demo
threads, small, store, data, out = int(sys.argv[1]), sys.argv[2] == "1", sys.argv[3], sys.argv[4], sys.argv[5]
if threads:
    demo.DEMO_TORCH_THREADS = threads
summary = demo.run_demo(store=store, small=small, dashboard=False, data_dir=data, progress=False)
json.dump({"stages": summary["stages"], "seconds": summary["seconds"], "stage_cpu": summary["stage_cpu"],
           "runs": summary["runs_computed"]}, open(out, "w"))
"""


def run_once(work: Path, small: bool, threads: int) -> dict:
    """One demo from nothing in ``work``; its stage rows, its own total and the process's wall time."""
    work.mkdir(parents=True, exist_ok=True)
    out = work / "stages.json"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(work / "numba-cache"), "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    cpu0 = _children_cpu()
    subprocess.run([sys.executable, "-c", CHILD, str(threads), "1" if small else "0", str(work / "demo.duckdb"),
                    str(work / "data"), str(out)], cwd=ROOT, env=env, check=True)
    wall = time.perf_counter() - t0
    return {**json.loads(out.read_text()), "wall": wall, "cpu": _children_cpu() - cpu0}


def _children_cpu() -> float:
    """User + system seconds of every finished child process (and the children they waited for)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def print_table(result: dict, label: str) -> None:
    wall = result["wall"]
    print(f"\n{label}: {result['runs']} run(s) computed")
    print(f"{'stage':<28} {'seconds':>8} {'share of wall':>14} {'CPU s (demo)':>13}")
    rows = [("start and imports", wall - result["seconds"])] + [(n, s) for n, s, _ in result["stages"]]
    cpu_by_stage = result.get("stage_cpu", {})
    for name, s in rows:
        c = cpu_by_stage.get(name)
        print(f"{name:<28} {s:8.1f} {100 * s / wall:13.1f}% {'' if c is None else f'{c:13.1f}'}")
    print(f"{'wall (whole process)':<28} {wall:8.1f} {'':>14}  target {TARGET_S:.0f} s on a quiet 2-core machine: "
          f"{wall / TARGET_S:.2f}x of it")
    cpu = result["cpu"]
    print(f"{'CPU, all processes':<28} {cpu:8.1f} {'':>14}  a quiet 2-core machine: {cpu / 2:.0f}-{cpu:.0f} s "
          f"({cpu / 2 / TARGET_S:.2f}-{cpu / TARGET_S:.2f}x the target)")


def precompute_seconds(result: dict) -> float:
    return sum(s for n, s, _ in result["stages"] if n.startswith("precompute") or n == "load models")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true", help="the --small demo (quicker)")
    ap.add_argument("--compare-threads", type=int, default=0, metavar="N",
                    help="also run it with N torch threads while embedding and print the precompute ratio")
    ap.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temporary one)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="layerscope-bench-demo-") as tmp:
        work = args.keep or Path(tmp)
        from precompute.demo import DEMO_TORCH_THREADS

        first = run_once(work / "default", args.small, 0)
        print_table(first, f"demo{' --small' if args.small else ''} (torch threads {DEMO_TORCH_THREADS})")
        if args.compare_threads:
            other = run_once(work / f"threads-{args.compare_threads}", args.small, args.compare_threads)
            print_table(other, f"the same with torch threads {args.compare_threads}")
            print(f"\nprecompute with {args.compare_threads} thread(s) / with {DEMO_TORCH_THREADS}: "
                  f"{precompute_seconds(other) / precompute_seconds(first):.2f}x; "
                  f"wall {other['wall'] / first['wall']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
