"""What a fitted law's parameters can be trusted to say: :func:`undetermined_params` (the parameters
the data do not determine, shown blank with the reason), bootstrap intervals of the parameters
(:func:`bootstrap_params`, refitting the law on resampled grids) and the resampled grid scores behind
them (:func:`grid_score_samples`)."""

from __future__ import annotations


import numpy as np

from .forms import FORMS
from .solver import EXPONENT_ATOL, fit_scaling_law, refit_many

def undetermined_params(form: str, params: dict, status: str | None, reason: str | None = None, *,
                        bounds=None, rmse: float | None = None) -> dict[str, str]:
    """``{parameter: why}`` for the parameters of a stored fit that the data do not determine (to be
    shown blank with the reason, never as a number: a number the data do not determine would read
    as a finding). Empty for a trusted fit.

    ``params`` as :attr:`ScalingFit.params` reports them, ``status``/``reason`` the fit's, ``bounds``
    the metric's ``(low, high)`` (S∞'s box). Per status:

    - ``flat``: no trend, so every parameter but the level (S∞, or ``a``) is undetermined;
    - ``not_identifiable``: every parameter (the values are one of many equal fits), except when a
      vanished term (below) is what leaves its exponent free: then that exponent alone;
    - an exponent on its box bound (checked on every exponent, whatever status is reported first):
      at the lower bound 0 its term is a constant that trades off with S∞, so S∞, that C and the
      exponent are undetermined; at the upper bound the term only separates n = 1 from the rest,
      and the law's limit still trades off with it, so the same three are left blank;
    - S∞ on the metric's bound: S∞ is the constraint, not an estimate;
    - a coefficient at 0 (C_f, C_c or C), or no larger than the fit's ``rmse``: its term
      ``C·n^−e`` moves the law by at most C over any budget, so it vanishes into the residual and its
      exponent has no effect on the fit (d_v = 2/α goes with α).

    >>> sorted(undetermined_params("saturating", {"s_inf": 35.0, "c_f": 34.6, "c_c": 0.1, "alpha": 0.0,
    ...                                           "beta": 1.0}, "exponent_at_bound"))
    ['alpha', 'c_f', 's_inf']
    """
    law = FORMS[form]
    names = law.params
    if status == "flat":
        level = names[law.limit] if law.limit is not None else names[0]
        return {n: "every score is the same: no trend to fit" for n in names if n != level}
    # exponent i belongs to the coefficient just before it in the saturating law (c_f·n_f^-α, c_c·n_c^-β)
    # and to the single coefficient of the joint power law
    partner = {"alpha": "c_f", "beta": "c_c", "gamma": "c"}
    level = params.get(names[law.limit]) if law.limit is not None else None
    exact = 1e-9 * max(1.0, abs(level) if level is not None and np.isfinite(level) else 1.0)
    tol = max(exact, rmse if rmse is not None and np.isfinite(rmse) else 0.0)
    vanished = {}
    for i in law.exponents:
        name, coef = names[i], partner[names[i]]
        c = params.get(coef)
        if c is not None and np.isfinite(c) and abs(c) <= tol:
            vanished[name] = (f"{coef} = {c:.3g}{' (within the fit’s RMSE)' if abs(c) > exact else ''}: "
                              f"its term vanishes, so {name} has no effect on the fit")
    if status == "not_identifiable":
        # a vanished term is what leaves its exponent free (a zero Jacobian column): the rest is
        # determined, unless the reason names another exponent
        other = [names[i] for i in law.exponents if names[i] in (reason or "") and names[i] not in vanished]
        if vanished and not other:
            return dict(vanished)
        return {n: reason or "the grid cannot separate the parameters" for n in names}
    out: dict[str, str] = {}
    for i in law.exponents:
        name = names[i]
        value = params.get(name)
        for edge, side in ((law.lower[i], "lower"), (law.upper[i], "upper")):
            if value is not None and np.isfinite(value) and abs(value - edge) <= EXPONENT_ATOL:
                why = (f"{name} = {value:.3g} sits on its {side} bound {edge:g}: no power law in this budget, "
                       f"so {name}, {partner[name]} and S∞ are not determined")
                for n in (name, partner[name], names[law.limit]):
                    out.setdefault(n, why)
    for name, why in vanished.items():
        out.setdefault(name, why)
    if law.limit is not None and bounds is not None:
        s_inf = params.get(names[law.limit])
        for edge in bounds:
            if edge is not None and s_inf is not None and np.isfinite(edge) \
                    and abs(s_inf - edge) <= 1e-6 * max(1.0, abs(edge)):
                out.setdefault(names[law.limit], f"S∞ sits on the metric's bound {edge:g}: the constraint, "
                                                 "not an estimate")
    return out


class ParamIntervals(dict):
    """Bootstrap intervals of a law's parameters: a dict ``{param: (low, high)}`` (so it stores as
    the plain mapping the dashboard reads) with the evidence beside it as attributes:

    ``estimate`` (the full-data fit's parameters), ``contains_estimate[p]`` (``low <= estimate
    <= high``), ``level``, ``n_boot``, ``n_fitted`` (resamples fitted), ``share_ok`` (share of the
    fitted resamples whose fit status was ``"ok"``), ``status`` (the full-data fit's status),
    ``recentred`` (resampled scores recentred on the full-data scores) and ``notes`` (what to tell
    the reader). :meth:`as_dict` gives all of it as plain data.
    """

    def __init__(self, intervals, *, estimate, contains_estimate, level, n_boot, n_fitted, share_ok, status,
                 recentred, notes):
        super().__init__(intervals)
        self.estimate, self.contains_estimate = estimate, contains_estimate
        self.level, self.n_boot, self.n_fitted, self.share_ok = level, n_boot, n_fitted, share_ok
        self.status, self.recentred, self.notes = status, recentred, notes

    @property
    def intervals(self) -> dict[str, tuple[float, float]]:
        return dict(self)

    def as_dict(self) -> dict:
        return {"intervals": {k: list(v) for k, v in self.items()}, "estimate": self.estimate,
                "contains_estimate": self.contains_estimate, "level": self.level, "n_boot": self.n_boot,
                "n_fitted": self.n_fitted, "share_ok": self.share_ok, "status": self.status,
                "recentred": self.recentred, "notes": list(self.notes)}


