"""Neighbourhood metrics between two spaces: mutual k-NN, cycle k-NN and CKNNA.

All three use cosine neighbours on L2-normalised rows with the item itself excluded, as in the
platonic-representation code (Huh et al., 2024, "The Platonic Representation Hypothesis").

Precision: neighbours are searched in float32 and proven (or recomputed) in float64, so they equal
an all-float64 search exactly (``analysis.metrics.neighbors.knn_search``); CKNNA's kernel values are
float64 cosines. Ties are broken by the lower item index.
With ``knn="ann"`` the lists come from faiss's search in a principal subspace instead (approximate; its
recall against the exact search is measured on a sample and kept on each state, see
``knn_summary``).

Collapsed layers: when every row of a layer is the same point after normalisation (or all rows
are zero), all cosines are equal and "the k nearest" is decided by tie-breaking alone; the old
scores were artefacts of index order (mutual k-NN gave a believable 0.387 on identical vectors).
Every score involving such a layer is NaN. The check is ``analysis.metrics.neighbors.is_collapsed`` /
``collapse_check`` (to be pointed at the shared definition in ``analysis/metrics/degenerate.py``).

Tie-decided layers: where at least half the rows have their list drawn by tie-breaking (more than k
other rows pointing the same way, or a zero row: ``analysis.metrics.degenerate.tied_lists``), the lists
measure the index order, not the representation; scores involving such a layer are NaN too
(``KnnState.tie_decided`` holds the reason). Fewer tied rows leave the layer scored.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse

from analysis.metrics.neighbors import (ANN_RECALL_TARGET, ann_search, check_knn_method, cosines64, cpu_search,
                                        knn_search)
from analysis.metrics.validation import as_matrix, check_k, check_paired
from analysis.metrics import knn_jit
from analysis.metrics.base import PairKernel, blas_threads, thread_map


class _computed_once:
    """``functools.cached_property`` without its lock: Python 3.11's holds one lock per attribute for
    every instance, so the cosines of several layers computed on several threads ran one at a
    time. No lock is needed: two threads computing one state's value get the same bits, and the
    later assignment replaces an equal array."""

    def __init__(self, fn):
        self.fn = fn
        self.name = fn.__name__
        self.__doc__ = fn.__doc__

    def __get__(self, obj, cls=None):
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.fn(obj)  # the instance's entry shadows this from now on
        return value


class KnnState:
    """Per-layer neighbour lists, a per-layer object a caller may cache and reuse for every pair.

    ``idx`` is ``(N, k)``, each row sorted by column index (exact float64 cosine k-NN, see
    ``analysis.metrics.neighbors.knn_search``). ``sim`` and ``recip`` (CKNNA only) are
    computed on first use from the layer rows kept by reference. ``collapsed``: every row is the same
    point, so neighbours are undefined and every score involving this layer is NaN.
    """

    def __init__(self, idx: np.ndarray, X: np.ndarray, norms: np.ndarray, *, collapsed: bool = False,
                 resolved: tuple = (), method: str = "exact", recall: float | None = None, recall_rows: int = 0,
                 sim: np.ndarray | None = None, tie_decided: str | None = None, dims: int | None = None):
        self.idx = idx
        if sim is not None:  # cosines the caller already has (the same bits): ``X`` may then be None
            self.__dict__["sim"] = sim
        self.X = X
        self.norms = norms
        self.collapsed = collapsed
        self.resolved = resolved  # rows settled per stage of knn_search (float32, re-rank..., full)
        self.method = method  # "exact" or "ann" (approximate neighbours)
        self.recall = recall  # ann: share of exact neighbours found on a sample of rows
        self.recall_rows = recall_rows
        self.dims = dims  # ann: dimensions of the subspace searched (grown until the recall passed)
        self.cknna_self: float | None = None  # CKNNA's self term, computed on first use
        self.tie_decided = tie_decided  # why most lists are drawn by tie-breaking (None: they are not)

    @property
    def undefined(self) -> bool:
        """Every score involving this layer is NaN: collapsed, or most lists decided by ties."""
        return self.collapsed or self.tie_decided is not None

    @property
    def n(self) -> int:
        return self.idx.shape[0]

    @property
    def k(self) -> int:
        return self.idx.shape[1]

    @_computed_once
    def sim(self) -> np.ndarray:
        """``(N, k)`` float64 cosine to each neighbour in ``idx``."""
        return cosines64(self.X, self.norms, self.idx, self.recip)

    @_computed_once
    def recip(self) -> np.ndarray:
        """``(N, k)`` slot of i in the list of its neighbour j, -1 if absent."""
        return reciprocal_slots(self.idx)


def tie_decided_reason(X, k: int, groups=None, search=None) -> str | None:
    """Why the k-NN lists of layer ``X`` are not a measurement, or None: at least half the rows
    have their list drawn by tie-breaking (:func:`analysis.metrics.degenerate.tied_lists`), e.g. a layer
    that gives 180 captions 3 distinct embeddings, where each item's k neighbours are k of its
    ~60 copies picked by index. Every neighbour score involving such a layer is NaN.

    ``search``: the layer's exact :class:`analysis.metrics.neighbors.KnnSearch`, whose float32 cosines
    settle most layers without the grouping: a row whose class of rows pointing its way has more
    than k others has k+1 of them within ``(k+1)·REL_TOL`` (a chain of at most k+1 links, each
    within the tolerance), i.e. at cosine ``>= 1 − ((k+1)·REL_TOL)²/2``; so when every non-zero
    row's (k+1)-th float32 cosine is below that by more than the search's error bound, only the
    zero rows are tie-decided. Otherwise (and with ``groups``) the rows are grouped."""
    from analysis.metrics.degenerate import REL_TOL, tied_lists

    if search is not None and search.next_sim is not None and groups is None:
        limit = 1.0 - ((k + 1) * REL_TOL) ** 2 / 2 - search.bound - 1e-12
        if np.all(search.next_sim < limit):  # zero rows too: their cosines are all 0
            return tie_verdict(search.zero_rows, X.shape[0], k)
    return tie_verdict(tied_lists(X, k, groups), X.shape[0], k)


def tie_verdict(tied: int, n: int, k: int) -> str | None:
    """The reason when ``tied`` of ``n`` rows (at least half) have their lists drawn by ties, else None."""
    if 2 * tied < n:
        return None
    return (f"k-NN lists decided by ties: {tied} of {n} rows have more than k={k} other rows pointing "
            "the same way (or are zero), so their neighbours are picked by index")


def reciprocal_slots(idx: np.ndarray) -> np.ndarray:
    """``(N, k)``: for neighbour ``j = idx[i, s]``, the slot of i in j's own list, or -1.

    Rows of ``idx`` must be sorted, so that ``i * N + idx[i, s]`` is one sorted key array (the
    numpy path; the compiled one, used when numba is there, reads j's k slots: ~5x faster).
    """
    jit = knn_jit.recip_kernel() if USE_JIT else None
    if jit is not None:
        return jit(idx)
    n, k = idx.shape
    keys = (np.arange(n)[:, None] * n + idx).ravel()
    back = (idx * n + np.arange(n)[:, None]).ravel()  # key of (j, i)
    pos = np.minimum(np.searchsorted(keys, back), len(keys) - 1)
    found = keys[pos] == back
    return np.where(found, pos % k, -1).reshape(n, k)


def masked_hsic_unbiased(n: int, rows, cols, kv, lv, trace: float) -> float:
    """Unbiased HSIC (Song et al., 2012) of two sparse kernels sharing one support.

    ``K~`` and ``L~`` are zero except at ``(rows[e], cols[e])`` where they hold ``kv[e]`` and
    ``lv[e]``; the diagonal is never in the support. Formula::

        [tr(K~ L~) + (1'K~1)(1'L~1)/((n-1)(n-2)) - 2/(n-2) 1'K~L~1] / (n(n-3))

    ``trace = tr(K~L~) = sum_ij K~_ij L~_ji`` comes from the caller (who knows which transposed
    entries exist); ``1'K~L~1 = colsum(K~) . rowsum(L~)``.
    """
    s_k, s_l = float(np.sum(kv)), float(np.sum(lv))
    colsum_k = np.bincount(cols, weights=kv, minlength=n)
    rowsum_l = np.bincount(rows, weights=lv, minlength=n)
    cross = float(colsum_k @ rowsum_l)
    return (trace + s_k * s_l / ((n - 1) * (n - 2)) - 2.0 * cross / (n - 2)) / (n * (n - 3))


class KnnKernel(PairKernel):
    """Shared preparation: cosine top-k per layer (and the CKNNA self term, which is cheap)."""

    def prepare(self, X, *, k=10, groups=None, knn="exact", **_):
        """Neighbour lists of one layer ``X`` ``(N, d)``, float32 or float64 (kept as given).

        ``knn="exact"``: proven exact search (``knn_search``); ``"ann"``: approximate
        (``ann_search``), its recall on a sample kept on the state (see ``knn_summary``).
        """
        # X was validated by the caller (the public function or layer_grid)
        check_k(X.shape[0] if groups is None else len(np.unique(groups)), k)
        search = knn_search if check_knn_method(knn) == "exact" else ann_search
        res = search(X, k, groups)
        # rows of idx come ordered by neighbour index: pair intersections then come out already
        # sorted by (row, column), which masked_hsic_unbiased exploits instead of sorting per pair
        return KnnState(res.idx, X, res.norms, collapsed=res.collapsed, resolved=res.resolved,
                        method=res.method, recall=res.recall, recall_rows=res.recall_rows, dims=res.dims,
                        tie_decided=None if res.collapsed else tie_decided_reason(X, k, groups, res))

    def prepares_in_threads(self, params, n):
        # the exact search on the CPU (numpy, or the symmetric blocks, which size their own threads
        # by the BLAS pool: one here); not faiss's OpenMP pool nor a GPU
        return params.get("knn", "exact") == "exact" and cpu_search(n)

    @staticmethod
    def _check_pair(sa: KnnState, sb: KnnState):
        if sa.n != sb.n:
            raise ValueError(f"X and Y must have the same number of rows (items): got {sa.n} and {sb.n}")


class MutualKnn(KnnKernel):
    """``1/(kN) sum_i |NN_k^X(i) ∩ NN_k^Y(i)|``; all pairs at once: compiled per-row marks where
    numba is there (any N), else slot tables (small N) or a sparse indicator product."""

    @staticmethod
    def _keys(state) -> np.ndarray:
        """``(N k,)`` slot ``i * N + j`` of every neighbour pair (int64: N^2 exceeds int32 at 46k)."""
        n = state.n
        return (np.arange(n, dtype=np.int64)[:, None] * n + state.idx).ravel()

    def score_block(self, states_a, states_b, **_):
        for sb in states_b:
            self._check_pair(states_a[0], sb)
        n, k = states_a[0].n, states_a[0].k
        jit = knn_jit.counts_kernel() if USE_JIT else None
        if jit is not None:  # per-row marks, any N (integer counts: the same as every path)
            counts = np.empty((len(states_a), len(states_b)), dtype=np.int64)
            idx_a = np.stack([s.idx for s in states_a]).astype(_narrow(n))
            for b0 in range(0, len(states_b), JIT_GROUP_LAYERS):
                block = states_b[b0:b0 + JIT_GROUP_LAYERS]
                counts[:, b0:b0 + len(block)] = jit(idx_a, _concat_lists(block, n, sims=False)[0])
        elif n <= SLOT_TABLE_MAX_N and len(states_b) * n * n <= MUTUAL_TABLE_BYTES:
            counts = np.empty((len(states_a), len(states_b)), dtype=np.int64)
            for b0, b1, table in _slot_table_groups(states_b, n):
                for a0, a1 in _a_chunks(len(states_a), b1 - b0, n, k):
                    hits = _lookup(table, states_a[a0:a1], n) >= 0  # (G, La, N k)
                    counts[a0:a1, b0:b1] = np.count_nonzero(hits, axis=2).T
        else:
            counts = self._sparse_counts(states_a, states_b, n, k)
        return self.from_counts(counts, states_a, states_b)

    @staticmethod
    def from_counts(counts: np.ndarray, states_a, states_b) -> np.ndarray:
        """The grid from shared-neighbour counts ``(La, Lb)`` (NaN on collapsed layers)."""
        n, k = states_a[0].n, states_a[0].k
        out = counts / (k * n)
        out[[s.undefined for s in states_a], :] = np.nan
        out[:, [s.undefined for s in states_b]] = np.nan
        return out

    def _sparse_counts(self, states_a, states_b, n, k) -> np.ndarray:
        """Shared-neighbour counts ``(La, Lb)`` by a sparse indicator product, for N above
        ``SLOT_TABLE_MAX_N`` (memory O(L N k), no N² table)."""
        # one row per layer, one column per (i, j) pair present in any layer's lists: relabelling
        # the N^2 slots to the U <= L N k that occur keeps the sparse product's index arrays
        # O(L N k) (an N^2-wide matrix needs an N^2 + 1 index pointer when transposed: 75 GB at 100k)
        layers = list(states_a) if states_b is states_a else list(states_a) + list(states_b)
        _, cols = np.unique(np.concatenate([self._keys(s) for s in layers]), return_inverse=True)
        ind = sparse.csr_matrix((np.ones(len(cols)), (np.repeat(np.arange(len(layers)), n * k), cols.ravel())),
                                shape=(len(layers), int(cols.max()) + 1))
        ind_a = ind[: len(states_a)]
        ind_b = ind_a if states_b is states_a else ind[len(states_a):]
        return np.rint((ind_a @ ind_b.T).toarray()).astype(np.int64)


class CycleKnn(KnnKernel):
    """Share of items i found among the X-neighbours of at least one of their Y-neighbours."""

    def score(self, sa: KnnState, sb: KnnState, **_):
        self._check_pair(sa, sb)
        if sa.undefined or sb.undefined:
            return float("nan")
        n = sa.n
        # (N, k, k): X-neighbours of each Y-neighbour of i; hit when i is among them
        back = sa.idx[sb.idx]
        hit = (back == np.arange(n)[:, None, None]).any(axis=(1, 2))
        return float(hit.mean())


#: Comparisons (layers × N × k × k) one CKNNA scoring step holds: bounds memory at large N.
CKNNA_BLOCK_ENTRIES = 1 << 22


class Cknna(KnnKernel):
    """CKA restricted to mutual k-NN pairs, with unbiased HSIC (Huh et al., 2024).

    Scoring matches layers of A against a group of B layers at once and adds every HSIC sum per
    (A layer, B layer) bin in entry order (row, then slot in A), whatever the other bins hold, so
    a grid cell equals the one-pair value bit for bit. Three routines, the same bits (tests):
    compiled per-row marks (:func:`_masked_cross_jit`, any N; memory ``2 JIT_SUM_ENTRIES``
    float64 sums per step, one step per thread at a time), and without numba slot tables (``N <= SLOT_TABLE_MAX_N``) or a
    row-by-row ``(G, N, k, k)`` comparison (``CKNNA_BLOCK_ENTRIES`` entries per step); plus the
    ``L N k`` lists.
    """

    def prepare(self, X, **params):
        """The lists (:meth:`KnnKernel.prepare`), then the layer's cosines, reciprocal slots and
        self term on the same thread: a grid prepares several layers at once
        (:func:`~analysis.metrics.base.prepare_on_threads`), so this per-layer work runs beside the
        other layers' searches instead of in a second round of threads after them all."""
        state = super().prepare(X, **params)
        self._self(state)
        return state

    def score(self, sa: KnnState, sb: KnnState, **_):
        return float(self.score_block([sa], [sb])[0, 0])

    def score_block(self, states_a, states_b, **_):
        return self.score_block_counts(states_a, states_b)[0]

    def score_block_counts(self, states_a, states_b) -> tuple[np.ndarray, np.ndarray]:
        """The CKNNA grid and the shared-neighbour counts ``(La, Lb)`` its masks were built from:
        exactly mutual k-NN's counts (``MutualKnn.from_counts`` turns them into its grid), so an
        engine scoring both metrics matches the lists once."""
        for sb in list(states_a) + list(states_b):
            self._check_pair(states_a[0], sb)
        n, k = states_a[0].n, states_a[0].k
        if n <= 3:
            raise ValueError(f"cknna needs N > 3 items for the unbiased HSIC, got N={n}")
        # each layer's cosines and self term on threads of our own (compiled, GIL released):
        # per-layer work that would otherwise run on one core after a search that used them all
        thread_map(self._self, list({id(s): s for s in list(states_a) + list(states_b)}.values()))
        self_a = np.array([self._self(s) for s in states_a])
        self_b = np.array([self._self(s) for s in states_b])
        cross = np.empty((len(states_a), len(states_b)))
        counts = np.empty((len(states_a), len(states_b)), dtype=np.int64)
        jit = knn_jit.kernel() if USE_JIT else None
        if jit is not None:
            tasks = _jit_tasks(len(states_a), len(states_b), n, blas_threads())

            def run(task):
                (a0, a1), (b0, b1) = task
                idx_b, sims, recips = _concat_lists(states_b[b0:b1], n)
                return _masked_cross_jit(jit, states_a[a0:a1], idx_b, sims, recips)

            # the compiled sums release the GIL and each cell's sums do not depend on the other
            # cells of its task, so the tasks run on threads of our own with the same bits
            for ((a0, a1), (b0, b1)), (c, m) in zip(tasks, thread_map(run, tasks)):
                cross[a0:a1, b0:b1], counts[a0:a1, b0:b1] = c, m
        elif n <= SLOT_TABLE_MAX_N:
            for b0, b1, table in _slot_table_groups(states_b, n):
                _, sims, recips = _concat_lists(states_b[b0:b1], n, idx=False)
                for a0, a1 in _a_chunks(len(states_a), b1 - b0, n, k):
                    cross[a0:a1, b0:b1], counts[a0:a1, b0:b1] = _masked_cross_table(
                        states_a[a0:a1], table, sims, recips, counts=True)
        else:
            group = max(1, CKNNA_BLOCK_ENTRIES // (n * k * k))
            for g0 in range(0, len(states_b), group):
                block = states_b[g0:g0 + group]
                idx_b, sims, recips = _concat_lists(block, n)
                for i, sa in enumerate(states_a):
                    cross[i, g0:g0 + len(block)], counts[i, g0:g0 + len(block)] = _masked_cross(
                        sa, len(block), idx_b, sims, recips, counts=True)
        denom = np.outer(self_a, self_b)
        with np.errstate(invalid="ignore"):
            out = np.where(denom > 0, cross / np.sqrt(np.where(denom > 0, denom, 1.0)), np.nan)
        out[[s.undefined for s in states_a], :] = np.nan
        out[:, [s.undefined for s in states_b]] = np.nan
        return out, counts

    @staticmethod
    def _self(state: KnnState) -> float:
        """Unbiased HSIC of the masked kernel with itself (so CKNNA(X, X) = 1).

        Against itself every listed entry is shared, each matched to itself: ``K~ = L~`` on the
        lists, ``tr(K~L~)`` sums ``K_ij²`` over entries whose reverse is listed too. The sums run
        over the entries in (i, slot) order, the order of the cross routines, so the value is the
        same bits as scoring the layer against itself through them (tests compare), in ``O(N k)``.
        """
        if state.cknna_self is None:
            if state.collapsed:
                state.cknna_self = float("nan")
            else:
                n, k = state.n, state.k
                kv = state.sim.ravel()
                both = state.recip.ravel() >= 0
                trace = np.bincount(np.zeros(kv.size, dtype=np.intp), weights=np.where(both, kv * kv, 0.0),
                                    minlength=1)
                colsum = np.bincount(state.idx.ravel(), weights=kv, minlength=n)[None]
                rowsum = np.bincount(np.repeat(np.arange(n), k), weights=kv, minlength=n)[None]
                state.cknna_self = float(_hsic_from_sums(n, trace, colsum, rowsum)[0])
        return state.cknna_self


def _narrow(n: int):
    return np.int32 if n < 2**31 else np.int64


def _concat_lists(states, n, *, idx=True, sims=True):
    """Neighbour lists ``(G, N, k)`` (None when ``idx=False``), cosines and reciprocal flags (flat;
    None when ``sims=False``: mutual k-NN needs the lists only) of several layers."""
    idx = np.stack([s.idx for s in states]).astype(_narrow(n)) if idx else None
    if not sims:
        return idx, None, None
    sims = np.concatenate([s.sim.ravel() for s in states])
    recips = np.concatenate([s.recip.ravel() >= 0 for s in states])
    return idx, sims, recips


#: Score CKNNA's shared entries in compiled code (:mod:`analysis.metrics.knn_jit`) when numba is
#: there, at any N; the numpy routines (slot tables up to ``SLOT_TABLE_MAX_N``, row-by-row
#: comparison above) give the same bits (tests switch this off to compare)
USE_JIT = True
#: B layers the compiled routine matches at once (its per-row marks are ``N × G``)
JIT_GROUP_LAYERS = 16
#: float64 entries of each of the compiled routine's two per-row sum arrays (``La × N × G``):
#: A layers are taken in chunks that keep them under it (32 MiB each)
JIT_SUM_ENTRIES = 1 << 22


#: Largest N whose layers are matched through dense slot tables (one ``N²`` table of int8 per
#: layer: 16 MiB at 4096). Above it the lists are compared row by row (``(N, k, k)`` per layer
#: pair, linear in N) and mutual k-NN counts come from a sparse indicator product.
SLOT_TABLE_MAX_N = 4096
#: Bytes of slot tables one scoring step builds (B layers per group: at least one).
SLOT_TABLE_BYTES = 1 << 26
#: Mutual k-NN looks up slot tables only while all of B's fit in this many bytes (measured: the
#: lookups then stay in cache and beat the sparse product 1.2-4x; beyond it the sparse product wins)
MUTUAL_TABLE_BYTES = 1 << 24


def _slot_dtype(k: int):
    return np.int8 if k < 2**7 else np.int16 if k < 2**15 else np.int32


def _slot_table_groups(states, n):
    """Yield ``(b0, b1, table)`` over groups of layers, ``table`` ``(N², G)``: at row ``i N + j`` the
    slot of j in row i's list in each layer of the group, -1 where j is not a neighbour of i. One
    gather per A entry then finds its match in every B layer of the group: ``G N k`` lookups per A
    layer instead of the ``G N k²`` comparisons of the row-by-row match. The layers of a group sit
    side by side, so an A entry's G lookups read one contiguous run of G bytes, not G far-apart
    bytes. Used by mutual k-NN and, without numba, by CKNNA."""
    k = states[0].k
    dtype = _slot_dtype(k)
    per_layer = n * n * np.dtype(dtype).itemsize
    group = max(1, SLOT_TABLE_BYTES // per_layer)
    slots = np.tile(np.arange(k, dtype=dtype), n)
    for b0 in range(0, len(states), group):
        block = states[b0:b0 + group]
        table = np.full((n * n, len(block)), -1, dtype=dtype)
        for t, st in enumerate(block):
            table[MutualKnn._keys(st), t] = slots
        yield b0, b0 + len(block), table


def _a_chunks(n_a: int, g: int, n: int, k: int):
    """``(a0, a1)`` ranges of A layers so one lookup holds at most ``CKNNA_BLOCK_ENTRIES`` entries
    (``G × La × N k``)."""
    step = max(1, CKNNA_BLOCK_ENTRIES // max(1, g * n * k))
    for a0 in range(0, n_a, step):
        yield a0, min(n_a, a0 + step)


def _lookup(table: np.ndarray, states_a, n) -> np.ndarray:
    """``(G, La, N k)``: the slot, in each B layer of ``table``, of every A layer's neighbour
    pairs (-1: not a neighbour there)."""
    k = states_a[0].k
    keys = np.concatenate([MutualKnn._keys(s) for s in states_a])
    return np.moveaxis(table[keys].reshape(len(states_a), n * k, table.shape[1]), 2, 0)


def _masked_cross_table(states_a, table, sims, recips, *, counts: bool = False):
    """``(La, G)`` unbiased HSIC of ``M∘K_a`` and ``M∘K_b``, as :func:`_masked_cross` for every A
    layer of ``states_a`` against the B layers of ``table`` at once.

    The shared entries are found by one table lookup per A entry; they come out ordered by
    (B layer, A layer, i, slot in A), so within each (A layer, B layer) bin in the same order as
    :func:`_masked_cross`'s, every ``bincount`` adds the same values in the same order, and both
    end in :func:`_hsic_from_sums`: the two routines agree bit for bit (tests compare).
    """
    sa0 = states_a[0]
    n, k = sa0.n, sa0.k
    g, la, nk = table.shape[1], len(states_a), n * k
    slot = _lookup(table, states_a, n)
    # int32 positions where they fit (a lookup holds at most CKNNA_BLOCK_ENTRIES): numpy's integer
    # division and gathers run several times faster on them than on int64
    flat = np.flatnonzero(slot >= 0)
    if g * la * nk < 2**31:
        flat = flat.astype(np.int32)
    pb = np.take(slot.ravel(), flat)
    b = flat // nk  # (B layer, A layer) bin: t * la + A layer
    e = flat - b * nk  # = i k + slot in A
    t = b // la  # B layer
    rem = flat - t * (la * nk)  # = A layer * N k + e
    rows = e // k
    fb = (t * n + rows) * k + pb
    sim_a = np.concatenate([s.sim.ravel() for s in states_a])
    idx_a = np.concatenate([s.idx.ravel() for s in states_a]).astype(flat.dtype)
    recip_a = np.concatenate([s.recip.ravel() >= 0 for s in states_a])
    kv, lv = np.take(sim_a, rem), np.take(sims, fb)
    cols = np.take(idx_a, rem)
    both = np.take(recip_a, rem) & np.take(recips, fb)
    bins = g * la
    b_n = b * n
    colsum_k = np.bincount(b_n + cols, weights=kv, minlength=bins * n).reshape(bins, n)
    rowsum_l = np.bincount(b_n + rows, weights=lv, minlength=bins * n).reshape(bins, n)
    bi = b.astype(np.intp)  # bincount casts to intp: once for the two counts below
    # the trace's entries outside ``both`` add exact zeros: the same sum as over ``both`` alone
    trace = np.bincount(bi, weights=np.where(both, kv * lv, 0.0), minlength=bins)
    out = _hsic_from_sums(n, trace, colsum_k, rowsum_l)
    if counts:  # shared entries per cell: mutual k-NN's counts
        return out.reshape(g, la).T, np.bincount(bi, minlength=bins).reshape(g, la).T
    return out.reshape(g, la).T


def _masked_cross_jit(jit, states_a, idx_b, sims, recips):
    """``(La, G)`` unbiased HSIC and shared counts, as :func:`_masked_cross_table`, from the
    compiled ``cross_sums`` (:mod:`analysis.metrics.knn_jit`): per row i it marks i's neighbours in
    the G layers of B in an ``N × G`` array, so each A entry's matches are G reads from a few
    cache lines; no ``N²`` table, any N. Within each (A layer, B layer) bin the entries come by
    row, then slot in A, as in the numpy routines, so the sums are the same bits (tests compare)."""
    sa0 = states_a[0]
    n, k = sa0.n, sa0.k
    g, la = idx_b.shape[0], len(states_a)
    trace, colsum_k, rowsum_l, shared = jit(
        np.stack([s.idx for s in states_a]), np.stack([s.sim for s in states_a]),
        np.stack([s.recip >= 0 for s in states_a]), idx_b, sims.reshape(g, n, k), recips.reshape(g, n, k))
    # the kernel's sums are (A layer, [row,] B layer); _hsic_from_sums takes C-contiguous
    # (B layer, A layer) bins, the layout whose row sums the numpy routines add
    out = _hsic_from_sums(n, trace.T.ravel(), colsum_k.transpose(2, 0, 1).reshape(g * la, n),
                          rowsum_l.transpose(2, 0, 1).reshape(g * la, n))
    return out.reshape(g, la).T, shared


def _jit_tasks(n_a: int, n_b: int, n: int, threads: int) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """``((a0, a1), (b0, b1))`` blocks of the CKNNA grid for the compiled sums, in row-major
    order: B split into as few groups of at most ``JIT_GROUP_LAYERS`` as possible, of sizes
    within one layer of each other (16 + 8 layers would leave a thread idle a third of the time),
    A into chunks that keep each call's sums under ``JIT_SUM_ENTRIES``, and into more chunks where
    there are fewer blocks than ``threads``, so every thread has work. Each block is one call;
    ``threads`` calls run at once, each with its own sums."""
    if not n_a or not n_b:
        return []
    groups = -(-n_b // JIT_GROUP_LAYERS)
    cuts = [i * n_b // groups for i in range(groups + 1)]
    b_ranges = list(zip(cuts[:-1], cuts[1:]))
    g = max(b1 - b0 for b0, b1 in b_ranges)
    step = max(1, JIT_SUM_ENTRIES // (g * n))
    pieces = min(n_a, max(-(-n_a // step), -(-threads // groups)))
    cuts = [i * n_a // pieces for i in range(pieces + 1)]
    a_ranges = list(zip(cuts[:-1], cuts[1:]))
    return [(a, b) for b in b_ranges for a in a_ranges]


def _hsic_from_sums(n: int, trace, colsum_k, rowsum_l) -> np.ndarray:
    """Unbiased HSIC per bin from ``tr(K~L~)`` and the ``(bins, N)`` column sums of ``K~`` and row
    sums of ``L~`` (:func:`masked_hsic_unbiased`'s formula; ``1'K~1`` and ``1'L~1`` are their
    totals, ``1'K~L~1`` their dot product). Both scoring routines end here, so they agree bit for
    bit whenever their sums do."""
    s_k = colsum_k.sum(axis=1)
    s_l = rowsum_l.sum(axis=1)
    dot = (colsum_k * rowsum_l).sum(axis=1)
    return (trace + s_k * s_l / ((n - 1) * (n - 2)) - 2.0 * dot / (n - 2)) / (n * (n - 3))


def _masked_cross(sa: KnnState, groups: int, idx_b, sims, recips, *, counts: bool = False):
    """``(groups,)`` unbiased HSIC of ``M∘K_a`` and ``M∘K_b`` for each B layer of ``idx_b`` ``(G, N, k)``.

    ``M`` is the joint mask (j among i's neighbours in both spaces). With the shared entries
    ``(i, j)`` and their values ``kv = K_a[i, j]``, ``lv = K_b[i, j]``: ``tr(K~ L~) = sum K~_ij L~_ji``
    runs over entries whose reverse ``(j, i)`` is shared too, where ``L~_ji = L_ij`` (``cosines64`` is
    symmetric bit for bit); the rest is :func:`masked_hsic_unbiased`'s formula, per layer.
    """
    n, k = sa.n, sa.k
    # (G, N, k, k): row i's k neighbours in A against its k in each B layer; entries come out
    # ordered by (layer, i, slot in A), the same order for any group of layers
    # (flat indices and integer division: 3x faster than a 4-D nonzero)
    ia = sa.idx.astype(idx_b.dtype)  # compared in int32 where N allows: half the memory traffic
    flat = np.flatnonzero(ia[None, :, :, None] == idx_b[:, :, None, :])
    pb = flat % k
    e = (flat // k) % (n * k)  # = i k + slot in A
    t = flat // (n * k * k)
    rows = e // k
    fb = (t * n + rows) * k + pb
    kv, lv = sa.sim.ravel()[e], sims[fb]
    cols = sa.idx.ravel()[e]
    both = (sa.recip.ravel()[e] >= 0) & recips[fb]
    trace = np.bincount(t[both], weights=kv[both] * lv[both], minlength=groups)
    colsum_k = np.bincount(t * n + cols, weights=kv, minlength=groups * n).reshape(groups, n)
    rowsum_l = np.bincount(t * n + rows, weights=lv, minlength=groups * n).reshape(groups, n)
    out = _hsic_from_sums(n, trace, colsum_k, rowsum_l)
    return (out, np.bincount(t, minlength=groups)) if counts else out


#: Lowest measured recall of approximate lists that a grid carries without a warning: below it
#: ``knn_summary`` adds ``recall_low`` (shown next to the grid's best cell). At recall r a list
#: of k shares about ``r k`` neighbours with the exact one, so a mutual k-NN cell can be off by up
#: to ``1 - r`` of its value (0.95: 5 %, the size of the bootstrap intervals at N = 1024).
RECALL_FLOOR = ANN_RECALL_TARGET


def knn_summary(states) -> dict:
    """What a result computed from these k-NN states should carry about its neighbour search.

    ``{"knn": "exact"}`` when every list is exact; otherwise ``{"knn": "ann", "knn_recall": [per
    state, None for a collapsed layer], "knn_recall_min": lowest, "knn_recall_rows": rows checked
    per layer}`` (recall = share of the exact k neighbours the approximate lists hold, measured on
    a seeded sample of rows; see ``analysis.metrics.neighbors.ann_search``), plus ``"recall_low"``,
    a sentence for the screen, when the lowest recall is below ``RECALL_FLOOR``.
    """
    states = list(states)
    if all(s.method == "exact" for s in states):
        return {"knn": "exact"}
    rec = [None if s.recall is None else float(s.recall) for s in states]
    seen = [r for r in rec if r is not None]
    out = {"knn": "ann", "knn_recall": rec, "knn_recall_min": min(seen) if seen else None,
           "knn_recall_rows": max((s.recall_rows for s in states), default=0)}
    low = [i for i, r in enumerate(rec) if r is not None and r < RECALL_FLOOR]
    if low:
        out["recall_low"] = (f"approximate k-NN recall {min(seen):.3f} is below {RECALL_FLOOR} on "
                             f"{len(low)} of {len(rec)} layer(s): cells may differ from the exact grid "
                             "(rerun with --knn exact)")
    return out


_MUTUAL = MutualKnn()
_CYCLE = CycleKnn()
_CKNNA = Cknna()


def _pair_inputs(X, Y, k):
    # float32 stays float32 (the search widens what it needs; the same answer as a float64 copy)
    X = as_matrix(X, "X", dtype=None)
    Y = as_matrix(Y, "Y", dtype=None)
    check_paired(X, Y)
    check_k(X.shape[0], k)
    return X, Y


def mutual_knn(X, Y, *, k: int = 10, knn: str = "exact") -> float:
    """Mutual k-nearest-neighbour alignment between two spaces.

    Args:
        X: ``(N, p)`` embeddings; Y: ``(N, q)`` embeddings of the same N items.
        k: neighbours per item (the item itself excluded); ``k < N``.
        knn: ``"exact"`` (default; proven equal to an all-float64 search) or ``"ann"`` (faiss
            search in a principal subspace, for very large N; recall reported by ``layer_grid(..., info=...)``).
    Returns:
        ``1/(kN) sum_i |NN_k^X(i) ∩ NN_k^Y(i)|`` in ``[0, 1]``; higher means more aligned.
        Chance level is about ``k/(N-1)``. Invariant to rotation and scaling of either space.
    Reference: Huh et al. (2024), The Platonic Representation Hypothesis.

    >>> import numpy as np; X = np.random.default_rng(0).normal(size=(50, 8))
    >>> mutual_knn(X, 3 * X, k=5)
    1.0
    """
    X, Y = _pair_inputs(X, Y, k)
    return _MUTUAL.one_pair(X, Y, k=k, knn=knn)


def cycle_knn(X, Y, *, k: int = 10, knn: str = "exact") -> float:
    """Cycle k-NN: share of items that return to themselves via Y-neighbours then X-neighbours.

    Returns a value in ``[0, 1]`` (higher is better): item i counts when i is among the k
    X-neighbours of at least one of its k Y-neighbours (``knn_X[knn_Y]`` contains i).
    Reference: Huh et al. (2024), platonic-rep ``cycle_knn``.

    >>> import numpy as np; X = np.random.default_rng(0).normal(size=(50, 8))
    >>> cycle_knn(X, 3 * X, k=5)  # every cycle returns to its item
    1.0
    """
    X, Y = _pair_inputs(X, Y, k)
    return _CYCLE.one_pair(X, Y, k=k, knn=knn)


def cknna(X, Y, *, k: int = 10, knn: str = "exact") -> float:
    """Centred kernel nearest-neighbour alignment (CKNNA).

    Kernels are cosine similarities of L2-normalised rows; both are masked to the pairs
    ``(i, j)`` where j is a k-NN of i in *both* spaces, and compared with unbiased HSIC::

        CKNNA = HSIC_u(M∘K, M∘L) / sqrt(HSIC_u(M_K∘K, M_K∘K) HSIC_u(M_L∘L, M_L∘L))

    Usually in ``[0, 1]`` (not bounded in theory; NaN when a self term is not positive).
    Needs N > 3. ``knn``: ``"exact"`` or ``"ann"``, as in ``mutual_knn``. Reference: Huh et al. (2024).

    >>> import numpy as np; X = np.random.default_rng(0).normal(size=(50, 8))
    >>> round(cknna(X, 3 * X, k=5), 12)  # the same neighbours in both spaces
    1.0
    """
    X, Y = _pair_inputs(X, Y, k)
    if X.shape[0] <= 3:
        raise ValueError(f"cknna needs N > 3 items for the unbiased HSIC, got N={X.shape[0]}")
    return _CKNNA.one_pair(X, Y, k=k, knn=knn)
