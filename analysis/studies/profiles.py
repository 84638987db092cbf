"""Profiles study: RankMe, LID (MLE) and uniformity per layer for every original run
(``result_profiles``). Per-run work only, so it spreads over processes like the grids."""

from __future__ import annotations

import numpy as np

from analysis.storage import results as R
from analysis.metrics.single import lid_report, uniformity_report
from analysis.studies.context import Context, DatasetRuns
from analysis.studies.parallel import run_tasks
from analysis.studies.threads import blas_threads_for

PROFILE_METRICS = ("rankme", "lid", "uniformity")
#: the words of an all-zero layer's status (analysis.metrics.degenerate.layer_status)
ZERO_LAYER = "rows are zero"


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
    for (r, metric, rid, ikey), (values, flags) in zip(stale, run_tasks(ctx, "profile", tasks, unit=profile,
                                                                        label=f"profiles {d.name}")):
        if metric == "rankme":  # once per run: which layers have no value anywhere, and why
            for layer in sorted(int(i) for i, flag in flags.items() if ZERO_LAYER in str(flag)):
                ctx.note(f"run {r['run_id']} ({r['model']} on {d.name}) layer {layer}: {flags[layer]}; its "
                         "RankMe, LID and uniformity are undefined (NaN) and its grid cells are left out")
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


def _profile(engine, run_id: str, metric: str, params: dict) -> tuple[np.ndarray, dict]:
    flags = {layer: reason for layer, reason in engine.degenerate_layers(run_id).items()}
    if metric == "uniformity" and not params:
        return _uniformity(engine, run_id, flags)
    if metric != "lid":
        return engine.profile(run_id, metric, **params), flags
    values = []
    for layer, X in enumerate(engine.emb(run_id)):
        rep = lid_report(X, **params, keep=engine.distinct_rows(run_id, layer), fast=True)
        values.append(rep.value)
        # the layer's own flag (collapsed, rank 1, ...) stays first: LID's note is added to it
        note = rep.reason or (f"LID on {rep.n_distinct} distinct of {rep.n_items} items (duplicates merged)"
                              if rep.n_distinct < rep.n_items else None)
        if rep.note():  # estimated from sampled query points above LID_EXACT_MAX_N: with its SE
            note = f"{note}; {rep.note()}" if note else rep.note()
        if note:
            flags[layer] = f"{flags[layer]}; {note}" if layer in flags else note
    return np.array(values, dtype=np.float64), flags


def _uniformity(engine, run_id: str, flags: dict) -> tuple[np.ndarray, dict]:
    """Uniformity per layer by :func:`analysis.metrics.single.uniformity_report`: exact up to
    ``UNIFORMITY_EXACT_MAX_N`` items, above it a seeded estimate whose standard error is stored in
    the layer's flag. An all-zero layer is NaN (its status flag says why), as ``engine.profile``
    makes it."""
    values = []
    for layer, (X, st) in enumerate(zip(engine.emb(run_id), engine.status(run_id))):
        if st.scale == 0.0:
            values.append(np.nan)
            continue
        rep = uniformity_report(X)
        values.append(rep.value)
        if rep.note():
            flags[layer] = f"{flags[layer]}; {rep.note()}" if layer in flags else rep.note()
    return np.array(values, dtype=np.float64), flags
