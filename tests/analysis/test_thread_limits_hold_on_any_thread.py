"""Every place that holds the thread pools to one thread holds them on whichever thread takes the hold,
and holders on several threads restore a pool only when the last of them leaves.

Two kinds of pool (threadpoolctl 3.8, Linux): numpy's and scipy's OpenBLAS (pthreads) have one pool
for the whole process, and threadpoolctl passes a count to it only from the thread that set one
first (here the main thread, inside ``threadpool_limits(2)``), dropping the others' silently; an
OpenMP runtime (scikit-learn's and faiss's libgomp) and an OpenBLAS built on OpenMP (faiss's) keep a
count per calling thread. Pool sizes are read with threadpoolctl's own ``threadpool_info`` on the
thread that does the work; lists are compared with ``tests.reference.ref_knn_lists`` (``math.fsum``
cosines) and with the same call on the main thread."""

import threading

import numpy as np
import pytest
import sklearn.cluster  # noqa: F401  (loads scikit-learn's OpenMP runtime: the tests need one)
from threadpoolctl import ThreadpoolController, threadpool_info, threadpool_limits

from analysis.metrics import base, neighbors_blocks, neighbors_faiss
from analysis.metrics.neighbors import knn_search
from tests.reference import ref_knn_lists


def per_thread(p) -> bool:
    return p["user_api"] == "openmp" or p.get("threading_layer") == "openmp"


def own_pools_at_two():
    """The calling thread's own pools at two threads for a ``with`` block, the process-wide pool left
    alone (``threadpool_limits`` would restore every pool it found on leaving, the shared one too,
    under another thread's hold)."""
    controller = ThreadpoolController()
    return controller.select(filepath=[p.filepath for p in controller.lib_controllers if per_thread(p.info())]).limit(limits=2)


