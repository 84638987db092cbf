"""Held-out selection of a scaling-law form: leave-one-out RMSE, small budgets predicting the largest,
and :func:`compare_forms`, which ranks the forms by held-out error (in-sample R² alone would pick the
form with the most parameters)."""

from __future__ import annotations


import numpy as np

from .forms import FORMS
from .solver import ScalingFit, TooFewPoints, check_points, refits, fit_scaling_law

def leave_one_out_rmse(n_frames, n_captions, scores, *, form: str = "saturating",
                       bounds=None, higher_is_better=True, full: ScalingFit | None = None) -> float:
    """RMSE of predicting each grid point from a fit on all the others (each refit starts from the
    full-data fit, ``full`` when the caller has it; the P refits' searches run batched, and only
    their parameters are kept: a held-out prediction needs no fit status)."""
    nf, nc, y = (np.asarray(a, float).ravel() for a in (n_frames, n_captions, scores))
    law = FORMS[form]
    check_points(nf[1:], nc[1:], y[1:], len(law.params), form)
    kw = {"form": form, "bounds": bounds, "higher_is_better": higher_is_better}
    full = full or fit_scaling_law(nf, nc, y, **kw)
    keep = ~np.eye(len(y), dtype=bool)  # row i: every point but i
    P = len(y) - 1
    theta, _, sign, *_ = refits(law, *(a[None].repeat(len(y), 0)[keep].reshape(-1, P) for a in (nf, nc, y)),
                                 full.theta, bounds, higher_is_better, 1e-9)
    errs = sign * law.fn(theta.T, nf, nc) - y  # row i's fit at the held-out point i
    return float(np.sqrt(np.mean(np.square(errs))))


def extrapolation_rmse(n_frames, n_captions, scores, *, form: str = "saturating",
                       bounds=None, higher_is_better=True) -> dict:
    """Fit on the small budgets (every point below the largest n_f and the largest n_c) and predict
    the large ones (points at the largest n_f or n_c). Returns ``{"rmse", "n_train", "n_test",
    "status"}`` (``status`` of the fit on the small budgets)."""
    nf, nc, y = (np.asarray(a, float).ravel() for a in (n_frames, n_captions, scores))
    train = (nf < nf.max()) & (nc < nc.max())
    fit = fit_scaling_law(nf[train], nc[train], y[train], form=form, bounds=bounds,
                          higher_is_better=higher_is_better)
    err = fit.predict(nf[~train], nc[~train]) - y[~train]
    return {"rmse": float(np.sqrt(np.mean(err**2))), "n_train": int(train.sum()), "n_test": int((~train).sum()),
            "status": fit.status}


def compare_forms(n_frames, n_captions, scores, *, bounds=None, higher_is_better=True,
                  fits: dict[str, ScalingFit] | None = None) -> list[dict]:
    """Every form's fit, status, in-sample R² and held-out errors, best (lowest LOO RMSE) first.

    Each row: ``form, formula, params, r2, rmse, loo_rmse, extrapolation, status, reason, best``;
    ``best`` is True on exactly one row (the form with the lowest leave-one-out RMSE, the one to
    draw) when any form could be fitted. Forms with too few points carry ``error`` instead.
    ``fits``: full-data fits the caller already has (``{form: fit_scaling_law(n_frames, n_captions,
    scores, form=form, bounds=bounds, higher_is_better=higher_is_better)}``), used instead of
    fitting that form again.
    """
    kw = {"bounds": bounds, "higher_is_better": higher_is_better}
    rows = []
    for name, law in FORMS.items():
        row = {"form": name, "formula": law.formula, "best": False}
        try:
            fit = (fits or {}).get(name) or fit_scaling_law(n_frames, n_captions, scores, form=name, **kw)
            row.update(params=dict(fit.params), r2=fit.r2, rmse=fit.rmse, status=fit.status, reason=fit.reason,
                       loo_rmse=leave_one_out_rmse(n_frames, n_captions, scores, form=name, full=fit, **kw))
            try:
                row["extrapolation"] = extrapolation_rmse(n_frames, n_captions, scores, form=name, **kw)
            except TooFewPoints as exc:
                row["extrapolation"] = {"error": str(exc)}
        except TooFewPoints as exc:
            row["error"] = str(exc)
        rows.append(row)
    rows.sort(key=lambda r: r.get("loo_rmse", np.inf))
    if "loo_rmse" in rows[0]:
        rows[0]["best"] = True
    return rows
