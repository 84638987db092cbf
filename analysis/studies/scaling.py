"""Scaling study: per vision×text model pair and metric, the best-cell score over the (n_f, n_c)
grid, the saturating law's fit, held-out errors, the other forms, and parameter intervals from
refits on item resamples (``result_studies``, study ``scaling``). Each subject's fits are one unit
of work, so subjects spread over processes."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from .. import results as R
from ..registry import get_metric
from ..scaling import TooFewPoints, bootstrap_params, compare_forms, fit_scaling_law
from .context import ANALYSIS_VERSION, Context, DatasetRuns
from .parallel import run_tasks

#: resamples for the parameter intervals (each one refits the law): at most this many
MAX_BOOT = 50


def run(ctx: Context, d: DatasetRuns, pairs: list[tuple]) -> None:
    s = ctx.settings
    by_models = defaultdict(list)
    for a, b, metric in pairs:
        by_models[(a["model"], b["model"], metric)].append((a, b))
    stale = []
    for (va, tb, metric), runs in by_models.items():
        params = s.params_for(metric)
        rid = R.key("scaling", d.name, va, tb, metric, params, ANALYSIS_VERSION)
        ikey = R.key(sorted((a["run_id"], str(a["finished"]), b["run_id"], str(b["finished"])) for a, b in runs),
                     s.n_boot, s.seed)
        if not ctx.fresh("scaling", "result_studies", rid, ikey):
            continue
        points = []
        for a, b in runs:
            g = R.read_grids(ctx.con, run_a=a["run_id"], run_b=b["run_id"], metric=metric)[0]
            points.append((a["n_frames"], b["n_captions"], g["best_value"], g["best_a"], g["best_b"],
                           a["run_id"], b["run_id"]))
        stale.append((f"{va}|{tb}|{metric}", rid, ikey, metric, params, points))
    tasks = [(points[0][5], metric, params, points, min(s.n_boot, MAX_BOOT), s.seed)
             for _, _, _, metric, params, points in stale]
    for (subject, rid, ikey, metric, params, _), payload in zip(stale, run_tasks(ctx, "scaling", tasks,
                                                                                 label=f"scaling {d.name}")):
        R.put_study(ctx.con, result_id=rid, study="scaling", dataset=d.name, subject=subject,
                    params={"metric": metric, **params, "n_boot": s.n_boot}, payload=payload, input_key=ikey)


def fit_subject(engine, _first_run: str, metric: str, params: dict, points: list, n_boot: int, seed: int) -> dict:
    """One subject's payload: scores per grid point, the law's fit, the other forms, intervals.

    ``points``: ``(n_f, n_c, best score, best layer a, best layer b, run a, run b)`` per grid point."""
    spec = get_metric(metric)
    nf = np.array([p[0] for p in points], float)
    nc = np.array([p[1] for p in points], float)
    y = np.array([p[2] for p in points], float)
    payload = {"n_frames": nf.tolist(), "n_captions": nc.tolist(), "scores": y.tolist(),
               "layers": [[p[3], p[4]] for p in points], "higher_is_better": spec.higher_is_better}
    try:
        fit = fit_scaling_law(nf, nc, y, seed=seed)
        payload["fit"] = {"params": fit.params, "r2": fit.r2, "rmse": fit.rmse, "n_points": fit.n_points}
        payload["forms"] = compare_forms(nf, nc, y, seed=seed)
        if n_boot >= 2:
            samples = resampled_scores(engine, points, metric, params, n_boot, seed)
            try:
                payload["intervals"] = bootstrap_params(samples, nf, nc, seed=seed)
                payload["intervals_n_boot"] = n_boot
            except ValueError as exc:
                payload["intervals_error"] = str(exc)
    except TooFewPoints as exc:
        payload["error"] = str(exc)
    return payload


def resampled_scores(engine, points, metric, params, n_boot, seed) -> np.ndarray:
    """``(n_boot, n_points)``: scores at each grid point's best layer pair, on item resamples shared
    across grid points (one resample of items is one replicate of the whole grid)."""
    spec = get_metric(metric)
    rng = np.random.default_rng(seed)
    n = engine.emb(points[0][5]).shape[1]
    out = np.empty((n_boot, len(points)))
    for bi in range(n_boot):
        ix = rng.integers(0, n, n)
        for j, (_, _, _, la, lb, a, b) in enumerate(points):
            out[bi, j] = spec(engine.emb(a)[la][ix], engine.emb(b)[lb][ix], **params)
    return out
