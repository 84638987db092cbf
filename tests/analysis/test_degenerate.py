"""Degenerate inputs: collapsed layers, duplicates, flat grids, ties, near-zero denominators (#11.3, #11.4)."""

import numpy as np
import pytest

from analysis.metrics.degenerate import (REL_TOL, duplicate_labels, flat_grid, layer_status, negligible, one_input,
                                         stack_status)
from analysis.grid import NoBestCell, best_cell
from analysis.metrics import lid, mean_ap, median_rank, recall_at_k
from analysis.metrics.single import lid_report
from analysis.methods.temporal import arrow_of_time, arrow_of_time_report

RNG = np.random.default_rng(0)


def test_layer_status_zero_constant_rank1_duplicates_and_healthy():
    zero = layer_status(np.zeros((12, 5)))
    assert zero.collapsed and zero.rank1 and zero.n_distinct == 1 and "zero" in zero.reason
    v = RNG.normal(size=16).astype(np.float32)
    # one point, perturbed at float32 rounding level: collapsed
    same = np.tile(v, (20, 1)) * (1 + np.finfo(np.float32).eps * RNG.uniform(-1, 1, (20, 16)))
    st = layer_status(same)
    assert st.collapsed and st.rank1 and st.n_distinct == 1 and st.degenerate and "collapsed" in st.reason
    # distinct multiples of one direction: not collapsed, but rank 1
    line = layer_status(np.outer(RNG.uniform(1, 3, 20), v))
    assert line.rank1 and not line.collapsed and line.n_distinct == 20 and "rank 1" in line.reason
    X = RNG.normal(size=(30, 8))
    dup = layer_status(np.vstack([X, X[:7], X[:3]]))
    assert (dup.n_distinct, dup.n_items) == (30, 40) and not dup.collapsed and not dup.rank1
    assert "10 of 40" in dup.reason
    ok = layer_status(X)
    assert ok.reason is None and not ok.degenerate and ok.n_distinct == 30
    # spread and scale by their definitions
    assert ok.spread == pytest.approx(np.sqrt(np.mean(np.sum((X - X.mean(0)) ** 2, 1))))
    assert ok.scale == pytest.approx(np.sqrt(np.mean(np.sum(X**2, 1))))


def test_duplicate_labels_match_brute_force_grouping():
    X = RNG.normal(size=(25, 6))
    src = RNG.integers(0, 25, 60)
    Y = X[src] * (1 + 1e-8 * RNG.uniform(-1, 1, (60, 6)))  # copies up to float64 jitter below tolerance
    labels = duplicate_labels(Y)
    # brute force: rows are the same item iff they came from the same source row
    for i in range(60):
        for j in range(60):
            assert (labels[i] == labels[j]) == (src[i] == src[j])
    assert labels.max() + 1 == len(np.unique(src))


def test_duplicate_labels_with_large_groups_of_exact_copies_and_near_copies():
    """Exact copies (joined before the pair search, one row standing for each run of them) and
    near copies of the same source: one label per source row, numbered by first appearance."""
    X = RNG.normal(size=(7, 5))
    src = RNG.integers(0, 7, 700)  # ~100 exact copies of each row
    Y = X[src].copy()
    jitter = RNG.random(700) < 0.2
    Y[jitter] *= 1 + 1e-8 * RNG.uniform(-1, 1, (int(jitter.sum()), 5))
    labels = duplicate_labels(Y)
    first = {}
    for s in src:
        first.setdefault(int(s), len(first))
    np.testing.assert_array_equal(labels, [first[int(s)] for s in src])


def test_stack_status_per_layer():
    A = np.stack([RNG.normal(size=(10, 4)), np.ones((10, 4)), np.zeros((10, 4))])
    out = stack_status(A)
    assert [s.collapsed for s in out] == [False, True, True]


