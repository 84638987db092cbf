"""Optional compiled inner loops: numba (a dependency of umap-learn), loaded once, on first use.

The modules with compiled kernels (:mod:`analysis.metrics.neighbors_jit`, :mod:`analysis.metrics.knn_jit`)
each keep a :class:`Kernels`; where numba is missing or ``LAYERSCOPE_NO_JIT`` is set, every kernel
is None and callers run their numpy routines, which give the same bits (tests compare).
"""

from __future__ import annotations

import os


def numba_module():
    """numba, or None where it cannot be used (not installed, or ``LAYERSCOPE_NO_JIT`` set)."""
    if os.environ.get("LAYERSCOPE_NO_JIT"):
        return None
    try:
        import numba
    except ImportError:  # pragma: no cover - numba comes with umap-learn
        return None
    return numba


class Kernels:
    """A module's compiled kernels: ``build(numba)`` returns ``{name: function}``, called once on
    the first :meth:`get` (compiling, or loading numba's on-disk cache, costs ~0.1 s a kernel)."""

    def __init__(self, build):
        self._build = build
        self._kernels: dict | None = None

    def get(self, name: str):
        """The compiled function ``name``, or None where numba cannot be used."""
        if self._kernels is None:
            numba = numba_module()
            self._kernels = {} if numba is None else self._build(numba)
        return self._kernels.get(name)
