"""How many BLAS threads per-layer work gets: one for small layers, whose products a second thread
mostly waits on; the whole pool for large ones. Shared by the engine (layer status) and the profiles.

``analyze_store`` itself holds one thread for the whole analysis (its numbers must not depend on
``--jobs``), so inside it :func:`blas_threads_for` keeps one thread for large layers too; it
matters to callers of the engine outside an analysis (benchmarks, notebooks)."""

from __future__ import annotations

_BLAS = None

#: per-layer work ``N · d · min(N, d)`` (about the flops of a layer's Gram, eigensolve and
#: distance products) from which the BLAS pool keeps its threads. Measured on the 2-core machine,
#: two threads against one: N = 1024, d = 768 (6·10⁸): layer status 67 → 47 ms, uniformity
#: 22 → 18 ms, LID 33 → 31 ms; d = 384 (1.5·10⁸): LID 22 → 25 ms, the rest within 5 %; smaller
#: layers lose up to 2-3x. Worker processes are held at one thread whatever this says.
THREADED_LAYER_WORK = 1 << 28


def blas_threads_for(shape):
    """A context for per-layer work on layers of ``shape`` ``(..., N, d)``: :func:`one_blas_thread`
    below :data:`THREADED_LAYER_WORK`, else the BLAS pool as it is (all cores in a serial analyze,
    one thread in a ``--jobs`` worker)."""
    import contextlib

    n, d = int(shape[-2]), int(shape[-1])
    return contextlib.nullcontext() if n * d * min(n, d) >= THREADED_LAYER_WORK else one_blas_thread()


def load_pooled_libraries() -> None:
    """Import the libraries the analysis loads lazily that bring thread pools of their own (faiss:
    its OpenBLAS and OpenMP), so that a limit set now covers them. threadpoolctl limits only the
    libraries loaded when it looks: faiss imported later searched on every core while the analysis
    held one (many small k-NN searches on a busy machine then spend most of their time in OpenMP
    waits; bench/README.md keeps the timings)."""
    from analysis.metrics.neighbors_faiss import faiss_module

    faiss_module()  # None where faiss is not installed: nothing to load


def one_blas_thread():
    """A context limiting the BLAS (and OpenMP) pools of the loaded libraries, faiss's included
    (:func:`load_pooled_libraries`), to one thread. The controller is made once: finding the
    libraries costs milliseconds, limiting them microseconds."""
    global _BLAS
    if _BLAS is None:
        from threadpoolctl import ThreadpoolController

        load_pooled_libraries()
        _BLAS = ThreadpoolController()
    return _BLAS.limit(limits=1)