def test_one_input_needs_every_layer_the_first_included_at_one_non_zero_point():
    L, N, d = 4, 10, 6
    point = np.broadcast_to(RNG.normal(size=(L, 1, d)), (L, N, d))  # another point per layer
    assert one_input(stack_status(point))
    cls = RNG.normal(size=(L, N, d))
    cls[0] = cls[0, :1]  # a class token before attention: layer 0 alone is one point
    assert not one_input(stack_status(cls))
    later = point.copy()
    later[0] = RNG.normal(size=(N, d))  # distinct first layer, collapsed after it
    assert not one_input(stack_status(later))
    assert not one_input(stack_status(np.zeros((L, N, d))))  # zeros say nothing of the input
    relu_zero = point.copy()
    relu_zero[2] = 0.0  # one point at the first layer, and a later layer that is zero for every item
    assert one_input(stack_status(relu_zero))
    assert not one_input(stack_status(point[:, :1]))  # one item is always one point
    assert not one_input([])


def test_flat_grid_and_negligible():
    assert flat_grid(np.full((3, 4), 0.25))
    assert flat_grid(np.full((2, 2), np.nan))
    assert flat_grid(np.array([[0.5, np.nan], [0.5, 0.5]]))
    assert not flat_grid(np.array([[0.5, 0.51]]))
    assert negligible(1e-15) and not negligible(1e-3)
    assert negligible(REL_TOL * 10, 100.0) and not negligible(REL_TOL * 10, 1.0)


def test_best_cell_never_names_a_cell_on_a_flat_grid_or_invalid_cells():
    with pytest.raises(NoBestCell, match="flat"):
        best_cell(np.full((3, 3), 0.1))  # every layer pair ties: no best
    with pytest.raises(NoBestCell, match="flat"):
        best_cell(np.full((2, 2), 1 / 3) + np.array([[0, 1e-17], [0, 0]]))
    g = np.array([[0.9, 0.2], [0.3, 0.4]])
    bad_a = np.array([True, False])  # layer 0 of A is collapsed
    assert best_cell(g, invalid=bad_a[:, None]) == (1, 1, 0.4)
    assert best_cell(g, higher_is_better=False, invalid=bad_a[:, None]) == (1, 0, 0.3)
    with pytest.raises(NoBestCell, match="valid"):
        best_cell(g, invalid=np.ones((2, 2), bool))
    assert issubclass(NoBestCell, ValueError)


def test_arrow_of_time_is_nan_on_collapsed_videos():
    v = RNG.normal(size=32)
    V = v + 1e-9 * RNG.normal(size=(50, 32))  # all videos one point up to far below float32 rounding
    R = v + 1e-9 * RNG.normal(size=(50, 32))
    assert np.isnan(arrow_of_time(V, R))
    value, reason = arrow_of_time_report(V, R)
    assert np.isnan(value) and "between videos" in reason
    W = RNG.normal(size=(50, 32))
    value, reason = arrow_of_time_report(W, W)
    assert value == pytest.approx(0.0, abs=1e-12) and reason is None


@pytest.mark.parametrize("make", [lambda: np.zeros((40, 16)), lambda: np.tile(RNG.normal(size=16), (40, 1))])
def test_ties_do_not_count_as_hits(make):
    D, R = make(), RNG.normal(size=(40, 16))
    # degenerate candidates (or all-zero queries): every candidate ties with the partner, so the
    # pessimistic rank is N (1-based) and nothing is retrieved
    for X, Y in ((R, D), (D, D)) + (((D, R),) if not D.any() else ()):
        assert recall_at_k(X, Y, k=1) == 0.0
        assert recall_at_k(X, Y, k=5) == 0.0
        assert mean_ap(X, Y) == pytest.approx(1 / 40)
        assert median_rank(X, Y) == 40.0
    assert recall_at_k(D, D, k=39) == 0.0 and recall_at_k(D, D, k=40) == 1.0


