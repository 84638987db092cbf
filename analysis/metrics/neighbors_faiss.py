"""faiss routes of the k-NN search: exact float32 candidates, and the approximate index.

Exact route: ``faiss.knn`` with ``METRIC_INNER_PRODUCT`` is faiss's exhaustive search
(the kernel behind ``IndexFlatIP.search``, without the index's copy of the rows): a blocked float32
sgemm and a heap per query. It only replaces the float32 similarities and top-c of
:class:`analysis.metrics.neighbors._Float32Sims`; the proof and the float64 re-rank of
:func:`analysis.metrics.neighbors._settle` run unchanged, so the lists stay exact in float64 with
ties to the lower index. The error bound ``E`` holds for faiss's values as for numpy's: Higham's
``γ_d`` bound covers any summation order, blocked or SIMD, with or without FMA (Higham, *Accuracy
and Stability of Numerical Algorithms*, 2nd ed., §3.1).

faiss does not know which columns are excluded (the row itself and its own group), so each query
asks for ``c + 1 + g`` columns (``g`` the largest group, 1 without groups): at most ``g`` of them
are excluded, which leaves at least ``c + 1`` valid ones, the first ``c`` the candidates and the
next one's value ``nxt``, an upper bound on every column left out (faiss returns the largest values;
a column not returned is at most the last value returned).
"""

from __future__ import annotations

import numpy as np

#: query rows per ``faiss.knn`` call: bounds the ``(rows, c + 1 + g)`` result arrays and the copy
#: of non-contiguous query rows; faiss blocks its sgemm internally (4096 queries × 1024 rows)
FAISS_QUERY_ROWS = 1 << 14


def faiss_module():
    """faiss, or None when it is not installed (the numpy route then runs)."""
    try:
        import faiss
    except ImportError:
        return None
    return faiss


def largest_group(groups) -> int:
    """Columns a query may have to skip: itself, or its whole group (the largest one)."""
    if groups is None:
        return 1
    return int(np.unique(groups, return_counts=True)[1].max())


def _query_rows(A: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``A[rows]`` as a view when ``rows`` is a contiguous run (the whole layer: no N×d copy)."""
    if len(rows) and rows[-1] - rows[0] == len(rows) - 1 and np.all(np.diff(rows) == 1):
        return A[rows[0]:rows[-1] + 1]
    return np.ascontiguousarray(A[rows])


def faiss_top(A: np.ndarray, rows: np.ndarray, c: int, groups, extra: int):
    """``(cand, vals, nxt)`` as :meth:`analysis.metrics.neighbors._Float32Sims.top`: for each of
    ``rows``, the ``c`` columns of largest float32 inner product ``A[row] · A[col]`` other than the
    row and its group, their values, and an upper bound ``nxt`` on the value of every other column.

    ``A``: ``(N, d)`` float32 unit rows, C-contiguous; needs ``c + 1 + extra <= N`` (``extra`` =
    :func:`largest_group`). Memory: ``FAISS_QUERY_ROWS · (c + 1 + extra)`` results per call.
    """
    import faiss

    take = c + 1 + extra
    if take > A.shape[0]:
        raise ValueError(f"faiss_top needs c + 1 + extra <= N, got {take} > {A.shape[0]}")
    cand = np.empty((len(rows), c), dtype=np.int64)
    vals = np.empty((len(rows), c), dtype=np.float32)
    nxt = np.empty(len(rows), dtype=np.float32)
    for start in range(0, len(rows), FAISS_QUERY_ROWS):
        r = rows[start:start + FAISS_QUERY_ROWS]
        D, I = faiss.knn(_query_rows(A, r), A, take, metric=faiss.METRIC_INNER_PRODUCT)
        excluded = I == r[:, None]
        if groups is not None:
            excluded |= groups[I] == groups[r][:, None]
        # valid columns first, each keeping faiss's order (largest first); at most `extra` excluded
        order = np.argsort(excluded, axis=1, kind="stable")
        I, D = np.take_along_axis(I, order, axis=1), np.take_along_axis(D, order, axis=1)
        stop = start + len(r)
        cand[start:stop], vals[start:stop] = I[:, :c], D[:, :c]
        # every valid column after the first c is bounded by the largest valid value among them
        # (faiss's order makes that D[:, c]; the max does not rely on it), and every column not
        # returned by the smallest value faiss returned
        tail = np.where(np.take_along_axis(excluded, order, axis=1)[:, c:], -np.inf, D[:, c:])
        nxt[start:stop] = np.maximum(tail.max(axis=1), D.min(axis=1))
    return cand, vals, nxt


def principal_directions(A: np.ndarray, p: int, rows: np.ndarray) -> np.ndarray:
    """``(d, p)`` float32: the ``p`` leading eigenvectors of the uncentred second moment
    ``Σ_i a_i a_iᵀ`` over ``A[rows]`` (float64 sums; largest eigenvalue first).

    Uncentred because the search ranks inner products: for unit rows ``a·b = (Va)·(Vb) + r_a·r_b``
    with residuals ``r`` orthogonal to ``V``, and these directions minimise ``Σ ||r_i||²`` over
    ``p``-dim subspaces (Eckart–Young), so the projected inner product misses the least on average.
    """
    d = A.shape[1]
    M = np.zeros((d, d))
    for start in range(0, len(rows), 4096):
        B = A[rows[start:start + 4096]].astype(np.float64)
        M += B.T @ B
    with _one_lapack_thread():
        _, vecs = np.linalg.eigh(M)  # ascending eigenvalues
    return np.ascontiguousarray(vecs[:, ::-1][:, :p], dtype=np.float32)


def _one_lapack_thread():
    """One BLAS/LAPACK thread for a ``d × d`` eigensolve (numpy's LAPACK): at d = 768 it takes
    0.35 s on one thread and 3.5 s on two cores shared with other work (measured on the 2-core VM).
    :func:`analysis.metrics.base.one_blas_thread`: it holds on whichever thread solves."""
    from analysis.metrics.base import one_blas_thread

    return one_blas_thread()


def projected_candidates(P: np.ndarray, rows: np.ndarray, take: int):
    """``(take,)`` columns per row of largest projected inner product ``P[row] · P[col]`` (faiss's
    exhaustive search in the ``p`` projected dimensions), the row itself and its group included.

    faiss's default blocks (4096 queries × 1024 rows) are kept: 256-query blocks looked 3.5x faster
    under ``OMP_WAIT_POLICY=PASSIVE`` but cost 7x the CPU with the default (spinning) OpenMP
    threads (N = 16,384, p = 64, 2-core VM at load 18: 2.4 s CPU against 16.7 s).
    """
    import faiss

    _, I = faiss.knn(_query_rows(P, rows), P, take, metric=faiss.METRIC_INNER_PRODUCT)
    return I
