"""Linear CKA scored on all item resamples at once equals CKA on each resample's rows."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.bootstrap import bootstrap_ci, resample_indices, score_resamples
from analysis.metrics.kernel import cka

RNG = np.random.default_rng(11)


def _pair(n=120):
    X = RNG.normal(size=(n, 16)) + 4.0  # a large mean: the weighted formula must centre well
    Y = X[:, :8] @ RNG.normal(size=(8, 24)) + 0.5 * RNG.normal(size=(n, 24))
    return X, Y


@pytest.mark.slow  # rescoring every resample from scratch
def test_linear_cka_resamples_equal_cka_on_the_resampled_rows():
    X, Y = _pair()
    IX = resample_indices(len(X), 25, np.random.default_rng(0))
    got = score_resamples("cka", X, Y, IX)
    ref = [cka(X[ix], Y[ix]) for ix in IX]
    np.testing.assert_allclose(got, ref, rtol=1e-10)


def test_degenerate_resamples_match_the_one_pair_rules():
    X, Y = _pair(30)
    IX = np.stack([np.zeros(30, int), np.arange(30)])  # one item drawn 30 times; the full sample
    got = score_resamples("cka", X, Y, IX)
    assert np.isnan(got[0])  # too few distinct items: skipped, as for every metric
    assert got[1] == pytest.approx(cka(X, Y), rel=1e-10)
    flat = np.ones_like(Y)  # a constant side: CKA is reported 0
    assert score_resamples("cka", X, flat, IX[1:])[0] == cka(X, flat) == 0.0


@pytest.mark.slow  # rescoring every resample from scratch
def test_bootstrap_ci_for_cka_is_the_percentile_interval_of_the_resampled_values():
    X, Y = _pair()
    ci = bootstrap_ci("cka", X, Y, n_boot=40, seed=3)
    IX = resample_indices(len(X), 40, np.random.default_rng(3))
    vals = np.array([cka(X[ix], Y[ix]) for ix in IX])
    lo, hi = np.quantile(vals, [0.025, 0.975]) + (cka(X, Y) - np.median(vals))
    assert (ci.low, ci.high) == pytest.approx((lo, min(hi, 1.0)), rel=1e-9)
    debiased = score_resamples("cka", X, Y, IX[:5], debiased=True)  # other settings: one resample at a time
    np.testing.assert_allclose(debiased, [cka(X[ix], Y[ix], debiased=True) for ix in IX[:5]], rtol=1e-12)
