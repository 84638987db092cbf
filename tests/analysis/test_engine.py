"""The study engine: each run prepared once, new models score only new pairs, processes give the
same numbers, the store's settings are reused, and analyze says what it computed."""

import shutil

import duckdb
import numpy as np
import pytest

from analysis.storage import results as R
from analysis.grid import layer_grid
from analysis.storage.store import load_embeddings
from analysis.studies import analyze_store
from analysis.metrics.base import one_blas_thread
from precompute.cli import main
from precompute.synthetic.store import write_sweep
from tests.helpers import SHAPE, quiet


def _tables(path):
    con = duckdb.connect(str(path), read_only=True)
    out = {
        "grids": sorted((g["result_id"], g["grid"].tolist(), g["best_a"], g["best_b"], g["best_value"], g["ci_low"],
                         g["ci_high"]) for g in R.read_grids(con)),
        "profiles": sorted((p["result_id"], p["layer_values"].tolist()) for p in R.read_profiles(con)),
        "studies": sorted((s["result_id"], repr(s["payload"])) for s in R.read_studies(con)),
    }
    con.close()
    return out


def test_each_run_is_prepared_once_per_metric_and_grids_equal_layer_grid(sweep):
    out = analyze_store(sweep, metrics=("mutual_knn", "cka"), n_boot=0, log=quiet)
    runs = 2 * 2 + 2 * 2  # 2 video + 2 text models, 2 budgets each
    # every run is on the vision x text grid for each metric: one preparation per (run, metric), no more
    assert out["preparations"] == runs * 2
    vt = 2 * 2 * 2 * 2  # vision runs x text runs
    vv = 2  # v1 x v2 at each shared n_f
    tt = 2  # t1 x t2 at each shared n_c
    assert out["computed_by_study"]["grids"] == (vt + vv + tt) * 2
    con = duckdb.connect(str(sweep), read_only=True)
    (g,) = R.read_grids(con, run_a="v1-2", run_b="t2-1", metric="cka")
    con.close()
    V = load_embeddings(sweep, model="v1", dataset="synthetic", n_frames=2)
    T = load_embeddings(sweep, model="t2", dataset="synthetic", n_captions=1)
    # the engine scores small layers on one BLAS thread; OpenBLAS on two threads may round the same
    # product differently (tests/analysis/test_jobs_same_bits.py), so the reference uses one too
    with one_blas_thread(openmp=True):
        np.testing.assert_array_equal(g["grid"], layer_grid(V, T, metric="cka"))


def test_adding_a_model_scores_only_its_new_pairs(sweep):
    analyze_store(sweep, metrics=("mutual_knn",), n_boot=0, log=quiet)
    write_sweep(sweep, video=["v1", "v2"], text=["t1", "t2", "t3"], **SHAPE)  # adds t3 only
    out = analyze_store(sweep, log=quiet)
    # t3's 2 runs x the 4 vision runs, and t3 x t1, t3 x t2 at each of the 2 shared n_c
    assert out["computed_by_study"]["grids"] == 2 * 2 * 2 + 2 * 2
    assert out["reused_by_study"]["grids"] == 2 * 2 * 2 * 2 + 2 + 2
    assert out["computed_by_study"]["profiles"] == 2 * 3  # t3's runs only
    # each run prepared at most once: t3's runs and the 4 vision runs for the new vision x text grids,
    # and the old text models' 4 runs for the new text x text grids (the model map reuses those)
    assert out["preparations"] == 2 + 4 + 4


@pytest.mark.slow  # starts a pool of worker processes
def test_worker_processes_give_the_same_numbers(sweep, tmp_path):
    other = tmp_path / "copy.duckdb"
    shutil.copy(sweep, other)
    analyze_store(sweep, metrics=("mutual_knn", "cknna"), n_boot=4, jobs=1, log=quiet)
    out = analyze_store(other, metrics=("mutual_knn", "cknna"), n_boot=4, jobs=2, log=quiet)
    assert out["computed"] > 0
    # the workers' preparations are counted: mutual k-NN and CKNNA share one neighbour-list state per
    # run, which each of the 2 workers prepares at most once
    assert 8 <= out["preparations"] <= 2 * 8
    assert _tables(sweep) == _tables(other)


