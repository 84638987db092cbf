"""Profiles study: RankMe, LID (MLE) and uniformity per layer for every original run
(``result_profiles``). Per-run work only, so it spreads over processes like the grids."""

from __future__ import annotations

import numpy as np

from analysis.storage import results as R
from analysis.metrics.single import lid_report
from analysis.studies.context import Context, DatasetRuns
from analysis.studies.parallel import run_tasks

PROFILE_METRICS = ("rankme", "lid", "uniformity")


def params_for(metric: str, n_items: int) -> dict:
    # LID's MLE uses 20 neighbours; small datasets use as many as they have
    return {"k": min(20, n_items - 1)} if metric == "lid" else {}


def run(ctx: Context, d: DatasetRuns) -> None:
    stale = []
    for r in d.originals:
        for metric in PROFILE_METRICS:
            rid = ctx.rid("profile", r["run_id"], metric)
            ikey = R.key(r["run_id"], r["finished"])
            if ctx.fresh("profiles", "result_profiles", rid, ikey):
                stale.append((r, metric, rid, ikey))
    tasks = [(r["run_id"], metric, params_for(metric, r["n_items"])) for r, metric, _, _ in stale]
    for (r, metric, rid, ikey), (values, flags) in zip(stale, run_tasks(ctx, "profile", tasks,
                                                                        label=f"profiles {d.name}")):
        ctx.put_profile(result_id=rid, dataset=d.name, model=r["model"], run_id=r["run_id"],
                      modality=r["modality"], n_frames=r["n_frames"], n_captions=r["n_captions"],
                      metric=metric, params=params_for(metric, r["n_items"]), layer_values=values, flags=flags,
                      input_key=ikey)


def profile(engine, run_id: str, metric: str, params: dict) -> tuple[np.ndarray, dict]:
    """``(L,)`` values and ``{layer: note}``: a collapsed layer's value is kept (RankMe 1 and
    uniformity 0 are what such a layer measures) but noted; LID runs on distinct rows and says
    how many it used, NaN with the reason when too few remain. LID (MLE) is computed from exact
    k-NN distances once per layer (``lid_report(fast=True)``, equal to scikit-dimension's), reusing
    the engine's layer status to skip the duplicate search where there are none.

    Runs with one BLAS thread, as the worker processes of ``--jobs N`` do, unless its layers are
    large (:func:`blas_threads_for`): a profile of small layers is many small per-layer products and
    eigensolves, where a second BLAS thread mostly waits on the first (on the shared 2-core machine
    the study took 2-3x longer with two threads than with one)."""
    with blas_threads_for(engine.emb(run_id).shape):
        return _profile(engine, run_id, metric, params)


_BLAS = None

#: per-layer work ``N · d · min(N, d)`` (about the flops of a layer's Gram, eigensolve and
#: distance products) from which the BLAS pool keeps its threads. Measured on the 2-core machine,
#: two threads against one: N = 1024, d = 768 (6·10⁸): layer status 67 → 47 ms, uniformity
#: 22 → 18 ms, LID 33 → 31 ms; d = 384 (1.5·10⁸): LID 22 → 25 ms, the rest within 5 %; smaller
#: layers lose up to 2-3x. Worker processes are held at one thread whatever this says.
THREADED_LAYER_WORK = 1 << 28


def blas_threads_for(shape):
    """A context for per-layer work on layers of ``shape`` ``(..., N, d)``: :func:`one_blas_thread`
    below :data:`THREADED_LAYER_WORK`, else the BLAS pool as it is (all cores in a serial analyze,
    one thread in a ``--jobs`` worker)."""
    import contextlib

    n, d = int(shape[-2]), int(shape[-1])
    return contextlib.nullcontext() if n * d * min(n, d) >= THREADED_LAYER_WORK else one_blas_thread()


def one_blas_thread():
    """A context limiting the BLAS (and OpenMP) pools of the loaded libraries to one thread. The
    controller is made once: finding the libraries costs milliseconds, limiting them microseconds."""
    global _BLAS
    if _BLAS is None:
        from threadpoolctl import ThreadpoolController

        _BLAS = ThreadpoolController()
    return _BLAS.limit(limits=1)


def _profile(engine, run_id: str, metric: str, params: dict) -> tuple[np.ndarray, dict]:
    flags = {layer: reason for layer, reason in engine.degenerate_layers(run_id).items()}
    if metric != "lid":
        return engine.profile(run_id, metric, **params), flags
    values = []
    for layer, X in enumerate(engine.emb(run_id)):
        rep = lid_report(X, **params, keep=engine.distinct_rows(run_id, layer), fast=True)
        values.append(rep.value)
        # the layer's own flag (collapsed, rank 1, ...) stays first: LID's note is added to it
        note = rep.reason or (f"LID on {rep.n_distinct} distinct of {rep.n_items} items (duplicates merged)"
                              if rep.n_distinct < rep.n_items else None)
        if note:
            flags[layer] = f"{flags[layer]}; {note}" if layer in flags else note
    return np.array(values, dtype=np.float64), flags
