"""The study engine: every run's layers are prepared once and scored against every partner.

Cost model. A layer×layer grid costs one *preparation* per layer (normalising, neighbour lists,
centred Gram pieces; the expensive part) plus one cheap *score* per layer pair. Preparing inside
every pair loop makes a study's cost grow with the number of pairs; here each (run, preparation,
parameters) is prepared at most once while its states are held (the k-NN metrics share one
preparation), so the cost grows with runs. CKA scores a run against groups of partners in one
call (:meth:`Engine.prefetch_grids`), so its side's per-layer scoring work is not redone per pair.

Memory stays bounded: embeddings and prepared states live in byte-budgeted LRU caches
(``state_budget``, ``emb_budget``), and the grid study walks pairs in blocks that fit the budget
(:meth:`Engine.blocks`), so a store of any size is analysed with at most the budget held (a
state's size counts what it builds on first use: CKA's N×N kernel, CKNNA's cosines). Scored
grids are memoised in a third, small LRU (``grid_budget``): they are needed again only a few
tasks later, and the result table keeps them for good.

The engine never writes; studies ask it for grids, profiles and embeddings and write result rows.
A cell from :meth:`Engine.grid` is bitwise the value :func:`analysis.grid.layer_grid` gives for the
same two runs (the same ``prepare``/``score_block`` code on the same arrays).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from analysis.metrics.degenerate import stack_status
from analysis.grid import layer_profile, prepare_layers
from analysis.metrics.kernel import GRAM_CACHE_MAX_N
from analysis.metrics.single import rankme_fast
from analysis.metrics.preprocess import clamp as clamp_stack
from analysis.registry import get_metric
from analysis.storage.store import StoreError, load_run
from analysis.metrics.validation import as_stack, check_k

#: Default byte budgets; ``analyze --memory`` style callers may pass others.
STATE_BUDGET = 2 << 30
EMB_BUDGET = 2 << 30
#: Bytes of scored grids the engine keeps for reuse in one analysis. A grid is read back shortly
#: after it is scored (the grids study stores it; mutual k-NN takes CKNNA's counts in the task after;
#: a CKA group's grids are taken by the group's next tasks), later studies read the result table, so
#: the memo only has to span a few tasks: without a bound it held every grid of the analysis
#: (1.7 KB a 13×13 grid, 9 KB a 33×33 one: gigabytes for the papers' ~450k grids).
GRID_BUDGET = 64 << 20


def _nbytes(obj, borrowed: np.ndarray | None = None) -> int:
    """Bytes held by numpy arrays inside a prepared state (dataclass, tuple, list or array).

    ``borrowed``: the run's embeddings the state was prepared from; arrays inside it (the layers a
    k-NN or feature-form CKA state keeps by reference) belong to the embedding cache, not to the
    state. Counting them put each k-NN state of a 100,000-item run at the run's size (4 GB, past the
    2 GiB budget), so a pair's first run's states were evicted while its second run's were prepared,
    and prepared again (13 more searches) at the next call."""
    if isinstance(obj, np.ndarray):
        return 0 if borrowed is not None and np.may_share_memory(obj, borrowed) else obj.nbytes
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(o, borrowed) for o in obj)
    if hasattr(obj, "__dict__"):
        return sum(_nbytes(v, borrowed) for v in vars(obj).values())
    if hasattr(obj, "data") and hasattr(obj, "indices"):  # scipy sparse
        return obj.data.nbytes + obj.indices.nbytes
    return 0


def _lazy_nbytes(state) -> int:
    """Bytes a prepared layer adds on first use, counted up front so the budget holds: CKNNA's
    ``(N, k)`` cosines and reciprocal slots on a k-NN state that does not hold them yet (CKNNA's
    own preparation builds them; mutual k-NN's leaves them to CKNNA's first score)."""
    from analysis.metrics.knn import KnnState

    # CKA states build everything they hold at preparation (packed triangle, or feature form), so
    # their arrays are counted as they stand
    if isinstance(state, KnnState):
        return sum(state.idx.size * 8 for lazy in ("sim", "recip") if lazy not in vars(state))
    return 0


class LRU:
    """Least-recently-used cache bounded by bytes (one item may exceed the budget on its own)."""

    def __init__(self, budget: int):
        self.budget = int(budget)
        self.items: OrderedDict = OrderedDict()
        self.sizes: dict = {}
        self.used = 0

    def __contains__(self, key) -> bool:  # without refreshing the key's place
        return key in self.items

    def get(self, key):
        if key in self.items:
            self.items.move_to_end(key)
            return self.items[key]
        return None

    def put(self, key, value, size: int):
        self.items[key] = value
        self.sizes[key] = size
        self.used += size
        while self.used > self.budget and len(self.items) > 1:
            old, _ = self.items.popitem(last=False)
            self.used -= self.sizes.pop(old)


@dataclass
class Counters:
    """What the engine did: preparations per (run, metric) and pair scores, for reports and tests."""

    preparations: int = 0  # layer stacks prepared (one per run × preparation × parameters while cached)
    layer_preparations: int = 0  # individual layers prepared
    grids_scored: int = 0
    profiles: int = 0
    prepared_keys: list = field(default_factory=list)

    def add(self, other: dict) -> None:
        """Add a worker's counts (a dict of the same fields)."""
        for name, value in other.items():
            setattr(self, name, getattr(self, name) + value)


