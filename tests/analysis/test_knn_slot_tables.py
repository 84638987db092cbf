"""Issue #13/#18: mutual k-NN and CKNNA matched through slot tables (one lookup per neighbour pair)
or CKNNA's compiled per-row marks give the same grids as the row-by-row comparison and the sparse
product, bit for bit, in any grouping, and equal the literal references on data with ties, duplicates and a collapsed layer."""

import numpy as np
import pytest

from analysis.grid import layer_grid
from analysis.metrics import knn as knn_mod
from tests.reference import ref_cknna, ref_mutual_knn


def stack(n, layers, d, seed, *, degenerate=False):
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, 6))
    E = np.stack([Z @ rng.normal(size=(6, d)) + 0.4 * rng.normal(size=(n, d)) for _ in range(layers)])
    if degenerate:
        E[:, 3] = E[:, 8]  # a duplicated item in every layer: exact cosine ties
        E[:, :, :] = np.round(E, 1)  # coarse values: many near and exact ties
        E[1] = E[1][0]  # a collapsed layer
    return E.astype(np.float32)


def grids(A, B, metric, k):
    return layer_grid(A, B, metric=metric, k=k)


@pytest.mark.parametrize("metric", ["mutual_knn", "cknna"])
@pytest.mark.parametrize("degenerate", [False, True])
def test_table_row_comparison_and_sparse_paths_agree_bitwise(monkeypatch, metric, degenerate):
    monkeypatch.setattr(knn_mod, "USE_JIT", False)  # the numpy routines (compiled: see below)
    A, B = stack(120, 3, 9, 1, degenerate=degenerate), stack(120, 4, 7, 2)
    tables = grids(A, B, metric, 6)
    monkeypatch.setattr(knn_mod, "SLOT_TABLE_MAX_N", 0)  # row-by-row comparison / sparse product
    np.testing.assert_array_equal(grids(A, B, metric, 6), tables)
    if degenerate:
        assert np.isnan(tables[1]).all() and np.isfinite(np.delete(tables, 1, axis=0)).all()


@pytest.mark.parametrize("metric", ["mutual_knn", "cknna"])
def test_small_table_groups_and_chunks_change_nothing(monkeypatch, metric):
    A, B = stack(100, 4, 8, 3), stack(100, 5, 6, 4)
    whole = grids(A, B, metric, 5)
    monkeypatch.setattr(knn_mod, "SLOT_TABLE_BYTES", 1)  # one B layer per table group
    monkeypatch.setattr(knn_mod, "CKNNA_BLOCK_ENTRIES", 1)  # one A layer per lookup
    np.testing.assert_array_equal(grids(A, B, metric, 5), whole)
    # each cell equals the pair scored alone
    for i in range(len(A)):
        for j in range(len(B)):
            assert grids(A[i:i + 1], B[j:j + 1], metric, 5)[0, 0] == whole[i, j]


def test_mutual_knn_table_path_forced_for_many_layers(monkeypatch):
    A, B = stack(80, 3, 8, 5), stack(80, 3, 8, 6)
    sparse_path = grids(A, B, "mutual_knn", 4)
    monkeypatch.setattr(knn_mod, "MUTUAL_TABLE_BYTES", 0)
    np.testing.assert_array_equal(grids(A, B, "mutual_knn", 4), sparse_path)


@pytest.mark.parametrize("degenerate", [False, True])
def test_table_paths_equal_the_literal_references(degenerate):
    A, B = stack(60, 3, 6, 7, degenerate=degenerate), stack(60, 2, 5, 8)
    k = 5
    mk, ck = grids(A, B, "mutual_knn", k), grids(A, B, "cknna", k)
    for i in range(len(A)):
        if degenerate and i == 1:
            continue  # collapsed: NaN (checked above)
        for j in range(len(B)):
            X, Y = A[i].astype(np.float64), B[j].astype(np.float64)
            if not degenerate:  # with exact ties the reference's tie order is its own
                assert mk[i, j] == pytest.approx(ref_mutual_knn(X, Y, k), abs=1e-12)
                assert ck[i, j] == pytest.approx(ref_cknna(X, Y, k), rel=1e-9, abs=1e-12)
            else:
                assert 0.0 <= mk[i, j] <= 1.0 and np.isfinite(ck[i, j])


