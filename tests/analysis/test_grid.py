import numpy as np
import pytest

from analysis.metrics import neighbors
from analysis.grid import best_cell, layer_grid, layer_profile
from analysis.metrics.preprocess import clamp_outliers
from analysis.registry import REGISTRY, metrics_of_kind
from tests.helpers import planted


def stack(n=80, layers=3, d=10, seed=0, same_dim=None):
    X, Y = planted(n, dx=d, dy=same_dim or d + 3, seed=seed)
    rng = np.random.default_rng(seed)
    # layers progressively mix in noise so cells really differ
    A = np.stack([X + l * rng.normal(size=X.shape) for l in range(layers)])
    B = np.stack([Y + l * rng.normal(size=Y.shape) for l in range(layers + 1)])
    return A, B


PAIRWISE = [s.name for s in metrics_of_kind("pairwise")]
SAME = [s.name for s in metrics_of_kind("same_space", "unpaired")]

PARAMS = {
    "cka": [{}, {"debiased": True}, {"kernel": "rbf"}, {"kernel": "rbf", "debiased": True}],
}


def cases(names):
    for name in names:
        for params in PARAMS.get(name, [{}]):
            yield name, params


@pytest.mark.parametrize("name,params", list(cases(PAIRWISE)))
def test_grid_cells_equal_one_pair_functions_exactly(name, params):
    A, B = stack()
    grid = layer_grid(A, B, metric=name, k=5, **params)
    spec = REGISTRY[name]
    if "k" in spec.params:
        params = {**params, "k": 5}
    expected = np.array([[spec(a, b, **params) for b in B] for a in A])
    assert grid.shape == (len(A), len(B))
    np.testing.assert_array_equal(grid, expected)


@pytest.mark.parametrize("name,params", list(cases(PAIRWISE)))
def test_self_grid_equals_explicit_grid(name, params):
    A, _ = stack(layers=4)
    np.testing.assert_array_equal(layer_grid(A, metric=name, k=5, **params),
                                  layer_grid(A, A.copy(), metric=name, k=5, **params))


@pytest.mark.parametrize("threads", [2, 3])
def test_cknna_grid_is_the_same_bits_on_one_thread_or_several(monkeypatch, threads):
    """Outside ``analyze`` (which holds one BLAS thread) CKNNA's per-layer cosines and self terms
    run on threads of our own: the grid is the same bits as on one thread."""
    from analysis.metrics import base
    from analysis.metrics import knn as knn_mod

    A, B = stack(layers=4)
    monkeypatch.setattr(base, "blas_threads", lambda: 1)
    serial = layer_grid(A, B, metric="cknna", k=5)
    monkeypatch.setattr(base, "blas_threads", lambda: threads)
    pools = []

    def spy(fn, items, threads=None):
        items = list(items)
        pools.append(min(threads or base.blas_threads(), len(items)))
        return base.thread_map(fn, items, threads)

    monkeypatch.setattr(knn_mod, "thread_map", spy)
    threaded = layer_grid(A, B, metric="cknna", k=5)
    assert max(pools) >= 2  # the threaded path ran
    np.testing.assert_array_equal(threaded, serial)


@pytest.mark.parametrize("name,params", [("cka", {}), ("cka", {"kernel": "rbf", "debiased": True}),
                                         ("cknna", {"k": 5}), ("mutual_knn", {"k": 5})])
def test_layers_prepared_on_threads_are_the_serial_states(monkeypatch, name, params):
    """Grids prepare several layers at once on threads of our own (BLAS held at one thread): each
    state is the one a serial, one-thread preparation gives, and so is every grid cell."""
    from threadpoolctl import threadpool_limits

    from analysis.grid import prepare_layers
    from analysis.metrics import base
    from analysis.registry import get_metric

    A, B = stack(n=90, layers=5)
    spec = get_metric(name)
    p = spec.resolve(**params)
    with threadpool_limits(1, user_api="blas"):  # serial: the pool holds one thread
        serial = prepare_layers(spec, A, p)
        want = layer_grid(A, B, metric=name, **params)
    used = []
    real = base.thread_map
    monkeypatch.setattr(base, "blas_threads", lambda: 3)
    monkeypatch.setattr(base, "thread_map", lambda fn, items, threads=None: used.append(threads) or real(fn, items, threads))
    threaded = prepare_layers(spec, A, p)
    assert 3 in used
    for a, b in zip(serial, threaded):
        for key in ("upper", "diag", "row_sum", "idx"):
            if getattr(a, key, None) is not None:
                np.testing.assert_array_equal(getattr(b, key), getattr(a, key))
    np.testing.assert_array_equal(layer_grid(A, B, metric=name, **params), want)


def test_one_blas_thread_held_on_several_threads_restores_the_pool_once():
    """The hold is shared: taken by the caller, then by its threads, entering and leaving in any
    order, the pool stays at one thread until the last holder leaves and is then as it was."""
    import threading

    from threadpoolctl import threadpool_limits

    from analysis.metrics import base

    with threadpool_limits(2, user_api="blas"):
        before = base.blas_threads()
        inside, release = threading.Barrier(3), threading.Event()
        seen = []

        def hold():
            with base.one_blas_thread():
                inside.wait(timeout=30)
                release.wait(timeout=30)
                seen.append(base.blas_threads())

        workers = [threading.Thread(target=hold) for _ in range(2)]
        try:
            with base.one_blas_thread():  # the caller's hold, as prepare_on_threads takes it
                for w in workers:
                    w.start()
                inside.wait(timeout=30)  # every worker holds it too
                release.set()
                for w in workers:
                    w.join()
                assert seen == [1, 1]
                assert base.blas_threads() == 1  # the workers left; the caller still holds it
        finally:
            release.set()
        assert base.blas_threads() == before


