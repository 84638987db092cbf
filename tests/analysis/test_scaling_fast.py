"""The scaling fits' fast paths against independent references.

- the normal equations built by point-order sums equal numpy's einsum of the design, bit for bit
  (the search picks among costs that differ in the last bits, so only equal bits keep its picks);
- a law's columns from distinct budgets and distinct exponent values equal ``n ** -e`` per point;
- a zoom level built per exponent equals the clip of the whole offset grid;
- the global fit reaches an objective at least as low as scipy's bounded least squares from many
  starts (``scipy.optimize.least_squares``);
- leave-one-out for the linear form equals the closed form ``e_i / (1 - h_ii)`` (hat matrix), and
  for the nonlinear forms a brute-force loop of refits on every subset;
- compare_forms reusing a fit equals compare_forms fitting it; the row checks raise what a loop of
  per-row checks raises.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import least_squares

from analysis.metrics.degenerate import flat_grid
from analysis.methods.scaling import FORMS, TooFewPoints, compare_forms, fit_scaling_law, leave_one_out_rmse
from analysis.methods.scaling.forms import Grid, plain_axes
from analysis.methods.scaling.solver import (
    check_points,
    _check_rows,
    _flat_rows,
    _grid_settings,
    _normal_equations,
    _Target,
    _zoom_settings,
)

RNG = np.random.default_rng(11)
NF, NC = (a.ravel().astype(float) for a in np.meshgrid([1, 2, 4, 8], [1, 2, 4], indexing="ij"))


def _design(form, E, nf, nc):
    """The law's design ``(G, P, m)`` written out from its formula (ones, then each column)."""
    G = len(E)
    nf, nc = np.broadcast_to(nf, (G, nf.shape[-1])), np.broadcast_to(nc, (G, nc.shape[-1]))
    one = np.ones(nf.shape)
    if form == "saturating":
        cols = [one, -nf ** -E[:, :1], -nc ** -E[:, 1:2]]
    elif form == "joint_power":
        cols = [one, -(nf * nc) ** -E[:, :1]]
    else:
        cols = [one, np.log(nf), np.log(nc)]
    return np.stack(cols, axis=2)


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("per_row", [False, True])
def test_normal_equations_equal_einsum_bit_for_bit(form, per_row):
    law = FORMS[form]
    e = len(law.exponents)
    for G in (1, 2, 7, 300):
        E = RNG.uniform(0, 5, (G, e))
        E[: G // 3] = np.round(E[: G // 3], 1)  # repeated and round values too
        if per_row:  # B grids of P points (leave-one-out-like rows), one target each
            B = 4
            NFr = np.stack([np.roll(NF, b)[:-1] for b in range(B)])
            NCr = np.stack([np.roll(NC, 2 * b)[:-1] for b in range(B)])
            Z = RNG.normal(size=(B, NFr.shape[1]))
            rows = RNG.integers(0, B, G)
            grid, target = Grid(NFr, NCr), _Target.of(Z)
            X = _design(form, E, NFr[rows], NCr[rows])
            ref_A, ref_Xz = np.einsum("gpi,gpj->gij", X, X), np.einsum("gpi,gp->gi", X, Z[rows])
        else:
            rows, z = None, RNG.normal(size=len(NF))
            grid, target = Grid(NF, NC), _Target.of(z)
            X = _design(form, E, NF, NC)
            ref_A, ref_Xz = np.einsum("gpi,gpj->gij", X, X), np.einsum("gpi,p->gi", X, z)
        A, Xz = _normal_equations(law, G, plain_axes(E), grid, target, rows)
        np.testing.assert_array_equal(A, ref_A)
        np.testing.assert_array_equal(Xz, ref_Xz)


def test_target_sums_equal_einsum():
    z = RNG.normal(size=9)
    Z = RNG.normal(size=(5, 9))
    # a design whose first column is ones: X'z's first entry is the target's sum
    ones = np.concatenate([np.ones((5, 9, 1)), RNG.normal(size=(5, 9, 2))], axis=2)
    assert _Target.of(z).zz == float(z @ z)
    assert _Target.of(z).zsum == np.einsum("gpi,p->gi", ones, z)[0, 0]
    np.testing.assert_array_equal(_Target.of(Z).zsum, np.einsum("gpi,gp->gi", ones, Z)[:, 0])


def test_grid_and_zoom_settings_equal_their_whole_array_definitions():
    lo, hi = np.array([0.0, 0.0]), np.array([5.0, 5.0])
    axes = [np.linspace(a, b, 21) for a, b in zip(lo, hi)]
    E, ax = _grid_settings(axes)
    np.testing.assert_array_equal(E, np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 2))
    for d in range(2):
        np.testing.assert_array_equal(ax[d][0][ax[d][1]], E[:, d])
    offsets = np.stack(np.meshgrid(*[np.linspace(-1, 1, 11)] * 2, indexing="ij"), axis=-1).reshape(-1, 2)
    centers = np.array([[0.0, 4.95], [1.3, 2.2], [1.3, 2.2], [5.0, 0.05]])  # on, near and past the bounds
    step = np.array([0.25, 0.25]) / 5**3
    Ez, ax = _zoom_settings(centers, step, lo, hi)
    np.testing.assert_array_equal(Ez, np.clip(centers[:, None, :] + offsets[None] * step, lo, hi))
    for d in range(2):
        np.testing.assert_array_equal(ax[d][0][ax[d][1]], Ez.reshape(-1, 2)[:, d])


