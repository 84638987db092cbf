"""One way to score a metric on an item resample (#11.2), and small datasets (#12.12)."""

import numpy as np
import pytest

from analysis.bootstrap import bootstrap_ci, resample_indices, score_resample, score_resamples
from analysis.metrics import mutual_knn

RNG = np.random.default_rng(3)


def brute_mutual_knn_on_resample(X, Y, ix, k):
    """Mutual k-NN on the resampled rows by its definition, with copies grouped: position q is a
    candidate neighbour of position p only if it holds another item; candidates in decreasing
    cosine, exact ties (copies of one item) broken by position, the same in both spaces (as a
    search on the resampled rows with ``groups=ix`` breaks them)."""

    def lists(A):
        An = A / np.linalg.norm(A, axis=1, keepdims=True)
        C = An @ An.T  # item-level cosines: copies of an item tie exactly
        out = []
        for p in range(len(ix)):
            cand = [q for q in range(len(ix)) if ix[q] != ix[p]]
            cand.sort(key=lambda q: (-C[ix[p], ix[q]], q))
            out.append(set(cand[:k]))
        return out

    lx, ly = lists(X), lists(Y)
    return sum(len(a & b) for a, b in zip(lx, ly)) / (k * len(ix))


@pytest.mark.parametrize("k", [1, 3, 7])
def test_mutual_knn_on_a_resample_equals_the_brute_force_definition(k):
    X = RNG.normal(size=(40, 6))
    Y = X @ RNG.normal(size=(6, 9)) + 0.7 * RNG.normal(size=(40, 9))
    for ix in resample_indices(40, 6, RNG):
        assert score_resample("mutual_knn", X, Y, ix, k=k) == pytest.approx(
            brute_mutual_knn_on_resample(X, Y, ix, k), abs=1e-12)
    # a resample without repeats is the plain metric
    perm = RNG.permutation(40)
    assert score_resample("mutual_knn", X, Y, perm, k=k) == pytest.approx(mutual_knn(X[perm], Y[perm], k=k))


def test_two_spaces_that_agree_on_items_agree_on_copies():
    # identical spaces score 1 on any resample (ties among copies are broken alike in both)
    X = RNG.normal(size=(30, 5))
    vals = score_resamples("mutual_knn", X, 2 * X, resample_indices(30, 20, RNG), k=5)
    np.testing.assert_array_equal(vals, 1.0)


def test_bootstrap_ci_uses_the_shared_resample_helper():
    X = RNG.normal(size=(60, 6))
    Y = X + 0.5 * RNG.normal(size=(60, 6))
    for metric, params in (("mutual_knn", {"k": 4}), ("cka", {}), ("cycle_knn", {"k": 3})):
        ci = bootstrap_ci(metric, X, Y, n_boot=15, seed=5, **params)
        IX = resample_indices(60, 15, np.random.default_rng(5))
        np.testing.assert_array_equal(ci.samples, score_resamples(metric, X, Y, IX, **params))
        assert ci.n_valid == 15 and ci.reason is None


def test_unrelated_spaces_stay_near_chance_on_resamples():
    # letting copies be neighbours would make every duplicate a shared neighbour
    X, Y = RNG.normal(size=(200, 8)), RNG.normal(size=(200, 8))
    vals = score_resamples("mutual_knn", X, Y, resample_indices(200, 10, RNG), k=5)
    assert np.all(vals < 0.1)


@pytest.mark.parametrize("n", [6, 12, 20])
def test_bootstrap_never_raises_on_small_datasets(n):
    X = RNG.normal(size=(n, 5))
    Y = X + 0.3 * RNG.normal(size=(n, 5))
    ci = bootstrap_ci("mutual_knn", X, Y, n_boot=30, k=min(10, n - 1))
    # resamples with at most k distinct items cannot hold k neighbours: skipped, and said so
    IX = resample_indices(n, 30, np.random.default_rng(0))
    too_few = sum(len(np.unique(ix)) <= min(10, n - 1) for ix in IX)
    assert ci.n_valid == 30 - too_few
    assert np.isnan(ci.samples).sum() == too_few
    if ci.n_valid >= 2:
        assert ci.low <= ci.high and "skipped" in ci.reason
    else:
        assert np.isnan(ci.low) and np.isnan(ci.high) and ci.reason.startswith("no interval")
    lid_ci = bootstrap_ci("lid", X, n_boot=10, k=min(20, n - 1))  # the profile's k on a small dataset
    assert lid_ci.n_valid <= 10


def test_a_duplicated_item_is_not_a_wrong_answer_for_ranking_metrics():
    # a perfect retrieval: y_i = x_i, four orthogonal items; the resample draws item 0 twice
    X = np.eye(4)
    ix = np.array([0, 0, 1, 2])
    # by hand: each query's partner (or its copy, cosine 1 as well) ranks first -> R@1 = 1, mAP = 1,
    # median rank 1; without groups, the copy of item 0 would tie its partner and be counted wrong
    assert score_resample("recall_at_k", X, X, ix, k=1) == 1.0
    assert score_resample("mean_ap", X, X, ix) == 1.0
    assert score_resample("median_rank", X, X, ix) == 1.0
    # caller's groups travel with the resample: items 1 and 2 share a label, so they are right answers too
    Y = np.array([[1.0, 0, 0, 0], [0, 1, 0, 0], [0, 1, 0, 0.01], [0, 0, 0, 1]])
    assert score_resample("recall_at_k", Y, Y, np.array([1, 2, 3, 3]), k=1, groups=[0, 1, 1, 2]) == 1.0
