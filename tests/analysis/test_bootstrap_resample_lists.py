"""Bootstrap resamples of the k-NN kernels take neighbour lists derived from lists computed once
(``ResampleNeighbours``), equal to a search on the resampled rows; the scaling intervals reuse the
grids' resample scores. References: ``knn_search`` on ``X[ix]`` with ``groups=ix`` (the
definition the derived lists must meet), and the searched path of ``score_resamples``."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import analysis.bootstrap as B
from analysis.storage import results as R
from analysis.bootstrap import ResampleNeighbours, resample_indices, score_resamples
from analysis.metrics.neighbors import knn_search
from analysis.storage.store import connect
from analysis.studies import analyze_store
from precompute.synthetic.store import write_sweep
from tests.helpers import quiet


def _reference(X, ix, k):
    return knn_search(X[ix], k, groups=ix)


def _check_lists(X, k, IX):
    """Derived lists equal the searched ones wherever derived; returns how many fell back."""
    space = ResampleNeighbours(X, k)
    fell_back = 0
    for ix in IX:
        if len(np.unique(ix)) <= k:
            continue
        got = space.lists(ix)
        if got is None:
            fell_back += 1
            continue
        ref = _reference(X, ix, k)
        assert not ref.collapsed
        np.testing.assert_array_equal(got, ref.idx)
    return fell_back


@pytest.mark.parametrize("seed", range(4))
def test_derived_lists_equal_a_search_on_the_resampled_rows(seed):
    rng = np.random.default_rng(seed)
    n, k = 90, 7
    X = rng.normal(size=(n, 9))
    X[60:75] = X[:15]  # exact duplicates of other items: ties at s = 1
    X[80] = 0.0  # a zero row: cosine 0 to everything
    IX = resample_indices(n, 40, np.random.default_rng(seed))
    assert _check_lists(X, k, IX) == 0  # Gaussian data: every list reaches k, nothing falls back


def test_exact_ties_between_distinct_items_go_to_the_lower_position():
    """Integer rows in 2-3 dims: many distinct items share a cosine exactly (parallel rows), so the
    boundary of a list often falls inside a tie, which the walk must settle by position."""
    rng = np.random.default_rng(5)
    derived = 0
    for trial in range(25):
        n, d = int(rng.integers(15, 70)), int(rng.integers(2, 4))
        k = int(rng.integers(1, min(9, n // 3)))
        X = rng.integers(-2, 3, size=(n, d)).astype(np.float64)
        X[0] = [1.0] * d
        X[1] = [2.0] * d  # parallel to row 0: the same unit row, a different item
        IX = resample_indices(n, 12, np.random.default_rng(trial))
        usable = sum(len(np.unique(ix)) > k for ix in IX)
        derived += usable - _check_lists(X, k, IX)
    assert derived > 100  # the walk (ties included) was exercised, not only the fallback


def test_a_list_that_runs_out_is_scanned_whole(monkeypatch):
    monkeypatch.setattr(B, "RESAMPLE_LIST_FACTOR", 1)  # K = k: any absent neighbour empties a list
    rng = np.random.default_rng(2)
    n, k = 40, 4
    X = rng.normal(size=(n, 5))
    space = ResampleNeighbours(X, k)
    ix = np.array([i for i in range(n) if i != space.items[0][0]] + [0])  # item 0's nearest left out
    IX = np.concatenate([ix[None], resample_indices(n, 20, np.random.default_rng(0))])
    assert _check_lists(X, k, IX) == 0
    assert space.rows_scanned == 0  # (the check above used its own instance)
    space.lists(ix)
    assert space.rows_scanned >= 1


def test_a_zero_row_ties_everything_and_is_scanned_whole():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(50, 6))
    X[[3, 17]] = 0.0  # two zero rows: cosine 0 to every item, one tie block across the list
    space = ResampleNeighbours(X, 5)
    IX = resample_indices(50, 30, np.random.default_rng(1))
    assert _check_lists(X, 5, IX) == 0
    for ix in IX:
        space.lists(ix)
    assert space.rows_scanned > 0


def test_collapsed_space_falls_back_and_scores_nan():
    rng = np.random.default_rng(3)
    X = np.tile(rng.normal(size=(1, 5)), (30, 1))
    Y = rng.normal(size=(30, 4))
    space = ResampleNeighbours(X, 3)
    assert space.collapsed and space.lists(np.arange(30)) is None
    assert np.isnan(score_resamples("cknna", X, Y, resample_indices(30, 3, np.random.default_rng(0)), k=3)).all()


@pytest.mark.parametrize("metric", ["cknna", "cycle_knn"])
def test_resample_scores_equal_the_searched_path_bit_for_bit(metric, monkeypatch):
    rng = np.random.default_rng(7)
    n = 70
    X = rng.normal(size=(n, 8)).astype(np.float32)
    X[40:50] = X[:10]
    Y = X @ rng.normal(size=(8, 6)).astype(np.float32) + 0.4 * rng.normal(size=(n, 6)).astype(np.float32)
    IX = resample_indices(n, 25, np.random.default_rng(1))
    derived = score_resamples(metric, X, Y, IX, k=6)
    monkeypatch.setattr(B, "_derives_lists", lambda *a: False)
    searched = score_resamples(metric, X, Y, IX, k=6)
    assert np.isfinite(derived).all()
    np.testing.assert_array_equal(derived, searched)


def _scaling_payloads(path):
    con = connect(path, read_only=True)
    try:
        rows = R.read_studies(con, study="scaling")
    finally:
        con.close()
    return {r["subject"]: json.dumps(r["payload"], sort_keys=True) for r in rows}


@pytest.mark.slow  # rescoring every resample from scratch
def test_scaling_intervals_reuse_the_grids_resamples_and_equal_a_rescoring(tmp_path, monkeypatch):
    import analysis.studies.scaling as S

    sweep = tmp_path / "s.duckdb"  # 3 x 3 budgets: enough points for the law's fit
    write_sweep(sweep, video=["v1"], text=["t1"], frames=(1, 2, 4), captions=(1, 2, 4), n_items=40,
                n_layers=3, dim=12)
    other = tmp_path / "other.duckdb"
    shutil.copy(sweep, other)
    calls = []
    real = S.grid_score_samples
    monkeypatch.setattr(S, "grid_score_samples", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    analyze_store(sweep, n_boot=12, metrics=["mutual_knn", "cka", "cknna"], log=quiet)
    assert calls == []  # every interval came from the grids' samples
    reused = _scaling_payloads(sweep)
    assert reused and all("intervals" in json.loads(p) for p in reused.values())

    # the same analysis, scaling scoring its resamples itself
    real_fit = S.fit_subject
    # the scaling study hands run_tasks its module's fit_subject at call time, so it runs this one
    monkeypatch.setattr(S, "fit_subject", lambda *a, **kw: real_fit(*a[:7], known=None))
    analyze_store(other, n_boot=12, metrics=["mutual_knn", "cka", "cknna"], log=quiet)
    assert calls  # this time they were scored again
    assert _scaling_payloads(other) == reused



@pytest.mark.slow  # several seconds: whole analyses or hundreds of trials
def test_grid_intervals_equal_bootstrap_ci_computed_from_scratch(sweep):
    """The grids study hands bootstrap_ci its best cell as the estimate and scores resamples from
    derived lists: the stored interval equals bootstrap_ci's own, computed from the rows alone."""
    from analysis.bootstrap import bootstrap_ci
    from analysis.studies.engine import Engine
    from analysis.metrics.base import one_blas_thread

    analyze_store(sweep, n_boot=10, metrics=["mutual_knn", "cka", "cknna", "cycle_knn"], log=quiet)
    con = connect(sweep, read_only=True)
    try:
        rows = [r for r in R.read_grids(con) if r["ci_low"] is not None]
        engine = Engine(con)
        assert {r["metric"] for r in rows} == {"mutual_knn", "cka", "cknna", "cycle_knn"}
        for r in rows[::3]:
            # the engine scores small layers on one BLAS thread; two OpenBLAS threads may round a
            # product differently in the last bit (tests/analysis/test_jobs_same_bits.py)
            with one_blas_thread(openmp=True):
                ci = bootstrap_ci(r["metric"], engine.emb(r["run_a"])[r["best_a"]],
                                  engine.emb(r["run_b"])[r["best_b"]], n_boot=10, seed=0, **r["params"])
            assert (ci.estimate, ci.low, ci.high) == (r["best_value"], r["ci_low"], r["ci_high"]), r["metric"]
    finally:
        con.close()