def prepared_by(spec, metric: str) -> str:
    """What a prepared state depends on besides the run and parameters. Every k-NN metric
    (mutual k-NN, cycle k-NN, CKNNA) prepares a layer with the same ``KnnKernel.prepare`` (exact
    neighbour lists; CKNNA's cosines are computed lazily on the state), so they share one state per
    run and ``k`` instead of searching the same neighbours once per metric."""
    from analysis.metrics.knn import KnnKernel

    return "knn" if isinstance(spec.kernel, KnnKernel) else metric


def _key_params(params: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in params.items()))


class Engine:
    """Per-run prepared states, computed once and shared by every study.

    Args:
        con: an open DuckDB connection to the store (read-only is enough).
        clamp: outlier clamp applied to each run's whole stack when it is loaded, before any
            metric (:func:`analysis.metrics.preprocess.clamp`: ``"off"``, ``"platonic"`` or ``"feature"``).
        state_budget, emb_budget: byte budgets of the two caches.
        grid_budget: byte budget of the memo of scored grids (:data:`GRID_BUDGET`).
    """

    def __init__(self, con, *, clamp: str = "off", state_budget: int = STATE_BUDGET, emb_budget: int = EMB_BUDGET,
                 grid_budget: int = GRID_BUDGET):
        self.con = con
        self.clamp = clamp
        self._emb = LRU(emb_budget)
        # runs evicted from ``_emb`` whose arrays something else still holds (prepared states keep
        # their layers by reference): reused, not loaded again, so a run is never in memory twice
        self._emb_alive = weakref.WeakValueDictionary()
        self._status: dict = {}
        self._states = LRU(state_budget)
        self._grids = LRU(grid_budget)
        self._profiles: dict = {}
        self.counters = Counters()

    # ------------------------------------------------------------------ embeddings
    def emb(self, run_id: str) -> np.ndarray:
        """``(L, N, d)`` embeddings of one run as the metrics take them (validated, finite)."""
        E = self._emb.get(run_id)
        if E is None and (E := self._emb_alive.get(run_id)) is not None:
            # evicted, but still held (by prepared states): the same array back in the cache. At
            # N = 100,000 (3.7 GiB a run) loading it again put two copies of each run in memory,
            # and the analysis past 24 GB
            self._emb.put(run_id, E, E.nbytes)
        if E is None:
            raw = load_run(self.con, run_id)
            try:
                E = as_stack(raw, f"run {run_id}", dtype=None)  # float32 as stored; metrics widen per layer
            except ValueError as exc:
                # a done run is skipped by precompute, so rerunning it would change nothing: remove it first
                raise StoreError(f"run {run_id}: {exc}; remove it (`layerscope runs rm --store STORE {run_id}`) "
                                 "and precompute it again (a float16 model that overflows: --dtype float32), or "
                                 "leave its dataset out with --dataset") from None
            if self.clamp != "off":
                E = clamp_stack(E, mode=self.clamp)
            self._emb.put(run_id, E, E.nbytes)
            self._emb_alive[run_id] = E
        return E

    def status(self, run_id: str) -> list:
        """Per-layer :class:`analysis.metrics.degenerate.LayerStatus` of a run (memoised), each holding the
        Gram eigenvalues RankMe reuses. One BLAS thread for small layers, whose eigensolves a second
        thread mostly waits on (see :func:`analysis.studies.threads.blas_threads_for`)."""
        if run_id not in self._status:
            from analysis.studies.threads import blas_threads_for

            E = self.emb(run_id)
            with blas_threads_for(E.shape):
                self._status[run_id] = stack_status(E)
        return self._status[run_id]

    def degenerate_layers(self, run_id: str) -> dict[int, str]:
        """``{layer: reason}`` for the run's degenerate layers (collapsed, rank 1, < 2 distinct rows)."""
        return {i: st.reason or "degenerate" for i, st in enumerate(self.status(run_id)) if st.degenerate}

    # ------------------------------------------------------------------ bootstrap spaces
    #: bytes of memoised resample lists and states one space may keep
    RESAMPLE_MEMO_BYTES = 64 << 20

    def resample_space(self, run_id: str, layer: int, k: int, n_boot: int = 0):
        """The :class:`analysis.bootstrap.ResampleNeighbours` of one layer (float64 rows, as
        ``bootstrap_ci`` widens them), kept in the state cache: every best cell, metric and pair
        that bootstraps this layer with this ``k`` reuses its lists and, through its memo, the
        lists and states of resamples already drawn (one seed draws the same rows each time)."""
        from analysis.bootstrap import ResampleNeighbours

        key = (run_id, "resample_space", layer, k)
        space = self._states.get(key)
        if space is None:
            X = np.asarray(self.emb(run_id)[layer], dtype=np.float64)
            space = ResampleNeighbours(X, k, memo_bytes=self.RESAMPLE_MEMO_BYTES)
            self._states.put(key, space, space.nbytes(n_boot) + X.nbytes)
        return space

    def tie_decided_layers(self, run_id: str, metric: str, **params) -> dict[int, str]:
        """``{layer: reason}`` for a k-NN metric's layers whose lists are decided by ties (not
        already degenerate): their cells are NaN (``KnnState.tie_decided``). Empty for other metrics."""
        from analysis.metrics.knn import KnnKernel

        if not isinstance(get_metric(metric).kernel, KnnKernel):
            return {}
        bad = self.degenerate_layers(run_id)
        return {i: st.tie_decided for i, st in enumerate(self.states(run_id, metric, **params))
                if st.tie_decided and i not in bad}

    # ------------------------------------------------------------------ prepared states
    def resolve(self, metric: str, **params) -> dict:
        spec = get_metric(metric)
        if "k" not in spec.params:
            params.pop("k", None)
        return spec.resolve(**params)

    def states(self, run_id: str, metric: str, **params) -> list:
        """The per-layer prepared states of ``run_id`` for ``metric`` (prepared once while cached)."""
        spec = get_metric(metric)
        params = self.resolve(metric, **params)
        key = (run_id, prepared_by(spec, metric), _key_params(params))
        st = self._states.get(key)
        if st is None:
            E = self.emb(run_id)
            if "k" in params:
                check_k(E.shape[1], params["k"])
            st = prepare_layers(spec, E, params)
            self._states.put(key, st, _nbytes(st, borrowed=E) + sum(_lazy_nbytes(s) for s in st))
            self.counters.preparations += 1
            self.counters.layer_preparations += len(st)
            self.counters.prepared_keys.append(key)
        return st

    def grid(self, run_a: str, run_b: str, metric: str, **params) -> np.ndarray:
        """``(La, Lb)`` grid of ``metric`` between two runs, from prepared states (memoised)."""
        spec = get_metric(metric)
        params = self.resolve(metric, **params)
        key = (run_a, run_b, metric, _key_params(params))
        g = self._grids.get(key)
        if g is not None:
            return g
        sa = self.states(run_a, metric, **params)
        sb = sa if run_b == run_a else self.states(run_b, metric, **params)
        if spec.kernel.paired and len(sa) and len(sb):
            na, nb = self.emb(run_a).shape[1], self.emb(run_b).shape[1]
            if na != nb:
                raise StoreError(f"runs {run_a} and {run_b} hold different item counts ({na} and {nb})")
        from analysis.metrics.knn import Cknna, MutualKnn

        if isinstance(spec.kernel, Cknna):
            # CKNNA's masks are the shared neighbours mutual k-NN counts: keep that grid too, so a
            # study scoring both metrics matches each pair's lists once (cell for cell the
            # MutualKnn.score_block value: the same integer counts over k N)
            g, counts = spec.kernel.score_block_counts(sa, sb)
            mkey = (run_a, run_b, "mutual_knn", _key_params(self.resolve("mutual_knn", **params)))
            if mkey not in self._grids:
                self._memo(mkey, MutualKnn.from_counts(counts, sa, sb))
        else:
            g = spec.kernel.score_block(sa, sb, **params)
        self._memo(key, g)
        self.counters.grids_scored += 1
        return g

    def _memo(self, key: tuple, grid: np.ndarray) -> None:
        self._grids.put(key, grid, grid.nbytes + 200)  # + the key and the array's header

    #: layers of runs scored in one CKA call on each side. A call reads each layer's packed Gram once
    #: (copied chunk by chunk into fixed tiles), so larger groups read each Gram for more partners.
    #: With 8-row tiles of 8192 columns (64 KB a layer a side), 9 × 12 runs of 13 layers at
    #: N = 1024, three rounds alternated: 23.7–27.1 ms a run pair at 64, 20.6–21.5 at 104, 20.0–20.5
    #: at 128; bare contractions of 156-layer groups cost more per pair than 117-layer ones (14.2
    #: against 13.5 ms). With 32-row tiles of 2048 columns (16 KB a layer a side) a 117 × 156 call
    #: costs 0.95 s against 1.24 s split 117 × 117 + 117 × 39, but two groups of 256 layers at
    #: N = 1024 would hold 2.1 GB of packed Grams, past the default state budget: 128 stays.
    #: Grids are bitwise the same at any grouping (tests)
    PREFETCH_LAYERS = 128

    def prefetch_grids(self, run_a: str, runs_b: list[str], metric: str, **params) -> None:
        """Score ``run_a`` against several partners in one kernel call and memoise each grid
        (:meth:`prefetch_pairs` with one run on the left)."""
        self.prefetch_pairs([(run_a, b) for b in runs_b], metric, **params)

    @staticmethod
    def prefetches(metric: str) -> bool:
        """Whether :meth:`prefetch_pairs` scores ``metric`` in groups (CKA)."""
        from analysis.metrics.kernel import CkaKernel

        return isinstance(get_metric(metric).kernel, CkaKernel)

    def prefetch_pairs(self, pairs: list[tuple[str, str]], metric: str, **params) -> None:
        """Score the pairs' left runs against their right runs in a few kernel calls (groups of up
        to ``PREFETCH_LAYERS`` layers on each side) and memoise each pair's grid, so the per-layer
        work (CKA: copying each layer's packed Gram into the product's tiles, its self-HSIC) is done
        once per group instead of once per pair, and the fixed ``(32, K)`` tiles are filled by
        several runs' layers instead of one run's (13 layers fill 32 rows). Only for CKA, whose
        block contraction makes a cell depend on its two rows alone (``gram_inner``'s fixed tiles),
        so every grid equals :meth:`grid`'s bit for bit (tests compare). Cells of a left × right
        group that no pair asks for are computed and dropped (the grids study asks for whole
        blocks of vision × text runs). No-op for other metrics, or fewer than two pairs to score."""
        if not self.prefetches(metric):
            return
        spec = get_metric(metric)
        params = self.resolve(metric, **params)
        kp = _key_params(params)
        todo = [(a, b) for a, b in dict.fromkeys(pairs) if a != b and (a, b, metric, kp) not in self._grids]
        if len(todo) < 2:
            return
        n = {r: self.emb(r).shape[1] for pair in todo for r in pair}
        for a, b in todo:
            if n[a] != n[b]:
                raise StoreError(f"runs {a} and {b} hold different item counts ({n[a]} and {n[b]})")
        want = set(todo)
        for left in self._layer_groups(list(dict.fromkeys(a for a, _ in todo)), metric, params):
            left_runs = {a for a, _ in left}
            right_runs = list(dict.fromkeys(b for a, b in todo if a in left_runs))
            for right in self._layer_groups(right_runs, metric, params):
                if not any((a, b) in want for a, _ in left for b, _ in right):
                    continue
                g = spec.kernel.score_block([s for _, st in left for s in st], [s for _, st in right for s in st],
                                            **params)
                row = 0
                for a, sa in left:
                    col = 0
                    for b, sb in right:
                        if (a, b) in want:
                            self._memo((a, b, metric, kp), g[row:row + len(sa), col:col + len(sb)].copy())
                            self.counters.grids_scored += 1
                            want.discard((a, b))
                        col += len(sb)
                    row += len(sa)

    def _layer_groups(self, runs: list[str], metric: str, params: dict):
        """Consecutive groups of ``(run, states)`` holding up to ``PREFETCH_LAYERS`` layers (a run
        with more is a group of its own)."""
        group, layers = [], 0
        for r in runs:
            st = self.states(r, metric, **params)
            if group and layers + len(st) > self.PREFETCH_LAYERS:
                yield group
                group, layers = [], 0
            group.append((r, st))
            layers += len(st)
        if group:
            yield group

    def profile(self, run_id: str, metric: str, **params) -> np.ndarray:
        """``(L,)`` values of a single-space metric per layer (memoised). RankMe comes from the
        smaller Gram's eigenvalues (:func:`analysis.metrics.single.rankme_fast`: the SVD's value
        within ``RANKME_RTOL``, the SVD itself where that cannot be guaranteed), taken from the
        layer status, which diagonalised the same Gram of the same float64 layer for its rank-1
        check (:func:`analysis.metrics.degenerate.gram_spectrum`)."""
        key = (run_id, metric, _key_params(params))
        if key not in self._profiles:
            with np.errstate(divide="ignore", invalid="ignore"):
                sts = self.status(run_id)
                # an all-zero layer has no spectrum and no directions: RankMe, uniformity (and any
                # single-space value) is undefined there, NaN; its status flag says why
                zero = [st.scale == 0.0 for st in sts]
                if metric == "rankme" and not params:
                    import dataclasses

                    values = np.array([np.nan if z else rankme_fast(layer, spectrum=st.spectrum)
                                       for layer, st, z in zip(self.emb(run_id), sts, zero)], dtype=np.float64)
                    # used: the memoised statuses need not hold min(N, d) eigenvalues per layer any more
                    self._status[run_id] = [dataclasses.replace(st, spectrum=None) for st in sts]
                else:
                    E = self.emb(run_id)
                    values = np.full(len(E), np.nan)
                    live = [i for i, z in enumerate(zero) if not z]
                    if live:
                        values[live] = layer_profile(E[live], metric=metric, **params)
            self._profiles[key] = values
            self.counters.profiles += 1
        return self._profiles[key]

    def distinct_rows(self, run_id: str, layer: int) -> np.ndarray | None:
        """Rows of one layer that are not duplicates of earlier ones: ``arange(N)`` when the layer
        status found none (so nothing is searched again), else None (the caller merges them)."""
        st = self.status(run_id)[layer]
        return np.arange(st.n_items) if st.n_distinct == st.n_items and not st.collapsed else None

    def blocks(self, runs: list[dict]) -> list[list[dict]]:
        """Split runs (rows of the ``runs`` table) into blocks whose prepared states fit half the
        state budget together, so a loop ``for block: for a in others: for b in block`` prepares
        each ``b`` once and each ``a`` once per block. Sizes are estimated from the runs table
        without loading anything: a prepared layer holds at most a float64 copy of its (N, d) data,
        its (N, N) kernel for CKA when N <= GRAM_CACHE_MAX_N, and neighbour lists."""
        out, block, used = [], [], 0
        for r in runs:
            n = int(r["n_items"])
            size = int(r["n_layers"]) * n * (int(r["dim"]) * 8 + 64 * 8 + (n * 8 if n <= GRAM_CACHE_MAX_N else 0))
            if block and used + size > self._states.budget // 2:
                out.append(block)
                block, used = [], 0
            block.append(r)
            used += size
        return out + ([block] if block else [])

    def memoised_grid(self, run_a: str, run_b: str, metric: str, **params) -> np.ndarray | None:
        """The ``(La, Lb)`` grid :meth:`grid` or :meth:`prefetch_grids` already scored in this
        engine, else None; never computes (studies use it before reading the result table)."""
        return self._grids.get((run_a, run_b, metric, _key_params(self.resolve(metric, **params))))