def test_slot_table_marks_every_neighbour_once():
    idx = np.array([[1, 2], [0, 2], [0, 1]])

    class S:
        pass

    st = S()
    st.idx, st.k, st.n = idx, 2, 3
    (_, _, table), = knn_mod._slot_table_groups([st], 3)
    expected = np.full(9, -1)
    for i in range(3):
        for s, j in enumerate(idx[i]):
            expected[i * 3 + j] = s
    np.testing.assert_array_equal(table[:, 0], expected)


@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize("d", [7, 129])
def test_cosines64_symmetric_chunk_free_and_exact(monkeypatch, d, jit):
    from analysis.metrics import neighbors as nb

    monkeypatch.setattr(nb, "USE_JIT", jit)
    rng = np.random.default_rng(d)
    X = rng.normal(size=(70, d)).astype(np.float32)
    norms = nb.row_norms(X)
    idx = nb.knn_search(X, 6).idx
    whole = nb.cosines64(X, norms, idx)
    # the compiled path copies s(j, i) for reciprocal pairs: the same bits as computing them
    np.testing.assert_array_equal(nb.cosines64(X, norms, idx, knn_mod.reciprocal_slots(idx)), whole)
    monkeypatch.setattr(nb, "COS_CHUNK_ENTRIES", 1)  # one row per step
    np.testing.assert_array_equal(nb.cosines64(X, norms, idx), whole)
    X64 = X.astype(np.float64)
    U = X64 / np.linalg.norm(X64, axis=1, keepdims=True)
    ref = np.array([[U[i] @ U[j] for j in idx[i]] for i in range(len(X))])
    np.testing.assert_allclose(whole, ref, rtol=0, atol=1e-15)
    slot = {(i, j): s for i in range(len(X)) for s, j in enumerate(idx[i])}
    for (i, j), s in slot.items():
        if (j, i) in slot:
            assert whole[i, s] == whole[j, slot[(j, i)]]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [1, 8, 13, 768])
def test_cosines64_compiled_and_numpy_paths_agree_bit_for_bit(monkeypatch, d, dtype):
    """The compiled kernel and the numpy path add in the same order (eight lanes, tail in lane 0),
    so CKNNA's kernel values do not depend on whether numba is there."""
    from analysis.metrics import neighbors as nb
    from analysis.metrics import neighbors_jit

    assert neighbors_jit.kernel() is not None  # numba comes with umap-learn, a dependency
    rng = np.random.default_rng(d)
    X = (rng.normal(size=(90, d)) * rng.uniform(0.01, 100, size=(90, 1))).astype(dtype)
    norms = nb.row_norms(X)
    idx = nb.knn_search(X, 5).idx if d > 1 else rng.integers(0, 90, size=(90, 5))
    rows = rng.integers(0, 90, size=40)
    compiled = nb.cosines64(X, norms, idx), nb.cosines64_rows(X, norms, rows, idx[:40])
    monkeypatch.setattr(nb, "USE_JIT", False)
    plain = nb.cosines64(X, norms, idx), nb.cosines64_rows(X, norms, rows, idx[:40])
    for a, b in zip(compiled, plain):
        np.testing.assert_array_equal(a, b)
    # the lane order itself, written out for one pair
    i, j = 3, int(idx[3, 0])
    p = X[i].astype(np.float64) * X[j].astype(np.float64)
    body = d - d % 8
    lanes = [sum(p[t] for t in range(l, body, 8)) if body else 0.0 for l in range(8)]
    for t in range(body, d):  # the tail, one term at a time into lane 0
        lanes[0] += p[t]
    dot = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))
    assert compiled[0][i, 0] == dot / (norms[i] * norms[j])


