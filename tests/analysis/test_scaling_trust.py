"""Scaling fits that stay inside the metric's range and say when they mean nothing (#11.1)."""

import numpy as np
import pytest

from analysis.bootstrap import resample_indices, score_resamples
from analysis.methods.scaling import (
    STATUSES, bootstrap_params, compare_forms, fit_scaling_law, grid_score_samples, leave_one_out_rmse,
)

NF, NC = (a.ravel().astype(float) for a in np.meshgrid([1, 2, 4, 8, 16, 32, 48], [1, 2, 4, 8, 10]))
TRUE = dict(s_inf=0.62, c_f=0.25, c_c=0.13, alpha=0.8, beta=1.3)


def law(p, nf, nc, sign=1.0):
    return p["s_inf"] - sign * (p["c_f"] * nf ** -p["alpha"] + p["c_c"] * nc ** -p["beta"])


def test_recovers_known_parameters_inside_bounds():
    y = law(TRUE, NF, NC)
    fit = fit_scaling_law(NF, NC, y, bounds=(0.0, 1.0))
    assert fit.status == "ok" and fit.reason is None
    for name, value in TRUE.items():
        assert fit.params[name] == pytest.approx(value, rel=1e-4), name


def test_lower_is_better_metrics_use_the_falling_law():
    p = dict(s_inf=2.0, c_f=3.0, c_c=1.0, alpha=0.7, beta=1.1)  # e.g. a median rank falling to 2
    y = law(p, NF, NC, sign=-1.0)
    fit = fit_scaling_law(NF, NC, y, bounds=(1.0, None), higher_is_better=False)
    assert fit.status == "ok" and fit.sign == -1.0
    for name, value in p.items():
        assert fit.params[name] == pytest.approx(value, rel=1e-4), name
    np.testing.assert_allclose(fit.predict(NF, NC), y, atol=1e-9)
    assert fit.r2 == pytest.approx(1.0)


@pytest.mark.parametrize("line", [
    0.3 + 0.08 * np.log2(NF) + 0.05 * np.log2(NC),  # straight in log n, reaching 0.95
    0.2 + 0.012 * NF + 0.02 * NC,  # straight in n
])
def test_a_straight_line_is_flagged_and_s_inf_stays_in_range(line):
    fit = fit_scaling_law(NF, NC, line, bounds=(0.0, 1.0))
    assert fit.s_inf <= 1.0
    assert fit.status in ("exponent_at_bound", "s_inf_at_bound") and fit.reason
    # without bounds the optimiser runs S∞ far beyond any reachable value; the flag still fires
    free = fit_scaling_law(NF, NC, line)
    assert free.status != "ok"


def test_a_flat_grid_is_flagged_and_not_fitted():
    fit = fit_scaling_law(NF, NC, np.full(len(NF), 0.4), bounds=(0.0, 1.0))
    assert fit.status == "flat" and "no trend" in fit.reason
    assert fit.s_inf == pytest.approx(0.4) and fit.c_f == fit.c_c == 0.0
    assert np.isnan(fit.alpha) and np.isnan(fit.beta) and np.isnan(fit.r2)
    np.testing.assert_allclose(fit.predict(NF, NC), 0.4)
    # float32 rounding noise is still flat
    jitter = 0.4 * (1 + np.finfo(np.float32).eps * np.random.default_rng(0).uniform(-1, 1, len(NF)))
    assert fit_scaling_law(NF, NC, jitter).status == "flat"


def test_too_few_distinct_budgets_are_not_identifiable():
    keep = NC <= 2  # only n_c in {1, 2}: C_c and β cannot be told from S∞
    fit = fit_scaling_law(NF[keep], NC[keep], law(TRUE, NF, NC)[keep], bounds=(0.0, 1.0))
    assert fit.status == "not_identifiable" and "n_c" in fit.reason
    # noise without a trend in n_c leaves β undetermined (its Jacobian column vanishes)
    rng = np.random.default_rng(1)
    noisy = 0.5 - 0.2 * NF ** -0.9 + 0.002 * rng.normal(size=len(NF))
    assert fit_scaling_law(NF, NC, noisy, bounds=(0.0, 1.0)).status != "ok"
    assert set(STATUSES) == {"ok", "flat", "not_identifiable", "exponent_at_bound", "s_inf_at_bound"}


