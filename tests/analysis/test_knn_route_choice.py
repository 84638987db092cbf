"""Which float32 candidate route ``auto`` takes on a CPU, per layer size, and that the choice never
changes an answer.

The documented rule (``analysis.metrics.neighbors.SYMMETRIC_MIN_ROWS``, chosen quiet and with a busy
core beside): numpy below 2048 rows, the symmetric blocks from 2048 on where numba runs, numpy
without numba; faiss never, for the k-NN lists nor for LID's distances. Expected lists come from
``tests.reference.ref_knn_lists`` (``math.fsum`` cosines, ties to the lower index); every route's
answer must equal the others bit for bit.
"""

import sys

import numpy as np
import pytest

from analysis.metrics import neighbors, neighbors_blocks, neighbors_faiss
from analysis.metrics.neighbors import knn_search
from analysis.metrics.single import knn_distances
from tests.helpers import near_ties
from tests.reference import ref_knn_lists


@pytest.fixture
def cpu(monkeypatch):
    """A machine without an NVIDIA driver: ``auto`` chooses among the CPU routes."""
    monkeypatch.setattr(neighbors, "_nvidia_driver", lambda: False)


@pytest.fixture
def routes_taken(monkeypatch):
    """Which candidate route each search ran: ``"symmetric"`` (whole layer) or ``"faiss"`` (any rows)."""
    taken = []
    real_sym, real_faiss = neighbors_blocks.symmetric_top, neighbors.faiss_top

    def sym(A, c, groups=None, **kw):
        taken.append("symmetric")
        return real_sym(A, c, groups, **kw)

    def fai(*a, **kw):
        taken.append("faiss")
        return real_faiss(*a, **kw)

    monkeypatch.setattr(neighbors_blocks, "symmetric_top", sym)
    monkeypatch.setattr(neighbors, "faiss_top", fai)
    return taken


@pytest.mark.parametrize("n", [512, 1024, 2047, 2048, 4096, 16384, 100_000])
def test_auto_takes_numpy_below_2048_rows_and_the_symmetric_blocks_from_there(cpu, n):
    expected = "symmetric" if n >= 2048 and neighbors_blocks.available() else None
    assert neighbors.SYMMETRIC_MIN_ROWS == 2048
    assert neighbors._resolve_device("auto", n) == expected


@pytest.mark.parametrize("n", [512, 4096, 100_000])
def test_without_numba_auto_takes_numpy_at_every_size(cpu, monkeypatch, n):
    monkeypatch.setattr(neighbors_blocks, "available", lambda: False)
    assert neighbors._resolve_device("auto", n) is None


def test_auto_runs_the_route_it_names_and_never_faiss(cpu, routes_taken, monkeypatch):
    """A small layer through numpy, the same layer over the (shrunk) size threshold through the
    symmetric blocks; the lists are the reference's both times."""
    pytest.importorskip("faiss")
    X = near_ties(n=150).astype(np.float32)
    small = knn_search(X, 6, device="auto")
    assert routes_taken == []  # numpy: neither symmetric nor faiss ran
    if neighbors_blocks.available():
        monkeypatch.setattr(neighbors, "SYMMETRIC_MIN_ROWS", 150)
        large = knn_search(X, 6, device="auto")
        assert routes_taken == ["symmetric"]
        np.testing.assert_array_equal(large.idx, small.idx)
    np.testing.assert_array_equal(small.idx, ref_knn_lists(X, 6))


def test_every_route_gives_the_same_lists_bit_for_bit():
    """numpy, symmetric and faiss on one layer of near ties with groups: identical lists, the reference's."""
    X = near_ties(n=240, seed=3).astype(np.float32)
    groups = np.arange(len(X)) % 200
    routes = ["numpy"] + (["symmetric"] if neighbors_blocks.available() else []) + (
        ["faiss"] if neighbors_faiss.faiss_module() is not None else [])
    for g in (None, groups):
        ref = ref_knn_lists(X, 7, g)
        for route in routes:
            np.testing.assert_array_equal(knn_search(X, 7, g, device=route).idx, ref, err_msg=route)


def test_the_symmetric_routes_retries_run_on_numpy_even_without_faiss(routes_taken, monkeypatch):
    """No extra candidates: row 0's near ties cannot be proven from the first k columns, so the
    row is searched again, wider, among its own rows: on numpy (faiss absent or not)."""
    if not neighbors_blocks.available():
        pytest.skip("numba switched off (LAYERSCOPE_NO_JIT)")
    monkeypatch.setattr(neighbors, "EXTRA_CANDIDATES", 0)
    monkeypatch.setitem(sys.modules, "faiss", None)  # import faiss now fails
    X = near_ties(n=200, ties=60).astype(np.float32)
    res = knn_search(X, 4, device="symmetric")
    assert len(res.resolved) >= 2 and sum(res.resolved[1:]) >= 1  # the retry ran
    assert routes_taken == ["symmetric"]
    np.testing.assert_array_equal(res.idx, ref_knn_lists(X, 4))


def test_lid_distances_auto_never_asks_faiss_and_equals_both_routes(monkeypatch):
    calls = []
    real = neighbors_faiss.faiss_module
    monkeypatch.setattr(neighbors_faiss, "faiss_module", lambda: calls.append(1) or real())
    X = np.random.default_rng(5).normal(size=(300, 12))
    auto = knn_distances(X, 8)
    assert calls == []
    np.testing.assert_array_equal(auto, knn_distances(X, 8, route="numpy"))
    if real() is not None:
        np.testing.assert_array_equal(auto, knn_distances(X, 8, route="faiss"))
        assert calls