def test_blas_pool_is_left_as_found_by_the_tile_contractions():
    from threadpoolctl import threadpool_limits

    from analysis.metrics import base

    A, B = stack(layers=3)
    for limit in (1, 2):
        with threadpool_limits(limit, user_api="blas"):
            before = base.blas_threads()
            layer_grid(A, B, metric="cka")
            assert base.blas_threads() == before


@pytest.mark.parametrize("name", SAME)
def test_same_space_grids(name):
    A, _ = stack()
    B = A[::-1] + 0.1
    grid = layer_grid(A, B, metric=name)
    spec = REGISTRY[name]
    params = {"k": 10} if "k" in spec.params else {}
    np.testing.assert_array_equal(grid, [[spec(a, b, **params) for b in B] for a in A])


@pytest.mark.slow  # a grid of many layers
def test_grid_with_many_layers_spans_several_gemm_tiles():
    A, B = stack(layers=11)
    grid = layer_grid(A, B, metric="cka")
    expected = np.array([[REGISTRY["cka"](a, b) for b in B] for a in A])
    np.testing.assert_array_equal(grid, expected)


def test_chunked_computation_agrees_with_unchunked(monkeypatch):
    A, B = stack(n=90)
    whole = {m: layer_grid(A, B, metric=m, k=5) for m in ("mutual_knn", "cka", "cknna")}
    whole["rbf"] = layer_grid(A, B, metric="cka", kernel="rbf", debiased=True)
    monkeypatch.setattr(neighbors, "CHUNK_ENTRIES", 500)  # forces ~6-row blocks
    for m in ("mutual_knn", "cka", "cknna"):
        chunked = layer_grid(A, B, metric=m, k=5)
        np.testing.assert_allclose(chunked, whole[m], rtol=1e-12, atol=1e-14)
        # and chunked grids still equal the chunked one-pair functions exactly
        assert chunked[1, 2] == REGISTRY[m](A[1], B[2], **({"k": 5} if m != "cka" else {}))
    np.testing.assert_allclose(layer_grid(A, B, metric="cka", kernel="rbf", debiased=True), whole["rbf"], rtol=1e-12)


def test_clamp_option_is_applied_before_scoring():
    A, B = stack()
    A[:, 0, 0] = 1e4  # one massive activation
    clamped = layer_grid(A, B, metric="cka", clamp_quantile=0.95)
    expected = REGISTRY["cka"](clamp_outliers(A[0], quantile=0.95), clamp_outliers(B[1], quantile=0.95))
    assert clamped[0, 1] == expected
    assert clamped[0, 1] != layer_grid(A, B, metric="cka")[0, 1]


def test_clamp_outliers_per_feature():
    X = np.array([[1.0, -10.0], [2.0, 1.0], [3.0, 2.0], [100.0, 3.0]])
    out = clamp_outliers(X, quantile=0.5)
    q0, q1 = np.quantile([1, 2, 3, 100], 0.5), np.quantile([10, 1, 2, 3], 0.5)
    np.testing.assert_allclose(out[:, 0], np.clip(X[:, 0], -q0, q0))
    np.testing.assert_allclose(out[:, 1], np.clip(X[:, 1], -q1, q1))
    with pytest.raises(ValueError, match="quantile"):
        clamp_outliers(X, quantile=1.5)


def test_profile_matches_per_layer_calls():
    A, _ = stack()
    for name in ("rankme", "uniformity", "lid"):
        prof = layer_profile(A, metric=name)
        assert prof.shape == (len(A),)
        np.testing.assert_array_equal(prof, [REGISTRY[name](a) for a in A])
    np.testing.assert_array_equal(layer_profile(A, metric="lid", method="twonn"),
                                  [REGISTRY["lid"](a, method="twonn") for a in A])


def test_grid_errors_name_the_problem():
    A, B = stack()
    with pytest.raises(ValueError, match="same items"):
        layer_grid(A, B[:, :-1], metric="mutual_knn")
    with pytest.raises(ValueError, match="layer_profile"):
        layer_grid(A, B, metric="rankme")
    with pytest.raises(ValueError, match="layer_grid"):
        layer_profile(A, metric="cka")
    with pytest.raises(ValueError, match="one embedding space"):
        layer_grid(A, B, metric="modality_gap")
    with pytest.raises(ValueError, match="3-D"):
        layer_grid(A[0], B, metric="cka")
    with pytest.raises(ValueError, match="too few"):
        layer_grid(A[:, :6], B[:, :6], metric="mutual_knn", k=10)
    with pytest.raises(ValueError, match="does not take"):
        layer_grid(A, B, metric="cka", kk=3)
    bad = A.copy()
    bad[1, 4, 2] = np.nan
    with pytest.raises(ValueError, match=r"A\[layer 1\].*NaN"):
        layer_grid(bad, B, metric="cka")


def test_best_cell():
    g = np.array([[0.1, 0.5], [np.nan, 0.3]])
    assert best_cell(g) == (0, 1, 0.5)
    assert best_cell(g, higher_is_better=False) == (0, 0, 0.1)
    with pytest.raises(ValueError, match="finite"):
        best_cell(np.full((2, 2), np.nan))
