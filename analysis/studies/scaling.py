"""Scaling study: per vision×text model pair and metric, the best-cell score over the (n_f, n_c)
grid, the saturating law's fit, held-out errors, the other forms, and parameter intervals from
refits on item resamples (``result_studies``, study ``scaling``). Each subject's fits are one unit
of work, so subjects spread over processes."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from analysis.storage import results as R
from analysis.registry import BOUNDS, get_metric
from analysis.methods.scaling import (TooFewPoints, bootstrap_params, compare_forms, fit_scaling_law, grid_score_samples,
                                      undetermined_params)
from analysis.studies.context import MAX_BOOT, Context, DatasetRuns
from analysis.studies.grids import result_keys
from analysis.studies.parallel import run_tasks


def run(ctx: Context, d: DatasetRuns, pairs: list[tuple]) -> None:
    s = ctx.settings
    by_models = defaultdict(list)
    for a, b, metric in pairs:
        by_models[(a["model"], b["model"], metric)].append((a, b))
    stale = []
    for (va, tb, metric), runs in by_models.items():
        params = s.params_for(metric)
        rid = ctx.rid("scaling", d.name, va, tb, metric, params)
        ikey = R.key(sorted((a["run_id"], str(a["finished"]), b["run_id"], str(b["finished"])) for a, b in runs),
                     s.n_boot, s.seed)
        if not ctx.fresh("scaling", "result_studies", rid, ikey):
            continue
        points, known = [], []
        for a, b in runs:
            # the grids study wrote this row or found it fresh: from memory, or the dataset's rows
            # of an earlier analyze read once
            grid_rid = result_keys(ctx, a, b, metric)[0]
            g = ctx.result_row("result_grids", d.name, grid_rid, grid=False)
            points.append((a["n_frames"], b["n_captions"], g["best_value"], g["best_a"], g["best_b"],
                           a["run_id"], b["run_id"]))
            known.append(ctx.boot_samples.get(grid_rid))
        stale.append((f"{va}|{tb}|{metric}", rid, ikey, metric, params, points, known))
    tasks = [(points[0][5], metric, params, points, min(s.n_boot, MAX_BOOT), s.seed, known)
             for _, _, _, metric, params, points, known in stale]
    for (subject, rid, ikey, metric, params, _, _), payload in zip(stale, run_tasks(ctx, "scaling", tasks, unit=fit_subject,
                                                                                 label=f"scaling {d.name}")):
        ctx.put_study(result_id=rid, study="scaling", dataset=d.name, subject=subject,
                    params={"metric": metric, **params, "n_boot": s.n_boot}, payload=payload, input_key=ikey)


def fit_subject(engine, _first_run: str, metric: str, params: dict, points: list, n_boot: int, seed: int,
                known: list | None = None) -> dict:
    """One subject's payload: scores per grid point, the law's fit, the other forms, intervals.

    ``points``: ``(n_f, n_c, best score or None, best layer a, best layer b, run a, run b)`` per grid
    point. A point without a best cell (degenerate grid) is kept in the payload with
    ``degenerate[i] = True`` and left out of every fit. The fit respects the metric: S∞ inside its
    bounds, the law's direction from the metric's; ``fit.status``/``fit.reason`` say when it cannot
    be trusted, and ``drawn`` names the form with the best held-out error (the one to draw).

    ``known``: per point, the best cell's resample scores the grids study computed in this
    analysis with the same seed (``bootstrap_ci``: ``resample_indices(N, B, default_rng(seed))``,
    whose first ``n_boot`` rows are the draws :func:`grid_score_samples` makes), or None. When every
    point has at least ``n_boot`` of them they are used instead of scoring the resamples again."""
    spec = get_metric(metric)
    hib = spec.higher_is_better is not False
    kw = dict(bounds=BOUNDS.get(metric), higher_is_better=hib)
    deg = [p[2] is None for p in points]
    nf = np.array([p[0] for p in points], float)
    nc = np.array([p[1] for p in points], float)
    y = np.array([np.nan if p[2] is None else p[2] for p in points], float)
    payload = {"n_frames": nf.tolist(), "n_captions": nc.tolist(), "scores": y.tolist(), "degenerate": deg,
               "layers": [[p[3], p[4]] for p in points], "higher_is_better": spec.higher_is_better,
               "bounds": list(BOUNDS.get(metric) or (None, None))}
    ok = ~np.array(deg, dtype=bool)
    if not ok.all():
        payload["notes"] = [f"{int((~ok).sum())} of {len(points)} grid point(s) have no best cell (degenerate "
                            "input) and are left out of the fits"]
    good = [p for p, keep in zip(points, ok) if keep]
    try:
        fit = fit_scaling_law(nf[ok], nc[ok], y[ok], **kw)
        # ``undetermined``: {parameter: why} for the values the data do not determine (a vanished
        # term's exponent, an exponent or S∞ on a bound, ...): stored, so the JSON says what the page
        # and the report leave blank; ``params`` keep every value (the curves are drawn from them)
        payload["fit"] = {"params": fit.params, "r2": fit.r2, "rmse": fit.rmse, "n_points": fit.n_points,
                          "status": fit.status, "reason": fit.reason,
                          "undetermined": undetermined_params("saturating", fit.params, fit.status, fit.reason,
                                                              bounds=kw["bounds"], rmse=fit.rmse)}
        # the saturating law is fitted once: compare_forms reuses this fit
        payload["forms"] = compare_forms(nf[ok], nc[ok], y[ok], fits={"saturating": fit}, **kw)
        for f in payload["forms"]:
            if f.get("params"):
                f["undetermined"] = undetermined_params(f["form"], f["params"], f.get("status"), f.get("reason"),
                                                        bounds=kw["bounds"], rmse=f.get("rmse"))
        payload["drawn"] = next((f["form"] for f in payload["forms"] if f.get("best")), "saturating")
        if n_boot >= 2:
            have = [kn for kn, keep in zip(known or [None] * len(points), ok) if keep]
            if have and all(kn is not None and len(kn) >= n_boot for kn in have):
                samples = np.stack([np.asarray(kn)[:n_boot] for kn in have], axis=1)
            else:
                samples = grid_score_samples([(engine.emb(a)[la], engine.emb(b)[lb])
                                              for _, _, _, la, lb, a, b in good],
                                             metric, n_boot=n_boot, seed=seed, **params)
            try:
                iv = bootstrap_params(samples, nf[ok], nc[ok], scores=y[ok], **kw)
                payload["intervals"] = iv.intervals
                payload["intervals_detail"] = iv.as_dict()
                payload["intervals_n_boot"] = n_boot
            except ValueError as exc:
                payload["intervals_error"] = str(exc)
    except TooFewPoints as exc:
        payload["error"] = str(exc)
    return payload