@pytest.mark.parametrize("layout", ["fortran", "strided"])
def test_cosines64_of_a_non_contiguous_layer_equals_its_contiguous_copy(monkeypatch, layout):
    """The compiled dot reads eight entries of a row at a time: a layer stored column-major or as a
    strided view gets the cosines of its contiguous copy, bit for bit, on both paths."""
    from analysis.metrics import neighbors as nb

    rng = np.random.default_rng(5)
    base = rng.normal(size=(60, 42)).astype(np.float32)
    X = np.asfortranarray(base[:, :21]) if layout == "fortran" else base[:, ::2]
    assert not X.flags.c_contiguous
    C = np.ascontiguousarray(X)
    norms = nb.row_norms(C)
    idx = nb.knn_search(C, 4).idx
    recip = knn_mod.reciprocal_slots(idx)
    for jit in (True, False):
        monkeypatch.setattr(nb, "USE_JIT", jit)
        np.testing.assert_array_equal(nb.cosines64(X, norms, idx, recip), nb.cosines64(C, norms, idx, recip))
        np.testing.assert_array_equal(nb.cosines64_rows(X, norms, np.arange(10)[::-1], idx[:10]),
                                      nb.cosines64_rows(C, norms, np.arange(10)[::-1], idx[:10]))


@pytest.mark.parametrize("path", ["compiled", "tables", "rows"])
def test_cknna_counts_are_mutual_knn_counts(monkeypatch, path):
    from analysis.grid import prepare_layers
    from analysis.registry import get_metric

    if path != "compiled":
        monkeypatch.setattr(knn_mod, "USE_JIT", False)
    if path == "rows":
        monkeypatch.setattr(knn_mod, "SLOT_TABLE_MAX_N", 0)
    A, B = stack(90, 3, 8, 9, degenerate=True), stack(90, 2, 6, 10)
    spec = get_metric("cknna")
    sa, sb = prepare_layers(spec, A, {"k": 5}), prepare_layers(spec, B, {"k": 5})
    grid, counts = knn_mod.Cknna().score_block_counts(sa, sb)
    np.testing.assert_array_equal(grid, knn_mod.Cknna().score_block(sa, sb))
    # counts from literal set intersections of the neighbour lists
    expected = [[sum(len(set(a.idx[i]) & set(b.idx[i])) for i in range(90)) for b in sb] for a in sa]
    np.testing.assert_array_equal(counts, expected)
    np.testing.assert_array_equal(knn_mod.MutualKnn.from_counts(counts, sa, sb),
                                  knn_mod.MutualKnn().score_block(sa, sb))


def test_engine_keeps_mutual_knn_from_cknna(tmp_path):
    from analysis.storage.store import connect
    from analysis.studies.engine import Engine
    from precompute.synthetic.store import write_sweep

    path = tmp_path / "s.duckdb"
    write_sweep(path, video=["v0"], text=["t0"], frames=(1,), captions=(1,), n_items=60, n_layers=3, dim=8)
    con = connect(path, read_only=True)
    runs = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()]
    eng = Engine(con)
    eng.grid(runs[0], runs[1], "cknna", k=5)
    scored = eng.counters.grids_scored
    via_cknna = eng.grid(runs[0], runs[1], "mutual_knn", k=5)
    assert eng.counters.grids_scored == scored  # from the memo, not scored again
    fresh = Engine(con).grid(runs[0], runs[1], "mutual_knn", k=5)
    np.testing.assert_array_equal(via_cknna, fresh)
    con.close()


