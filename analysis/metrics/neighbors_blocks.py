"""Symmetric blocked self-search: the float32 top-c of every row against every other row, each
block of ``A·Aᵀ`` computed once.

A self-search compares each pair of rows twice: ``s̃(i, j)`` in row i's list and ``s̃(j, i)`` in
row j's. faiss's exhaustive search (``IndexFlatIP``) computes both, ``2 N² d`` flops. Here the rows
are cut into blocks of ``b`` rows; block ``I`` is multiplied once with itself and every later row
(``S = A_I · A_{I0:}ᵀ``, one float32 sgemm), and ``S`` feeds two selections:

* *rows*: each row of block I scans its row of ``S`` (its own block's columns and every later
  column) into its heap;
* *columns*: each later row j (columns of ``S`` right of the diagonal block) scans its column of
  ``S`` (the rows of block I) into its heap: the pairs ``(j, i)`` that j's own block, computed
  later, no longer covers.

Every ordered pair is scanned once, from one product: about ``N² d`` flops, half of faiss's. The
heaps are per-row min-heaps of the ``c + 1`` largest values (numba, compiled once, cached on disk):
a value enters when it beats the row's smallest (strictly), so after warm-up nearly every entry is
one comparison against a threshold held in a contiguous array (runs of ``CHUNK`` entries are
tested at once). Threads (as many as the BLAS pool has: one inside ``analyze``): each thread
computes a slice of block I's rows of ``S`` and feeds those rows' heaps at once; then the later
rows' columns are split between the threads. Every task writes heaps no other task touches, and
each heap sees its entries in one fixed order, so the answer does not depend on the threads.

Where it serves (``analysis.metrics.neighbors``): whole-layer exact searches from N = 2048
(``SYMMETRIC_MIN_ROWS``), and the approximate search's subspace, every row at once. Measured on
the 2-core VM (bench/README.md): 0.81× faiss's ``IndexFlatIP`` at N = 16,384 and 0.70× at 65,536
(``bench/grid.py --scaling``, proof and float64 re-rank included on our side).

What comes out is what :meth:`analysis.metrics.neighbors._Float32Sims.top` returns for all rows:
per row the ``c`` candidates, their values, and ``nxt``, the heap's smallest (the ``(c+1)``-th
largest value: every column not in the heap is at most it). Each value is one float32 product
of the two unit rows, within the bound ``E`` of the float64 cosine whatever the summation order
(Higham §3.1), so the proof and the float64 re-rank of ``_settle`` apply unchanged and the lists
are the exact route's, bit for bit. The row itself and its group are never entered.

Memory: the ``(N, c + 1)`` heaps (values float32, columns int64: 52 MB at N = 100k, c = 42) and
one block of ``S``, at most ``BLOCK_ENTRIES`` float32 (128 MB).
"""

from __future__ import annotations

import numpy as np

from analysis.metrics.jit import Kernels

#: Block height: ``N / 4`` rows, at most ``MAX_BLOCK_ROWS`` and ``BLOCK_ENTRIES // N`` (one block
#: of ``S`` within 128 MB), at least ``MIN_BLOCK_ROWS``. Measured on the 2-core VM, d = 768, ms a
#: layer (block rows): N = 2048: 35 (512) against 51 (2048, one block); N = 4096: 93 (1024)
#: against 193 (one block); N = 16,384: 972 (1024) against 1,121 (256); faiss: 36, 110, ~1,200.
BLOCK_ENTRIES = 1 << 25
MAX_BLOCK_ROWS = 1024
#: rows per block at least: below this the sgemm's shape, not its flops, sets its speed
MIN_BLOCK_ROWS = 256
#: entries tested at once before any is walked (a compiled constant: changing it needs a recompile)
CHUNK = 32


def available() -> bool:
    """Whether the compiled heaps can run (numba present and not switched off)."""
    return _KERNELS.get("rows_update") is not None


def _build(numba) -> dict:
    """This module's kernels, compiled with ``numba`` (:class:`analysis.metrics.jit.Kernels`)."""
    return {**_build_heaps(numba), **_build_dots(numba)}