def _scipy_best_cost(form, nf, nc, z, lower, upper, starts):
    """The lowest sum of squares scipy's bounded least squares reaches from ``starts``."""
    law = FORMS[form]
    lo = np.where(np.isfinite(lower), lower, -np.inf)
    best = np.inf
    for x0 in starts:
        x0 = np.clip(x0, lo + 1e-9, upper - 1e-9)
        res = least_squares(lambda t: law.fn(t, nf, nc) - z, x0, jac=lambda t: law.jac(t, nf, nc),
                            bounds=(lo, upper), method="trf", xtol=1e-15, ftol=1e-15, gtol=1e-15, max_nfev=2000)
        best = min(best, float(np.sum(res.fun**2)))
    return best


@pytest.mark.parametrize("case", range(8))
def test_the_global_fit_is_at_least_as_good_as_scipy_from_many_starts(case):
    """An interior optimum ("ok") is resolved to scipy's objective. Where S∞ sits on its bound the
    valley of the exponents can be narrow and curved, and the zoom (±1 step, 5× finer a level) can
    stop short of its floor: case 2 ends 1.7e-5 above scipy's objective (α 0.0454 vs 0.0453, β 0.588
    vs 0.592), a known limit of the search that this work keeps unchanged (same grid, same picks)."""
    r = np.random.default_rng(case)
    form = ("saturating", "joint_power")[case % 2]
    law = FORMS[form]
    true = {"s_inf": r.uniform(0.4, 0.9), "c_f": r.uniform(0.05, 0.3), "c_c": r.uniform(0.05, 0.3),
            "alpha": r.uniform(0.1, 2.0), "beta": r.uniform(0.1, 2.0)}
    y = true["s_inf"] - true["c_f"] * NF ** -true["alpha"] - true["c_c"] * NC ** -true["beta"]
    y = np.clip(y + r.normal(0, (0.0, 0.01, 0.03)[case % 3], y.shape), 0.0, 1.0)
    fit = fit_scaling_law(NF, NC, y, form=form, bounds=(0.0, 1.0))
    ours = float(np.sum((fit.predict(NF, NC) - y) ** 2))
    lower, upper = np.array(law.lower, float), np.array(law.upper, float)
    lower[law.limit], upper[law.limit] = 0.0, 1.0
    starts = [np.concatenate([[y.mean()], r.uniform(0, 0.5, len(law.params) - 1 - len(law.exponents)),
                              r.uniform(0.05, 4.0, len(law.exponents))]) for _ in range(25)]
    theirs = _scipy_best_cost(form, NF, NC, y, lower, upper, starts)
    assert ours <= theirs * (1 + (1e-7 if fit.status == "ok" else 1e-4)) + 1e-14


