"""The compiled kernels load from numba's on-disk cache in a new process (issue #30: every analyze
run and every test worker compiled two of them again, ~3 s of CPU each time)."""

import pytest

from analysis.metrics import knn_jit, neighbors_jit


@pytest.mark.parametrize("module, name", [(neighbors_jit, "pair_cosines"), (neighbors_jit, "near_sqdists"),
                                          (knn_jit, "cross_sums"), (knn_jit, "reciprocal_slots"),
                                          (knn_jit, "shared_counts")])
def test_no_kernel_closes_over_a_cell(module, name, monkeypatch):
    # numba's cache key hashes a closure's pickled cells; a dispatcher in a cell pickles differently in
    # each process, so such a kernel never hits its cache. Globals are not part of the key.
    monkeypatch.delenv("LAYERSCOPE_NO_JIT", raising=False)
    kernel = module._KERNELS.get(name)
    assert kernel is not None, f"{module.__name__}.{name}: numba (a dependency of umap-learn) is missing"
    assert kernel._cache is not None and type(kernel._cache).__name__ == "FunctionCache", f"{name} is not cached"
    cells = kernel.py_func.__closure__
    assert cells is None, f"{name} closes over {[c.cell_contents for c in cells]}"
