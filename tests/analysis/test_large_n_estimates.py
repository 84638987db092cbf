"""Profiles at large N (issue #32): uniformity exact up to UNIFORMITY_EXACT_MAX_N, above it an
unbiased estimate from seeded row subsets; LID (MLE) exact up to LID_EXACT_MAX_N distinct rows,
above it from seeded query points; each estimate's standard error stored in the layer's flag by
the profiles study. Expected values: scipy's pdist / cdist over all pairs and the estimators'
formulas (the definitions), never the code's own output; thresholds are lowered to keep N small."""

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
    from precompute.synthetic.store import write_run

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


def test_profiles_study_stores_the_lid_estimate_and_its_flag(tmp_path, lid_sample):
    from analysis.storage.store import connect
    from analysis.studies.engine import Engine
    from analysis.studies.profiles import profile
    from precompute.synthetic.store import write_run

    A = np.stack([_manifold(1500, seed=4), _manifold(400, seed=5).repeat(4, axis=0)[:1500]]).astype(np.float32)
    path = tmp_path / "l.duckdb"
    write_run(path, "l", A, model="l", modality="video", n_frames=1)
    con = connect(path, read_only=True)
    values, flags = profile(Engine(con), "l", "lid", {"k": 10})
    con.close()
    se = float(flags[0].rsplit("SE ", 1)[1])
    assert "1,500" in flags[0] and abs(values[0] - _brute_lid(A[0].astype(np.float64), 10)) <= 4 * se
    # 375 distinct rows (each 4 times), below the threshold: exact on them, noted as merged, no SE
    assert "LID on 375 distinct of 1500" in flags[1] and "SE" not in flags[1]
    assert values[1] == pytest.approx(_brute_lid(np.unique(A[1].astype(np.float64), axis=0), 10), rel=1e-9)


# LID (MLE) above LID_EXACT_MAX_N: an estimate from seeded query points, each with its exact k
# neighbours among all rows. Reference: brute-force distances (scipy cdist) and the MLE formula.

def _brute_lid(X, k):
    from scipy.spatial.distance import cdist

    D = cdist(X, X)
    np.fill_diagonal(D, np.inf)
    R = np.sort(D, axis=1)[:, :k]
    return (k - 1) * len(X) / float(np.sum(np.log(R[:, -1:] / R)))


@pytest.fixture
def lid_sample(monkeypatch):
    monkeypatch.setattr(single, "LID_EXACT_MAX_N", 500)
    monkeypatch.setattr(single, "LID_SAMPLE_QUERIES", 300)


def _manifold(n, seed=0):
    """A 3-D curved sheet in 10-D with small noise: per-point LIDs vary around 3."""
    rng = np.random.default_rng(seed)
    t = rng.uniform(-1, 1, size=(n, 3))
    X = np.hstack([t, np.sin(2 * t), t[:, :1] * t[:, 1:2], np.cos(t[:, 2:]),
                   t[:, 1:2] ** 2, t[:, 2:] ** 3])
    return X + 0.01 * rng.normal(size=X.shape)


def test_lid_exact_at_or_below_the_threshold(lid_sample):
    X = _manifold(500)
    rep = single.lid_report(X, k=10, fast=True)
    assert rep.n_queries is None and rep.se == 0.0 and rep.note() is None
    assert rep.value == pytest.approx(_brute_lid(X, 10), rel=1e-10)


def test_lid_estimate_within_its_standard_error(lid_sample):
    X = _manifold(2000)
    exact = _brute_lid(X, 10)
    rep = single.lid_report(X, k=10, fast=True)
    assert rep.n_queries == 300 and rep.se > 0 and "SE" in rep.note()
    assert abs(rep.value - exact) <= 4 * rep.se, (rep.value, exact, rep.se)
    assert single.lid_report(X, k=10, fast=True) == rep  # seeded


def test_lid_standard_error_is_honest_across_seeds(lid_sample, monkeypatch):
    X = _manifold(1500, seed=1)
    exact = _brute_lid(X, 10)
    z = []
    for seed in range(60):
        monkeypatch.setattr(single, "LID_SEED", seed)
        rep = single.lid_report(X, k=10, fast=True)
        z.append((rep.value - exact) / rep.se)
    z = np.array(z)
    # the SE omits the finite-population factor sqrt(1 - q/N) = 0.89: a little conservative
    assert abs(z.mean()) < 0.45, z.mean()
    assert 0.55 < z.std() < 1.3, z.std()


def test_lid_estimate_with_duplicates_uses_the_distinct_rows(lid_sample):
    X = _manifold(1200, seed=2)
    doubled = np.vstack([X, X[:400]])
    rep = single.lid_report(doubled, k=10, fast=True)
    assert rep.n_distinct == 1200 and rep.n_queries == 300
    assert abs(rep.value - _brute_lid(X, 10)) <= 4 * rep.se
