"""The batched scaling-law searches equal their one-at-a-time definitions.

``_box_lstsq`` (every bound assignment solved in one batch) against scipy's ``lsq_linear``; the
batched leave-one-out and bootstrap refits against a loop of :func:`fit_scaling_law` calls.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import lsq_linear

from analysis.methods.scaling import FORMS, bootstrap_params, fit_scaling_law, leave_one_out_rmse, refit_many
from analysis.methods.scaling.solver import _box_lstsq

NF, NC = (a.ravel().astype(float) for a in np.meshgrid([1, 2, 4, 8], [1, 2, 4]))
RNG = np.random.default_rng(3)


def _law(noise=0.004, seed=0):
    r = np.random.default_rng(seed)
    return 0.6 - 0.15 * NF**-0.7 - 0.08 * NC**-0.4 + r.normal(0, noise, NF.shape)


@pytest.mark.parametrize("bounds", [((-np.inf, 0.0, 0.0), (np.inf, np.inf, np.inf)),
                                    ((0.0, 0.0, 0.0), (1.0, np.inf, np.inf)),
                                    ((0.2, -1.0, 0.0), (0.3, 1.0, 0.5))])
def test_box_lstsq_equals_scipy_lsq_linear(bounds):
    lo, hi = (np.array(b, float) for b in bounds)
    X = RNG.normal(size=(40, 12, 3))
    z = RNG.normal(size=12)
    b, cost = _box_lstsq(X, z, lo, hi)
    Z = RNG.normal(size=(40, 12))  # one target per design
    b2, cost2 = _box_lstsq(X, Z, lo, hi)
    for g in range(len(X)):
        for target, bb, cc in ((z, b[g], cost[g]), (Z[g], b2[g], cost2[g])):
            ref = lsq_linear(X[g], target, bounds=(lo, hi), method="bvls", tol=1e-14)
            assert cc == pytest.approx(2 * ref.cost, rel=1e-9, abs=1e-12)  # scipy's cost is half the SSE
            np.testing.assert_allclose(bb, ref.x, rtol=1e-6, atol=1e-8)
            assert np.all(bb >= lo) and np.all(bb <= hi)


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("hib", [True, False])
def test_batched_leave_one_out_equals_the_loop_of_refits(form, hib):
    y = _law() if hib else -_law() + 1
    kw = {"form": form, "bounds": (0.0, 1.0), "higher_is_better": hib}
    full = fit_scaling_law(NF, NC, y, **kw)
    errs = []
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        fit = fit_scaling_law(NF[keep], NC[keep], y[keep], init=full.theta, **kw)
        errs.append(float(fit.predict(NF[i], NC[i])) - y[i])
    ref = float(np.sqrt(np.mean(np.square(errs))))
    assert leave_one_out_rmse(NF, NC, y, full=full, **kw) == pytest.approx(ref, rel=1e-6)


def test_refit_many_equals_one_fit_per_row_including_flat_rows():
    Y = np.stack([_law(seed=s) for s in range(6)] + [np.full(NF.shape, 0.4)])  # the last row is flat
    full = fit_scaling_law(NF, NC, Y[0], bounds=(0.0, 1.0))
    many = refit_many(NF, NC, Y, init=full.theta, bounds=(0.0, 1.0))
    for y, got in zip(Y, many):
        ref = fit_scaling_law(NF, NC, y, init=full.theta, bounds=(0.0, 1.0))
        assert got.status == ref.status
        for p in ref.params:
            assert got.params[p] == pytest.approx(ref.params[p], rel=1e-5, abs=1e-6, nan_ok=True)
        np.testing.assert_allclose(got.predict(NF, NC), ref.predict(NF, NC), rtol=1e-7)
    assert many[-1].status == "flat"


def test_batched_bootstrap_intervals_equal_the_loop():
    y = _law()
    samples = y + RNG.normal(0, 0.01, (30, len(y)))
    ci = bootstrap_params(samples, NF, NC, scores=y, bounds=(0.0, 1.0))
    centred = samples - np.median(samples, axis=0) + y
    full = fit_scaling_law(NF, NC, y, bounds=(0.0, 1.0))
    fits = [fit_scaling_law(NF, NC, row, init=full.theta, bounds=(0.0, 1.0)) for row in centred]
    P = np.array([[f.params[p] for p in FORMS["saturating"].params] for f in fits])
    lo, hi = np.nanquantile(P, [0.025, 0.975], axis=0)
    for name, a, b in zip(FORMS["saturating"].params, lo, hi):
        assert ci[name] == pytest.approx((a, b), rel=1e-4, abs=1e-6)
    assert ci.share_ok == pytest.approx(np.mean([f.status == "ok" for f in fits]))
    assert ci.n_fitted == 30


@pytest.mark.parametrize("m", [1, 2, 3])
def test_spd_solve_equals_lapack_and_is_the_same_bits_in_any_batch(m):
    from analysis.methods.scaling.solver import _spd_solve

    R = RNG.normal(size=(200, m + 2, m))
    M = np.einsum("gpi,gpj->gij", R, R) + 1e-9 * np.eye(m)  # SPD, some badly conditioned
    M[:20] = np.einsum("gpi,gpj->gij", R[:20, :, :1].repeat(m, 2), R[:20, :, :1].repeat(m, 2)) + 1e-6 * np.eye(m)
    r = RNG.normal(size=(200, m))
    x = _spd_solve(M, r)
    ref = np.linalg.solve(M, r[..., None])[..., 0]
    cond = np.linalg.cond(M)
    # backward stable: the error relative to the solution is within a small multiple of cond · u
    err = np.linalg.norm(x - ref, axis=1) / np.linalg.norm(ref, axis=1)
    assert np.all(err <= 50 * m * cond * 2.0**-53 + 1e-15)
    # each system's answer comes from its own matrix only: alone, or in another batch, the same bits
    for g in (0, 7, 150, 199):
        np.testing.assert_array_equal(_spd_solve(M[g:g + 1], r[g:g + 1])[0], x[g])
    perm = RNG.permutation(200)
    np.testing.assert_array_equal(_spd_solve(M[perm], r[perm]), x[perm])


def test_box_solve_gives_each_design_the_same_bits_alone_and_in_a_batch():
    from analysis.methods.scaling.solver import _box_solve

    X = RNG.normal(size=(300, 9, 3))
    z = RNG.normal(size=(300, 9))
    A = np.einsum("gpi,gpj->gij", X, X)
    Xz = np.einsum("gpi,gp->gi", X, z)
    zz = np.einsum("gp,gp->g", z, z)
    lo, hi = np.array([0.0, 0.0, -np.inf]), np.array([1.0, np.inf, 0.5])
    b, cost = _box_solve(A, Xz, zz, lo, hi)
    assert np.isfinite(cost).all() and (b >= lo).all() and (b <= hi).all()
    for g in range(0, 300, 37):  # feasible and infeasible designs alike
        bg, cg = _box_solve(A[g:g + 1], Xz[g:g + 1], zz[g:g + 1], lo, hi)
        np.testing.assert_array_equal(bg[0], b[g])
        assert cg[0] == cost[g]