def test_the_store_settings_are_reused_when_none_are_given(sweep):
    analyze_store(sweep, k=5, metrics=("mutual_knn",), n_boot=0, log=quiet)
    again = analyze_store(sweep, log=quiet)
    assert again["settings"] == {"k": 5, "metrics": ["mutual_knn"], "references": [], "n_boot": 0, "seed": 0,
                                 "clamp": "off", "reorder_k": 5, "downstream_setting": "paper", "maps": 24,
                                 "knn": "exact", "n_null": 200, "null_metrics": ["mutual_knn"], "null_budgets": "largest",
                                 "labels": [], "probes": ["knn", "kmeans"], "probe_budgets": "largest"}
    assert again["computed"] == 0 and again["skipped"] > 0
    changed = analyze_store(sweep, k=3, log=quiet)
    assert changed["settings"]["k"] == 3 and changed["computed_by_study"]["grids"] > 0


def test_analyze_prints_what_it_computed_and_reused(sweep, capsys):
    assert main(["analyze", "--store", str(sweep), "--metric", "mutual_knn", "--bootstrap", "0", "--quiet",
                 "--jobs", "1"]) == 0
    assert main(["analyze", "--store", str(sweep), "--quiet"]) == 0
    out = capsys.readouterr().out.splitlines()
    grids_line = [line for line in out if line.strip().startswith("grids")][-1]
    assert grids_line.split() == ["grids", "0", "computed", str(16 + 2 + 2), "reused"]  # vt + vv + tt
    assert "bootstrap=0" in out[-1] and "metrics=mutual_knn" in out[-1]


@pytest.mark.parametrize("bad, flag", [(["--bootstrap", "-5"], "--bootstrap"), (["--jobs", "0"], "--jobs"),
                                       (["--k", "0"], "--k")])
def test_bad_settings_are_refused_naming_the_flag(sweep, bad, flag, capsys):
    with pytest.raises(SystemExit) as exit_:  # argparse's usage error: exit status 2
        main(["analyze", "--store", str(sweep), "--quiet", *bad])
    assert exit_.value.code == 2
    assert flag in capsys.readouterr().err


def test_a_newer_run_of_the_same_setting_supersedes_the_older(sweep):
    from analysis.storage.store import connect, find_run

    T = load_embeddings(sweep, model="t1", dataset="synthetic", n_captions=1)
    from precompute.synthetic.store import write_run

    write_run(sweep, "t1-1-v2", T[::-1].copy(), model="t1", modality="text", n_captions=1)  # another protocol
    out = analyze_store(sweep, metrics=("mutual_knn",), n_boot=0, log=quiet)
    assert any("t1-1 " in n and "superseded" in n for n in out["notes"])
    con = duckdb.connect(str(sweep), read_only=True)
    runs_b = {g["run_b"] for g in R.read_grids(con, model_b="t1", n_captions=1)}
    con.close()
    assert runs_b == {"t1-1-v2"}
    con = connect(sweep)
    assert find_run(con, model="t1", dataset="synthetic", n_captions=1)["run_id"] == "t1-1-v2"
    con.close()