def test_partner_rank_counts_other_items_scoring_at_least_as_high():
    # hand case: query 0's partner ties with candidate 1, beats candidate 2
    X = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    Y = np.array([[1.0, 1.0], [1.0, 1.0], [-1.0, 0.0]])
    from analysis.metrics import partner_ranks

    r = partner_ranks(X, Y)
    # brute force: rank_i = #{j != i: cos(x_i, y_j) >= cos(x_i, y_i)}
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    Yn = Y / np.linalg.norm(Y, axis=1, keepdims=True)
    S = Xn @ Yn.T
    expected = [sum(S[i, j] >= S[i, i] for j in range(3) if j != i) for i in range(3)]
    np.testing.assert_array_equal(r, expected)
    assert r[0] == 1


def test_lid_uses_distinct_points_and_says_how_many():
    import skdim

    X = RNG.normal(size=(150, 4)) @ RNG.normal(size=(4, 12))
    doubled = np.vstack([X, X[:60]])
    ref = skdim.id.MLE().fit(X, n_neighbors=10).dimension_  # the estimator on the 150 distinct rows
    rep = lid_report(doubled, k=10)
    assert (rep.n_distinct, rep.n_items, rep.reason) == (150, 210, None)
    assert rep.value == pytest.approx(ref, rel=1e-12)
    assert lid(doubled, k=10) == pytest.approx(ref, rel=1e-12)
    assert 0 < lid(doubled, k=10) < 12
    assert lid(doubled, method="twonn") == pytest.approx(skdim.id.TwoNN().fit(X).dimension_, rel=1e-12)


def test_lid_nan_with_reason_when_too_few_distinct_points():
    X = RNG.normal(size=(8, 5))
    rep = lid_report(np.vstack([X] * 5), k=10)  # 40 rows, 8 distinct
    assert np.isnan(rep.value) and rep.n_distinct == 8 and "8 distinct" in rep.reason
    flat = lid_report(np.ones((40, 5)), k=10)
    assert np.isnan(flat.value) and flat.n_distinct == 1
    assert np.isnan(lid(np.zeros((30, 3)), method="twonn"))


def _tied_brute(X, k, groups=None):
    """Rows with more than k other rows (other groups) at cosine 1 (same direction), or zero."""
    n = len(X)
    g = np.arange(n) if groups is None else np.asarray(groups)
    norms = np.linalg.norm(X, axis=1)
    out = 0
    for i in range(n):
        if norms[i] == 0:
            out += 1
            continue
        same = [j for j in range(n) if g[j] != g[i] and norms[j] > 0
                and np.allclose(X[j] / norms[j], X[i] / norms[i], rtol=0, atol=1e-9)]
        out += len(same) > k
    return out


def test_tied_lists_counts_rows_whose_neighbours_are_drawn_by_ties():
    from analysis.metrics.degenerate import tied_lists

    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 4))
    X[10:17] = X[0]  # 8 rows one way: each has 7 others
    X[20:23] = 3.0 * X[1]  # parallel rows: the same direction, cosine 1
    X[30] = 0.0
    for k in (2, 6, 7):
        assert tied_lists(X, k) == _tied_brute(X, k)
    assert tied_lists(X, 6) == 8 + 1 and tied_lists(X, 7) == 1
    groups = np.arange(50)
    groups[10:14] = 0  # four of the copies are copies of item 0 in a resample: not each other's ties
    assert tied_lists(X, 2, groups) == _tied_brute(X, 2, groups)


def test_direction_classes_do_not_depend_on_the_block_size(monkeypatch):
    from analysis.metrics import degenerate
    from analysis.metrics.degenerate import direction_classes

    rng = np.random.default_rng(3)
    X = rng.normal(size=(120, 9)).astype(np.float32)
    X[10:30] = X[0]
    X[40:45] = 2.5 * X[1]
    X[50] = 0.0
    labels, zero = direction_classes(X)
    for entries in (1, 9, 100):  # one row per block, and a few rows
        monkeypatch.setattr(degenerate, "ROW_PASS_ENTRIES", entries)
        got, got_zero = direction_classes(X)
        np.testing.assert_array_equal(got, labels)
        np.testing.assert_array_equal(got_zero, zero)
    assert len(set(labels[10:30]) | {labels[0]}) == 1 and len(set(labels[40:45]) | {labels[1]}) == 1
    assert zero[50] and zero.sum() == 1


