"""Per-item scores between two layers: each item's own k-NN agreement, agreement on a subset with its
chance level, and each item's leave-one-out k-NN probe verdict. References are independent: scikit-learn's
``NearestNeighbors`` (cosine, brute force) for the lists, loops written here for the rest."""

import numpy as np
import pytest
from sklearn.neighbors import NearestNeighbors

from analysis.methods import item_scores
from analysis.metrics.knn import mutual_knn


def sk_lists(X, k):
    """Each row's k nearest other rows by cosine (sklearn, brute force), as sets."""
    nn = NearestNeighbors(n_neighbors=k + 1, metric="cosine", algorithm="brute").fit(X)
    _, idx = nn.kneighbors(X)
    return [set(int(j) for j in row if j != i) if i in row else set(int(j) for j in row[:k])
            for i, row in enumerate(idx)]


def data(n=60, d=8, seed=0, noise=0.5):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(n, d))
    B = A @ rng.normal(size=(d, d + 3)) + noise * rng.normal(size=(n, d + 3))
    return A, B


@pytest.mark.parametrize("k", [1, 3, 7])
def test_each_items_agreement_is_the_share_of_its_neighbours_both_layers_hold(k):
    A, B = data()
    la, lb = sk_lists(A, k), sk_lists(B, k)
    want = np.array([len(a & b) / k for a, b in zip(la, lb)])
    got = item_scores.item_agreement(A, B, k=k)
    assert got.shape == (60,) and got.dtype == np.float64
    np.testing.assert_allclose(got, want)
    # the mean over items is the mutual k-NN score of the two layers
    assert got.mean() == pytest.approx(mutual_knn(A, B, k=k))


def test_agreement_is_one_for_a_rotated_copy_and_rejects_unpaired_layers():
    A, _ = data()
    Q, _ = np.linalg.qr(np.random.default_rng(1).normal(size=(8, 8)))
    np.testing.assert_array_equal(item_scores.item_agreement(A, 2 * A @ Q, k=5), np.ones(60))
    with pytest.raises(ValueError, match="same items"):
        item_scores.item_agreement(A, A[:50], k=5)


def test_agreement_on_a_subset_searches_neighbours_inside_it_with_its_chance_level():
    A, B = data(n=80, seed=2)
    rows = np.arange(0, 80, 3)
    k = 4
    la, lb = sk_lists(A[rows], k), sk_lists(B[rows], k)
    want = np.mean([len(a & b) / k for a, b in zip(la, lb)])
    got = item_scores.subset_agreement(A, B, rows, k=k)
    assert got.value == pytest.approx(want)
    assert got.chance == pytest.approx(k / (len(rows) - 1))
    assert got.n == len(rows) and got.k == k


def test_a_subset_too_small_for_k_shrinks_k_and_says_so():
    A, B = data()
    got = item_scores.subset_agreement(A, B, [1, 2, 3], k=10)
    assert got.k == 2 and got.chance == pytest.approx(1.0)
    assert item_scores.subset_agreement(A, B, [4], k=3).value is None


def test_the_knn_probe_verdict_per_item_is_a_leave_one_out_majority_vote():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 3, size=50)
    X = rng.normal(size=(50, 6)) + 1.5 * np.eye(6)[y]
    k = 5
    lists = sk_lists(X, k)
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    want = []
    for i, nb in enumerate(lists):
        votes = np.bincount(y[list(nb)], minlength=3)
        top = np.flatnonzero(votes == votes.max())
        sums = {c: sum(Xn[i] @ Xn[j] for j in nb if y[j] == c) for c in top}
        want.append(max(top, key=lambda c: (sums[c], -c)) == y[i])
    got = item_scores.knn_probe_correct(X, y, k=k)
    assert got.dtype == bool
    np.testing.assert_array_equal(got, want)


def test_a_collapsed_layer_has_no_agreement():
    A, _ = data()
    flat = np.ones_like(A)
    assert np.isnan(item_scores.item_agreement(A, flat, k=3)).all()
    assert item_scores.subset_agreement(A, flat, range(10), k=3).value is None


def test_a_collapsed_layer_gives_no_probe_verdicts_rather_than_all_wrong():
    # every row the same point: neighbour lists are tie-breaking alone, so no item has a verdict
    y = np.array([0, 1, 0, 1, 2, 2])
    assert item_scores.knn_probe_correct(np.ones((6, 4)), y, k=2) is None
    # one distinct row is enough for neighbour lists to exist
    X = np.ones((6, 4))
    X[0, 0] = 2.0
    assert item_scores.knn_probe_correct(X, y, k=2).shape == (6,)