def test_cosines_of_items_equal_the_cosines_of_the_resampled_rows_bitwise():
    from analysis.metrics.neighbors import cosines64, cosines64_rows, row_norms

    rng = np.random.default_rng(9)
    for X in (rng.normal(size=(80, 33)).astype(np.float32), rng.normal(size=(80, 700))):
        norms = row_norms(X)
        ix = rng.integers(0, 80, 80)
        idx = rng.integers(0, 80, (80, 7))
        ref = cosines64(X[ix], norms[ix], idx)  # the resampled rows, as the searched path has them
        np.testing.assert_array_equal(cosines64_rows(X, norms, ix, ix[idx]), ref)
        np.testing.assert_array_equal(cosines64_rows(X, norms, None, idx), cosines64(X, norms, idx))


def _searched_mutual(X, Y, ix, k):
    from analysis.registry import get_metric

    spec = get_metric("mutual_knn")
    p = spec.resolve(k=k)
    sa, sb = (spec.kernel.prepare(A[ix], groups=ix, **p) for A in (X, Y))
    return float(spec.kernel.score_block([sa], [sb], **p)[0, 0])


@pytest.mark.parametrize("seed", range(3))
def test_mutual_knn_resamples_equal_the_kernel_on_searched_lists(seed):
    """Mutual k-NN's resamples from derived lists equal the kernel scoring the lists a search finds
    on the resampled rows, bit for bit: Gaussian rows with duplicated items and a zero row, and
    integer rows whose exact ties between distinct items the lists settle by position."""
    rng = np.random.default_rng(seed)
    n = 60
    X = rng.normal(size=(n, 7))
    X[40:48] = X[:8]
    X[55] = 0.0
    Y = X @ rng.normal(size=(7, 5)) + 0.5 * rng.normal(size=(n, 5))
    Xi = rng.integers(-2, 3, size=(n, 2)).astype(np.float64)
    Yi = rng.integers(-2, 3, size=(n, 3)).astype(np.float64)
    Xi[np.abs(Xi).sum(axis=1) == 0, 0] = 1.0  # keep the integer rows off zero: ties, not zero rows
    Yi[np.abs(Yi).sum(axis=1) == 0, 0] = 1.0
    IX = resample_indices(n, 15, np.random.default_rng(seed))
    for A, B_, k in ((X, Y, 5), (Xi, Yi, 4)):
        got = score_resamples("mutual_knn", A, B_, IX, k=k)
        ref = [_searched_mutual(A, B_, ix, k) for ix in IX]
        np.testing.assert_array_equal(got, ref)
        # the integer rows share few directions: some resamples have most lists drawn by ties (NaN)
        assert np.isfinite(got).all() if A is X else np.isfinite(got).any()


