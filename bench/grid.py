"""Benchmark: layer×layer grids against their floors, a naive per-pair loop, and a scaling table.

Prints, measured in one run on the same float32 data (default N=1024, d=768, 24×24 layers):
- the time of ``layer_grid`` for mutual_knn, cka and cknna;
- the float32 floor (issue #18): every layer's float32 unit rows, similarity matrix and top-k,
  computed once, which any k-NN grid must do — target: k-NN grids ≤ 1.3× this floor;
- the float64 floor the grids were held to before (#18: the same in float64), and for cka the
  centred float64 Gram blocks of every layer;
- every floor is scheduled as the grids schedule their layers (``prepare_on_threads``: as many
  layers at a time as the BLAS pool has threads, each on one BLAS thread; A's layers, then B's), so
  a ratio measures only the work a grid adds above its floor, not a difference in threading;
- beside the wall times, the CPU seconds of the quiet run with the BLAS pool held at one thread
  (one layer at a time, grids and floors alike): a column the machine's load barely moves;
- a naive per-pair mutual_knn loop that recomputes neighbours for every pair, as research code does;
- whether grid cells equal the one-pair functions, and whether neighbour lists equal an
  all-float64 search (the pre-#18 algorithm) on every layer.
Targets (issue #47): mutual k-NN <= 1.3x the float32 floor and >= 15x the per-pair loop, CKNNA
<= 1.4x, CKA <= 1.6x the Gram floor. ``--busy N`` measures every time twice in the same run, quiet
and with N spinning processes beside (``bench/busy.py``), and prints both columns side by side:
users run the grids next to other work, and a route that wins only on an idle machine shows here.
Times are the best of ``--repeat`` rounds (default 5) in which the floors and the grids run
interleaved (the naive loop: one run), all in one process on the same arrays, after one tiny grid per metric (numba loads
its compiled kernels on first use). Numbers on a shared machine are noisy.

``--scaling 1024,4096,16384[,65536]`` adds a table: for each N and method, in a fresh subprocess,
the time of a self-grid of ``--scaling-layers`` layers, its peak of numpy allocations (tracemalloc,
beyond the stack), and the process's peak resident memory (VmHWM, the stack included; the only
measure that sees faiss's own allocations). Methods: ``exact`` mutual_knn (exactness checked on 64
sampled rows per layer against their full float64 rows; faiss's exhaustive search proposes the
float32 candidates where faiss is installed), ``faiss`` (issue #32's reference: ``faiss.IndexFlatIP``
search of the float32 unit rows and the mutual k-NN intersection, float32 lists), ``cknna`` (the
same search, then CKNNA's compiled scoring: no N² table at any N), ``ann`` mutual_knn
(``knn="ann"``; the recall it reports, and its grid's largest difference from the exact grid) and
linear ``cka`` (packed Gram at N <= 1024, row blocks to 8192, feature space above). After each N
the issue's targets: exact / faiss time (≤ 1.0) and ann's recall (≥ 0.95) and time / exact
(≤ 1/3). ``--scaling-methods`` picks some (default: all, ``faiss`` and ``ann`` only when faiss is
installed). The 64k row takes ~10 min per method on 2 cores; leave it out for a quick run.

Usage: python bench/grid.py [--n 1024] [--d 768] [--layers 24] [--k 10] [--no-naive] [--busy 1] [--repeat 5]
       [--scaling 1024,4096,16384] [--scaling-layers 2] [--scaling-methods exact,ann,cka] [--only-scaling]
       [--scaling-spectrum latent|powerlaw]
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

from analysis.grid import layer_grid
from analysis.metrics.base import PairKernel, one_blas_thread, prepare_on_threads
from analysis.metrics.neighbors import dot64, knn_search, row_chunks, row_norms
from bench import busy

#: interleaved rounds per measure (``--repeat``): with three, the busy column of a 0.3-0.7 s grid
#: swung by ±15 % between runs (a spell of the spinner and the grid sharing one core)
REPEAT = 5
#: the last column: CPU seconds of the quiet run with the BLAS pool held at one thread
CPU = "CPU s, 1 thread"


def timed(fn, repeat=None):
    """Best of ``repeat`` wall-clock runs (the first run of a process also pays one-off page faults)."""
    best, out = float("inf"), None
    for _ in range(repeat or REPEAT):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def topk_dense(layer, k, dtype):
    """Unit rows, chunked similarity and top-k in ``dtype``: the floor's per-layer work.

    Negated in place (no second N-wide temporary), the self entry at +inf, then one argpartition.
    """
    X = layer.astype(dtype)
    U = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), np.finfo(dtype).tiny)
    n = len(U)
    idx = np.empty((n, k), dtype=np.int64)
    for start, stop in row_chunks(n, n):
        S = U[start:stop] @ U.T
        S *= -1
        S[np.arange(stop - start), np.arange(start, stop)] = np.inf
        idx[start:stop] = np.argpartition(S, k - 1, axis=1)[:, :k]
    return idx


class FloorWork(PairKernel):
    """A floor's per-layer work as a kernel's ``prepare``, so that ``prepare_on_threads`` schedules
    it exactly as it schedules a grid's layers: as many layers at a time as the BLAS pool has
    threads, BLAS held at one thread each (one layer at a time when the pool holds one thread).
    A floor scheduled otherwise (one layer at a time on BLAS's own threads) would be beaten by the
    grids' threading, and its ratio would measure the threading as much as the work."""

    def __init__(self, work):
        self.work = work

    def prepares_in_threads(self, params, n):
        return True

    def prepare(self, X, **params):
        return self.work(X, **params)


def on_grid_schedule(work, A, B, **params) -> list:
    """``[work(X, **params) for X in A] + [... for X in B]``, run as ``layer_grid`` prepares its
    layers: A's stack, then B's, each through ``prepare_on_threads``."""
    kernel = FloorWork(work)
    return [out for stack in (A, B) for out in prepare_on_threads(kernel, stack, params)]


def knn_floor(A, B, k, dtype):
    """``2L`` ``(N, k)`` top-k lists (unsorted), one per layer of A then B."""
    return on_grid_schedule(topk_dense, A, B, k=k, dtype=dtype)


def centred_gram(layer):
    """CKA's floor per layer: a float64 copy, centred, and its ``X Xᵀ`` in row chunks (not kept)."""
    Xc = layer.astype(np.float64)
    Xc -= Xc.mean(axis=0)
    n = len(Xc)
    for start, stop in row_chunks(n, n):
        Xc[start:stop] @ Xc.T


def gram_floor(A, B):
    on_grid_schedule(centred_gram, A, B)


def naive_mutual_knn(A, B, k):
    """Per-pair loop: both neighbour lists recomputed for every (a, b) — the same search."""
    out = np.empty((len(A), len(B)))
    n = A.shape[1]
    for a in range(len(A)):
        for b in range(len(B)):
            ia, ib = knn_search(A[a], k).idx, knn_search(B[b], k).idx
            out[a, b] = (ia[:, :, None] == ib[:, None, :]).any(axis=2).sum() / (k * n)
    return out


def make_stack(n, d, layers, seed, latent_seed=0):
    """float32 ``(layers, n, d)``: a shared 32-dim latent plus noise that grows with depth."""
    latent = np.random.default_rng(latent_seed).normal(size=(n, 32)).astype(np.float32)
    r = np.random.default_rng(seed)
    out = np.empty((layers, n, d), dtype=np.float32)
    for l in range(layers):
        out[l] = latent @ r.normal(size=(32, d)).astype(np.float32)
        out[l] += (1 + l / 4) * r.standard_normal(size=(n, d), dtype=np.float32)
    return out


def powerlaw_stack(n, d, layers, seed):
    """float32 ``(layers, n, d)`` with a power-law spectrum: ``Z diag(i^-a) Q`` (``Z`` Gaussian,
    ``Q`` a random rotation), ``a = 0.5`` (eigenvalues ∝ 1/i, no low-rank cut) in the first layer,
    flatter with depth (``a = 0.5 / (1 + l / 4)``): the ann search's hard case, unlike
    ``make_stack``'s 32-dim latent, whose 64 principal dimensions hold most of every inner product."""
    r = np.random.default_rng(seed)
    Q = np.linalg.qr(r.normal(size=(d, d)))[0].astype(np.float32)
    out = np.empty((layers, n, d), dtype=np.float32)
    for l in range(layers):
        scale = (np.arange(1, d + 1) ** (-0.5 / (1 + l / 4))).astype(np.float32)
        for start in range(0, n, 8192):
            stop = min(n, start + 8192)
            out[l, start:stop] = (r.standard_normal(size=(stop - start, d), dtype=np.float32) * scale) @ Q
    return out


def exact_on_sample(X, idx, k, rows=64, seed=0):
    """Neighbour lists of ``rows`` sampled rows against their full float64 rows (ties to lower index)."""
    sample = np.random.default_rng(seed).choice(len(X), size=min(rows, len(X)), replace=False)
    norms = row_norms(X)
    S = dot64(X, norms, sample, np.broadcast_to(np.arange(len(X)), (len(sample), len(X))))
    S[np.arange(len(sample)), sample] = -np.inf
    ref = np.sort(np.argsort(-S, axis=1, kind="stable")[:, :k], axis=1)
    return bool(np.array_equal(ref, idx[sample]))


def vm_hwm() -> int:
    """Peak resident memory of this process in bytes (VmHWM: unlike ru_maxrss, reset by exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def scaling_point(n, d, layers, k, method, spectrum="latent"):
    """Run in a subprocess: one (N, method) cell of the scaling table, printed as JSON."""
    import tracemalloc

    from analysis.grid import prepare_layers
    from analysis.registry import get_metric

    A = make_stack(n, d, layers, seed=1) if spectrum == "latent" else powerlaw_stack(n, d, layers, seed=1)
    if method == "faiss":
        return print(json.dumps(faiss_point(A, k)))
    metric = {"cka": "cka", "cknna": "cknna"}.get(method, "mutual_knn")
    spec = get_metric(metric)
    params = spec.resolve(**({} if method == "cka" else {"k": k, "knn": "ann" if method == "ann" else "exact"}))
    if method != "cka":  # imports (faiss, numba's compiled kernels, loaded on first use): not part of the cell
        layer_grid(A[:1, :64], metric=metric, k=min(k, 10), **({"knn": "ann"} if method == "ann" else {}))
    tracemalloc.start()  # numpy reports its array allocations here: the grid's own peak
    t0 = time.perf_counter()
    # what layer_grid(A, metric=..., **params) runs, kept open so the check reuses the lists
    states = prepare_layers(spec, A, params)
    grid = spec.kernel.score_block(states, states, **params)
    seconds = time.perf_counter() - t0
    traced = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    peak = vm_hwm()
    out = {"n": n, "method": method, "seconds": seconds, "peak_bytes": peak, "grid_bytes": traced,
           "data_bytes": A.nbytes}
    if method in ("exact", "cknna"):
        out["exact"] = all(exact_on_sample(layer, s.idx, k) for layer, s in zip(A, states))
    elif method == "ann":
        from analysis.metrics.knn import knn_summary

        info = knn_summary(states)
        out["recall"] = info["knn_recall_min"]
        out["recall_rows"] = info["knn_recall_rows"]
        out["dims"] = [s.dims for s in states]
        # the exact grid for comparison costs the exact search again: only where that is quick
        out["max_diff"] = (float(np.max(np.abs(grid - layer_grid(A, metric="mutual_knn", k=k))))
                           if n <= 16384 else None)
    print(json.dumps(out))


def faiss_point(A, k):
    """The issue's reference: ``faiss.IndexFlatIP`` search of each layer's float32 unit rows (k + 1,
    the row itself dropped), then the mutual k-NN intersection; float32 answers, ties as faiss
    breaks them. Timed like the other cells (one subprocess, same threads)."""
    import faiss

    faiss.knn(A[0, :64], A[0, :64], 2)  # warm-up, as the other cells
    t0 = time.perf_counter()
    lists = []
    for layer in A:
        U = layer / np.linalg.norm(layer, axis=1, keepdims=True)
        index = faiss.IndexFlatIP(U.shape[1])
        index.add(U)
        _, I = index.search(U, k + 1)
        own = I == np.arange(len(U))[:, None]
        own[~own.any(axis=1), -1] = True  # a row whose self fell out of its top k+1 (duplicates)
        lists.append(I[~own].reshape(len(U), k))
    grid = np.array([[(a[:, :, None] == b[:, None, :]).any(axis=2).sum() / a.size for b in lists] for a in lists])
    seconds = time.perf_counter() - t0
    return {"n": A.shape[1], "method": "faiss", "seconds": seconds, "peak_bytes": vm_hwm(), "grid_bytes": 0,
            "data_bytes": A.nbytes, "grid": grid.tolist()}


def scaling_summary(n, cells):
    """The issue's targets for one N, from cells measured in this run."""
    exact, ref, ann = cells.get("exact"), cells.get("faiss"), cells.get("ann")
    if exact and ref:
        print(f"{n:>7} exact / faiss IndexFlatIP: {exact['seconds'] / ref['seconds']:.2f}x (target <= 1.0; "
              "ours float64-exact, ties to the lower index)", flush=True)
    if exact and ann:
        print(f"{n:>7} ann: recall {ann['recall']:.4f} (target >= 0.95) in {ann['seconds'] / exact['seconds']:.2f}x "
              "the exact time (target <= 0.33)", flush=True)


def scaling_table(sizes, d, layers, k, methods, spectrum="latent"):
    print(f"\nscaling: self-grids of {layers} layers, d={d}, k={k}, float32 data ({spectrum} spectrum), "
          "one subprocess per cell")
    print(f"{'N':>7} {'method':>7} {'time s':>9} {'grid peak MiB':>14} {'peak RSS MiB':>13} {'data MiB':>9}  check")
    for n in sizes:
        cells = {}
        for method in methods:
            cmd = [sys.executable, __file__, "--scaling-point", str(n), "--d", str(d), "--scaling-layers",
                   str(layers), "--k", str(k), "--scaling-methods", method, "--scaling-spectrum", spectrum]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
            r = cells[method] = json.loads(out)
            if method == "faiss":
                check = "faiss IndexFlatIP + intersection (float32 lists)"
            elif method in ("exact", "cknna"):
                check = f"exact on 64 rows/layer: {r['exact']}"
            elif method == "ann":
                diff = "not computed above 16k" if r["max_diff"] is None else f"<= {r['max_diff']:.4f}"
                check = (f"recall (min over layers, {r['recall_rows']} held-out rows) {r['recall']:.4f}; "
                         f"subspace dims {r['dims']}; |ann - exact grid| {diff}")
            else:
                check = "linear CKA"
            print(f"{r['n']:>7} {method:>7} {r['seconds']:>9.2f} {r['grid_bytes'] / 2**20:>14.0f} "
                  f"{r['peak_bytes'] / 2**20:>13.0f} {r['data_bytes'] / 2**20:>9.0f}  {check}", flush=True)
        scaling_summary(n, cells)


def default_methods():
    try:
        import faiss  # noqa: F401
    except ImportError:
        print("(faiss not installed: no ann rows; pip install 'layerscope[ann]')")
        return ["exact", "cknna", "cka"]
    return ["exact", "faiss", "ann", "cknna", "cka"]


FLOORS_HELP = ("A floor is the per-layer work any such grid must do (k-NN: float32 unit rows, one "
               "similarity product, top-k; CKA: float64 copy, centring, X X^T), run as the grids run their "
               "layers (as many at a time as the BLAS pool has threads, one BLAS thread each), so that a "
               "ratio measures only the work the grid adds. The last column: CPU seconds, quiet, BLAS held "
               "at one thread (one layer at a time), which the machine's load barely moves.")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=FLOORS_HELP)
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--no-naive", action="store_true", help="skip the slow per-pair loop")
    p.add_argument("--repeat", type=int, default=REPEAT, help="interleaved rounds; each figure is the best")
    p.add_argument("--scaling", default="", help="comma-separated N for the scaling table, e.g. 1024,4096,16384")
    p.add_argument("--scaling-layers", type=int, default=2)
    p.add_argument("--scaling-methods", default="",
                   help="comma-separated: exact, faiss, ann, cknna, cka (default: all)")
    p.add_argument("--scaling-spectrum", choices=("latent", "powerlaw"), default="latent",
                   help="scaling data: a 32-dim latent plus noise (default) or a power-law spectrum (ann's hard case)")
    p.add_argument("--only-scaling", action="store_true", help="skip the grid-vs-floor part")
    p.add_argument("--scaling-point", type=int, help=argparse.SUPPRESS)
    busy.add_argument(p)
    args = p.parse_args(argv)
    methods = [m for m in args.scaling_methods.split(",") if m]
    if args.scaling_point:
        return scaling_point(args.scaling_point, args.d, args.scaling_layers, args.k, methods[0],
                             args.scaling_spectrum)
    sizes = [int(s) for s in args.scaling.split(",") if s]
    if not args.only_scaling:
        grid_vs_floor(args)
    if sizes:
        scaling_table(sizes, args.d, args.scaling_layers, args.k, methods or default_methods(),
                      args.scaling_spectrum)


