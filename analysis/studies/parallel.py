"""Spreading a study's independent units of work over processes, with a progress bar.

``run_tasks(ctx, kind, tasks, unit=fn)`` returns ``fn(engine, *task)`` for each task, in order. With
``jobs == 1`` tasks run in this process on ``ctx.engine``. Otherwise the write connection is closed, worker processes open
the store read-only (DuckDB allows many readers or one writer) with an engine each, and tasks are
sent in runs of the same first run, so a worker prepares that run once and its partners once per
worker; results come back to this process, which alone writes. Workers use one BLAS thread each so
``jobs`` processes do not oversubscribe the cores; results are the same numbers as ``jobs == 1``
(tests compare them cell for cell).

Elsewhere than local processes: ``ctx.executor`` (``analyze_store(..., executor=...)``; ``layerscope
sweep run --ray`` passes one, see precompute/batch/ray_backend.py) is called as ``executor(store, clamp, unit,
chunks)`` and yields ``(chunk position, run_chunk's result)`` as each chunk finishes, each chunk run
elsewhere by :func:`init_worker`, :func:`run_chunk` and :func:`close_worker`. This module knows no
study: the task function comes with the tasks.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor, as_completed

from tqdm.auto import tqdm

_ENGINE = None


def default_jobs() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


def _prefetch(engine, kind: str, tasks: list[tuple], i: int) -> None:
    """Before a grid task whose grid is not scored yet, let the engine score a group of pairs at
    once (:meth:`Engine.prefetch_pairs`): the following tasks of the same metric whose left runs
    fill up to ``PREFETCH_LAYERS`` layers, with all their partners. Tasks come ordered by metric,
    block of partners, left run, so a group is consecutive left runs of one block; the partners'
    states stay in the engine's budget as they did for one left run at a time."""
    if kind != "grid":
        return
    a, b, metric, params = tasks[i][:4]
    if not engine.prefetches(metric) or engine.memoised_grid(a, b, metric, **params) is not None:
        return
    left, layers, pairs = set(), 0, []
    for t in tasks[i:]:
        if t[2] != metric or t[3] != params:
            break
        if t[0] not in left:
            n_layers = engine.emb(t[0]).shape[0]
            if left and layers + n_layers > engine.PREFETCH_LAYERS:
                break
            left.add(t[0])
            layers += n_layers
        pairs.append((t[0], t[1]))
    engine.prefetch_pairs(pairs, metric, **params)


def die_with_parent(sig: int | None = None, *, watch: bool = True) -> None:
    """Make this (child) process end when its parent does, however the parent ends (``kill -9``
    included): otherwise pool workers live on holding the store open, and every rerun is refused as
    "store in use".

    Linux: ``prctl(PR_SET_PDEATHSIG, sig)`` (default SIGKILL) has the kernel signal this process the
    moment its parent exits. Elsewhere, and as a second line, ``watch`` starts a daemon thread that
    exits the process within half a second of it being re-parented. Safe in a ``preexec_fn``
    (``watch=False``: no threads between fork and exec).
    """
    import signal

    parent = os.getppid()
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL if sig is None else sig), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the watch below does it
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)
    if watch:
        import threading
        import time

        def watch_parent():
            while os.getppid() == parent:
                time.sleep(0.5)
            os._exit(1)

        threading.Thread(target=watch_parent, name="die-with-parent", daemon=True).start()


def _init_pool_worker(store: str, clamp: str) -> None:
    """A local pool worker: it ends with the analysis that forked it, and at once on SIGTERM, then
    :func:`init_worker`."""
    import signal

    # forked, it inherits the analysis's SIGTERM handler (analysis.signals), which would turn the
    # signal into an error of the task under way and go on with the next one: a cancelled analysis's
    # workers (its process group is sent SIGTERM) must end, and the analysis records the end
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent()
    init_worker(store, clamp)


def init_worker(store: str, clamp: str) -> None:
    """Open ``store`` read-only with an engine of this process's own, on one BLAS thread."""
    global _ENGINE
    from threadpoolctl import threadpool_limits

    from analysis.storage.store import connect
    from analysis.studies.engine import Engine
    from analysis.metrics.base import load_pooled_libraries

    load_pooled_libraries()  # faiss's pools too: threadpoolctl limits only what is loaded
    threadpool_limits(1)
    _ENGINE = Engine(connect(store, read_only=True), clamp=clamp)


def close_worker() -> None:
    """Close the connection :func:`init_worker` opened (a remote task ends; the driver writes next)."""
    global _ENGINE
    _ENGINE.con.close()
    _ENGINE = None


