"""Kendall's W carries a permutation p: how often text encoders that rank the vision models
independently (each encoder's ranking shuffled on its own) concord at least as much. References are
computed here: every joint ordering enumerated with W from scipy's Friedman statistic
(W = χ²_F / (m (n − 1))), and, for two raters without ties, from Spearman's ρ (W = (1 + ρ) / 2)."""

import itertools

import numpy as np
import pytest
from scipy import stats

from analysis.methods.paper_figures import W_EXACT_MAX, kendall_w_p, rank_agreement


def _w_friedman(X):
    n, m = X.shape
    return stats.friedmanchisquare(*X).statistic / (m * (n - 1))  # objects as groups, raters as blocks


def _brute_p(X):
    """Share of the (n!)^(m-1) orderings of columns 1.. (column 0 fixed) whose W reaches the observed."""
    n, m = X.shape
    observed = _w_friedman(X)
    hits = total = 0
    for orders in itertools.product(itertools.permutations(range(n)), repeat=m - 1):
        Y = X.copy()
        for j, o in enumerate(orders, start=1):
            Y[:, j] = X[list(o), j]
        hits += _w_friedman(Y) >= observed - 1e-12
        total += 1
    return hits / total


@pytest.mark.parametrize("X", [
    np.array([[0.1, 0.3, 0.2], [0.4, 0.2, 0.5], [0.3, 0.6, 0.1], [0.8, 0.9, 0.7]]),  # 4 models, 3 encoders
    np.array([[1.0, 2.0, 1.0], [2.0, 2.0, 3.0], [3.0, 1.0, 2.0], [4.0, 5.0, 4.0]]),  # ties in one encoder
    np.array([[0.2, 0.1], [0.5, 0.4], [0.1, 0.3], [0.9, 0.8], [0.4, 0.2]]),  # 5 models, 2 encoders
])
def test_exact_p_is_the_share_of_independent_orderings_that_concord_as_much(X):
    got = kendall_w_p(X)
    assert got["method"] == "exact permutation"
    assert got["p"] == pytest.approx(_brute_p(X), abs=1e-12)


def test_perfect_agreement_of_three_models_is_only_one_ordering_in_six():
    # the smallest case the paper-figures page shows: W = 1 means little over 3 models
    assert kendall_w_p([[0.1, 0.2], [0.5, 0.6], [0.9, 0.7]])["p"] == pytest.approx(1 / 6)


def test_many_models_are_drawn_and_agree_with_the_exact_spearman_reference():
    rng = np.random.default_rng(3)
    n = 9  # 9! = 362,880 orderings: more than W_EXACT_MAX, so drawn
    a = rng.normal(size=n)
    b = a + rng.normal(scale=1.5, size=n)
    got = kendall_w_p(np.column_stack([a, b]))
    assert got["method"] == "permutation" and got["n_perm"] == W_EXACT_MAX
    rb = stats.rankdata(b)
    perms = np.array(list(itertools.permutations(range(n))))
    rho_obs = stats.spearmanr(a, b).statistic
    ra = stats.rankdata(a)
    rho = 1 - 6 * ((ra[None, :] - rb[perms]) ** 2).sum(axis=1) / (n * (n * n - 1))
    exact = float(np.mean(rho >= rho_obs - 1e-12))  # W = (1 + ρ)/2 for two raters without ties
    se = np.sqrt(exact * (1 - exact) / W_EXACT_MAX)
    assert abs(got["p"] - exact) < 5 * se + 1e-6


def test_no_w_no_p_and_rank_agreement_carries_it():
    assert kendall_w_p([[1.0, 2.0], [2.0, 1.0]])["p"] is None  # two models: no W
    w = rank_agreement([[0.1, 0.2], [0.5, 0.6], [0.9, 0.7], [0.3, 0.1]], ["a", "b"])["w"]
    assert w["p_method"] == "exact permutation" and w["n_perm"] == 24
    assert w["p"] == pytest.approx(_brute_p(np.array([[0.1, 0.2], [0.5, 0.6], [0.9, 0.7], [0.3, 0.1]])))