def shared_blas() -> set:
    """Sizes of the process-wide BLAS pools (OpenBLAS on pthreads)."""
    return {p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas" and not per_thread(p)}


def own_pools() -> set:
    """Sizes of the calling thread's own pools: OpenMP runtimes and BLAS built on OpenMP."""
    return {p["num_threads"] for p in threadpool_info() if per_thread(p)}


def on_a_thread(fn):
    """``fn()`` on a fresh thread (named as Streamlit names a page's script thread), its own pools
    first set to two threads; its result."""
    out, failed = [], []

    def run():
        try:
            with own_pools_at_two():
                out.append(fn())
        except BaseException as exc:  # re-raised below, on the test's thread
            failed.append(exc)

    worker = threading.Thread(target=run, name="ScriptRunner.scriptThread")
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive()
    if failed:
        raise failed[0]
    return out[0]


@pytest.fixture
def main_holds_two():
    """The main thread inside a ``threadpool_limits(2)`` of its own (threadpoolctl's OpenBLAS role is
    the main thread's meanwhile); the process-wide pool at two threads throughout."""
    with threadpool_limits(2):
        assert shared_blas() == {2} and own_pools() <= {2}
        yield
        assert shared_blas() == {2}  # every hold taken inside gave the pool back as it found it


def test_a_blocked_knn_search_on_a_thread_runs_its_products_on_one_blas_thread(main_holds_two, monkeypatch):
    if not neighbors_blocks.available():
        pytest.fail("numba switched off: the blocked search cannot run")
    # blocks of 16 rows whatever N, so a 120-row layer crosses many blocks on the search's own threads
    monkeypatch.setattr(neighbors_blocks, "MIN_BLOCK_ROWS", 16)
    monkeypatch.setattr(neighbors_blocks, "BLOCK_ENTRIES", 16)
    seen = []
    cuts = neighbors_blocks._cuts

    def spy(*args, **kw):  # called between the block products, on the searching thread, inside its hold
        seen.append(shared_blas())
        return cuts(*args, **kw)

    monkeypatch.setattr(neighbors_blocks, "_cuts", spy)
    X = np.random.default_rng(5).normal(size=(120, 24)).astype(np.float32)
    want = ref_knn_lists(X, 6)
    main = knn_search(X, 6, device="symmetric").idx
    assert seen and all(pool == {1} for pool in seen)
    seen.clear()
    got = on_a_thread(lambda: (knn_search(X, 6, device="symmetric").idx, shared_blas()))
    assert seen and all(pool == {1} for pool in seen)  # dropped: {2}
    assert got[1] == {2}  # restored on the thread once the search left its hold
    np.testing.assert_array_equal(got[0], main)
    np.testing.assert_array_equal(got[0], want)


def test_the_faiss_routes_eigensolve_on_a_thread_runs_on_one_blas_thread(main_holds_two, monkeypatch):
    seen = []
    eigh = np.linalg.eigh

    def spy(M):
        seen.append(shared_blas())
        return eigh(M)

    monkeypatch.setattr(np.linalg, "eigh", spy)
    A = np.random.default_rng(6).normal(size=(400, 48)).astype(np.float32)
    rows = np.arange(400)
    main = neighbors_faiss.principal_directions(A, 8, rows)
    got = on_a_thread(lambda: neighbors_faiss.principal_directions(A, 8, rows))
    assert seen == [{1}, {1}]  # the thread's hold dropped: {2}
    np.testing.assert_array_equal(got, main)


def test_a_map_computed_on_a_thread_holds_blas_and_its_openmp_at_one(main_holds_two, tmp_path, monkeypatch):
    """``layerscope map`` outside ``analyze``: the map's own hold is the only one."""
    from analysis.studies import embedding_map as EM
    from tests.stores import write_store

    store = tmp_path / "s.duckdb"
    write_store(store, models=("txt",))
    seen = []

    def spy(*args, **kw):  # stands for UMAP: records the pools it would run on
        seen.append((shared_blas(), own_pools()))
        raise EM.MapUndefined("recorded")

    monkeypatch.setattr(EM, "map_coords", spy)

    def request():
        before = own_pools()
        out = EM.request_map(store, dataset="toy", model="txt", layer=1, log=lambda _m: None)
        return out, before, own_pools()

    out, before, after = on_a_thread(request)
    assert out["reason"] == "recorded"
    assert seen == [({1}, {1})]  # dropped: ({2}, {1})
    assert after == before  # the thread's OpenMP count as it found it


def test_small_layers_on_a_thread_hold_blas_and_openmp_at_one_and_large_ones_keep_the_pools(main_holds_two):
    from analysis.studies.threads import THREADED_LAYER_WORK, blas_threads_for

    def per_layer():
        start = own_pools()
        with blas_threads_for((9, 64, 32)):
            small = (shared_blas(), own_pools())
        side = int(round(THREADED_LAYER_WORK ** (1 / 3))) + 1  # N·d·min(N, d) above the line
        with blas_threads_for((side, side)):
            large = (shared_blas(), own_pools())
        return start, small, large, own_pools()

    start, small, large, end = on_a_thread(per_layer)
    assert start == {2}
    assert small == ({1}, {1})
    assert large == ({2}, start)
    assert end == start


def test_holders_on_two_threads_share_the_blas_pool_and_each_holds_its_own_openmp():
    """A holds, B holds, A leaves, B leaves: B's pools stay at one until B leaves; the process-wide
    pool comes back when the last holder leaves, each thread's own pools when that thread's does."""
    steps = {name: threading.Event() for name in ("a_in", "b_in", "a_out", "checked", "b_out")}
    seen = {}
    failed = []

    def holder(name, enter_after, leave_after, entered, left):
        try:
            if enter_after:
                steps[enter_after].wait(timeout=30)
            with own_pools_at_two():
                seen[name, "start"] = own_pools()
                with base.one_blas_thread(openmp=True):
                    seen[name, "in"] = (shared_blas(), own_pools())
                    steps[entered].set()
                    steps[leave_after].wait(timeout=30)
                    seen[name, "late"] = (shared_blas(), own_pools())
                seen[name, "out"] = own_pools()
            steps[left].set()
        except BaseException as exc:
            failed.append(exc)
        finally:
            for event in steps.values():  # never leave the other thread waiting on a failure
                if failed:
                    event.set()

    with threadpool_limits(2):
        a = threading.Thread(target=holder, args=("a", None, "b_in", "a_in", "a_out"))
        b = threading.Thread(target=holder, args=("b", "a_in", "checked", "b_in", "b_out"))
        a.start()
        b.start()
        steps["a_out"].wait(timeout=30)
        blas_between = shared_blas()  # A left, B still holds
        steps["checked"].set()
        a.join(timeout=60)
        b.join(timeout=60)
        assert not failed, failed
        assert blas_between == {1}
        assert shared_blas() == {2}
    for name in ("a", "b"):
        assert seen[name, "start"] == {2}
        assert seen[name, "in"] == ({1}, {1})  # B joined while A held: its own pools set too
        assert seen[name, "out"] == seen[name, "start"]
    assert seen["b", "late"] == ({1}, {1})  # A left first


def test_a_hold_nested_on_one_thread_restores_when_the_outermost_leaves(main_holds_two):
    def nested():
        start = own_pools()
        with base.one_blas_thread(openmp=True):
            with base.one_blas_thread():
                with base.one_blas_thread(openmp=True):
                    pass
                inner = (shared_blas(), own_pools())
            outer = (shared_blas(), own_pools())
        return start, inner, outer, (shared_blas(), own_pools())

    start, inner, outer, end = on_a_thread(nested)
    assert inner == outer == ({1}, {1})
    assert end == ({2}, start)



def test_a_thread_joining_another_threads_hold_sets_its_own_openmp_built_blas():
    """faiss's OpenBLAS is built on OpenMP: its count is per thread, so a thread taking the BLAS hold
    while another already holds it must still set its own (a shared count alone would skip it)."""
    pytest.importorskip("faiss")  # loads the only OpenMP-built BLAS here

    def own_blas() -> set:
        return {p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas" and per_thread(p)}

    def join_the_hold():
        with base.one_blas_thread():
            held = (shared_blas(), own_blas())
        return held, own_blas()

    assert own_blas()  # loaded: the test can fail
    with threadpool_limits(2):
        with base.one_blas_thread():  # the main thread holds first
            held, after = on_a_thread(join_the_hold)
            assert shared_blas() == {1}  # the thread's leaving kept the main thread's hold
        assert shared_blas() == {2}
    assert held == ({1}, {1})
    assert after == {2}  # the thread's own count back as it found it