def test_mutual_knn_resample_of_a_collapsed_space_is_nan():
    rng = np.random.default_rng(1)
    X = np.tile(rng.normal(size=(1, 4)), (25, 1))
    Y = rng.normal(size=(25, 4))
    assert np.isnan(score_resamples("mutual_knn", X, Y, resample_indices(25, 4, np.random.default_rng(0)), k=3)).all()


def test_a_kept_space_memoises_resamples_within_its_budget_and_scores_the_same():
    """A space the engine keeps serves every metric and best cell that bootstraps its layer: the
    same resample rows (one seed) come back, so their lists and states are memoised, up to
    ``memo_bytes``; the scores equal fresh spaces' bit for bit."""
    rng = np.random.default_rng(11)
    n, k = 60, 5
    X = rng.normal(size=(n, 6))
    X[50:55] = X[:5]
    Y = X @ rng.normal(size=(6, 4)) + 0.3 * rng.normal(size=(n, 4))
    IX = resample_indices(n, 8, np.random.default_rng(0))
    spaces = (ResampleNeighbours(X, k, memo_bytes=1 << 20), ResampleNeighbours(Y, k, memo_bytes=1 << 20))
    for metric in ("mutual_knn", "cknna", "cycle_knn", "mutual_knn"):
        kept = score_resamples(metric, X, Y, IX, spaces=spaces, k=k)
        np.testing.assert_array_equal(kept, score_resamples(metric, X, Y, IX, k=k))
    assert spaces[0].memo_hits >= 3 * len(IX)  # lists: computed once, then served
    assert 0 < spaces[0]._memo_used <= 1 << 20
    tight = ResampleNeighbours(X, k, memo_bytes=200)  # room for nothing
    score_resamples("mutual_knn", X, Y, IX, spaces=(tight, spaces[1]), k=k)
    assert tight._memo_used == 0 and tight.memo_hits == 0
    with pytest.raises(ValueError, match="k=5"):
        score_resamples("mutual_knn", X, Y, IX, spaces=spaces, k=4)


@pytest.mark.parametrize("metric", ["mutual_knn", "cknna", "cycle_knn"])
def test_resamples_of_a_tie_decided_layer_match_the_searched_path(metric, monkeypatch):
    """Resamples of a layer near the tie threshold (some resamples over it, some under) score
    what the kernels score on the searched resampled rows: NaN where most lists are drawn by ties."""
    rng = np.random.default_rng(8)
    n = 60
    X = rng.normal(size=(n, 6))
    Y = rng.normal(size=(n, 5))
    Y[:26] = Y[0]  # 26 rows one way: about half of a resample's positions are tied for k = 4
    IX = resample_indices(n, 30, np.random.default_rng(3))
    derived = score_resamples(metric, X, Y, IX, k=4)
    searched = [_searched_mutual(X, Y, ix, 4) for ix in IX] if metric == "mutual_knn" else None
    if searched is None:
        monkeypatch.setattr(B, "_derives_lists", lambda *a: False)
        searched = score_resamples(metric, X, Y, IX, k=4)
    np.testing.assert_array_equal(derived, searched)
    assert np.isnan(derived).any() and np.isfinite(derived).any()