def _build_heaps(numba) -> dict:
    """``rows_update`` and ``cols_update``, and the heap ``push`` they share (a module global)."""
    global _push

    @numba.njit(cache=True, nogil=True)
    def push(hv, hi, thr, row, v, col):  # pragma: no cover - compiled
        # replace the root (smallest) of row's min-heap with (v, col), sift down, refresh thr[row]
        h = hv.shape[1]
        pos = 0
        while True:
            child = 2 * pos + 1
            if child >= h:
                break
            if child + 1 < h and hv[row, child + 1] < hv[row, child]:
                child += 1
            if hv[row, child] >= v:
                break
            hv[row, pos] = hv[row, child]
            hi[row, pos] = hi[row, child]
            pos = child
        hv[row, pos] = v
        hi[row, pos] = col
        thr[row] = hv[row, 0]

    _push = push

    @numba.njit(cache=True, nogil=True)
    def rows_update(S, r0, c0, i0, i1, hv, hi, thr, groups, grouped):  # pragma: no cover - compiled
        # rows r0 + i (i in [i0, i1)) take the entries of their row of S (columns c0 + j); a run of
        # CHUNK entries is first tested as a whole (one vectorised compare-and-or, no branch per
        # entry), and only a run holding an entry above the threshold is walked
        m = S.shape[1]
        for i in range(i0, i1):
            row = r0 + i
            t = thr[row]
            for j0 in range(0, m, CHUNK):
                j1 = min(m, j0 + CHUNK)
                hit = False
                for j in range(j0, j1):
                    hit |= S[i, j] > t
                if not hit:
                    continue
                for j in range(j0, j1):
                    v = S[i, j]
                    if v > t:
                        col = c0 + j
                        if col == row or (grouped and groups[col] == groups[row]):
                            continue
                        _push(hv, hi, thr, row, v, col)
                        t = thr[row]

    @numba.njit(cache=True, nogil=True)
    def cols_update(S, r0, c0, j0, j1, hv, hi, thr, groups, grouped):  # pragma: no cover - compiled
        # rows c0 + j (j in [j0, j1)) take the entries of their column of S (rows r0 + i), a run of
        # CHUNK columns tested as a whole against their thresholds first (as in rows_update)
        b = S.shape[0]
        for i in range(b):
            src = r0 + i
            for a0 in range(j0, j1, CHUNK):
                a1 = min(j1, a0 + CHUNK)
                hit = False
                for j in range(a0, a1):
                    hit |= S[i, j] > thr[c0 + j]
                if not hit:
                    continue
                for j in range(a0, a1):
                    v = S[i, j]
                    col = c0 + j
                    if v > thr[col]:
                        if grouped and groups[col] == groups[src]:
                            continue
                        _push(hv, hi, thr, col, v, src)

    return {"rows_update": rows_update, "cols_update": cols_update}


def _build_dots(numba) -> dict:
    """``pair_dots``: the float32 products of each row with its candidates."""

    @numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
    def pair_dots(A, rows, cand, out, r0, r1):  # pragma: no cover - compiled
        # out[i, j] = A[rows[i]] · A[cand[i, j]] in float32 for i in [r0, r1), rows read in place;
        # reassociation lets the sum run in vector lanes: any order is within the bound E
        d = A.shape[1]
        for i in range(r0, r1):
            a = A[rows[i]]
            for j in range(cand.shape[1]):
                b = A[cand[i, j]]
                acc = np.float32(0.0)
                for t in range(d):
                    acc += a[t] * b[t]
                out[i, j] = acc

    return {"pair_dots": pair_dots}


_KERNELS = Kernels(_build)


def selection_threads() -> int:
    """Threads for the selections: the BLAS pool's size as it is now (one inside ``analyze``, which
    holds one thread, and in its workers; the machine's cores elsewhere), so the selections never
    use more cores than the sgemm they follow."""
    from analysis.metrics.base import blas_threads

    return blas_threads()