def grid_vs_floor(args):
    A, B = make_stack(args.n, args.d, args.layers, 1), make_stack(args.n, args.d, args.layers, 2)
    print(f"data: {args.layers}x{args.layers} layers, N={args.n}, d={args.d}, k={args.k}, float32 "
          f"({(A.nbytes + B.nbytes) / 2**20:.0f} MiB); load average (1 min) {os.getloadavg()[0]:.2f}")
    # one tiny grid per metric first: numba loads its compiled kernels (from the cache) on first use
    for metric in ("mutual_knn", "cka", "cknna"):
        layer_grid(A[:1, :64], B[:1, :64], metric=metric, k=args.k)
    # floors and grids interleaved, --repeat rounds, the best of each: a slow spell of the shared VM
    # (seconds long, 1.5x) then hits both sides of a ratio instead of one; with --busy each round
    # runs them quiet, then again with the spinning processes beside
    conds = busy.conditions(args.busy)
    best, out = measure(args, A, B, conds)
    print_table(args, best, conds)
    check_results(args, A, B, out)


def cell(fn, column):
    """``fn(column)``, or ``-`` where that column has no figure (the naive loop's CPU seconds)."""
    try:
        return fn(column)
    except KeyError:
        return "-"


def measure(args, A, B, conds):
    """``(best, out)``: the best time per ``(column, job)`` over ``args.repeat`` interleaved rounds,
    and each job's last result."""
    best = {}
    out = {}
    jobs = {"float32": lambda: knn_floor(A, B, args.k, np.float32),
            "float64": lambda: knn_floor(A, B, args.k, np.float64),
            "gram": lambda: gram_floor(A, B)}
    for metric in ("mutual_knn", "cka", "cknna"):
        jobs[metric] = lambda metric=metric: layer_grid(A, B, metric=metric, k=args.k)
    for _ in range(args.repeat):
        for cond, n_busy in conds:
            with busy.busy(n_busy):
                for name, fn in jobs.items():
                    t, out[name] = timed(fn, repeat=1)
                    best[cond, name] = min(best.get((cond, name), float("inf")), t)
        # quiet, the BLAS pool held at one thread: one layer at a time, grids and floors alike;
        # CPU seconds count work, not waiting for a core, so the machine's load barely moves them
        with one_blas_thread():
            for name, fn in jobs.items():
                t0 = time.process_time()
                fn()
                best[CPU, name] = min(best.get((CPU, name), float("inf")), time.process_time() - t0)
    if not args.no_naive:  # once per condition: it is the slow side of its ratio
        for cond, n_busy in conds:
            with busy.busy(n_busy):
                best[cond, "naive"], out["naive"] = timed(lambda: naive_mutual_knn(A, B, args.k), repeat=1)
    print(f"load average (1 min) after the timings: {os.getloadavg()[0]:.2f}")
    return best, out