def bootstrap_params(score_samples: np.ndarray, n_frames, n_captions, *, scores=None, level: float = 0.95,
                     form: str = "saturating", bounds=None,
                     higher_is_better=True) -> ParamIntervals:
    """Percentile intervals of the law's parameters from scores recomputed on item resamples.

    Args:
        score_samples: ``(B, P)`` scores for B item resamples at the P grid points, one resample
            shared by all grid points (:func:`grid_score_samples`); NaN rows are skipped.
        scores: ``(P,)`` full-data scores. Give them: the estimate is the fit to them, and the
            resampled scores are recentred on them first, ``s_b - median_b(s) + scores`` per grid
            point (the same median shift :func:`analysis.bootstrap.bootstrap_ci` applies), which
            removes the resampling bias of neighbourhood metrics (a resample holds ~63% distinct
            items, so k-NN scores shift) that would otherwise move every refit away from the
            estimate. Without them the fit to the samples' mean is the estimate and nothing is
            recentred.
        bounds, higher_is_better: as in :func:`fit_scaling_law`.
    Each resample is refitted from the full-data estimate (and the default start). Intervals are
    the ``(1-level)/2`` and ``(1+level)/2`` percentiles of the refitted parameters (all fitted
    resamples, whatever their status). When the data say otherwise, i.e. the estimate falls
    outside its interval (a skewed or multi-modal refit distribution, typically when the full fit
    or many refits are not ``"ok"``), nothing is forced: ``contains_estimate`` is False for that
    parameter and ``notes`` says so, together with ``share_ok``, so the reader can discount it.
    Raises:
        ValueError when fewer than 2 resamples could be fitted.
    """
    samples = np.atleast_2d(np.asarray(score_samples, float))
    samples = samples[np.all(np.isfinite(samples), axis=1)]
    kw = {"form": form, "bounds": bounds, "higher_is_better": higher_is_better}
    recentred = scores is not None
    if recentred:
        y = np.asarray(scores, float).ravel()
        if samples.shape[1] != len(y):
            raise ValueError(f"score_samples has {samples.shape[1]} grid points, scores has {len(y)}")
        if len(samples):
            samples = samples - np.median(samples, axis=0) + y
    else:
        y = samples.mean(axis=0)
    full = fit_scaling_law(n_frames, n_captions, y, **kw)
    init = full.theta
    kw_refit = {"form": form, "bounds": bounds, "higher_is_better": higher_is_better}
    fits, ok = [], 0
    if len(samples):  # every resample refitted from the estimate, the searches batched
        for f in refit_many(n_frames, n_captions, samples, init=init, **kw_refit):
            fits.append([f.params[p] for p in FORMS[form].params])
            ok += f.status == "ok"
    if len(fits) < 2:
        raise ValueError(f"bootstrap: fewer than 2 of {len(score_samples)} resamples could be fitted")
    fits = np.array(fits)
    a = (1 - level) / 2
    lo, hi = np.nanquantile(fits, [a, 1 - a], axis=0) if np.isfinite(fits).any() else (fits[0], fits[0])
    names = FORMS[form].params
    intervals = {p: (float(l), float(h)) for p, l, h in zip(names, lo, hi)}
    contains = {p: bool(intervals[p][0] <= full.params[p] <= intervals[p][1]) for p in names}
    notes = []
    if full.status != "ok":
        notes.append(f"the full-data fit is {full.status}: {full.reason}")
    share_ok = ok / len(fits)
    if share_ok < 1:
        notes.append(f"{len(fits) - ok} of {len(fits)} resample fits were not ok")
    outside = [p for p in names if not contains[p] and np.isfinite(full.params[p])]
    if outside:
        notes.append(f"estimate outside its {level:.0%} interval for {', '.join(outside)}: the refits are "
                     "skewed or multi-modal there; treat those intervals as unreliable")
    return ParamIntervals(intervals, estimate=full.params, contains_estimate=contains, level=float(level),
                          n_boot=len(score_samples), n_fitted=len(fits), share_ok=float(share_ok),
                          status=full.status, recentred=recentred, notes=notes)


def grid_score_samples(points, metric: str, *, n_boot: int = 50, seed: int = 0, **params) -> np.ndarray:
    """``(n_boot, P)`` scores of ``metric`` at P grid points on item resamples shared by all points.

    Args:
        points: P pairs ``(X, Y)``, each the best layer pair of one grid point, all over the same
            N items.
    Uses :func:`analysis.bootstrap.resample_indices` and :func:`analysis.bootstrap.score_resamples`,
    so an item drawn twice is never its own neighbour, exactly as in ``bootstrap_ci``.
    """
    from analysis.bootstrap import resample_indices, score_resamples

    n = len(points[0][0])
    if any(len(X) != n or len(Y) != n for X, Y in points):
        raise ValueError("every grid point must hold the same N items")
    IX = resample_indices(n, n_boot, np.random.default_rng(seed))
    return np.stack([score_resamples(metric, X, Y, IX, **params) for X, Y in points], axis=1)