def block_rows(n: int) -> int:
    """Rows per block for a layer of ``n`` rows (see ``BLOCK_ENTRIES``); ``n`` itself: one block."""
    return min(n, max(MIN_BLOCK_ROWS, min(MAX_BLOCK_ROWS, n // 4, BLOCK_ENTRIES // max(1, n))))


def symmetric_top(A: np.ndarray, c: int, groups=None, *, threads: int | None = None):
    """``(cand, vals, nxt)`` for every row of ``A``: the ``c`` columns of largest float32 inner
    product other than the row and its group (unordered), their values, and ``nxt`` the
    ``(c+1)``-th largest (an upper bound on every column not returned).

    ``A``: ``(N, d)`` float32 unit rows, C-contiguous; ``c + 1 + g <= N`` (``g`` the largest group,
    1 without groups) so every heap fills. ``groups``: ``(N,)`` labels or None. ``threads``: None
    reads :func:`selection_threads` (only when the layer spans several blocks). Rows whose heap
    did not fill (non-finite values) get ``nxt = +inf``: the caller's proof then sends them to a
    wider search. Needs numba (:func:`available`).
    """
    rows_update = _KERNELS.get("rows_update")
    n = A.shape[0]
    h = c + 1
    hv = np.full((n, h), -np.inf, dtype=np.float32)
    hi = np.full((n, h), -1, dtype=np.int64)
    thr = np.full(n, -np.inf, dtype=np.float32)
    grouped = groups is not None
    g = np.asarray(groups, dtype=np.int64) if grouped else np.zeros(1, dtype=np.int64)
    b = block_rows(n)
    if b >= n:
        S = A @ A.T
        rows_update(S, 0, 0, 0, n, hv, hi, thr, g, grouped)
    else:
        threads = selection_threads() if threads is None else max(1, int(threads))
        _blocks(A, b, hv, hi, thr, g, grouped, threads)
    # the root is the smallest of the c + 1: nxt; the other c are the candidates
    nxt = hv[:, 0].copy()
    nxt[(hi < 0).any(axis=1)] = np.inf
    return hi[:, 1:].copy(), hv[:, 1:].copy(), nxt


def _blocks(A, b, hv, hi, thr, g, grouped, threads):
    """The blocks of ``A·Aᵀ`` on ``threads`` threads of our own, BLAS held at one thread: each
    block's sgemm in row parts, then its selections over disjoint heaps. One pool for both
    because BLAS's own threads spin after each product (OpenBLAS's wait policy) and would take
    the cores the selections need. The hold (:func:`analysis.metrics.base.one_blas_thread`) takes
    on whichever thread runs the search, and is shared with any other holder."""
    import contextlib
    from concurrent.futures import ThreadPoolExecutor

    from analysis.metrics.base import one_blas_thread

    rows_update, cols_update = _KERNELS.get("rows_update"), _KERNELS.get("cols_update")
    n = A.shape[0]
    S_buf = np.empty(b * n, dtype=np.float32)

    def rows_part(r0, a, e, S):
        # rows a..e of the block: their slice of S, then their own heaps from it (no wait between)
        np.matmul(A[r0 + a:r0 + e], A[r0:].T, out=S[a:e])
        rows_update(S, r0, r0, a, e, hv, hi, thr, g, grouped)

    def run(pool, fn, calls):
        if pool is None:  # one thread: no pool, BLAS left as the caller set it
            for args in calls:
                fn(*args)
        else:
            for fut in [pool.submit(fn, *args) for args in calls]:
                fut.result()

    with contextlib.ExitStack() as stack:
        pool = None
        if threads > 1:
            stack.enter_context(one_blas_thread())
            pool = stack.enter_context(ThreadPoolExecutor(threads))
        for r0 in range(0, n, b):
            r1 = min(n, r0 + b)
            S = S_buf[:(r1 - r0) * (n - r0)].reshape(r1 - r0, n - r0)
            run(pool, rows_part, [(r0, a, e, S) for a, e in _cuts(r1 - r0, threads)])
            # the later rows' heaps from their columns of S: every row of S must be there first
            run(pool, cols_update, [(S, r0, r0, a, e, hv, hi, thr, g, grouped)
                                    for a, e in _cuts(n - r1, threads, offset=r1 - r0)])


def _cuts(size: int, parts: int, offset: int = 0):
    """``parts`` contiguous ``(start, stop)`` ranges covering ``[offset, offset + size)``."""
    edges = np.linspace(0, size, min(parts, max(1, size)) + 1).round().astype(int) + offset
    return [(int(a), int(e)) for a, e in zip(edges[:-1], edges[1:]) if e > a]


def pair_values(A: np.ndarray, rows: np.ndarray, cand: np.ndarray, threads: int | None = None) -> np.ndarray:
    """``(r, c)`` float32 inner products ``A[rows[i]] · A[cand[i, j]]`` of float32 unit rows, each
    row read in place (no ``(r, c, d)`` gather), on :func:`selection_threads` threads: the values the
    exact route's proof works on for listed pairs (``s̃``, within ``E`` of ``s`` in any summation
    order). Needs numba (:func:`available`)."""
    kernel = _KERNELS.get("pair_dots")
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    cand = np.ascontiguousarray(cand, dtype=np.int64)
    out = np.empty(cand.shape, dtype=np.float32)
    threads = selection_threads() if threads is None else max(1, int(threads))
    parts = _cuts(len(rows), threads) if len(rows) >= 4096 else [(0, len(rows))]
    if len(parts) == 1:
        kernel(A, rows, cand, out, 0, len(rows))
        return out
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(parts)) as pool:
        for fut in [pool.submit(kernel, A, rows, cand, out, a, e) for a, e in parts]:
            fut.result()
    return out