def print_table(args, best, conds):
    names = [c for c, _ in conds] + [CPU]
    print(f"{'':>26}" + "".join(f"{c:>18}" for c in names))

    def line(label, fn):
        print(f"{label:>26}" + "".join(f"{cell(fn, c):>18}" for c in names))

    line("float32 floor", lambda c: f"{best[c, 'float32']:.2f} s")
    line("float64 floor (pre-#18)", lambda c: f"{best[c, 'float64']:.2f} s")
    line("cka float64 Gram floor", lambda c: f"{best[c, 'gram']:.2f} s")
    targets = {"mutual_knn": 1.3, "cknna": 1.4, "cka": 1.6}
    for metric in ("mutual_knn", "cka", "cknna"):
        floor = "gram" if metric == "cka" else "float32"
        line(f"{metric} grid", lambda c: f"{best[c, metric]:.2f} s")
        line(f"  / {'Gram' if metric == 'cka' else 'float32'} floor (<= {targets[metric]}x)",
             lambda c: f"{best[c, metric] / best[c, floor]:.2f}x")
        if metric != "cka":
            line("  / float64 floor", lambda c: f"{best[c, metric] / best[c, 'float64']:.2f}x")
    if not args.no_naive:
        line("naive per-pair loop", lambda c: f"{best[c, 'naive']:.2f} s")
        line("  grid speed-up (>= 15x)", lambda c: f"{best[c, 'naive'] / best[c, 'mutual_knn']:.1f}x")


