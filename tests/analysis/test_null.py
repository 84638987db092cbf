"""The shuffled-pairing null of a grid's best cell (analysis/null.py; issue #29, item 5).

Expected values come from the public one-pair metrics on explicitly permuted rows (a fresh neighbour
search or Gram per cell), from an independent numpy CKA, and from the null's definition: under no
shared structure its p-values are uniform, so about 5% fall at or under 0.05.
"""

from __future__ import annotations

import numpy as np
import pytest

from analysis.grid import best_cell, layer_grid, prepare_layers
from analysis.metrics.cca import svcca
from analysis.metrics.kernel import cka
from analysis.metrics.knn import cknna, mutual_knn
from analysis.null import (null_maxima, null_summary, pairing_permutations, permuted_state, selection_null)
from analysis.registry import get_metric
from tests.helpers import planted


def _states(metric, stack, **params):
    spec = get_metric(metric)
    if "k" not in spec.params:
        params.pop("k", None)
    return spec.kernel, prepare_layers(spec, stack, spec.resolve(**params))


def _stack(base, n_layers, rng, noise=0.3):
    """Layers of one model: a shared base plus per-layer noise (neighbouring cells correlate)."""
    return np.stack([base + noise * rng.normal(size=base.shape) for _ in range(n_layers)])


def _cka_reference(X, Y) -> float:
    """Linear biased CKA by its definition, ``||Xc^T Yc||² / (||Xc^T Xc|| ||Yc^T Yc||)`` (Kornblith 2019, eq. 4)."""
    Xc, Yc = X - X.mean(0), Y - Y.mean(0)
    return float(np.linalg.norm(Xc.T @ Yc) ** 2 / (np.linalg.norm(Xc.T @ Xc) * np.linalg.norm(Yc.T @ Yc)))


def test_permutations_are_permutations_and_seeded():
    P = pairing_permutations(30, 50, seed=3)
    assert P.shape == (50, 30)
    assert (np.sort(P, axis=1) == np.arange(30)).all()
    assert (P == pairing_permutations(30, 50, seed=3)).all()
    assert not (P == np.arange(30)).all(axis=1).all()


def test_grouped_permutations_stay_in_their_group_and_pool_singletons():
    groups = np.array(["a", "a", "a", "b", "b", "x", "y", "z", "c", "c"])
    P = pairing_permutations(10, 400, seed=1, groups=groups, kind="within")
    assert (np.sort(P, axis=1) == np.arange(10)).all()
    pooled = np.isin(groups, ["x", "y", "z"])
    assert (pooled[P] == pooled[None, :]).all()  # singletons only meet singletons
    grouped = ~pooled
    assert (groups[P][:, grouped] == groups[grouped][None, :]).all()  # others stay in their group
    # every member of a group reaches every position of it (uniform within the group)
    assert set(P[:, 0]) == {0, 1, 2} and set(P[:, 5]) == {5, 6, 7}


@pytest.mark.parametrize("metric", ["mutual_knn", "cknna", "cycle_knn"])
def test_relabelled_knn_state_scores_like_a_fresh_search_of_the_permuted_rows(metric):
    X, Y = planted(60, seed=2)
    perm = np.random.default_rng(0).permutation(60)
    kernel, (sx,) = _states(metric, X[None], k=5)
    _, (sy,) = _states(metric, Y[None], k=5)
    if metric == "cknna":
        sy.sim  # noqa: B018 -- the null computes the cosines before relabelling
    got = float(kernel.score_block([sx], [permuted_state(sy, perm)])[0, 0])
    ref = get_metric(metric)(X, Y[perm], k=5)  # a fresh search of the permuted rows
    assert got == pytest.approx(ref, rel=1e-12, abs=1e-15)
    assert got != pytest.approx(get_metric(metric)(X, Y, k=5))  # the pairing matters on planted data


@pytest.mark.parametrize("params", [{}, {"debiased": True}, {"kernel": "rbf"}])
def test_reindexed_gram_state_scores_like_cka_of_the_permuted_rows(params):
    X, Y = planted(50, seed=4)
    perm = np.random.default_rng(1).permutation(50)
    kernel, (sx,) = _states("cka", X[None], **params)
    _, (sy,) = _states("cka", Y[None], **params)
    got = float(kernel.score_block([sx], [permuted_state(sy, perm)])[0, 0])
    assert got == pytest.approx(cka(X, Y[perm], **params), rel=1e-10)
    if not params:
        assert got == pytest.approx(_cka_reference(X, Y[perm]), rel=1e-10)


