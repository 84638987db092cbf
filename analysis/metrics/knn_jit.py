"""Compiled inner loops of k-NN pair scoring (numba, a dependency of umap-learn): CKNNA's sums,
mutual k-NN's shared counts, reciprocal slots.

The numpy routine (``knn._masked_cross_table``) finds the shared neighbours of an A layer and a
B layer with one slot-table lookup per entry, then spends ~20 array passes over the shared
entries (index arithmetic, gathers, ``bincount``s): about 100 ns per shared entry, 20 ms per
9×9-layer pair of runs at N = 512 when half the lists agree. Here the same sums are one pass in
compiled code (~4 ns per A entry and B layer), matching lists through a per-row mark array
instead of the ``N²`` slot table, so it runs at any N. The sums are accumulated in the numpy routine's order (per
(B layer, A layer) bin, by row i then slot in A), so both give the same bits (tests compare);
where numba is missing or ``LAYERSCOPE_NO_JIT`` is set, the numpy routine runs.
"""

from __future__ import annotations

import numpy as np

from analysis.metrics.jit import Kernels


def kernel():
    """The compiled ``cross_sums`` function, or None where numba cannot be used."""
    return _KERNELS.get("cross_sums")


def recip_kernel():
    """The compiled ``reciprocal_slots`` function, or None where numba cannot be used."""
    return _KERNELS.get("reciprocal_slots")


def counts_kernel():
    """The compiled ``shared_counts`` function (mutual k-NN), or None where numba cannot be used."""
    return _KERNELS.get("shared_counts")


def _build(numba) -> dict:
    """This module's kernels, compiled with ``numba`` (:class:`analysis.metrics.jit.Kernels`)."""
    return {**_build_sums(numba), **_build_counts(numba)}


def _build_counts(numba) -> dict:
    """``shared_counts`` (mutual k-NN) and ``reciprocal_slots``."""

    @numba.njit(cache=True, nogil=True)
    def shared_counts(idx_a, idx_b):  # pragma: no cover - compiled
        # (La, G) neighbours shared per (A layer, B layer), summed over rows: per row i, mark[j, t]
        # says whether j is in row i's list in B layer t (set from B's lists, cleared after the row)
        la, n, k = idx_a.shape
        g = idx_b.shape[0]
        counts = np.zeros((la, g), np.int64)
        mark = np.zeros((n, g), np.uint8)
        for i in range(n):
            for t in range(g):
                for s in range(k):
                    mark[idx_b[t, i, s], t] = 1
            for a in range(la):
                for s in range(k):
                    j = idx_a[a, i, s]
                    for t in range(g):
                        counts[a, t] += mark[j, t]
            for t in range(g):
                for s in range(k):
                    mark[idx_b[t, i, s], t] = 0
        return counts

    @numba.njit(cache=True, nogil=True)
    def reciprocal_slots(idx):  # pragma: no cover - compiled
        # the slot of i in the list of each neighbour j = idx[i, s], or -1 (k reads of row j)
        n, k = idx.shape
        out = np.full((n, k), -1, np.int64)
        for i in range(n):
            for s in range(k):
                j = idx[i, s]
                for q in range(k):
                    if idx[j, q] == i:
                        out[i, s] = q
                        break
        return out

    return {"reciprocal_slots": reciprocal_slots, "shared_counts": shared_counts}


def _build_sums(numba) -> dict:
    """``cross_sums``: CKNNA's sums."""

    @numba.njit(cache=True, nogil=True)
    def cross_sums(idx_a, sim_a, rec_a, idx_b, sims_b, rec_b):  # pragma: no cover - compiled
        # per row i: mark[j, t] = slot of j in row i's list in B layer t (-1: absent), set from
        # B's lists and cleared after the row, so the matches of an A entry in all G layers of B
        # are G adjacent reads of a small array that stays in cache (no N² table). Sums are kept
        # (A layer, [row,] B layer); within each (A layer, B layer) bin entries come by row i,
        # then slot in A, the numpy routines' order.
        la, n, k = idx_a.shape
        g = idx_b.shape[0]
        trace = np.zeros((la, g))
        colsum = np.zeros((la, n, g))
        rowsum = np.zeros((la, n, g))
        counts = np.zeros((la, g), np.int64)
        mark = np.full((n, g), -1, np.int32)
        for i in range(n):
            for t in range(g):
                for s in range(k):
                    mark[idx_b[t, i, s], t] = s
            for a in range(la):
                for s in range(k):
                    j = idx_a[a, i, s]
                    kv = sim_a[a, i, s]
                    both_a = rec_a[a, i, s]
                    for t in range(g):
                        # no branch on the match (shared or not is a coin flip: mispredictions
                        # cost 40 % of the loop): a miss adds kv·0 and l·0, i.e. ±0 to finite
                        # sums that start at +0 and so never hold −0, which leaves them the same bits
                        pb = mark[j, t]
                        hit = pb >= 0
                        q = pb if hit else 0
                        w = 1.0 if hit else 0.0
                        lv = sims_b[t, i, q] * w
                        counts[a, t] += hit
                        colsum[a, j, t] += kv * w
                        rowsum[a, i, t] += lv
                        trace[a, t] += kv * lv if (both_a and rec_b[t, i, q]) else 0.0
            for t in range(g):
                for s in range(k):
                    mark[idx_b[t, i, s], t] = -1
        return trace, colsum, rowsum, counts

    return {"cross_sums": cross_sums}


_KERNELS = Kernels(_build)