def check_results(args, A, B, out):
    """Neighbour lists against the float64 search, grid cells against the one-pair functions."""
    idx32, idx64 = out["float32"], out["float64"]

    # neighbour lists equal an all-float64 search (sets; exact ties do not occur on this data)
    searched = [knn_search(layer, args.k).idx for stack in (A, B) for layer in stack]
    same = all(np.array_equal(s, np.sort(r, axis=1)) for s, r in zip(searched, idx64))
    print(f"neighbour lists equal the all-float64 search on every layer: {same}; "
          f"float32-only top-k differs on {sum(not np.array_equal(np.sort(a, 1), np.sort(b, 1)) for a, b in zip(idx32, idx64))}"
          f" of {len(idx64)} layers")

    from analysis.registry import REGISTRY
    cells = [(0, 0), (args.layers // 2, args.layers - 1), (args.layers - 1, 3 % args.layers)]
    for metric in ("mutual_knn", "cka", "cknna"):
        params = {} if metric == "cka" else {"k": args.k}
        ok = all(out[metric][a, b] == REGISTRY[metric](A[a], B[b], **params) for a, b in cells)
        print(f"{metric:>10}: grid cells identical to one-pair function: {ok}")
    if not args.no_naive:
        print(f"naive per-pair loop's values identical to the grid's: {np.array_equal(out['naive'], out['mutual_knn'])}")

if __name__ == "__main__":
    main()
