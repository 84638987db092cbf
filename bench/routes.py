"""Benchmark: each k-NN route per N, quiet and with busy cores beside, to choose what ``auto`` takes.

For one layer of ``bench/grid.py``'s data (a 32-dim latent plus noise, float32, d = 768 by default)
at each N, in one process: the exact k-NN search (``knn_search``, k = 10) on each float32 candidate
route (``numpy``: one sgemm block and ``argpartition``; ``symmetric``: the blocked self-search of
``neighbors_blocks``; ``faiss``: ``faiss.knn``), and LID's neighbour distances (``knn_distances``,
k = 20, every row a query as up to ``LID_EXACT_MAX_N``) on its ``numpy`` and ``faiss`` routes.
Each route runs with the thread pools as a plain call finds them (``pool``: every core) and held
to one thread (``1``: threadpoolctl, as inside ``analyze``), quiet and with ``--busy N`` spinning
processes beside. Printed per N: milliseconds per cell, and each cell's ratio to the best cell of
its condition and thread setting (1.00 = the fastest there); then which route is best quiet, busy,
and least bad across both (the smallest worst ratio). ``auto``'s choice is printed beside.

faiss's OpenMP threads spin-wait after each parallel region by default; ``--passive`` repeats the
faiss cells in a child process started with ``OMP_WAIT_POLICY=PASSIVE`` (read by OpenMP when faiss
loads, so it cannot be switched within one process) and prints them as route ``faiss-passive``.
Every cell is the best of ``--repeat`` runs (1 from N = 8192); the lists of every route are
checked equal (they must be, bit for bit).

Usage: python bench/routes.py [--sizes 512,1024,2048,4096,8192,16384] [--d 768] [--busy 1]
       [--routes numpy,symmetric,faiss,lid-numpy,lid-faiss] [--threads pool,1] [--passive]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from bench import busy

ROUTES = ("numpy", "symmetric", "faiss", "lid-numpy", "lid-faiss")


def make_layer(n, d):
    from bench.grid import make_stack

    return make_stack(n, d, 1, seed=1)[0]


def run_route(route, X):
    """The route's answer: k-NN lists or LID distances."""
    from analysis.metrics.neighbors import knn_search
    from analysis.metrics.single import knn_distances

    if route.startswith("lid-"):
        return knn_distances(X, 20, route=route[4:])
    return knn_search(X, 10, device=route).idx


def threads_context(setting):
    import contextlib

    if setting == "pool":
        return contextlib.nullcontext()
    from analysis.metrics.base import one_blas_thread

    return one_blas_thread(openmp=True)


def measure(sizes, d, routes, threads, n_busy, repeat):
    """``{(n, condition, threads, route): seconds}`` and whether every route agreed at each N."""
    from analysis.metrics.base import load_pooled_libraries

    load_pooled_libraries()
    for route in routes:  # compiled kernels and libraries loaded before any timing
        run_route(route, make_layer(256, 16))
    out, agree = {}, {}
    for n in sizes:
        X = make_layer(n, d)
        answers = {}
        reps = repeat if n < 8192 else 1
        for cond, k in busy.conditions(n_busy):
            with busy.busy(k):
                for setting in threads:
                    for route in routes:
                        best = float("inf")
                        for _ in range(reps):
                            with threads_context(setting):
                                t0 = time.perf_counter()
                                answers[route] = run_route(route, X)
                                best = min(best, time.perf_counter() - t0)
                        out[(n, cond, setting, route)] = best
        knn = [answers[r] for r in routes if not r.startswith("lid-")]
        lid = [answers[r] for r in routes if r.startswith("lid-")]
        agree[n] = (all(np.array_equal(knn[0], a) for a in knn) and all(np.array_equal(lid[0], a) for a in lid))
    return out, agree


def child_cells(args, routes, n):
    """The ``routes`` at ``n`` measured in a child process with ``OMP_WAIT_POLICY=PASSIVE``, renamed ``*-passive``."""
    cmd = [sys.executable, __file__, "--child", "--sizes", str(n), "--d", str(args.d), "--busy", str(args.busy),
           "--routes", ",".join(routes), "--threads", args.threads, "--repeat", str(args.repeat)]
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    rows = json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout.splitlines()[-1])
    return {(n, c, t, f"{r}-passive"): s for n, c, t, r, s in rows}


def auto_choice(n):
    """What ``auto`` takes at ``n`` on this machine (a CPU): the k-NN route and LID's (always numpy)."""
    from analysis.metrics.neighbors import _cpu_route

    return _cpu_route(n) or "numpy", "lid-numpy"


def report(cells, agree, sizes, routes, threads, conds):
    for family, members in (("k-NN lists (knn_search, k = 10)", [r for r in routes if not r.startswith("lid")]),
                            ("LID distances (knn_distances, k = 20)", [r for r in routes if r.startswith("lid")])):
        if not members:
            continue
        print(f"{family}: ms per layer (ratio to the best route of that condition and threads)")
        print(f"{'N':>6} {'threads':>7} {'route':>16} " + " ".join(f"{c:>17}" for c in conds))
        for n in sizes:
            for setting in threads:
                best = {c: min(cells[(n, c, setting, r)] for r in members) for c in conds}
                worst = {}
                for r in members:
                    ratios = [cells[(n, c, setting, r)] / best[c] for c in conds]
                    worst[r] = max(ratios)
                    print(f"{n:>6} {setting:>7} {r:>16} " + " ".join(
                        f"{1e3 * cells[(n, c, setting, r)]:>9.1f} ({q:4.2f})" for c, q in zip(conds, ratios)))
                picks = "; ".join(f"best {c}: {min(members, key=lambda r: cells[(n, c, setting, r)])}" for c in conds)
                print(f"{'':>6} {'':>7} {'':>16} {picks}; least bad: {min(members, key=worst.get)}")
            knn, lid = auto_choice(n)
            print(f"{'':>6} auto takes: {knn if family.startswith('k-NN') else lid}; "
                  f"answers of every route equal: {agree.get(n)}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--routes", default=",".join(ROUTES))
    ap.add_argument("--threads", default="pool,1", help="pool (as a plain call finds it), 1 (as inside analyze)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--passive", action="store_true", help="also the faiss cells under OMP_WAIT_POLICY=PASSIVE")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    busy.add_argument(ap)
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    routes = [r for r in args.routes.split(",") if r]
    threads = [t for t in args.threads.split(",") if t]
    conds = [c for c, _ in busy.conditions(args.busy)]
    if not args.child:
        print(f"one layer per N, d = {args.d}, {os.cpu_count()} cores", flush=True)
    for n in sizes:  # one N at a time, printed as it is measured
        load = os.getloadavg()[0]
        cells, agree = measure([n], args.d, routes, threads, args.busy, args.repeat)
        if args.child:
            print(json.dumps([[*key, s] for key, s in cells.items()]), flush=True)
            continue
        shown = routes
        if args.passive:
            faiss_routes = [r for r in routes if "faiss" in r]
            cells.update(child_cells(args, faiss_routes, n))
            shown = routes + [f"{r}-passive" for r in faiss_routes]
        print(f"\nN = {n}: load average (1 min) {load:.2f} before, {os.getloadavg()[0]:.2f} after", flush=True)
        report(cells, agree, [n], shown, threads, conds)


if __name__ == "__main__":
    main()
