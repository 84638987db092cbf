"""Issue #32: biased linear CKA above FEATURE32_CKA_MIN_N by float32 block products with float64
accumulation, each cell's error proven (or the cell recomputed in float64). References: the
explicit N x N Gram formula (tests/reference.py), independent of the code; the thresholds are
lowered so the cases stay small."""

import numpy as np
import pytest

from analysis.grid import layer_grid
from analysis.metrics import cka
from analysis.metrics import kernel as K
from tests.helpers import planted
from tests.reference import ref_hsic_biased


def gram_cka(X, Y):
    X, Y = np.asarray(X, np.float64), np.asarray(Y, np.float64)
    Km, Lm = X @ X.T, Y @ Y.T
    return ref_hsic_biased(Km, Lm) / np.sqrt(ref_hsic_biased(Km, Km) * ref_hsic_biased(Lm, Lm))


@pytest.fixture
def float32_mode(monkeypatch):
    monkeypatch.setattr(K, "FEATURE_CKA_MIN_N", 100)
    monkeypatch.setattr(K, "FEATURE32_CKA_MIN_N", 100)
    monkeypatch.setattr(K, "FEATURE_CHUNK_ROWS", 53)
    monkeypatch.setattr(K, "FEATURE32_ROWS", 37)  # several uneven blocks
    monkeypatch.setattr(K, "FEATURE32_TILE", 3)  # grids span several tiles


def _bound(X, Y):
    a, b = K._CKA.prepare(X), K._CKA.prepare(Y)
    cross, e = K._feature32_cross(a, b)
    (sa, ea), (sb, eb) = K._feature32_self(a), K._feature32_self(b)
    return K.feature32_cka_bound(cross, e, sa, ea, sb, eb)


@pytest.mark.parametrize("offset", [0.0, 50.0])  # a large mean against the spread
def test_float32_cka_within_its_proven_bound_of_the_gram_formula(float32_mode, offset):
    X, Y = planted(400, dx=12, dy=7, seed=0)
    X, Y = X + offset, Y - offset
    st = K._CKA.prepare(X)
    assert st.mode == "feature" and st.float32
    Z = np.random.default_rng(3).normal(size=X.shape)  # unrelated: CKA near 0
    for A, B in ((X, Y), (X, Z), (X, X @ np.random.default_rng(1).normal(size=(12, 12)))):
        exact, got, bound = gram_cka(A, B), cka(A, B), _bound(A, B)
        assert bound <= K.CKA_FLOAT32_ATOL
        assert abs(got - exact) <= bound
        assert got == pytest.approx(exact, abs=1e-6)  # what float32 blocks give in practice


def test_float32_cka_on_a_subsample_of_a_wide_layer(float32_mode):
    """d = 96 and N = 2000 (the bound grows with the block rows, not N): the float32 value against
    the exact Gram formula on a subsample of 600 items, and against the float64 feature form."""
    rng = np.random.default_rng(7)
    latent = rng.normal(size=(2000, 6))
    X = latent @ rng.normal(size=(6, 96)) + 1.5 * rng.normal(size=(2000, 96))
    Y = latent @ rng.normal(size=(6, 96)) + 2.5 * rng.normal(size=(2000, 96))
    sub = rng.choice(2000, 600, replace=False)
    assert cka(X[sub], Y[sub]) == pytest.approx(gram_cka(X[sub], Y[sub]), abs=1e-6)
    got = cka(X, Y)
    K.FEATURE32_CKA_MIN_N = 10**9  # the float64 feature form (restored by monkeypatch)
    assert got == pytest.approx(cka(X, Y), abs=1e-6)


def test_unproven_cells_take_the_float64_form(float32_mode, monkeypatch):
    X, Y = planted(300, dx=12, dy=7, seed=1)
    monkeypatch.setattr(K, "CKA_FLOAT32_ATOL", 0.0)  # nothing can be proven: every cell float64
    got = cka(X, Y)
    monkeypatch.setattr(K, "FEATURE32_CKA_MIN_N", 10**9)
    assert got == cka(X, Y)  # bit for bit the float64 feature form
    assert got == pytest.approx(gram_cka(X, Y), rel=1e-9)


def test_float32_grid_on_degenerate_layers(float32_mode):
    """A constant layer (zero self-HSIC: CKA 0 by the kernel's convention, via the float64 form),
    duplicated items, the grid equal to the one-pair function cell by cell, diagonal 1."""
    rng = np.random.default_rng(2)
    X, _ = planted(200, dx=12, dy=7, seed=2)
    dup = np.vstack([X[:100], X[:100]])
    # a constant layer of exactly representable values: its mean is exact, its centred rows exactly 0
    A = np.stack([X, X + rng.normal(size=X.shape), dup, np.tile(np.arange(12) * 0.25, (200, 1))])
    g = layer_grid(A, metric="cka")
    np.testing.assert_array_equal(g, [[cka(a, b) for b in A] for a in A])
    np.testing.assert_array_equal(np.diag(g)[:3], 1.0)
    assert np.all(g[3] == 0.0) and np.all(g[:, 3] == 0.0)
    ref = [[gram_cka(a, b) if i != 3 and j != 3 else 0.0 for j, b in enumerate(A)] for i, a in enumerate(A)]
    np.testing.assert_allclose(g, ref, atol=1e-6)
