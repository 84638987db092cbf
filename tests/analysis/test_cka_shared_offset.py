"""CKA does not depend on a vector added to every row of a representation (HSIC of a linear kernel,
biased or unbiased, and every RBF distance are translation-invariant), so a large shared offset,
common in LLM hidden states, must leave the score unchanged. The reference is the paper formula on
the data before the offset was added, centred in the test (tests/reference.py, explicit N x N
Grams), independent of the package's routes."""

import numpy as np
import pytest

from analysis.grid import layer_grid
from analysis.metrics import cka
from analysis.metrics import kernel as K
from tests.helpers import planted
from tests.reference import ref_cka, ref_hsic_biased, ref_hsic_unbiased, ref_rbf

OFFSETS = [0.0, 10.0, 1e2, 1e3, 1e4, 1e6]  # times the rows' spread (std of a coordinate)


def _shifted(n, offset, seed=0):
    X, Y = planted(n, dx=12, dy=7, noise=0.5, seed=seed)
    rng = np.random.default_rng(seed + 1)
    X0, Y0 = X - X.mean(axis=0), Y - Y.mean(axis=0)
    # one random direction per space, scaled to `offset` times the spread of a coordinate
    ox, oy = rng.normal(size=X.shape[1]), rng.normal(size=Y.shape[1])
    ox *= offset * X0.std() / np.linalg.norm(ox) * np.sqrt(X.shape[1])
    oy *= offset * Y0.std() / np.linalg.norm(oy) * np.sqrt(Y.shape[1])
    return X0, Y0, X0 + ox, Y0 + oy


@pytest.mark.parametrize("offset", OFFSETS)
@pytest.mark.parametrize("debiased", [True, False])
def test_linear_cka_with_a_shared_offset_equals_the_centred_reference(offset, debiased):
    X0, Y0, X, Y = _shifted(150, offset)
    hsic = ref_hsic_unbiased if debiased else ref_hsic_biased
    expected = ref_cka(X0 @ X0.T, Y0 @ Y0.T, hsic)
    assert 0.5 < expected < 0.99  # planted: clearly aligned, not trivially 1
    # adding a vector of size 1e6 x the spread rounds X itself at ~1e6 * 2^-53 of the spread
    assert cka(X, Y, debiased=debiased) == pytest.approx(expected, abs=1e-7)


@pytest.mark.parametrize("offset", [1e4, 1e6])
def test_debiased_cka_with_an_offset_is_right_on_the_row_block_route_and_in_a_grid(monkeypatch, offset):
    # the blocks route (N > GRAM_CACHE_MAX_N), lowered so the case stays small
    monkeypatch.setattr(K, "GRAM_CACHE_MAX_N", 64)
    X0, Y0, X, Y = _shifted(120, offset, seed=3)
    expected = ref_cka(X0 @ X0.T, Y0 @ Y0.T, ref_hsic_unbiased)
    assert cka(X, Y, debiased=True) == pytest.approx(expected, abs=1e-7)
    grid = layer_grid(np.stack([X, X0]), np.stack([Y]), metric="cka", debiased=True)
    assert grid[0, 0] == pytest.approx(expected, abs=1e-7)
    assert grid[1, 0] == pytest.approx(expected, abs=1e-7)


@pytest.mark.parametrize("offset", [1e4, 1e6])
def test_debiased_cka_with_an_offset_is_right_on_the_feature_route(monkeypatch, offset):
    monkeypatch.setattr(K, "FEATURE_CKA_MIN_N", 64)
    X0, Y0, X, Y = _shifted(120, offset, seed=4)
    expected = ref_cka(X0 @ X0.T, Y0 @ Y0.T, ref_hsic_unbiased)
    assert cka(X, Y, debiased=True) == pytest.approx(expected, abs=1e-7)


@pytest.mark.parametrize("offset", [1e4, 1e6])
def test_rbf_cka_with_an_offset_equals_the_centred_reference(offset):
    X0, Y0, X, Y = _shifted(60, offset, seed=5)
    expected = ref_cka(ref_rbf(X0), ref_rbf(Y0), ref_hsic_unbiased)
    assert cka(X, Y, kernel="rbf", debiased=True) == pytest.approx(expected, abs=1e-6)
