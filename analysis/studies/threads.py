"""How many BLAS threads per-layer work gets: one for small layers, whose products a second thread
mostly waits on; the whole pool for large ones. Shared by the engine (layer status) and the profiles.

``analyze_store`` itself holds one thread for the whole analysis (its numbers must not depend on
``--jobs``), so inside it :func:`blas_threads_for` keeps one thread for large layers too; it
matters to callers of the engine outside an analysis (benchmarks, notebooks). The hold itself is
:func:`analysis.metrics.base.one_blas_thread`."""

from __future__ import annotations

import contextlib

from analysis.metrics.base import one_blas_thread

#: per-layer work ``N · d · min(N, d)`` (about the flops of a layer's Gram, eigensolve and
#: distance products) from which the BLAS pool keeps its threads. Measured on the 2-core machine,
#: two threads against one: N = 1024, d = 768 (6·10⁸): layer status 67 → 47 ms, uniformity
#: 22 → 18 ms, LID 33 → 31 ms; d = 384 (1.5·10⁸): LID 22 → 25 ms, the rest within 5 %; smaller
#: layers lose up to 2-3x. Worker processes are held at one thread whatever this says.
THREADED_LAYER_WORK = 1 << 28


def blas_threads_for(shape):
    """A context for per-layer work on layers of ``shape`` ``(..., N, d)``: below
    :data:`THREADED_LAYER_WORK` the BLAS and OpenMP pools held at one thread
    (``one_blas_thread(openmp=True)``, on whichever thread takes it), else the pools as they are
    (all cores in a serial analyze, one thread in a ``--jobs`` worker)."""
    n, d = int(shape[-2]), int(shape[-1])
    return contextlib.nullcontext() if n * d * min(n, d) >= THREADED_LAYER_WORK else one_blas_thread(openmp=True)