@pytest.mark.parametrize("metric", ["mutual_knn", "cka", "cknna", "svcca"])
@pytest.mark.parametrize("layers", [(3, 2), (2, 3)])  # (2, 3): A, the side with fewer layers, is relabelled
def test_null_maxima_equal_the_brute_force_grid_maximum_of_each_shuffle(metric, layers):
    rng = np.random.default_rng(5)
    A = _stack(rng.normal(size=(30, 6)), layers[0], rng)
    B = _stack(rng.normal(size=(30, 5)), layers[1], rng)
    perms = pairing_permutations(30, 6, seed=2)
    kernel, sa = _states(metric, A, k=4)
    _, sb = _states(metric, B, k=4)
    invalid = np.zeros(layers, dtype=bool)
    invalid[1, :] = True  # a layer excluded as degenerate: never part of the maximum
    got = null_maxima(kernel, sa, sb, perms, invalid=invalid)
    fn = {"mutual_knn": mutual_knn, "cknna": cknna, "cka": lambda x, y, k: _cka_reference(x, y),
          "svcca": lambda x, y, k: svcca(x, y)}[metric]
    ref = [max(fn(A[a], B[b][p], k=4) for a in range(layers[0]) if a != 1 for b in range(layers[1])) for p in perms]
    assert got == pytest.approx(ref, rel=1e-10)


def test_identity_shuffle_gives_back_the_observed_best_cell():
    X, Y = planted(40, seed=6)
    rng = np.random.default_rng(0)
    A, B = _stack(X, 3, rng, 0.5), _stack(Y, 3, rng, 0.5)
    for metric in ("mutual_knn", "cka"):
        kernel, sa = _states(metric, A, k=5)
        _, sb = _states(metric, B, k=5)
        _, _, best = best_cell(layer_grid(A, B, metric=metric, k=5))
        assert null_maxima(kernel, sa, sb, np.arange(40)[None])[0] == pytest.approx(best, rel=1e-12)


def test_summary_counts_ties_as_reaching_and_follows_the_direction():
    m = np.array([0.1, 0.2, 0.3, 0.3, np.nan])
    s = null_summary(0.3, m)
    assert s == {"p": 3 / 6, "q95": pytest.approx(np.quantile([0.1, 0.2, 0.3, 0.3], 0.95)), "n_perm": 5,
                 "grouped": False, "kind": "plain"}
    low = null_summary(0.15, m, higher_is_better=False, grouped=True)
    assert low["p"] == 2 / 6 and low["grouped"] is True
    assert low["q95"] == pytest.approx(np.quantile([0.1, 0.2, 0.3, 0.3], 0.05))
    with pytest.raises(ValueError, match="finite"):
        null_summary(float("nan"), m)


@pytest.mark.slow  # several seconds: whole analyses or hundreds of trials
@pytest.mark.parametrize("metric", ["mutual_knn", "cka"])
def test_p_values_are_uniform_when_the_two_sides_share_no_structure(metric):
    """300 seeded trials of N = 40 items, 3 x 3 layers, each side clustered on its own (5 clusters)
    but independently of the other: the rate of p <= 0.05 must be near 0.05 (0.02-0.08: the
    binomial sd at 300 trials is 0.013). The maximum over 9 correlated cells sits well above chance
    k/(N-1), so a test against chance would reject far more often: the null must take selection in."""
    n, n_perm, trials, k = 40, 99, 300, 5
    rng = np.random.default_rng(2029)
    ps, above_chance = [], 0
    for t in range(trials):
        sides = []
        for d in (6, 5):
            centres = rng.normal(size=(5, d)) * 2.0
            sides.append(_stack(centres[rng.integers(0, 5, n)] + rng.normal(size=(n, d)), 3, rng, 0.5))
        kernel, sa = _states(metric, sides[0], k=k)
        _, sb = _states(metric, sides[1], k=k)
        _, _, best = best_cell(kernel.score_block(sa, sb))
        above_chance += best > k / (n - 1)
        ps.append(selection_null(kernel, sa, sb, best, n_perm=n_perm, seed=t)["p"])
    rate = np.mean(np.array(ps) <= 0.05)
    assert 0.02 <= rate <= 0.08, rate
    # and the p-values spread over (0, 1]: not a few values piled up
    assert 0.35 <= np.mean(np.array(ps) <= 0.5) <= 0.65
    if metric == "mutual_knn":
        assert above_chance > 0.75 * trials  # most best cells beat k/(N-1): selection + clusters, no pairing


