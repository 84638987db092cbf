import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from analysis import metrics as M
from analysis.bootstrap import bootstrap_ci
from analysis.registry import KINDS, REGISTRY, get_metric
from tests.helpers import planted


def test_registry_entries_are_complete():
    for name, spec in REGISTRY.items():
        assert spec.name == name
        assert spec.kind in KINDS
        assert spec.higher_is_better in (True, False, None)
        assert spec.summary
        if spec.kind != "single":
            assert spec.kernel is not None, name


def test_unknown_metric_suggests_close_names():
    with pytest.raises(ValueError, match="Did you mean 'mutual_knn'"):
        get_metric("mutual_kn")
    with pytest.raises(ValueError, match="Choices: "):
        get_metric("zzz")


def test_unknown_parameter_lists_accepted_ones():
    X, Y = planted()
    with pytest.raises(ValueError, match="its parameters are: k"):
        REGISTRY["mutual_knn"](X, Y, topk=3)


def test_bootstrap_interval_brackets_the_estimate_and_is_reproducible():
    X, Y = planted(100)
    ci = bootstrap_ci("cka", X, Y, n_boot=60, seed=1)
    assert ci.low <= ci.estimate <= ci.high
    assert ci.estimate == M.cka(X, Y)
    again = bootstrap_ci("cka", X, Y, n_boot=60, seed=1)
    np.testing.assert_array_equal(ci.samples, again.samples)
    # percentile method, recentred on the estimate: quantiles shifted by estimate - median
    lo, hi = np.quantile(ci.samples, [0.025, 0.975])
    shift = ci.estimate - np.median(ci.samples)
    assert (ci.raw_low, ci.raw_high) == (lo, hi)
    assert (ci.low, ci.high) == (pytest.approx(lo + shift), pytest.approx(min(1.0, hi + shift)))


def test_bootstrap_never_pairs_an_item_with_its_own_copy():
    # with copies allowed as neighbours, resampled mutual k-NN of unrelated spaces jumps far above
    # chance (every duplicate is a shared neighbour); grouping keeps it near chance k/(N-1)
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(200, 8)), rng.normal(size=(200, 8))
    ci = bootstrap_ci("mutual_knn", X, Y, n_boot=30, k=5)
    assert np.nanmedian(ci.samples) < 0.1
    assert ci.low <= ci.estimate <= ci.high


def test_bootstrap_resamples_pairs_together():
    # if pairs were broken, a perfectly aligned pair would drop far below 1
    X, _ = planted(80)
    ci = bootstrap_ci("cka", X, 2 * X, n_boot=30)
    assert ci.raw_low == pytest.approx(1.0)


def test_bootstrap_single_and_unpaired_and_errors():
    X, Y = planted(80)
    assert bootstrap_ci("rankme", X, n_boot=20).estimate == M.rankme(X)
    ci = bootstrap_ci("mmd", X, X[:50] + 1.0, n_boot=20)
    assert ci.low > 0  # a shifted sample is reliably different
    with pytest.raises(ValueError, match="pass Y"):
        bootstrap_ci("cka", X)
    with pytest.raises(ValueError, match="do not pass Y"):
        bootstrap_ci("rankme", X, Y)
    with pytest.raises(ValueError, match="level"):
        bootstrap_ci("cka", X, Y, level=1.5)


finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)


@settings(max_examples=40, deadline=None)
@given(arrays(np.float64, (15, 4), elements=finite), arrays(np.float64, (15, 3), elements=finite),
       st.integers(1, 6))
def test_knn_metrics_bounded_for_any_input(X, Y, k):
    from analysis.metrics.neighbors import is_collapsed

    X, Y = X + 1e-3 * np.arange(60).reshape(15, 4), Y + 1.0
    # a space whose rows are all one point has no neighbours, and one where most lists are drawn
    # by ties measures index order: their scores are NaN
    undefined = is_collapsed(X) or is_collapsed(Y) or _tie_decided_brute(X, k) or _tie_decided_brute(Y, k)
    for f in (M.mutual_knn, M.cycle_knn):
        v = f(X, Y, k=k)
        assert np.isnan(v) if undefined else 0.0 <= v <= 1.0


def _tie_decided_brute(A, k):
    """At least half the rows are zero or have more than k other rows pointing the same way: unit
    rows joined (transitively) when within ``REL_TOL`` × their RMS norm, by pairwise distances."""
    from analysis.metrics.degenerate import REL_TOL

    norms = np.linalg.norm(A, axis=1)
    U = A / np.where(norms == 0, 1.0, norms)[:, None]
    tol = REL_TOL * np.sqrt(np.mean(np.sum(U * U, axis=1)))
    n = len(A)
    label = list(range(n))
    for i in range(n):
        for j in range(n):
            if np.linalg.norm(U[i] - U[j]) <= tol:
                a, b = label[i], label[j]
                label = [a if x == b else x for x in label]
    others = np.array([label.count(label[i]) - 1 for i in range(n)])
    return 2 * int(np.count_nonzero((others > k) | (norms == 0))) >= n


@settings(max_examples=40, deadline=None)
@given(arrays(np.float64, (12, 3), elements=st.floats(-100, 100)), arrays(np.float64, (12, 5), elements=st.floats(-100, 100)))
def test_biased_linear_cka_in_unit_interval(X, Y):
    v = M.cka(X, Y)
    assert -1e-12 <= v <= 1 + 1e-12


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000))
def test_retrieval_ranks_agree_with_argsort(seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(25, 4))
    Y = X + rng.normal(size=X.shape)
    S = (X / np.linalg.norm(X, axis=1, keepdims=True)) @ (Y / np.linalg.norm(Y, axis=1, keepdims=True)).T
    order = np.argsort(-S, axis=1)
    expected = np.array([int(np.where(order[i] == i)[0][0]) for i in range(25)])
    np.testing.assert_array_equal(M.partner_ranks(X, Y), expected)
