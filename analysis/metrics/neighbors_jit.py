"""Compiled float64 pair arithmetic for neighbour work (numba, a dependency of umap-learn): the
cosines of listed row pairs (CKNNA's kernel values) and the exact squared distances of a row's
near candidates (LID's neighbour distances, :func:`analysis.metrics.single.knn_distances`).

:func:`analysis.metrics.neighbors.cosines64_rows` needs ``s(i, j) = (x_i · x_j) / (||x_i|| ||x_j||)`` for
every row and its ``c`` listed neighbours, accumulated in float64 from the stored (usually float32)
rows. numpy can only do that by gathering the ``N c`` neighbour rows first (``N c d`` values,
30 MB a layer at N = 1024, k = 10, d = 768): the gather, not the arithmetic, set its cost
(~6.7 ms a layer). Here each pair's dot product reads the two rows in place, and when ``i`` is in
``j``'s list too the value computed for ``(j, i)`` is reused (the dot is symmetric bit for bit),
which on k-NN lists skips most pairs; the eight running sums below are one vector of eight
float64 lanes (:func:`_lanes8_intrinsic`): ~0.9 ms a layer, 2.6x less than the same sums as
scalars (N = 1024, k = 10, d = 768, one core).

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
    # lanes8, dot8 and sqdist8 become module globals, not closure cells of the kernels that call them:
    # numba keys its on-disk cache on a closure's pickled cells, and a dispatcher pickles differently
    # in every process, so a kernel closing over them missed the cache and compiled again in every
    # process (~3 s of CPU for the two, paid by every analyze run and job).
    global _dot8, _sqdist8, _lanes8

    _lanes8 = _lanes8_intrinsic(numba)

    @numba.njit(cache=True, nogil=True)
    def dot8(xi, xj, d):  # pragma: no cover - compiled
        # xi, xj C-contiguous (the intrinsic reads 8 entries at a time)
        body = d - d % 8
        a0, a1, a2, a3, a4, a5, a6, a7 = _lanes8(xi, xj, body)
        for t in range(body, d):
            a0 += xi[t] * np.float64(xj[t])
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


def _lanes8_intrinsic(numba):
    """``lanes8(xi, xj, body)``: the eight running sums of the module docstring over the first
    ``body`` (a multiple of 8) terms, as one ``<8 x double>`` vector in LLVM IR: lane ``l`` adds
    ``xi[t] * xj[t]`` for ``t ≡ l (mod 8)`` in order of ``t``, the very adds of eight scalar
    running sums, so the same bits; one vector multiply and add per 8 terms instead of 8 of each.
    numba leaves LLVM's SLP vectoriser off, so the scalar form stayed scalar (~2.6x slower). No
    fast-math flags: LLVM may neither reassociate nor fuse the multiply into the add (for float32
    rows the fused form would round the same, the products being exact; for float64 ones not).
    ``xi``: float64, ``xj``: float32 or float64, both 1-D and C-contiguous."""
    from llvmlite import ir
    from numba.core import types
    from numba.extending import intrinsic

    @intrinsic
    def lanes8(typingctx, xi, xj, body):
        arrays = (xi, xj)
        if not (all(isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" for a in arrays)
                and xi.dtype == types.float64 and xj.dtype in (types.float32, types.float64)
                and isinstance(body, types.Integer)):
            return None  # numba then reports the argument types it could not match
        sig = types.UniTuple(types.float64, 8)(xi, xj, body)

        def codegen(context, builder, signature, args):
            ai = context.make_array(xi)(context, builder, args[0])
            aj = context.make_array(xj)(context, builder, args[1])
            stop = context.cast(builder, args[2], body, types.intp)
            intp = context.get_value_type(types.intp)
            vec = ir.VectorType(ir.DoubleType(), 8)
            single = xj.dtype == types.float32
            src = ir.VectorType(ir.FloatType() if single else ir.DoubleType(), 8)
            head = builder.basic_block
            loop, step, done = (builder.append_basic_block(f"lanes8.{n}") for n in ("loop", "step", "done"))
            builder.branch(loop)
            builder.position_at_end(loop)
            t, acc = builder.phi(intp), builder.phi(vec)
            t.add_incoming(ir.Constant(intp, 0), head)
            acc.add_incoming(ir.Constant(vec, [0.0] * 8), head)
            builder.cbranch(builder.icmp_signed("<", t, stop), step, done)
            builder.position_at_end(step)
            vi = builder.load(builder.bitcast(builder.gep(ai.data, [t]), vec.as_pointer()), align=8)
            vj = builder.load(builder.bitcast(builder.gep(aj.data, [t]), src.as_pointer()), align=4 if single else 8)
            if single:
                vj = builder.fpext(vj, vec)  # exact
            t.add_incoming(builder.add(t, ir.Constant(intp, 8)), step)
            acc.add_incoming(builder.fadd(acc, builder.fmul(vi, vj)), step)
            builder.branch(loop)
            builder.position_at_end(done)
            lanes = [builder.extract_element(acc, ir.Constant(ir.IntType(32), lane)) for lane in range(8)]
            return context.make_tuple(builder, signature.return_type, lanes)

        return sig, codegen

    return lanes8


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