@pytest.mark.parametrize("metric", ["mutual_knn", "cka", "cknna"])
def test_planted_structure_gets_the_smallest_p_and_beats_q95(metric):
    X, Y = planted(80, seed=7)
    rng = np.random.default_rng(1)
    A, B = _stack(X, 3, rng, 0.5), _stack(Y, 4, rng, 0.5)
    kernel, sa = _states(metric, A, k=5)
    _, sb = _states(metric, B, k=5)
    _, _, best = best_cell(kernel.score_block(sa, sb))
    got = selection_null(kernel, sa, sb, best, n_perm=200, seed=0)
    assert got["p"] == 1 / 201 and got["n_perm"] == 200 and got["grouped"] is False
    assert best > got["q95"]


def test_constant_layer_cells_are_left_out_of_every_shuffled_maximum():
    """A constant layer (collapsed: k-NN cells NaN) of B is excluded as the grid study excludes it;
    the other layers' cells make the maximum."""
    X, Y = planted(40, seed=8)
    rng = np.random.default_rng(2)
    A = _stack(X, 2, rng, 0.5)
    B = np.stack([Y, np.ones_like(Y), Y + 0.5 * rng.normal(size=Y.shape)])
    kernel, sa = _states("mutual_knn", A, k=4)
    _, sb = _states("mutual_knn", B, k=4)
    assert sb[1].undefined
    perms = pairing_permutations(40, 20, seed=0)
    got = null_maxima(kernel, sa, sb, perms, invalid=np.array([False, True, False])[None, :])
    ref = [max(mutual_knn(A[a], B[b][p], k=4) for a in (0, 1) for b in (0, 2)) for p in perms]
    assert got == pytest.approx(ref, rel=1e-12)
    # every cell excluded: no maximum at all (NaN), which counts as not reaching the observed value
    none = null_maxima(kernel, sa, sb, perms[:3], invalid=np.ones((2, 3), dtype=bool))
    assert np.isnan(none).all()
    assert null_summary(0.5, none)["p"] == 1 / 4


def test_grouped_shuffles_absorb_alignment_that_comes_from_the_groups_alone():
    """Pairs of near-duplicate items (two clips of one scene) are each other's nearest neighbour in
    both spaces, the scenes placed independently: mutual 1-NN is 1 on the groups alone. Plain
    shuffles call that far beyond chance; grouped shuffles (whole groups as blocks, the default, or
    within the groups) keep it, so p = 1."""
    rng = np.random.default_rng(3)
    n_groups = 20
    groups = np.repeat(np.arange(n_groups), 2)
    sides = [np.repeat(rng.normal(size=(n_groups, d)), 2, axis=0) + 0.01 * rng.normal(size=(2 * n_groups, d))
             for d in (6, 5)]
    kernel, sa = _states("mutual_knn", sides[0][None], k=1)
    _, sb = _states("mutual_knn", sides[1][None], k=1)
    best = float(kernel.score_block(sa, sb)[0, 0])
    assert best == 1.0
    plain = selection_null(kernel, sa, sb, best, n_perm=100, seed=0)
    grouped = selection_null(kernel, sa, sb, best, n_perm=100, seed=0, groups=groups)
    assert plain["p"] == 1 / 101 and plain["grouped"] is False
    assert grouped["p"] == 1.0 and grouped["grouped"] is True and grouped["q95"] == 1.0
    # all-singleton groups mark nothing: the shuffles are plain
    assert selection_null(kernel, sa, sb, best, n_perm=100, seed=0, groups=np.arange(40)) == plain


def test_cka_above_the_packed_n_is_skipped_with_a_reason_and_packed_states_are_not(monkeypatch):
    """Above GRAM_CACHE_MAX_N a CKA state keeps no kernel: every shuffle would redo the grid, so the
    null is refused with a reason; k-NN lists and packed Grams are shufflable."""
    from analysis.metrics import kernel as kernel_mod
    from analysis.null import unshufflable

    X = np.random.default_rng(0).normal(size=(30, 5))
    assert unshufflable(_states("cka", X[None])[1][0]) is None
    assert unshufflable(_states("mutual_knn", X[None], k=3)[1][0]) is None
    monkeypatch.setattr(kernel_mod, "GRAM_CACHE_MAX_N", 20)
    reason = unshufflable(_states("cka", X[None])[1][0])
    assert reason and "N = 30 > 20" in reason