def test_text_runs_beyond_the_memory_budget_are_walked_in_blocks(sweep):
    from analysis.studies import grids
    from analysis.studies.context import DatasetRuns
    from analysis.studies.engine import Engine

    con = duckdb.connect(str(sweep), read_only=True)
    runs = R.rows(con, "SELECT * FROM runs ORDER BY model, run_id")
    d = DatasetRuns("synthetic", runs, 40)
    one = 4 * 40 * (12 * 8 + 64 * 8 + 40 * 8)  # the estimate of one run's prepared states (kernel kept)
    eng = Engine(con, state_budget=2 * (2 * one))  # half the budget holds two text runs
    blocks = eng.blocks(d.text)
    assert [len(b) for b in blocks] == [2, 2]
    order = [(a["run_id"], b["run_id"]) for kind, a, b, m in grids.pair_list(d, ["mutual_knn"], eng.blocks)
             if kind == "vision_text"]
    # every vision run meets the first block's text runs before any vision run meets the second block
    first = {r["run_id"] for r in blocks[0]}
    assert {b for _, b in order[:8]} == first and not {b for _, b in order[8:]} & first
    assert sorted(order) == sorted((a["run_id"], b["run_id"]) for a in d.vision for b in d.text)
    con.close()


def test_knn_metrics_share_one_prepared_state_per_run(sweep):
    """mutual k-NN and CKNNA prepare the same neighbour lists: once per run, not once per metric,
    and the grids still equal layer_grid's for each metric."""
    out = analyze_store(sweep, metrics=("mutual_knn", "cknna"), n_boot=0, log=quiet)
    assert out["preparations"] == 8  # 8 runs, one shared k-NN state each
    con = duckdb.connect(str(sweep), read_only=True)
    V = load_embeddings(sweep, model="v2", dataset="synthetic", n_frames=1)
    T = load_embeddings(sweep, model="t1", dataset="synthetic", n_captions=2)
    for metric in ("mutual_knn", "cknna"):
        (g,) = R.read_grids(con, run_a="v2-1", run_b="t1-2", metric=metric)
        np.testing.assert_array_equal(g["grid"], layer_grid(V, T, metric=metric))
    con.close()


@pytest.mark.slow  # several seconds: whole analyses or hundreds of trials
def test_the_grid_memo_is_bounded_and_mutual_knn_still_takes_cknna_counts(sweep, tmp_path, monkeypatch):
    """Scored grids are memoised in a small LRU, not kept for the whole analysis; with room for two
    4×4 grids every mutual k-NN grid still comes from CKNNA's counts (the pair order asks for it in
    the task after its CKNNA grid), and the stored numbers equal those of the default budget."""
    from analysis.studies import context
    from analysis.studies.engine import Engine

    reference = tmp_path / "reference.duckdb"
    shutil.copy(sweep, reference)
    unbounded = analyze_store(reference, metrics=("mutual_knn", "cknna"), n_boot=0, log=quiet)
    engines = []

    def small_memo(con, **kw):
        engines.append(Engine(con, grid_budget=2 * (4 * 4 * 8 + 200), **kw))
        return engines[-1]

    monkeypatch.setattr(context, "Engine", small_memo)
    out = analyze_store(sweep, metrics=("mutual_knn", "cknna"), n_boot=0, log=quiet)
    pairs = out["computed_by_study"]["grids"] // 2  # each pair's mutual k-NN and CKNNA grid
    # CKNNA's grids (the model map's text × text cell is a grids-study pair, read back): mutual k-NN's
    # came from CKNNA's counts, as with an unbounded memo
    assert out["grids_scored"] == unbounded["grids_scored"] == pairs
    (eng,) = engines
    assert len(eng._grids.items) == 2 and eng._grids.used <= eng._grids.budget
    assert _tables(sweep) == _tables(reference)


