"""Compiled float64 cosines of listed row pairs (numba, a dependency of umap-learn).

:func:`analysis.neighbors.cosines64_rows` needs ``s(i, j) = (x_i · x_j) / (||x_i|| ||x_j||)`` for
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
plain add does. Where numba is missing or ``LAYERSCOPE_NO_JIT`` is set, the numpy routine runs.
"""

from __future__ import annotations

import os

import numpy as np

LANES = 8
_KERNEL = None
_TRIED = False


def kernel():
    """The compiled ``pair_cosines`` function, or None where numba cannot be used."""
    global _KERNEL, _TRIED
    if _TRIED:
        return _KERNEL
    _TRIED = True
    if os.environ.get("LAYERSCOPE_NO_JIT"):
        return None
    try:
        import numba
    except ImportError:  # pragma: no cover - numba comes with umap-learn
        return None

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
                    out[i, s] = dot8(xi, X[j], d) / (norms[own] * norms[j])
        return out

    _KERNEL = pair_cosines
    return _KERNEL


def lane_dots(own: np.ndarray, nbrs: np.ndarray) -> np.ndarray:
    """``(r, c)`` dot products of ``own`` ``(r, d)`` with ``nbrs`` ``(r, c, d)`` in the compiled
    kernel's summation order (the module docstring), for the numpy path."""
    r, c, d = nbrs.shape
    p = nbrs.astype(np.float64)
    p *= own.astype(np.float64)[:, None, :]
    body = d - d % LANES
    lanes = np.zeros((r, c, LANES))
    for t0 in range(0, body, LANES):  # sequential per lane, as the compiled loop adds
        lanes += p[:, :, t0:t0 + LANES]
    for t in range(body, d):
        lanes[:, :, 0] += p[:, :, t]
    a = lanes
    return ((a[..., 0] + a[..., 1]) + (a[..., 2] + a[..., 3])) + ((a[..., 4] + a[..., 5]) + (a[..., 6] + a[..., 7]))