def test_linear_leave_one_out_equals_the_hat_matrix_formula():
    y = 0.3 + 0.04 * np.log(NF) + 0.03 * np.log(NC) + 0.01 * RNG.normal(size=len(NF))
    X = np.stack([np.ones_like(NF), np.log(NF), np.log(NC)], axis=1)
    H = X @ np.linalg.pinv(X)
    e = y - H @ y
    expected = np.sqrt(np.mean((e / (1 - np.diag(H))) ** 2))  # LOO residuals of least squares
    assert leave_one_out_rmse(NF, NC, y, form="log_linear") == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("form", ["saturating", "joint_power"])
@pytest.mark.parametrize("hib", [True, False])
def test_nonlinear_leave_one_out_equals_brute_force_refits(form, hib):
    y = 0.6 - 0.15 * NF**-0.7 - 0.08 * NC**-0.4 + 0.004 * RNG.normal(size=len(NF))
    y = y if hib else 1 - y
    kw = {"form": form, "bounds": (0.0, 1.0), "higher_is_better": hib}
    full = fit_scaling_law(NF, NC, y, **kw)
    errs = []
    for i in range(len(y)):  # refit on every subset without point i, from the full fit, one at a time
        keep = np.arange(len(y)) != i
        errs.append(fit_scaling_law(NF[keep], NC[keep], y[keep], init=full.theta, **kw).predict(NF[i], NC[i]) - y[i])
    expected = float(np.sqrt(np.mean(np.square(errs))))
    assert leave_one_out_rmse(NF, NC, y, **kw) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("hib", [True, False])
def test_compare_forms_reusing_a_fit_equals_fitting_it(hib):
    y = 0.6 - 0.15 * NF**-0.7 - 0.08 * NC**-0.4 + 0.004 * RNG.normal(size=len(NF))
    kw = {"bounds": (0.0, 1.0), "higher_is_better": hib}
    fit = fit_scaling_law(NF, NC, y, **kw)
    again = compare_forms(NF, NC, y, **kw)
    reused = compare_forms(NF, NC, y, fits={"saturating": fit}, **kw)
    assert reused == again
    row = next(r for r in reused if r["form"] == "saturating")
    assert row["params"] == fit.params and row["params"] is not fit.params


def test_row_checks_raise_what_a_loop_of_checks_raises():
    nf = np.array([1.0, 1, 2, 4, 8, 8])  # points 0, 1 and 4, 5 are repeats: removing 2 or 3 leaves 3 distinct
    nc = np.array([1.0, 1, 2, 4, 8, 8])
    y = RNG.normal(size=6)
    keep = ~np.eye(6, dtype=bool)
    rows = [a[None].repeat(6, 0)[keep].reshape(6, 5) for a in (nf, nc, y)]
    for n_params in (2, 3, 4):
        try:
            for r in zip(*rows):
                check_points(*r, n_params, "f")
            expected = None
        except TooFewPoints as exc:
            expected = str(exc)
        if expected is None:
            _check_rows(*rows, n_params, "f")
        else:
            with pytest.raises(TooFewPoints) as got:
                _check_rows(*rows, n_params, "f")
            assert str(got.value) == expected
    bad = rows[2].copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        _check_rows(rows[0], rows[1], bad, 2, "f")


def test_flat_rows_equal_flat_grid():
    Y = np.stack([np.full(6, 0.4), 0.4 + 1e-12 * RNG.normal(size=6), RNG.normal(size=6),
                  np.full(6, 0.4) * (1 + np.finfo(np.float32).eps * RNG.uniform(-1, 1, 6))])
    for atol in (1e-9, 0.0):
        np.testing.assert_array_equal(_flat_rows(Y, atol), [flat_grid(y, atol=atol) for y in Y])