@pytest.mark.parametrize("metric", ["cknna", "mutual_knn"])
@pytest.mark.parametrize("degenerate", [False, True])
def test_compiled_and_numpy_cknna_sums_agree_bitwise(monkeypatch, degenerate, metric):
    from analysis.metrics import knn_jit

    assert knn_jit.kernel() is not None and knn_jit.counts_kernel() is not None  # numba: via umap-learn
    A, B = stack(110, 3, 9, 11, degenerate=degenerate), stack(110, 4, 7, 12)
    compiled = grids(A, B, metric, 6)
    # B layers in groups of 2 and A layers one at a time: cells do not depend on the grouping
    monkeypatch.setattr(knn_mod, "JIT_GROUP_LAYERS", 2)
    monkeypatch.setattr(knn_mod, "JIT_SUM_ENTRIES", 1)
    np.testing.assert_array_equal(grids(A, B, metric, 6), compiled)
    monkeypatch.setattr(knn_mod, "USE_JIT", False)
    np.testing.assert_array_equal(grids(A, B, metric, 6), compiled)  # slot tables
    monkeypatch.setattr(knn_mod, "SLOT_TABLE_MAX_N", 0)
    np.testing.assert_array_equal(grids(A, B, metric, 6), compiled)  # row comparison / sparse product
    if metric == "mutual_knn":  # the counts themselves, from literal set intersections
        from analysis.grid import prepare_layers
        from analysis.registry import get_metric

        spec = get_metric("mutual_knn")
        sa, sb = prepare_layers(spec, A, {"k": 6}), prepare_layers(spec, B, {"k": 6})
        want = [[sum(len(set(a.idx[i]) & set(b.idx[i])) for i in range(110)) for b in sb] for a in sa]
        got = knn_jit.counts_kernel()(np.stack([s.idx for s in sa]), np.stack([s.idx for s in sb]))
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("degenerate", [False, True])
def test_cknna_grid_is_the_same_bits_on_any_number_of_threads(degenerate):
    """The compiled sums run as blocks of the grid on threads of our own (as many as the BLAS pool):
    a grid of 3 x 20 layers (two B groups, A split between threads) equals the one-thread grid and
    the numpy routine's cells bit for bit."""
    from threadpoolctl import threadpool_limits

    A, B = stack(90, 3, 9, 21, degenerate=degenerate), stack(90, 20, 7, 22)
    runs = []
    for threads in (1, 2, 3):
        with threadpool_limits(threads, user_api="blas"):
            runs.append(grids(A, B, "cknna", 5))
    for got in runs[1:]:
        np.testing.assert_array_equal(got, runs[0])
    for a, b in [(0, 0), (2, 19), (1, 11)]:  # cells against one-pair calls
        np.testing.assert_array_equal(runs[0][a, b], grids(A[a:a + 1], B[b:b + 1], "cknna", 5)[0, 0])


@pytest.mark.parametrize("n_a, n_b, threads", [(24, 24, 2), (24, 13, 2), (1, 1, 2), (3, 40, 2), (7, 33, 1),
                                               (5, 3, 4)])
