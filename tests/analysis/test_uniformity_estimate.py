"""Uniformity at large N (issue #32): exact up to UNIFORMITY_EXACT_MAX_N, above it an unbiased
estimate from seeded row subsets with its standard error, which the profiles study stores in the
layer's flag. Expected values: scipy's pdist over all pairs (the definition), never the code's own."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import pdist

from analysis.metrics import single
from analysis.metrics.single import uniformity, uniformity_report


def _pdist_uniformity(X, t=2.0) -> float:
    """The definition over all pairs i < j: scipy's pdist of the unit rows, where a zero row (no
    direction) counts as orthogonal to every row, itself and other zero rows included, so its
    squared distance is 2 (uniformity's documented convention, which pdist cannot express)."""
    X = np.asarray(X, np.float64)
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    live = norms[:, 0] > 0
    xn = np.divide(X, norms, out=np.zeros_like(X), where=norms > 0)
    n, n_live = len(X), int(live.sum())
    live_terms = np.exp(-t * pdist(xn[live], "sqeuclidean"))
    dead_pairs = n * (n - 1) // 2 - n_live * (n_live - 1) // 2
    return float(np.log((live_terms.sum() + dead_pairs * np.exp(-2 * t)) / (n * (n - 1) // 2)))


def _clusters(n, d=8, seed=0):
    """Five tight clusters of unequal size: pair terms range from ~1 (same cluster) to ~e^-8."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(5, d))
    which = rng.choice(5, size=n, p=[0.4, 0.25, 0.15, 0.12, 0.08])
    return centres[which] + 0.3 * rng.normal(size=(n, d))


@pytest.fixture
def small_sample(monkeypatch):
    monkeypatch.setattr(single, "UNIFORMITY_SAMPLE_ROWS", 120)
    monkeypatch.setattr(single, "UNIFORMITY_SAMPLE_BLOCKS", 40)


def test_exact_at_or_below_the_threshold():
    X = _clusters(300)
    rep = uniformity_report(X, max_exact_n=300)
    assert rep.exact and rep.se == 0.0 and rep.n_pairs == 300 * 299 // 2 and rep.note() is None
    assert rep.value == uniformity(X)  # the exact routine itself, bit for bit
    assert rep.value == pytest.approx(_pdist_uniformity(X), abs=1e-12)


def test_estimate_within_its_standard_error_on_a_planted_case(small_sample):
    X = _clusters(3000)
    exact = _pdist_uniformity(X)
    rep = uniformity_report(X, max_exact_n=1000)
    assert not rep.exact and rep.se > 0 and rep.n_pairs == 40 * 120 * 119 // 2
    assert abs(rep.value - exact) <= 4 * rep.se, (rep.value, exact, rep.se)
    assert "SE" in rep.note() and "sampled pairs" in rep.note()
    assert uniformity_report(X, max_exact_n=1000) == rep  # seeded: the same store, the same value


def test_standard_error_is_honest_across_seeds(small_sample, monkeypatch):
    """Over many seeds the errors divided by their stated SE have mean ≈ 0 and sd ≈ 1 (unbiased,
    and the SE neither hides nor inflates the spread)."""
    X = _clusters(2000, seed=1)
    exact = _pdist_uniformity(X)
    z = []
    for seed in range(150):
        monkeypatch.setattr(single, "UNIFORMITY_SEED", seed)
        rep = uniformity_report(X, max_exact_n=500)
        z.append((rep.value - exact) / rep.se)
    z = np.array(z)
    assert abs(z.mean()) < 0.35, z.mean()
    assert 0.7 < z.std() < 1.4, z.std()


def test_estimate_on_degenerate_layers(small_sample):
    rng = np.random.default_rng(3)
    collapsed = np.tile(rng.normal(size=8), (2000, 1))  # every pair at distance 0: exactly log 1
    rep = uniformity_report(collapsed, max_exact_n=100)
    assert rep.value == 0.0 and rep.se == 0.0 and not rep.exact
    X = _clusters(2000, seed=2)
    dup = np.vstack([X[:1000], X[:1000]])  # every item twice
    rep = uniformity_report(dup, max_exact_n=100)
    assert abs(rep.value - _pdist_uniformity(dup)) <= 4 * rep.se
    half_zero = X.copy()
    half_zero[::2] = 0.0  # zero rows count as orthogonal to everything, as in the exact form
    rep = uniformity_report(half_zero, max_exact_n=100)
    assert abs(rep.value - _pdist_uniformity(half_zero)) <= 4 * rep.se
    with pytest.raises(ValueError, match="all zeros"):
        uniformity_report(np.zeros((2000, 4)), max_exact_n=100)


def test_profiles_study_stores_the_estimate_and_its_flag(tmp_path, small_sample, monkeypatch):
    from analysis.storage.store import connect
    from analysis.studies.engine import Engine
    from analysis.studies.profiles import profile
    from precompute.synthetic_store import write_run

    monkeypatch.setattr(single, "UNIFORMITY_EXACT_MAX_N", 500)
    A = np.stack([_clusters(1500, seed=4), _clusters(1500, seed=5), np.zeros((1500, 8))]).astype(np.float32)
    path = tmp_path / "u.duckdb"
    write_run(path, "u", A, model="u", modality="video", n_frames=1)
    con = connect(path, read_only=True)
    values, flags = profile(Engine(con), "u", "uniformity", {})
    con.close()
    for layer in (0, 1):
        ref = _pdist_uniformity(A[layer].astype(np.float64))
        se = float(flags[layer].rsplit("SE ", 1)[1])
        assert abs(values[layer] - ref) <= 4 * se
    assert np.isnan(values[2]) and "zero" in flags[2] and "SE" not in flags[2]
