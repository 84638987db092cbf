"""Compiled float64 pair arithmetic for neighbour work (numba, a dependency of umap-learn): the
cosines of listed row pairs (CKNNA's kernel values) and the exact squared distances of a row's
near candidates (LID's neighbour distances, :func:`analysis.metrics.single.knn_distances`).

:func:`analysis.metrics.neighbors.cosines64_rows` needs ``s(i, j) = (x_i · x_j) / (||x_i|| ||x_j||)`` for
every row and its ``c`` listed neighbours, accumulated in float64 from the stored (usually float32)
rows. numpy can only do that by gathering the ``N c`` neighbour rows first (``N c d`` values,
30 MB a layer at N = 1024, k = 10, d = 768): the gather, not the arithmetic, set its cost
(~6.7 ms a layer). Here each pair's dot product reads the two rows in place, and when ``i`` is in
``j``'s list too the value computed for ``(j, i)`` is reused (the dot is symmetric bit for bit),
which on k-NN lists skips most pairs: ~1.5 ms a layer.

Summation order, the same in both paths so they give the same bits (tests compare): eight
running sums, lane ``l`` adding ``p_t`` for ``t ≡ l (mod 8)`` over the first ``8 ⌊d/8⌋`` terms in
order, the tail ``t ≥ 8 ⌊d/8⌋`` added to lane 0, then ``((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7))``.
Each ``p_t = x_it x_jt`` is exact in float64 for float32 rows, so an FMA-fused add rounds as the
plain add does. Squared distances use the same lanes on ``p_t = (x_it - x_jt)²``, which is the
same bits for ``(j, i)``. Where numba is missing or ``LAYERSCOPE_NO_JIT`` is set, the numpy
routines run.
"""

from __future__ import annotations

import numpy as np

from analysis.metrics.jit import Kernels

LANES = 8


def kernel():
    """The compiled ``pair_cosines`` function, or None where numba cannot be used."""
    return _KERNELS.get("pair_cosines")


def near_kernel():
    """The compiled ``near_sqdists`` function, or None where numba cannot be used."""
    return _KERNELS.get("near_sqdists")


def _build(numba) -> dict:
    """This module's kernels, compiled with ``numba`` (:class:`analysis.metrics.jit.Kernels`)."""
    _build_products(numba)
    return _build_kernels(numba)


def _build_products(numba) -> None:
    """``dot8`` and ``sqdist8``, the 8-lane float64 products the kernels call."""
    # dot8 and sqdist8 become module globals, not closure cells of the kernels that call them:
    # numba keys its on-disk cache on a closure's pickled cells, and a dispatcher pickles differently
    # in every process, so a kernel closing over them missed the cache and compiled again in every
    # process (~3 s of CPU for the two, paid by every analyze run and job).
    global _dot8, _sqdist8

    @numba.njit(cache=True, nogil=True)
    def dot8(xi, xj, d):  # pragma: no cover - compiled
        a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = 0.0
        t = 0
        while t + 8 <= d:
            a0 += xi[t] * np.float64(xj[t])
            a1 += xi[t + 1] * np.float64(xj[t + 1])
            a2 += xi[t + 2] * np.float64(xj[t + 2])
            a3 += xi[t + 3] * np.float64(xj[t + 3])
            a4 += xi[t + 4] * np.float64(xj[t + 4])
            a5 += xi[t + 5] * np.float64(xj[t + 5])
            a6 += xi[t + 6] * np.float64(xj[t + 6])
            a7 += xi[t + 7] * np.float64(xj[t + 7])
            t += 8
        while t < d:
            a0 += xi[t] * np.float64(xj[t])
            t += 1
        return ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))

    _dot8 = dot8

    @numba.njit(cache=True, nogil=True)
    def sqdist8(xi, xj, d):  # pragma: no cover - compiled
        a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = 0.0
        t = 0
        while t + 8 <= d:
            e0 = xi[t] - xj[t]
            e1 = xi[t + 1] - xj[t + 1]
            e2 = xi[t + 2] - xj[t + 2]
            e3 = xi[t + 3] - xj[t + 3]
            e4 = xi[t + 4] - xj[t + 4]
            e5 = xi[t + 5] - xj[t + 5]
            e6 = xi[t + 6] - xj[t + 6]
            e7 = xi[t + 7] - xj[t + 7]
            a0 += e0 * e0
            a1 += e1 * e1
            a2 += e2 * e2
            a3 += e3 * e3
            a4 += e4 * e4
            a5 += e5 * e5
            a6 += e6 * e6
            a7 += e7 * e7
            t += 8
        while t < d:
            e0 = xi[t] - xj[t]
            a0 += e0 * e0
            t += 1
        return ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))

    _sqdist8 = sqdist8