@pytest.mark.slow  # several seconds: whole analyses or hundreds of trials
def test_grid_rows_are_cached_without_their_grids_and_read_back_equal(sweep, tmp_path, monkeypatch):
    """The analysis keeps its grid rows in memory without their grids (a grid LRU of
    ``Context.GRID_BYTES``); with room for one grid, the studies that read grids (model map,
    predictors, layer choice, ...) read them back from the store and store what a default
    analysis stores."""
    from analysis import studies
    from analysis.studies.context import Context

    reference = tmp_path / "reference.duckdb"
    shutil.copy(sweep, reference)
    analyze_store(reference, n_boot=0, log=quiet)
    contexts = []

    def capture(*a, **kw):
        contexts.append(Context(*a, **kw))
        return contexts[-1]

    monkeypatch.setattr(studies, "Context", capture)
    monkeypatch.setattr(Context, "GRID_BYTES", 1)
    analyze_store(sweep, n_boot=0, log=quiet)
    (ctx,) = contexts
    rows = ctx._rows["result_grids"].values()
    assert len(rows) == 3 * (2 * 2 * 2 * 2 + 2 + 2) and not any("grid" in r for r in rows)
    assert len(ctx._grids.items) == 1
    assert _tables(sweep) == _tables(reference)


def test_stored_profiles_equal_the_reference_definitions(sweep):
    """RankMe (Gram eigenvalues) and LID (exact k-NN MLE) in result_profiles equal the SVD's RankMe
    and scikit-dimension's MLE on every layer of every run."""
    import skdim

    from analysis.metrics.single import RANKME_RTOL, rankme

    analyze_store(sweep, metrics=("mutual_knn",), n_boot=0, log=quiet)
    con = duckdb.connect(str(sweep), read_only=True)
    rows = {(p["run_id"], p["metric"]): p["layer_values"] for p in R.read_profiles(con)}
    con.close()
    for model, kw in (("v1", {"n_frames": 2}), ("t2", {"n_captions": 1})):
        A = load_embeddings(sweep, model=model, dataset="synthetic", **kw)
        run = f"{model}-{2 if model == 'v1' else 1}"
        np.testing.assert_allclose(rows[(run, "rankme")], [rankme(a) for a in A], rtol=RANKME_RTOL)
        ref = [skdim.id.MLE().fit(np.asarray(a, np.float64), n_neighbors=20).dimension_ for a in A]
        np.testing.assert_allclose(rows[(run, "lid")], ref, rtol=1e-10)