def test_knn_metrics_are_nan_where_most_lists_are_decided_by_ties_and_finite_below_half():
    from analysis.metrics import cknna, mutual_knn
    from analysis.registry import get_metric

    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 8))
    Y = np.repeat(rng.normal(size=(3, 8)), 20, axis=0)  # 3 directions, 19 others each: all tied for k = 5
    for f in (mutual_knn, cknna, get_metric("cycle_knn")):
        assert np.isnan(f(X, Y, k=5)) and np.isnan(f(Y, X, k=5))
    Y[:31] = rng.normal(size=(31, 8))  # rows 31-39 (8 others each) and 40-59 tied: 29 of 60, a measurement
    assert np.isfinite(mutual_knn(X, Y, k=5))
    Y[30] = Y[40]  # 30 of 60: half the lists are drawn by ties
    assert np.isnan(mutual_knn(X, Y, k=5))


@pytest.mark.parametrize("case", ["healthy", "half_copies", "few_copies", "zeros", "chain", "parallel"])
def test_tie_check_from_the_search_equals_the_grouping(case, monkeypatch):
    """The k-NN preparation settles the tie rule from the search's float32 cosines where it can;
    its verdict equals the one from grouping the rows, and healthy layers skip the grouping."""
    from analysis.metrics import degenerate
    from analysis.metrics.knn import tie_decided_reason
    from analysis.metrics.neighbors import knn_search

    rng = np.random.default_rng(7)
    X = rng.normal(size=(60, 8)).astype(np.float32)
    k = 5
    if case == "half_copies":
        X[:30] = X[0]  # 30 rows one way: 29 others each, > k
    elif case == "few_copies":
        X[:5] = X[0]  # 4 others each: not tied, but cosines at 1 defeat the shortcut
    elif case == "zeros":
        X[:30] = 0.0
    elif case == "chain":  # near duplicates 1e-7 apart, a chain of 12 rows
        X[:12] = X[0] + 1e-7 * np.arange(12)[:, None]
    elif case == "parallel":
        X[:40] = X[0] * rng.uniform(0.5, 2.0, size=(40, 1)).astype(np.float32)
    search = knn_search(X, k)
    want = tie_decided_reason(X, k)
    assert tie_decided_reason(X, k, None, search) == want
    assert (want is not None) == (case in ("half_copies", "zeros", "parallel"))
    if case == "healthy":
        monkeypatch.setattr(degenerate, "tied_lists", lambda *a, **kw: pytest.fail("grouped a healthy layer"))
        assert tie_decided_reason(X, k, None, search) is None


def test_direction_classes_find_every_near_copy_among_dense_projections():
    """Rows nudged by about the tolerance (some pairs within it, some just outside) among 3,000 rows,
    so that many unrelated rows lie within the projection window of each other: the classes equal the
    connected components of the brute-force "unit rows within tol" graph (scipy), so the second
    projection filter drops no close pair."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    from analysis.metrics.degenerate import REL_TOL, direction_classes

    rng = np.random.default_rng(5)
    X = rng.normal(size=(3000, 6))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    for a in range(0, 600, 3):  # triples: each nudged from the first by 0.3 to 0.9 tolerances
        for j in (1, 2):
            step = rng.normal(size=6)
            X[a + j] = X[a] + rng.uniform(0.3, 0.9) * REL_TOL * step / np.linalg.norm(step)
    labels, zero = direction_classes(X)
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    D = np.sqrt(np.maximum(0.0, ((U[:, None, :] - U[None, :, :]) ** 2).sum(-1)))
    n_ref, ref = connected_components(csr_matrix(D <= REL_TOL), directed=False)
    assert n_ref < 3000 - 200  # the nudged rows did join
    assert len(np.unique(labels)) == n_ref
    # the same partition: each reference class maps to one label and back
    assert len(set(zip(ref, labels))) == n_ref
    assert not zero.any()