def _build_kernels(numba) -> dict:
    """``pair_cosines`` and ``near_sqdists``, calling the products as module globals."""

    @numba.njit(cache=True, nogil=True)
    def pair_cosines(X, norms, rows, idx, recip, symmetric):  # pragma: no cover - compiled
        r, c = idx.shape
        d = X.shape[1]
        out = np.empty((r, c))
        xi = np.empty(d)
        for i in range(r):
            own = rows[i]
            for t in range(d):
                xi[t] = X[own, t]
            for s in range(c):
                j = idx[i, s]
                # (i, j) with i in j's list and j < i: row j's value, computed already, is the same bits
                if symmetric and j < i and recip[i, s] >= 0:
                    out[i, s] = out[j, recip[i, s]]
                else:
                    out[i, s] = _dot8(xi, X[j], d) / (norms[own] * norms[j])
        return out

    @numba.njit(cache=True, nogil=True)
    def near_sqdists(approx, limit, X, rows, k):  # pragma: no cover - compiled
        # per row r: the k smallest exact squared distances from X[rows[r]] to the columns j with
        # approx[r, j] <= limit[r], ascending (insertion into a sorted list of k)
        r_n, n = approx.shape
        d = X.shape[1]
        out = np.full((r_n, k), np.inf)
        xi = np.empty(d)
        cand = np.empty(n, np.int64)
        for r in range(r_n):
            for t in range(d):
                xi[t] = X[rows[r], t]
            lim = limit[r]
            m = 0
            for j in range(n):  # the candidates first: the exact loop then runs without the test
                if approx[r, j] <= lim:
                    cand[m] = j
                    m += 1
            best = out[r]
            for q in range(m):
                v = _sqdist8(xi, X[cand[q]], d)
                if v < best[k - 1]:
                    p = k - 1
                    while p > 0 and best[p - 1] > v:
                        best[p] = best[p - 1]
                        p -= 1
                    best[p] = v
        return out

    return {"pair_cosines": pair_cosines, "near_sqdists": near_sqdists}


def lane_dots(own: np.ndarray, nbrs: np.ndarray) -> np.ndarray:
    """``(r, c)`` dot products of ``own`` ``(r, d)`` with ``nbrs`` ``(r, c, d)`` in the compiled
    kernel's summation order (the module docstring), for the numpy path."""
    p = nbrs.astype(np.float64)
    p *= own.astype(np.float64)[:, None, :]
    return lane_sum(p)


def lane_sqdists(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(m,)`` squared distances of the rows of ``a`` and ``b`` ``(m, d)`` (float64) in the
    compiled kernel's order, for the numpy path."""
    p = a - b
    p *= p
    return lane_sum(p[:, None, :])[:, 0]


def lane_sum(p: np.ndarray) -> np.ndarray:
    """``(r, c)`` sums over the last axis of ``p`` ``(r, c, d)`` float64, in the lane order."""
    r, c, d = p.shape
    body = d - d % LANES
    lanes = np.zeros((r, c, LANES))
    for t0 in range(0, body, LANES):  # sequential per lane, as the compiled loop adds
        lanes += p[:, :, t0:t0 + LANES]
    for t in range(body, d):
        lanes[:, :, 0] += p[:, :, t]
    a = lanes
    return ((a[..., 0] + a[..., 1]) + (a[..., 2] + a[..., 3])) + ((a[..., 4] + a[..., 5]) + (a[..., 6] + a[..., 7]))


_KERNELS = Kernels(_build)