def run_chunk(kind: str, unit, chunk: list[tuple]) -> tuple[list, dict]:
    """Results of a chunk, and what the worker's engine did for it (added to the parent's counters)."""
    c = _ENGINE.counters
    before = (c.preparations, c.layer_preparations, c.grids_scored, c.profiles, len(c.prepared_keys))
    out = []
    for i, t in enumerate(chunk):
        _prefetch(_ENGINE, kind, chunk, i)
        out.append(unit(_ENGINE, *t))
    done = {"preparations": c.preparations - before[0], "layer_preparations": c.layer_preparations - before[1],
            "grids_scored": c.grids_scored - before[2], "profiles": c.profiles - before[3],
            "prepared_keys": c.prepared_keys[before[4]:]}
    return out, done


def _chunks(tasks: list[tuple]) -> list[list[int]]:
    """Task positions grouped by their first element (a run id), in order."""
    groups: dict = {}
    for i, t in enumerate(tasks):
        groups.setdefault(t[0], []).append(i)
    return list(groups.values())


def _run_remote(ctx, kind: str, unit, tasks: list[tuple], out: list, bar) -> list:
    """``run_tasks`` on ``ctx.executor``, the write connection released meanwhile as for the
    process pool; the same chunks, so the same numbers."""
    chunks = _chunks(tasks)
    with ctx.released():
        for pos, (results, done) in ctx.executor(ctx.store, ctx.settings.clamp, kind, unit,
                                                 [[tasks[i] for i in idx] for idx in chunks]):
            for i, res in zip(chunks[pos], results):
                out[i] = res
            ctx.engine.counters.add(done)
            bar.update(len(chunks[pos]))
    return out


def run_tasks(ctx, kind: str, tasks: list[tuple], *, unit, label: str = "") -> list:
    """``unit(engine, *task)`` for each of ``tasks`` (same order), on ``ctx.settings.jobs`` processes
    or ``ctx.executor``, with a progress bar. ``unit`` is a module-level function (workers receive it
    by name); ``kind`` names the tasks for the bar, and ``"grid"`` tasks let the engine prefetch."""
    if not tasks:
        return []
    bar = tqdm(total=len(tasks), desc=label or kind, unit=kind, disable=not ctx.progress, leave=False)
    out = [None] * len(tasks)
    try:
        jobs = min(ctx.settings.jobs, len(_chunks(tasks)))
        if ctx.executor is not None and len(_chunks(tasks)) > 1:
            return _run_remote(ctx, kind, unit, tasks, out, bar)
        if jobs <= 1:
            for i, t in enumerate(tasks):
                bar.set_postfix_str(_describe(kind, t), refresh=False)
                _prefetch(ctx.engine, kind, tasks, i)
                out[i] = unit(ctx.engine, *t)
                bar.update()
            return out
        chunks = _chunks(tasks)
        _load_kernels()
        with ctx.released():
            with ProcessPoolExecutor(max_workers=jobs, initializer=_init_pool_worker, initargs=(ctx.store, ctx.settings.clamp)) as pool:
                futures = {pool.submit(run_chunk, kind, unit, [tasks[i] for i in idx]): idx for idx in chunks}
                for fut in as_completed(futures):
                    idx = futures[fut]
                    results, done = fut.result()
                    for i, res in zip(idx, results):
                        out[i] = res
                    ctx.engine.counters.add(done)
                    bar.update(len(idx))
        return out
    finally:
        bar.close()


_KERNELS_LOADED = False


def _load_kernels() -> None:
    """Run numba's compiled kernels once on tiny inputs in this process before a pool starts:
    workers forked from it inherit them instead of each loading them from numba's cache again
    (about 0.7 s per worker and pool). The float32-layer and float64 signatures analyze uses."""
    global _KERNELS_LOADED
    if _KERNELS_LOADED:
        return
    _KERNELS_LOADED = True
    import numpy as np

    from analysis.grid import layer_grid
    from analysis.metrics.single import knn_distances

    X = np.random.default_rng(0).normal(size=(1, 12, 4))
    for dtype in (np.float32, np.float64):
        layer_grid(X.astype(dtype), X.astype(dtype) + 1.0, metric="cknna", k=2)
    layer_grid(X.astype(np.float32), metric="mutual_knn", k=2)
    knn_distances(X[0], 2)


def _describe(kind: str, task: tuple) -> str:
    return f"{task[0]}×{task[1]} {task[2]}" if kind == "grid" else f"{task[0]} {task[1]}"
