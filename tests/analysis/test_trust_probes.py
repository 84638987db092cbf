"""Clamping as platonic-rep does it (#11.9), the reorder probe at one layer pair (#11.8), and the
registry's bounds and chance levels (issue 11, item 9)."""

import inspect

import numpy as np
import pytest

from analysis.metrics import mutual_knn, recall_at_k
from analysis.metrics.preprocess import clamp, clamp_outliers, platonic_threshold
from analysis.registry import BOUNDS, REGISTRY, chance_level, metric_info
from analysis.methods.temporal import reorder_alignment, reorder_at_best_pair

RNG = np.random.default_rng(7)


def platonic_remove_outliers(feats, q: float, exact: bool):
    """The rule of platonic-rep's metrics.remove_outliers, written out with torch on its own
    (N, L, D) layout (one scalar threshold for the whole tensor); ``feats`` a float tensor."""
    import torch  # here, not at the top: the other analysis tests never need torch

    if q == 1:
        return feats
    if exact:
        q_val = feats.reshape(-1).abs().sort().values[int(q * feats.numel())]
    else:
        q_val = torch.quantile(feats.abs().flatten(start_dim=1), q, dim=1).mean()
    return feats.clamp(-q_val, q_val)


@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("q", [0.95, 0.8])
def test_platonic_clamp_matches_platonic_rep_rule(exact, q):
    A = RNG.standard_t(3, size=(5, 40, 24))  # (L, N, d), heavy tails so clamping bites
    import torch

    ref = platonic_remove_outliers(torch.from_numpy(A.transpose(1, 0, 2).copy()), q, exact).numpy()
    out = clamp(A, mode="platonic", q=q, exact=exact)
    np.testing.assert_allclose(out, ref.transpose(1, 0, 2), rtol=1e-12, atol=0)
    assert (np.abs(out) < np.abs(A)).any()  # it clamped something
    # the threshold is one scalar over all layers: layer-by-layer clamping would differ
    per_layer = np.stack([clamp(a, mode="platonic", q=q, exact=exact) for a in A])
    assert not np.allclose(per_layer, out)
    assert np.max(np.abs(out)) == pytest.approx(platonic_threshold(A, q=q, exact=exact))


def test_clamp_modes_feature_and_off():
    A = RNG.standard_t(3, size=(3, 30, 6))
    np.testing.assert_array_equal(clamp(A, mode="off"), A)
    feat = clamp(A, mode="feature", q=0.9)
    for layer in range(3):
        np.testing.assert_array_equal(feat[layer], clamp_outliers(A[layer], quantile=0.9))
        for j in range(6):  # per feature: clip at that column's quantile of |x| over the items
            t = np.quantile(np.abs(A[layer][:, j]), 0.9)
            np.testing.assert_allclose(feat[layer][:, j], np.clip(A[layer][:, j], -t, t))
    np.testing.assert_array_equal(clamp(A, q=1.0), A)
    with pytest.raises(ValueError, match="mode"):
        clamp(A, mode="global")
    with pytest.raises(ValueError, match="quantile"):
        clamp(A, q=0.0)


def test_reorder_probe_has_its_own_k_and_one_layer_pair():
    assert inspect.signature(reorder_alignment).parameters["k"].default == 5
    assert inspect.signature(reorder_at_best_pair).parameters["k"].default == 5
    n = 60
    base = RNG.normal(size=(n, 8))
    V = np.stack([RNG.normal(size=(n, 8)), base + 0.1 * RNG.normal(size=(n, 8))])  # layer 1 aligns
    P = np.stack([base @ RNG.normal(size=(8, 10)), RNG.normal(size=(n, 10)), RNG.normal(size=(n, 10))])
    # the negatives align best at another text layer (2), where the positive is random
    Nn = np.stack([RNG.normal(size=(n, 10)), RNG.normal(size=(n, 10)), P[0].copy()])
    out = reorder_at_best_pair(V, P, Nn)
    # brute force: the pair is the argmax of the positive over all pairs; both scored there
    pos = np.array([[mutual_knn(v, p, k=5) for p in P] for v in V])
    a, b = np.unravel_index(np.argmax(pos), pos.shape)
    assert (out["layer_v"], out["layer_t"]) == (a, b) == (1, 0)
    one = reorder_alignment(V[a], P[b], Nn[b], k=5)
    assert (out["positive"], out["negative"], out["drop"]) == (one["positive"], one["negative"], one["drop"])
    assert out["positive"] == pytest.approx(pos[a, b])
    np.testing.assert_allclose(out["positive_grid"], pos)
    assert out["k"] == 5


def test_registry_bounds_and_chance_levels():
    assert set(BOUNDS) == set(REGISTRY)
    assert BOUNDS["mutual_knn"] == (0.0, 1.0) and BOUNDS["median_rank"][0] == 1.0
    assert chance_level("mutual_knn", 101, k=10) == pytest.approx(10 / 100)
    assert chance_level("recall_at_k", 50, k=5) == pytest.approx(0.1)
    assert chance_level("mean_ap", 4) == pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 4) / 4)
    assert chance_level("median_rank", 9) == 5.0
    assert chance_level("cka", 100) is None
    info = metric_info("mutual_knn", 101)
    assert info["bounds"] == [0.0, 1.0] and info["chance"] == pytest.approx(0.1) and info["higher_is_better"]
    # the chance level is what unrelated spaces score on average (Monte Carlo)
    n, k = 41, 4
    mk = np.mean([mutual_knn(RNG.normal(size=(n, 5)), RNG.normal(size=(n, 5)), k=k) for _ in range(300)])
    assert mk == pytest.approx(chance_level("mutual_knn", n, k=k), rel=0.1)
    rk = np.mean([recall_at_k(RNG.normal(size=(n, 5)), RNG.normal(size=(n, 5)), k=k) for _ in range(300)])
    assert rk == pytest.approx(chance_level("recall_at_k", n, k=k), rel=0.15)