def test_cknna_blocks_cover_the_grid_once_and_keep_threads_busy(n_a, n_b, threads):
    tasks = knn_mod._jit_tasks(n_a, n_b, 1024, threads)
    cover = np.zeros((n_a, n_b), dtype=int)
    for (a0, a1), (b0, b1) in tasks:
        cover[a0:a1, b0:b1] += 1
        assert b1 - b0 <= knn_mod.JIT_GROUP_LAYERS
        assert a1 - a0 == 1 or (a1 - a0) * (b1 - b0) * 1024 <= knn_mod.JIT_SUM_ENTRIES
    assert (cover == 1).all()
    widths = {b1 - b0 for _, (b0, b1) in tasks}
    assert max(widths) - min(widths) <= 1  # B groups of equal size
    assert len(tasks) >= min(threads, n_a * -(-n_b // knn_mod.JIT_GROUP_LAYERS))


def test_a_tiled_inner_cell_depends_on_its_two_vectors_alone():
    """Cells in every tile position (several tiles a side, a padded last tile, several column
    chunks) equal the 1×1 call of their two vectors and their cell in a reordered call, bit for
    bit, and the float64 products within rounding."""
    from analysis.metrics.base import K_CHUNK, TILE, tiled_inner

    rng = np.random.default_rng(3)
    m = 2 * K_CHUNK + 5
    A = [rng.normal(size=m) for _ in range(TILE + 9)]
    B = [rng.normal(size=m) for _ in range(2 * TILE - 3)]
    full = tiled_inner(A, B)
    np.testing.assert_allclose(full, np.array(A) @ np.array(B).T, rtol=0, atol=1e-12 * m)
    perm_a, perm_b = rng.permutation(len(A)), rng.permutation(len(B))
    np.testing.assert_array_equal(tiled_inner([A[i] for i in perm_a], [B[j] for j in perm_b]),
                                  full[np.ix_(perm_a, perm_b)])
    cells = [(0, 0), (len(A) - 1, len(B) - 1), (TILE, TILE - 1), (TILE - 1, TILE)]
    cells += [tuple(c) for c in zip(rng.integers(len(A), size=12), rng.integers(len(B), size=12))]
    for i, j in cells:
        assert tiled_inner([A[i]], [B[j]])[0, 0] == full[i, j], (i, j)


@pytest.mark.parametrize("layers,m", [(1, 50), (9, 9000), (17, 8195), (40, 4101)])
def test_tiled_self_is_the_diagonal_of_tiled_inner_bit_for_bit(layers, m):
    from analysis.metrics.base import tiled_inner, tiled_self

    rng = np.random.default_rng(layers)
    vecs = [rng.normal(size=m) for _ in range(layers)]
    np.testing.assert_array_equal(tiled_self(vecs), np.diag(tiled_inner(vecs, vecs)))
    np.testing.assert_allclose(tiled_self(vecs), [v @ v for v in vecs], rtol=1e-12)
    # a self-product equals the product with copies: numpy would send a tile times its own
    # transpose to syrk, which rounds differently from gemm on some CPUs (AMD EPYC, OpenBLAS)
    copies = [v.copy() for v in vecs]
    np.testing.assert_array_equal(tiled_inner(vecs, vecs), tiled_inner(vecs, copies))
    np.testing.assert_array_equal(tiled_self(vecs), np.diag(tiled_inner(vecs, copies)))


@pytest.mark.parametrize("la,lb,m", [(1, 1, 50), (9, 4, 9000), (33, 40, 4101)])
def test_one_pass_cross_and_self_terms_equal_the_separate_calls(la, lb, m):
    """``tiled_inner_self`` (the self terms' tile products in the cross product's pass) gives the
    cells of ``tiled_inner`` and the terms of ``tiled_self`` of each side, bit for bit, in several
    tiles a side and column chunks; a self-product its diagonal."""
    from analysis.metrics.base import tiled_inner, tiled_inner_self, tiled_self

    rng = np.random.default_rng(la + lb)
    A = [rng.normal(size=m) for _ in range(la)]
    B = [rng.normal(size=m) * 3 for _ in range(lb)]
    cross, self_a, self_b = tiled_inner_self(A, B)
    np.testing.assert_array_equal(cross, tiled_inner(A, B))
    np.testing.assert_array_equal(self_a, tiled_self(A))
    np.testing.assert_array_equal(self_b, tiled_self(B))
    np.testing.assert_allclose(self_b, [v @ v for v in B], rtol=1e-12)
    cross, self_a, self_b = tiled_inner_self(A, A)
    np.testing.assert_array_equal(cross, tiled_inner(A, A))
    np.testing.assert_array_equal(self_a, tiled_self(A))
    np.testing.assert_array_equal(self_b, tiled_self(A))
    assert tiled_inner_self(A, B, selves=False)[1:] == (None, None)


@pytest.mark.parametrize("m", [300, 1000, 2 * 2048 + 1000])
def test_tiled_contractions_are_the_same_bits_on_any_blas_pool(monkeypatch, m):
    """The tile products run on one BLAS thread whatever the pool: on two threads OpenBLAS rounded
    a 32 x 1000 x 32 product differently in the last bits (Xeon VM), so grids computed outside
    ``analyze`` (whole pool) differed from ``analyze``'s (one thread). The chunks' products run on
    as many threads of our own as the pool holds and are added in column order: rounds of one
    chunk per thread give the same bits."""
    from threadpoolctl import threadpool_limits

    from analysis.metrics import base
    from analysis.metrics.base import tiled_inner, tiled_inner_self, tiled_self

    rng = np.random.default_rng(m)
    A = [rng.normal(size=m) for _ in range(32)]
    B = [rng.normal(size=m) for _ in range(30)]
    runs = []
    for threads, round_bytes in ((1, base.ROUND_BYTES), (2, base.ROUND_BYTES), (4, base.ROUND_BYTES), (2, 1)):
        monkeypatch.setattr(base, "ROUND_BYTES", round_bytes)
        with threadpool_limits(threads, user_api="blas"):
            runs.append((tiled_inner(A, B), tiled_self(A), *tiled_inner_self(A, B)))
    for run in runs[1:]:
        for got, want in zip(run, runs[0]):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("debiased", [False, True])
def test_packed_cka_grid_fills_each_layers_own_self_term(debiased):
    """The self terms a packed grid computes in its cross pass are each layer's own (a state
    prepared and asked alone), bit for bit; a state that has one keeps it."""
    from analysis.metrics.kernel import CkaKernel

    rng = np.random.default_rng(4)
    kernel = CkaKernel()
    layers = [rng.normal(size=(70, 6 + i)) for i in range(5)]
    sa = [kernel.prepare(x, debiased=debiased) for x in layers[:3]]
    sb = [kernel.prepare(x, debiased=debiased) for x in layers[3:]]
    kept = sb[0].self_inner = 123.0
    kernel.score_block(sa, sb)
    alone = [kernel.prepare(x, debiased=debiased).inner_self() for x in layers]
    assert [s.self_inner for s in sa] + [s.self_inner for s in sb[1:]] == alone[:3] + alone[4:]
    assert sb[0].self_inner == kept


@pytest.mark.parametrize("degenerate", [False, True])
@pytest.mark.parametrize("jit", [True, False])
def test_cknna_self_term_equals_the_layer_scored_against_itself_bitwise(monkeypatch, degenerate, jit):
    """The O(N k) self term is the cross routines' value of a layer against itself (table path,
    compiled or not, and the row-by-row path), bit for bit."""
    from analysis.metrics import knn_jit
    from analysis.metrics.knn import (Cknna, KnnKernel, _concat_lists, _masked_cross, _masked_cross_jit,
                                      _masked_cross_table, _slot_table_groups)

    monkeypatch.setattr(knn_mod, "USE_JIT", jit)
    for layer in stack(90, 3, 7, 8, degenerate=degenerate):
        state = KnnKernel().prepare(layer, k=6)
        if state.collapsed:
            assert np.isnan(Cknna._self(state))
            continue
        n = state.n
        (_, _, table), = _slot_table_groups([state], n)
        _, sims, recips = _concat_lists([state], n, idx=False)
        by_table = float(_masked_cross_table([state], table, sims, recips)[0, 0])
        by_rows = float(_masked_cross(state, 1, *_concat_lists([state], n))[0])
        by_jit = float(_masked_cross_jit(knn_jit.kernel(), [state], *_concat_lists([state], n))[0][0, 0])
        assert Cknna._self(state) == by_table == by_rows == by_jit


@pytest.mark.parametrize("jit", [True, False])
def test_reciprocal_slots_brute_force(monkeypatch, jit):
    from analysis.metrics.neighbors import knn_search

    monkeypatch.setattr(knn_mod, "USE_JIT", jit)
    for layer in stack(80, 2, 6, 5, degenerate=True):
        if np.ptp(layer, axis=0).max() == 0:
            continue  # the collapsed layer: no lists
        idx = knn_search(layer, 7).idx
        want = np.array([[list(idx[j]).index(i) if i in idx[j] else -1 for j in idx[i]] for i in range(80)])
        np.testing.assert_array_equal(knn_mod.reciprocal_slots(idx), want)


def test_kernels_build_once_and_step_aside_without_numba(monkeypatch):
    from analysis.metrics.jit import Kernels

    built = []

    def build(numba):
        built.append(numba)
        return {"f": numba.njit(lambda x: x + 1)}

    ks = Kernels(build)
    assert ks.get("f")(1) == 2 and ks.get("missing") is None and len(built) == 1  # built once
    monkeypatch.setenv("LAYERSCOPE_NO_JIT", "1")
    off = Kernels(build)
    assert off.get("f") is None and len(built) == 1  # numpy routines run instead