def test_compare_forms_names_one_best_held_out_form():
    rng = np.random.default_rng(2)
    y = 0.3 + 0.04 * np.log(NF) + 0.03 * np.log(NC) + 0.002 * rng.normal(size=len(NF))
    rows = compare_forms(NF, NC, y, bounds=(0.0, 1.0))
    assert sum(r["best"] for r in rows) == 1
    best = next(r for r in rows if r["best"])
    loo = {r["form"]: leave_one_out_rmse(NF, NC, y, form=r["form"], bounds=(0.0, 1.0)) for r in rows}
    assert best["form"] == min(loo, key=loo.get) == "log_linear"
    assert all("status" in r for r in rows)


def item_level_samples(seed, n_items=300, n_boot=40, bias=0.02):
    """Scores at each grid point are means over items of law + item noise; resampling items with
    replacement (one draw for all grid points) gives the bootstrap grids. ``bias`` shifts every
    resampled score, as k-NN scores shift on resamples (~63 % distinct items)."""
    rng = np.random.default_rng(seed)
    per_item = law(TRUE, NF, NC)[None] + 0.05 * rng.normal(size=(n_items, len(NF)))
    full = per_item.mean(axis=0)
    IX = resample_indices(n_items, n_boot, rng)
    return full, per_item[IX].mean(axis=1) + bias


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bootstrap_intervals_contain_the_estimate_on_law_generated_data(seed):
    full, samples = item_level_samples(seed)
    ci = bootstrap_params(samples, NF, NC, scores=full, bounds=(0.0, 1.0))
    est = fit_scaling_law(NF, NC, full, bounds=(0.0, 1.0))
    assert ci.estimate == est.params and ci.recentred and ci.status == est.status
    for name in TRUE:
        lo, hi = ci[name]
        assert lo <= est.params[name] <= hi, name
        assert ci.contains_estimate[name]
    assert ci.n_fitted == 40 and 0 < ci.share_ok <= 1
    assert ci.as_dict()["intervals"]["s_inf"] == list(ci["s_inf"])


def test_bootstrap_without_recentring_shows_the_resampling_bias_and_notes_bad_fits():
    full, samples = item_level_samples(0, bias=0.05)
    # without the full-data scores nothing is recentred: the biased resamples move every refit
    ci = bootstrap_params(samples, NF, NC, bounds=(0.0, 1.0))
    assert not ci.recentred
    lo, hi = ci["s_inf"]
    assert not lo <= fit_scaling_law(NF, NC, full, bounds=(0.0, 1.0)).s_inf <= hi
    # a full-data fit that is not ok is said so next to the intervals
    high = bootstrap_params(samples, NF, NC, scores=full + 0.45, bounds=(0.0, 1.0))  # S∞ would be 1.07
    assert high.status == "s_inf_at_bound" and high.estimate["s_inf"] == pytest.approx(1.0)
    assert any("full-data fit is s_inf_at_bound" in n for n in high.notes)
    assert high["s_inf"][1] <= 1.0


def test_grid_score_samples_share_one_resample_across_grid_points():
    rng = np.random.default_rng(4)
    base = rng.normal(size=(40, 6))
    points = [(base + s * rng.normal(size=base.shape), base + s * rng.normal(size=base.shape)) for s in (0.2, 0.6, 1.0)]
    out = grid_score_samples(points, "mutual_knn", n_boot=8, seed=3, k=4)
    IX = resample_indices(40, 8, np.random.default_rng(3))
    for j, (X, Y) in enumerate(points):
        np.testing.assert_array_equal(out[:, j], score_resamples("mutual_knn", X, Y, IX, k=4))


@pytest.mark.parametrize("higher", [True, False])
def test_a_stored_fit_predicts_what_the_fit_predicts(higher):
    from analysis.methods.scaling import predict_from_params

    nf, nc = np.meshgrid([1.0, 2, 4, 8], [1.0, 2, 4], indexing="ij")
    nf, nc = nf.ravel(), nc.ravel()
    truth = 0.6 - (0.2 * nf ** -0.8 + 0.1 * nc ** -1.2)
    y = truth if higher else 1.0 - truth
    for form in ("saturating", "log_linear", "joint_power"):
        fit = fit_scaling_law(nf, nc, y, form=form, higher_is_better=higher, bounds=(0.0, 1.0))
        got = predict_from_params(form, fit.params, nf, nc, higher_is_better=higher)
        np.testing.assert_allclose(got, fit.predict(nf, nc), rtol=1e-12, atol=1e-12)
