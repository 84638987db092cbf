"""Statistics over a handful of models say only what n supports: exact permutation p-values below
10 models (every pairing enumerated in the test, each scored by scipy), no bootstrap interval below
5 models, and no line or ranking over untrained controls alone."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from analysis.methods.downstream import correlate
from analysis.methods.paper_figures import kendall_w, line_fit


def brute_p(x, y, stat):
    obs = abs(stat(x, y))
    hits = [abs(stat(x, [y[i] for i in perm])) >= obs - 1e-12 for perm in itertools.permutations(range(len(x)))]
    return sum(hits) / math.factorial(len(x))


def pearson(a, b):
    return stats.pearsonr(a, b)[0]


def spearman(a, b):
    return stats.spearmanr(a, b)[0]


def test_rho_one_over_three_models_has_exact_p_one_third_not_zero():
    c = correlate([0.1, 0.2, 0.3], [1.0, 5.0, 9.0], n_boot=100)
    assert c.spearman_rho == pytest.approx(1.0)
    # 2 of the 3! pairings (the identity and its reverse) reach |rho| = 1
    assert c.spearman_p == pytest.approx(1 / 3)
    assert c.pearson_p == pytest.approx(brute_p([0.1, 0.2, 0.3], [1.0, 5.0, 9.0], pearson))
    assert c.p_method == "exact permutation"


@pytest.mark.parametrize("n", [4, 6, 7])
def test_exact_p_below_ten_models_equals_the_enumerated_permutation_test(n):
    rng = np.random.default_rng(n)
    x = rng.normal(size=n)
    y = x + rng.normal(scale=0.8, size=n)
    y[1] = y[0]  # a tie among the results
    c = correlate(x, y, n_boot=50)
    assert c.pearson_p == pytest.approx(brute_p(x, y, pearson), abs=1e-12)
    assert c.spearman_p == pytest.approx(brute_p(x, y, spearman), abs=1e-12)


def test_ten_models_and_more_keep_scipys_p():
    rng = np.random.default_rng(1)
    x = rng.normal(size=10)
    y = x + rng.normal(size=10)
    c = correlate(x, y, n_boot=50)
    assert c.pearson_p == pytest.approx(stats.pearsonr(x, y)[1])
    assert c.p_method == "scipy"


@pytest.mark.parametrize("n", [3, 4])
def test_no_bootstrap_interval_below_five_models(n):
    x = np.arange(n, dtype=float)
    c = correlate(x, x ** 2, n_boot=200)
    assert all(np.isnan(v) for v in (*c.r_ci, *c.rho_ci))
    assert c.ci_note == "too few models"


def test_five_models_get_a_bootstrap_interval():
    x = np.arange(5, dtype=float)
    c = correlate(x, x + np.array([0.3, -0.2, 0.1, 0.4, -0.1]), n_boot=200)
    assert np.isfinite(c.r_ci).all() and c.ci_note == ""


def test_no_line_and_no_r_through_two_points():
    fit = line_fit([0.1, 0.2], [0.3, 0.9])
    assert fit["slope"] is None and fit["r"] is None
    assert "at least 3" in fit["error"]


def test_no_kendall_w_over_two_models():
    # two models ranked by two raters always agree (W = 1) or disagree (W = 0): no evidence
    w = kendall_w([[0.1, 0.3], [0.2, 0.4]])
    assert w["w"] is None and "at least 3" in w["error"]


def test_no_line_or_ranking_over_untrained_controls_only(tmp_path):
    import duckdb

    from analysis.views import paper_figures as pf
    from tests.stores import write_paper_store

    path = tmp_path / "controls.duckdb"
    write_paper_store(path)
    with duckdb.connect(str(path)) as con:
        con.execute("UPDATE models SET random_init = true")
    with duckdb.connect(str(path), read_only=True) as con:
        fv = pf.fig7_view(con, "mine", "mutual_knn", "gemma")
        av = pf.fig11_view(con, "mine", "mutual_knn")
    assert len(fv["points"]) == 5 and not fv["points"]["in_fit"].any()  # drawn, not fitted
    assert fv["fit"]["slope"] is None and fv["fit"]["r"] is None
    assert av["agreement"]["w"]["w"] is None
    assert pf.ALL_CONTROLS in fv["notes"] and pf.ALL_CONTROLS in av["notes"]


def test_fig7s_r_over_four_models_carries_its_exact_p_and_no_interval(tmp_path):
    import duckdb

    from analysis.views import paper_figures as pf
    from tests.stores import PAPER_VISION, write_paper_store

    path = tmp_path / "paper.duckdb"
    write_paper_store(path)
    with duckdb.connect(str(path), read_only=True) as con:
        fv = pf.fig7_view(con, "mine", "mutual_knn", "gemma")
    # the four trained models at their largest n_f: x = n_c 1, y = n_c 10 (tests/stores.py)
    pts = [max(cells.items())[1] for _, control, cells in PAPER_VISION.values() if not control]
    x, y = [p[("gemma", 1)] for p in pts], [p[("gemma", 10)] for p in pts]
    assert fv["fit"]["n"] == 4
    assert fv["fit"]["p"] == pytest.approx(brute_p(x, y, pearson))  # 4! pairings, each scored by scipy
    text = pf.fig7_text(fv)
    assert f"exact permutation p = {fv['fit']['p']:.3g}" in text and "no interval below 5 models" in text


def kendall(a, b):
    return stats.kendalltau(a, b)[0]


@pytest.mark.parametrize("n", [4, 6])
def test_kendall_tau_between_two_encoders_carries_its_exact_permutation_p(n):
    from analysis.methods.paper_figures import rank_agreement

    rng = np.random.default_rng(n)
    X = np.column_stack([rng.normal(size=n), rng.normal(size=n)])
    X[1, 1] = X[0, 1]  # a tie in one encoder's scores
    (pair,) = rank_agreement(X, ["a", "b"])["pairs"]
    assert pair["p"] == pytest.approx(brute_p(X[:, 0], X[:, 1], kendall))  # n! orderings, each scored by scipy