def test_state_budget_counts_what_states_build_on_first_use(sweep):
    """A CKA layer (N <= 1024) holds its kernel's diagonal and strict upper triangle, built at
    preparation, and a k-NN layer gains CKNNA's (N, k) cosines and reciprocal slots on first use:
    the LRU counts them when the state is stored. The layer rows a k-NN state keeps by reference
    are the run's embeddings (the embedding cache's): not counted again."""
    from analysis.storage.store import connect
    from analysis.studies.engine import Engine

    con = connect(sweep, read_only=True)
    eng = Engine(con)
    L, N, d, k = SHAPE["n_layers"], SHAPE["n_items"], SHAPE["dim"], 10
    eng.states("v1-1", "cka")
    eng.states("v1-1", "cknna", k=k)
    sizes = sorted(eng._states.sizes.values())
    con.close()
    cka = L * (N * 8 + N * (N - 1) // 2 * 8)  # packed kernel: float64 diagonal + strict upper triangle
    knn = L * (N * k * 8 + N * 8 + 2 * N * k * 8)  # idx, norms, sim + recip (the float32 rows: borrowed)
    assert sorted([cka, knn]) == sizes
    assert d  # the rows left out are L * N * d * 4 bytes of the run's own array


def test_an_evicted_run_still_held_by_states_is_reused_not_loaded_again(sweep, monkeypatch):
    """With room for one run, a pair's first run is evicted while the second is prepared; its states
    still hold its layers, so asking for its embeddings again returns that array (no second copy
    in memory, no second load), and its states stay cached (their own arrays fit the budget)."""
    from analysis.storage.store import connect
    from analysis.studies import engine as engine_mod
    from analysis.studies.engine import Engine

    loads = []
    real = engine_mod.load_run
    monkeypatch.setattr(engine_mod, "load_run", lambda con, rid: loads.append(rid) or real(con, rid))
    con = connect(sweep, read_only=True)
    N, d, L = SHAPE["n_items"], SHAPE["dim"], SHAPE["n_layers"]
    eng = Engine(con, emb_budget=L * N * d * 4)  # one run's float32 embeddings
    first = eng.emb("v1-1")
    sa = eng.states("v1-1", "mutual_knn", k=5)
    eng.states("t1-1", "mutual_knn", k=5)  # evicts v1-1's embeddings from the cache
    assert "v1-1" not in eng._emb
    assert eng.emb("v1-1") is first and loads == ["v1-1", "t1-1"]
    assert eng.states("v1-1", "mutual_knn", k=5) is sa  # not prepared again
    del first, sa
    con.close()


def test_prefetched_cka_grids_equal_one_pair_grids(sweep):
    """Scoring a run against several partners in one CKA call gives each grid bit for bit."""
    from analysis.storage.store import connect
    from analysis.studies.engine import Engine

    con = connect(sweep, read_only=True)
    eng = Engine(con)
    eng.PREFETCH_LAYERS = 6  # groups of 2 partner runs (4 layers each): several calls
    partners = ["t1-1", "t1-2", "t2-1", "t2-2", "v2-1"]
    eng.prefetch_grids("v1-1", partners, "cka")
    assert eng.counters.grids_scored == len(partners)
    ref = Engine(con)
    for b in partners:
        np.testing.assert_array_equal(eng.grid("v1-1", b, "cka"), ref.grid("v1-1", b, "cka"))
    assert eng.counters.grids_scored == len(partners)  # every grid came from the prefetch
    con.close()


def test_profiles_on_degenerate_layers_equal_the_references(tmp_path):
    """The profiles study's per-layer values on a healthy layer, duplicated rows (LID on the distinct
    rows, or NaN with the reason when fewer than k + 1 remain: N close to k), a collapsed and a rank-1
    layer: RankMe the SVD's (and bitwise rankme_fast's own, though it reuses the status's Gram
    eigenvalues), uniformity a naive double loop's, LID scikit-dimension's."""
    import skdim

    from analysis.metrics.single import RANKME_RTOL, rankme, rankme_fast
    from analysis.storage.store import connect
    from analysis.studies.engine import Engine
    from analysis.studies.profiles import params_for, profile
    from precompute.synthetic.store import write_run

    rng = np.random.default_rng(5)
    n, d = 24, 6
    healthy = rng.normal(size=(n, d))
    dup2, dup4 = healthy.copy(), healthy.copy()
    dup2[[20, 21]] = healthy[[0, 1]]  # 22 distinct rows: LID on them
    dup4[20:] = healthy[:4]  # 20 distinct: fewer than k + 1 = 21
    collapsed = np.tile(rng.normal(size=d), (n, 1))
    rank1 = np.outer(rng.uniform(0.5, 3, n), rng.normal(size=d))
    A = np.stack([healthy, dup2, dup4, collapsed, rank1]).astype(np.float32)
    path = tmp_path / "deg.duckdb"
    write_run(path, "deg", A, model="deg", modality="video", n_frames=1)
    con = connect(path, read_only=True)
    eng = Engine(con)
    out = {m: profile(eng, "deg", m, params_for(m, n)) for m in ("rankme", "lid", "uniformity")}
    # RankMe used the statuses' Gram eigenvalues; the memoised statuses no longer hold them
    assert [st.spectrum for st in eng.status("deg")] == [None] * 5
    con.close()
    X = A.astype(np.float64)
    rk, _ = out["rankme"]
    np.testing.assert_allclose(rk, [rankme(x) for x in X], rtol=RANKME_RTOL)
    np.testing.assert_array_equal(rk, [rankme_fast(x) for x in X])
    un, flags = out["uniformity"]
    for value, x in zip(un, X):
        xn = x / np.linalg.norm(x, axis=1, keepdims=True)
        ref = np.log(np.mean([np.exp(-2 * np.sum((xn[i] - xn[j]) ** 2)) for i in range(n) for j in range(n) if i != j]))
        assert value == pytest.approx(ref, rel=1e-12, abs=1e-13)
    assert "collapsed" in flags[3] and "rank 1" in flags[4] and 0 not in flags
    lid, lflags = out["lid"]
    k = params_for("lid", n)["k"]
    assert k == 20
    assert lid[0] == pytest.approx(skdim.id.MLE().fit(X[0], n_neighbors=k).dimension_, rel=1e-10)
    distinct = np.delete(X[1], [20, 21], axis=0)
    assert lid[1] == pytest.approx(skdim.id.MLE().fit(distinct, n_neighbors=k).dimension_, rel=1e-10)
    assert "LID on 22 distinct of 24" in lflags[1]
    assert np.isnan(lid[2]) and "only 20 distinct rows of 24" in lflags[2]
    assert np.isnan(lid[3]) and "only 1 distinct rows of 24" in lflags[3]
    assert lid[4] == pytest.approx(skdim.id.MLE().fit(X[4], n_neighbors=k).dimension_, rel=1e-10)


def test_prefetched_pairs_of_several_left_runs_equal_one_pair_grids(sweep):
    """Groups of left runs against groups of right runs in one CKA call (tiles filled by several
    runs' layers): each asked-for grid bit for bit, cells nobody asked for dropped, not memoised."""
    from analysis.storage.store import connect
    from analysis.studies.engine import Engine

    con = connect(sweep, read_only=True)
    eng = Engine(con)
    eng.PREFETCH_LAYERS = 9  # two runs of 4 layers per group on each side
    pairs = [("v1-1", "t1-1"), ("v1-1", "t2-2"), ("v1-2", "t1-1"), ("v2-1", "t1-2"), ("v2-1", "v1-1")]
    eng.prefetch_pairs(pairs, "cka")
    assert eng.counters.grids_scored == len(pairs)
    assert eng.memoised_grid("v1-2", "t2-2", "cka") is None  # computed in a group, not asked for
    ref = Engine(con)
    for a, b in pairs:
        np.testing.assert_array_equal(eng.grid(a, b, "cka"), ref.grid(a, b, "cka"))
    assert eng.counters.grids_scored == len(pairs)
    con.close()


def test_kernels_are_loaded_before_a_pool_forks_its_workers(monkeypatch):
    """``run_tasks`` runs every compiled kernel analyze uses once in the parent, so forked workers
    inherit them instead of each loading numba's cache again."""
    from analysis.metrics import neighbors_jit
    from analysis.metrics import knn_jit
    from analysis.studies import parallel

    monkeypatch.setattr(parallel, "_KERNELS_LOADED", False)
    parallel._load_kernels()
    for kernel in (knn_jit.kernel(), knn_jit.recip_kernel(), knn_jit.counts_kernel(), neighbors_jit.kernel(),
                   neighbors_jit.near_kernel()):
        assert kernel.signatures, kernel  # compiled (or loaded) for at least one signature
    # float32 layers and float64 rows (the bootstrap's resample spaces): both cosine signatures
    assert {str(sig[0]) for sig in neighbors_jit.kernel().signatures} >= {"array(float32, 2d, C)",
                                                                          "array(float64, 2d, C)"}


def test_small_layers_run_on_one_blas_thread_and_large_ones_keep_the_pool():
    from threadpoolctl import threadpool_info, threadpool_limits

    from analysis.studies.threads import THREADED_LAYER_WORK, blas_threads_for

    def threads():
        return {p["internal_api"]: p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"}

    with threadpool_limits(2):
        pool = threads()
        with blas_threads_for((9, 512, 128)):
            assert set(threads().values()) == {1}
        side = int(round(THREADED_LAYER_WORK ** (1 / 3))) + 1  # N = d = side: N·d·min(N, d) above the line
        with blas_threads_for((side, side)):
            assert threads() == pool
        assert threads() == pool
