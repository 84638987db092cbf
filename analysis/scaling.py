"""Test-time scaling laws: alignment as a function of the frames and captions given at test time.

Main form (video–text alignment paper): ``S(n_f, n_c) = S∞ − (C_f n_f^−α + C_c n_c^−β)``, fitted by
bounded nonlinear least squares from several starts. Beyond the paper's in-sample R², we report
held-out error (leave-one-out and small-budgets-predict-large) and compare other functional forms.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from scipy.optimize import least_squares


@dataclass(frozen=True)
class LawForm:
    name: str
    formula: str
    params: tuple[str, ...]
    fn: Callable  # fn(theta, nf, nc) -> predictions
    jac: Callable  # jac(theta, nf, nc) -> (P, n_params) derivatives of the predictions
    lower: tuple
    upper: tuple
    starts: Callable  # starts(rng, scores) -> list of initial thetas


def _saturating(theta, nf, nc):
    s_inf, c_f, c_c, a, b = theta
    return s_inf - (c_f * nf ** (-a) + c_c * nc ** (-b))


def _starts_saturating(rng, y):
    top = float(np.max(y))
    spread = max(float(np.ptp(y)), 1e-3)
    out = [np.array([top + 0.1 * spread, spread / 2, spread / 2, 1.0, 1.0])]
    for _ in range(11):
        out.append(np.array([top + rng.uniform(0, 1) * spread, rng.uniform(0, 2) * spread,
                             rng.uniform(0, 2) * spread, rng.uniform(0.1, 3), rng.uniform(0.1, 3)]))
    return out


def _saturating_jac(theta, nf, nc):
    _, c_f, c_c, a, b = theta
    pf, pc = nf ** (-a), nc ** (-b)
    return np.stack([np.ones_like(nf), -pf, -pc, c_f * pf * np.log(nf), c_c * pc * np.log(nc)], axis=1)


def _loglinear_jac(theta, nf, nc):
    return np.stack([np.ones_like(nf), np.log(nf), np.log(nc)], axis=1)


def _joint_power_jac(theta, nf, nc):
    _, c, g = theta
    p = nf * nc
    q = p ** (-g)
    return np.stack([np.ones_like(p), -q, c * q * np.log(p)], axis=1)


def _loglinear(theta, nf, nc):
    a, b, c = theta
    return a + b * np.log(nf) + c * np.log(nc)


def _joint_power(theta, nf, nc):
    s_inf, c, g = theta
    return s_inf - c * (nf * nc) ** (-g)


FORMS = {
    "saturating": LawForm(
        "saturating", "S∞ − (C_f·n_f^−α + C_c·n_c^−β)", ("s_inf", "c_f", "c_c", "alpha", "beta"), _saturating, _saturating_jac,
        (-np.inf, 0.0, 0.0, 0.0, 0.0), (np.inf, np.inf, np.inf, 5.0, 5.0), _starts_saturating),
    "log_linear": LawForm(
        "log_linear", "a + b·log n_f + c·log n_c", ("a", "b", "c"), _loglinear, _loglinear_jac,
        (-np.inf, -np.inf, -np.inf), (np.inf, np.inf, np.inf),
        lambda rng, y: [np.array([float(np.mean(y)), 0.0, 0.0])]),
    "joint_power": LawForm(
        "joint_power", "S∞ − C·(n_f·n_c)^−γ", ("s_inf", "c", "gamma"), _joint_power, _joint_power_jac,
        (-np.inf, 0.0, 0.0), (np.inf, np.inf, 5.0),
        lambda rng, y: [np.array([float(np.max(y)) + 0.05, max(float(np.ptp(y)), 1e-3), g])
                        for g in (0.2, 0.5, 1.0, 2.0)]),
}


class TooFewPoints(ValueError):
    """A fit needs more distinct grid points than it has parameters."""


@dataclass
class ScalingFit:
    form: str
    params: dict[str, float]
    r2: float
    rmse: float
    n_points: int
    theta: np.ndarray = field(repr=False)

    def predict(self, n_frames, n_captions) -> np.ndarray:
        return FORMS[self.form].fn(self.theta, np.asarray(n_frames, float), np.asarray(n_captions, float))

    def __getattr__(self, name):  # fit.s_inf, fit.alpha, ...
        params = self.__dict__.get("params", {})
        if name in params:
            return params[name]
        raise AttributeError(name)


def _check(n_frames, n_captions, scores, n_params, form):
    nf = np.asarray(n_frames, dtype=float).ravel()
    nc = np.asarray(n_captions, dtype=float).ravel()
    y = np.asarray(scores, dtype=float).ravel()
    if not (len(nf) == len(nc) == len(y)):
        raise ValueError(f"n_frames, n_captions and scores must have one entry per grid point: "
                         f"got {len(nf)}, {len(nc)}, {len(y)}")
    if np.any(nf < 1) or np.any(nc < 1):
        raise ValueError("n_frames and n_captions must be >= 1")
    if not np.all(np.isfinite(y)):
        raise ValueError("scores contain NaN or inf")
    distinct = len(set(zip(nf, nc)))
    if distinct <= n_params:
        raise TooFewPoints(
            f"the {form} law has {n_params} parameters but only {distinct} distinct (n_f, n_c) grid points: "
            f"need at least {n_params + 1}. Precompute more settings (--frames / --captions)."
        )
    return nf, nc, y


def fit_scaling_law(n_frames, n_captions, scores, *, form: str = "saturating", seed: int = 0,
                    init=None) -> ScalingFit:
    """Fit a scaling law by bounded least squares from several starts; keep the best.

    Args:
        n_frames, n_captions, scores: one entry per grid point (flat arrays of equal length).
        form: ``"saturating"`` (the paper's), ``"log_linear"`` or ``"joint_power"``.
        init: a known good start (e.g. the full-data fit when refitting subsets); then only it and
            the default start are tried.
    Returns:
        A :class:`ScalingFit` with ``params`` (for the saturating form: ``s_inf, c_f, c_c, alpha,
        beta``), in-sample ``r2`` and ``rmse``, and ``predict``.
    Raises:
        TooFewPoints when there are not more distinct grid points than parameters.
    """
    law = FORMS[form]
    nf, nc, y = _check(n_frames, n_captions, scores, len(law.params), form)
    rng = np.random.default_rng(seed)
    best = None
    starts = law.starts(rng, y)
    if init is not None:
        starts = [np.asarray(init, float), starts[0]]
    for theta0 in starts:
        theta0 = np.clip(theta0, np.array(law.lower) + 1e-9, np.array(law.upper) - 1e-9)
        res = least_squares(lambda t: law.fn(t, nf, nc) - y, theta0, jac=lambda t: law.jac(t, nf, nc),
                            bounds=(law.lower, law.upper), method="trf", max_nfev=2000)
        if best is None or res.cost < best.cost:
            best = res
    pred = law.fn(best.x, nf, nc)
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan")
    return ScalingFit(form, dict(zip(law.params, map(float, best.x))), r2, float(np.sqrt(ss_res / len(y))),
                      len(y), best.x)


def leave_one_out_rmse(n_frames, n_captions, scores, *, form: str = "saturating", seed: int = 0) -> float:
    """RMSE of predicting each grid point from a fit on all the others."""
    nf, nc, y = (np.asarray(a, float).ravel() for a in (n_frames, n_captions, scores))
    _check(nf[1:], nc[1:], y[1:], len(FORMS[form].params), form)
    full = fit_scaling_law(nf, nc, y, form=form, seed=seed).theta
    errs = []
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        fit = fit_scaling_law(nf[keep], nc[keep], y[keep], form=form, seed=seed, init=full)
        errs.append(float(fit.predict(nf[i], nc[i])) - y[i])
    return float(np.sqrt(np.mean(np.square(errs))))


def extrapolation_rmse(n_frames, n_captions, scores, *, form: str = "saturating", seed: int = 0) -> dict:
    """Fit on the small budgets (every point below the largest n_f and the largest n_c) and predict
    the large ones (points at the largest n_f or n_c). Returns ``{"rmse", "n_train", "n_test"}``."""
    nf, nc, y = (np.asarray(a, float).ravel() for a in (n_frames, n_captions, scores))
    train = (nf < nf.max()) & (nc < nc.max())
    fit = fit_scaling_law(nf[train], nc[train], y[train], form=form, seed=seed)
    err = fit.predict(nf[~train], nc[~train]) - y[~train]
    return {"rmse": float(np.sqrt(np.mean(err**2))), "n_train": int(train.sum()), "n_test": int((~train).sum())}


def compare_forms(n_frames, n_captions, scores, *, seed: int = 0) -> list[dict]:
    """Every form's in-sample R² and held-out errors, best (lowest LOO RMSE) first; forms with too
    few points say so instead of numbers."""
    rows = []
    for name in FORMS:
        row = {"form": name, "formula": FORMS[name].formula}
        try:
            fit = fit_scaling_law(n_frames, n_captions, scores, form=name, seed=seed)
            row.update(params=fit.params, r2=fit.r2, rmse=fit.rmse,
                       loo_rmse=leave_one_out_rmse(n_frames, n_captions, scores, form=name, seed=seed))
            try:
                row["extrapolation"] = extrapolation_rmse(n_frames, n_captions, scores, form=name, seed=seed)
            except TooFewPoints as exc:
                row["extrapolation"] = {"error": str(exc)}
        except TooFewPoints as exc:
            row["error"] = str(exc)
        rows.append(row)
    return sorted(rows, key=lambda r: r.get("loo_rmse", np.inf))


def bootstrap_params(score_samples: np.ndarray, n_frames, n_captions, *, level: float = 0.95,
                     form: str = "saturating", seed: int = 0) -> dict[str, tuple[float, float]]:
    """Percentile intervals of the law's parameters from scores recomputed on item resamples.

    Args:
        score_samples: ``(B, P)`` scores for B item resamples at the P grid points.
    """
    fits = []
    samples = np.asarray(score_samples, float)
    init = fit_scaling_law(n_frames, n_captions, samples.mean(axis=0), form=form, seed=seed).theta
    for row in samples:
        try:
            fits.append(fit_scaling_law(n_frames, n_captions, row, form=form, seed=seed, init=init).theta)
        except (TooFewPoints, ValueError):
            continue
    if len(fits) < 2:
        raise ValueError("bootstrap: fewer than 2 resamples could be fitted")
    fits = np.array(fits)
    a = (1 - level) / 2
    lo, hi = np.quantile(fits, [a, 1 - a], axis=0)
    return {p: (float(l), float(h)) for p, l, h in zip(FORMS[form].params, lo, hi)}
