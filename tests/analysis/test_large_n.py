"""Issue #18, large N: CKA without N x N Grams, and the packed small-N form, against the Gram formula.

References are explicit N x N matrices (``H K H`` and the unbiased HSIC of Song et al. 2012, from
``tests/reference.py``), independent of the code under test; the large-N switch is lowered so the cases stay small.
"""

import numpy as np
import pytest

from analysis.grid import layer_grid
from analysis.metrics import cka
from analysis.metrics import kernel as K
from tests.helpers import planted
from tests.reference import ref_hsic_biased, ref_hsic_unbiased


def gram_cka(X, Y, debiased):
    X, Y = np.asarray(X, np.float64), np.asarray(Y, np.float64)
    h = ref_hsic_unbiased if debiased else ref_hsic_biased
    Km, Lm = X @ X.T, Y @ Y.T
    return h(Km, Lm) / np.sqrt(h(Km, Km) * h(Lm, Lm))


def data(n=300, seed=0, offset=0.0):
    X, Y = planted(n, dx=12, dy=7, seed=seed)
    return X + offset, Y - offset


@pytest.fixture
def feature_mode(monkeypatch):
    monkeypatch.setattr(K, "FEATURE_CKA_MIN_N", 100)
    monkeypatch.setattr(K, "FEATURE_CHUNK_ROWS", 37)  # several uneven chunks


@pytest.mark.parametrize("debiased", [False, True])
@pytest.mark.parametrize("offset", [0.0, 50.0])  # a large mean against the spread
def test_feature_space_cka_equals_the_gram_formula(feature_mode, debiased, offset):
    X, Y = data(offset=offset)
    state = K._CKA.prepare(X, debiased=debiased)
    assert state.mode == "feature" and state.upper is None  # no N x N object was built
    expected = gram_cka(X, Y, debiased)
    # tolerance: the documented bound gamma_N (2 sqrt(pq) + sqrt(p) + sqrt(q)) ~ 1e-12 here, plus the
    # reference's own rounding after centring a mean of 50 (~u64 * 50^2 / spread^2 relative)
    assert cka(X, Y, debiased=debiased) == pytest.approx(expected, rel=1e-9, abs=1e-12)
    Z = np.random.default_rng(3).normal(size=X.shape)  # unrelated: CKA near 0, the hard case for ratios
    assert cka(X, Z, debiased=debiased) == pytest.approx(gram_cka(X, Z, debiased), rel=1e-7, abs=1e-12)


def test_feature_space_keeps_float32_layers_uncopied(feature_mode):
    X, _ = data()
    X32 = X.astype(np.float32)
    state = K._CKA.prepare(X32)
    assert state.X is X32  # held by reference, widened chunk by chunk
    assert cka(X32, X32 @ np.random.default_rng(1).normal(size=(12, 12))) == pytest.approx(
        gram_cka(X32, X32.astype(np.float64) @ np.random.default_rng(1).normal(size=(12, 12)), False), rel=1e-9)


@pytest.mark.parametrize("debiased", [False, True])
def test_feature_space_grid_equals_one_pair_and_is_one_on_the_diagonal(feature_mode, debiased):
    rng = np.random.default_rng(2)
    X, _ = data(n=150)
    A = np.stack([X + l * rng.normal(size=X.shape) for l in range(3)])
    g = layer_grid(A, metric="cka", debiased=debiased)
    np.testing.assert_array_equal(g, [[cka(a, b, debiased=debiased) for b in A] for a in A])
    np.testing.assert_array_equal(np.diag(g), 1.0)
    np.testing.assert_allclose(g, [[gram_cka(a, b, debiased) for b in A] for a in A], rtol=1e-9)


@pytest.mark.parametrize("kernel", ["linear", "rbf"])
@pytest.mark.parametrize("debiased", [False, True])
def test_packed_and_block_forms_agree(monkeypatch, kernel, debiased):
    X, Y = data(n=200)
    packed = cka(X, Y, kernel=kernel, debiased=debiased)
    assert K._CKA.prepare(X, kernel=kernel, debiased=debiased).mode == "packed"
    monkeypatch.setattr(K, "GRAM_CACHE_MAX_N", 50)
    assert K._CKA.prepare(X, kernel=kernel, debiased=debiased).mode == "blocks"
    assert cka(X, Y, kernel=kernel, debiased=debiased) == pytest.approx(packed, rel=1e-12)
    if kernel == "linear":
        assert packed == pytest.approx(gram_cka(X, Y, debiased), rel=1e-10)


def test_cknna_block_scoring_is_the_same_in_any_grouping(monkeypatch):
    from analysis.metrics import cknna
    from analysis.metrics import knn as knn_mod

    rng = np.random.default_rng(4)
    X, Y = planted(90, dx=10, dy=8, seed=4)
    A = np.stack([X + l * rng.normal(size=X.shape) for l in range(3)])
    B = np.stack([Y + l * rng.normal(size=Y.shape) for l in range(4)])
    whole = layer_grid(A, B, metric="cknna", k=5)
    monkeypatch.setattr(knn_mod, "CKNNA_BLOCK_ENTRIES", 1)  # one B layer per step
    np.testing.assert_array_equal(layer_grid(A, B, metric="cknna", k=5), whole)
    assert cknna(X, X, k=5) == 1.0  # self terms run the same routine as cross terms
    np.testing.assert_array_equal(np.diag(layer_grid(A, metric="cknna", k=5)), 1.0)


@pytest.mark.parametrize("route", ["compiled", "row_blocks", "slot_tables"])
def test_cknna_large_n_routines_equal_the_dense_formula(monkeypatch, route):
    """Issue #32: CKNNA never builds an N x N kernel (its sums run over the N k listed pairs), so its
    large-N routines are the only ones; at small N each of them, forced, gives the dense
    reference (N x N cosine kernels, top-k masks, unbiased HSIC: tests.reference.ref_cknna)."""
    from analysis.metrics import cknna
    from analysis.metrics import knn as knn_mod
    from tests.reference import ref_cknna

    if route != "compiled":
        monkeypatch.setattr(knn_mod, "USE_JIT", False)
    if route == "row_blocks":  # the numpy routine used above SLOT_TABLE_MAX_N
        monkeypatch.setattr(knn_mod, "SLOT_TABLE_MAX_N", 0)
        monkeypatch.setattr(knn_mod, "CKNNA_BLOCK_ENTRIES", 1)
    rng = np.random.default_rng(21)
    X, Y = planted(150, dx=12, dy=9, seed=21)
    for A, B in ((X, Y), (X, X + 0.3 * rng.normal(size=X.shape))):
        for k in (3, 10):
            assert cknna(A, B, k=k) == pytest.approx(ref_cknna(A, B, k), rel=1e-9, abs=1e-12)
