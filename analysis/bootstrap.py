"""Percentile bootstrap confidence intervals for any registered metric, resampling items.

One way to score a metric on an item resample, :func:`score_resample` (and its batch form
:func:`score_resamples`), serves both :func:`bootstrap_ci` and the scaling-law bootstrap: an item
drawn twice is never its own neighbour.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.metrics.degenerate import direction_classes
from analysis.metrics.neighbors import (collapse_check, cosine_topk, cosines64_rows, cross_topk, dot64, l2_normalize,
                                        row_norms, stacked_queries)
from analysis.registry import get_metric

#: ranking metrics taking ``groups=`` (items sharing a label are right answers for each other):
#: a resample passes its item indices as the groups, so the copies of an item retrieve each other
RANKING_METRICS = frozenset({"recall_at_k", "mean_ap", "median_rank"})

#: largest N for which the N x N cosine matrix of a space is computed once and gathered per resample
FULL_SIM_MAX_N = 4096


def resample_indices(n: int, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """``(n_boot, n)`` item indices drawn uniformly with replacement, one row per resample."""
    if n < 1 or n_boot < 1:
        raise ValueError(f"resample_indices needs n >= 1 and n_boot >= 1, got n={n}, n_boot={n_boot}")
    return rng.integers(0, n, (n_boot, n))


def _needs_distinct(spec, params) -> int:
    """Distinct items a resample must hold for the metric to be defined on it."""
    p = spec.resolve(**params)
    if spec.name == "lid":
        return p["k"] + 1 if p["method"] == "mle" else 3
    need = 4 if spec.name == "cknna" else 2  # cknna's unbiased HSIC needs N > 3
    if "k" in p and spec.name != "recall_at_k":
        need = max(need, p["k"] + 1)
    return need


class _Cosine:
    """Cosine similarities among a space's items, computed once (N <= FULL_SIM_MAX_N) or per subset."""

    def __init__(self, X):
        self.Xn = l2_normalize(np.asarray(X, dtype=np.float64))
        self.S = self.Xn @ self.Xn.T if len(self.Xn) <= FULL_SIM_MAX_N else None

    def among(self, u: np.ndarray) -> np.ndarray:
        return self.S[np.ix_(u, u)].copy() if self.S is not None else self.Xn[u] @ self.Xn[u].T


def _copy_counts(S: np.ndarray, m: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """For each distinct item a, the k nearest *positions* of a resample, as (item, copies) lists.

    ``S`` ``(U, U)`` cosines among the U distinct items, ``m`` ``(U,)`` their copy counts. Items are
    taken in decreasing similarity (ties to the lower index); an item drawn c times fills c
    positions, and the last item taken may fill only part of its copies (its lower positions).
    Returns ``(items, counts)``, both ``(U, kk)`` with ``kk = min(k, U - 1)``; counts sum to k.
    """
    U = len(m)
    kk = min(k, U - 1)
    S = S.copy()
    np.fill_diagonal(S, -np.inf)  # an item (and every copy of it) is not its own neighbour
    part = np.argpartition(-S, kk - 1, axis=1)[:, :kk]
    vals = np.take_along_axis(S, part, axis=1)
    order = np.lexsort((part, -vals), axis=1)
    items = np.take_along_axis(part, order, axis=1)
    mult = m[items]
    before = np.cumsum(mult, axis=1) - mult
    counts = np.clip(k - before, 0, mult)
    return items, counts


def _mutual_knn_resample(cx: _Cosine, cy: _Cosine, ix: np.ndarray, k: int) -> float:
    u, m = np.unique(ix, return_counts=True)
    if len(u) <= k:
        return float("nan")
    ia, ca = _copy_counts(cx.among(u), m, k)
    ib, cb = _copy_counts(cy.among(u), m, k)
    same = ia[:, :, None] == ib[:, None, :]
    shared = np.minimum(ca[:, :, None], cb[:, None, :]) * same
    per_item = shared.sum(axis=(1, 2))  # |NN_X ∩ NN_Y| of each copy of item a, in positions
    return float(np.sum(m * per_item) / (k * len(ix)))


#: largest N for which linear CKA's resamples are scored from the N x N Grams computed once
CKA_GRAM_MAX_N = 2048


def _cka_linear_resamples(X: np.ndarray, Y: np.ndarray, IX: np.ndarray) -> np.ndarray:
    """Biased linear CKA on every resample ``IX`` ``(B, N)`` at once, ``(B,)``.

    A resample that draws item a ``w_a`` times (``n = Σ w_a``) has ``HSIC = tr(K_r H L_r H)`` over
    its n positions, which sums over items with weights:
    ``Σ_ab w_a w_b K_ab L_ab − (2/n) Σ_a w_a (Kw)_a (Lw)_a + (wᵀKw)(wᵀLw)/n²``, with ``K``, ``L`` the
    Grams of the items (any common shift of the rows leaves HSIC unchanged, so the rows are centred
    on the full-sample mean first, which keeps the correction terms small). So the Grams and their
    products are formed once and every resample costs matrix–vector work, batched over resamples.
    ``CKA = HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L))``, 0 where a side is constant (as :func:`cka`).
    """
    n = X.shape[0]
    Xc, Yc = X - X.mean(axis=0), Y - Y.mean(axis=0)
    K, L = Xc @ Xc.T, Yc @ Yc.T
    W = np.zeros((len(IX), n))
    np.add.at(W, (np.repeat(np.arange(len(IX)), IX.shape[1]), IX.ravel()), 1.0)
    m = float(IX.shape[1])
    Kw, Lw = W @ K, W @ L
    wKw, wLw = np.einsum("bn,bn->b", W, Kw), np.einsum("bn,bn->b", W, Lw)

    def hsic(P, Pw, Qw, wPw, wQw):
        return np.einsum("bn,bn->b", W @ P, W) - (2.0 / m) * np.einsum("bn,bn,bn->b", W, Pw, Qw) + wPw * wQw / m**2

    cross = hsic(K * L, Kw, Lw, wKw, wLw)
    sxx = hsic(K * K, Kw, Kw, wKw, wKw)
    syy = hsic(L * L, Lw, Lw, wLw, wLw)
    denom = np.sqrt(np.maximum(sxx, 0.0) * np.maximum(syy, 0.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, cross / denom, 0.0)


#: items kept per item (``RESAMPLE_LIST_FACTOR · k``) to derive a resample's neighbour lists from
RESAMPLE_LIST_FACTOR = 4


class ResampleNeighbours:
    """Exact k-NN lists of one space on any item resample, derived from lists computed once.

    The answer is the one :func:`analysis.metrics.neighbors.knn_search` gives on the resampled rows
    ``X[ix]`` with ``groups=ix`` (a position's own item, every copy of it, is excluded): for each
    position, the k positions of largest float64 cosine ``s`` (``dot64``), ties to the lower
    position. ``s`` between two positions is ``s`` between their items (row-wise normalisation,
    one fixed summation per pair), so it is read off each item's ``K = RESAMPLE_LIST_FACTOR · k``
    nearest items, sorted by ``s`` (ties to the lower item), computed once per space
    (:func:`analysis.metrics.neighbors.cosine_topk`).

    For item ``a`` of a resample that draws item ``b`` ``c_b`` times, walk ``a``'s list summing
    ``c_b`` until k positions are filled; the item ``t`` where that happens has value
    ``v = s(a, t)``. Items above ``v`` give all their copies; the items at exactly ``v`` (usually
    ``t`` alone) give their lowest positions until k are filled. The walk is exact when the list
    provably holds every item at or above ``v``: the tie block at ``v`` ends inside the list, or
    the list holds all other items. Otherwise (the list ran out, about ``P(Poisson(4k) < k)`` per
    item, ~1e-10 at k = 10; or ties reach its end, e.g. a zero row, whose cosines are all 0) that
    item's row is scanned whole: ``dot64`` against every item, then the same rule (``O(N d)``).
    A resample whose rows all lie at one point (collapsed), and every resample of a collapsed
    space, is searched instead (``knn_search`` decides that case). Every copy of an item has the
    same list. Cost per resample: ``O(U K)`` for U distinct items, against ``O(N² d)`` for a search.

    ``queries`` ``(N, d)``: the lists are those of query row ``Q[a]`` among the rows of X instead of
    X's own rows (item a's row, every copy of it, still left out): the reorder probe's negative
    caption of item a among the other items' positives. The item lists then come from
    :func:`analysis.metrics.neighbors.cross_topk` (every pair's cosine, ``O(N² d)`` once) and a row
    scanned whole takes its query's cosines; the walk is the same. Only :meth:`lists` and
    :meth:`tie_decided` serve such a space (no kernel state: no kernel scores query lists).
    """

    def __init__(self, X: np.ndarray, k: int, *, memo_bytes: int = 0, queries: np.ndarray | None = None):
        n = len(X)
        self.X, self.k, self.n = X, k, n
        self.queries = queries
        self.K = min(n - 1, max(k, RESAMPLE_LIST_FACTOR * k))
        self.rows_scanned = 0  # distinct items whose row was scanned whole (list too short)
        # a cached space (the engine's) meets the same resamples again: one seed draws the same
        # index rows for every pair and metric of N items, so lists and states are kept per resample
        self.memo_bytes = int(memo_bytes)
        self._memo: dict = {}
        self._memo_used = 0
        self.memo_hits = 0
        self.norms = row_norms(X)
        # the float32 unit rows knn_search tests for a collapse (same arithmetic, see _Float32Sims)
        self.unit32 = (X.astype(np.float64) / self.norms[:, None]).astype(np.float32)
        self.collapsed = collapse_check(self.unit32, self.unit32[0])
        if self.collapsed:
            return
        if queries is None:
            self.items, self.s = cosine_topk(X, self.K)
            self._scan_rows, self._scan_norms, self._scan_offset = X, self.norms, 0
        else:
            Z, znorms = stacked_queries(queries, X)
            self.items, self.s = cross_topk(queries, X, self.K, stacked=(Z, znorms))
            self._scan_rows, self._scan_norms, self._scan_offset = Z, znorms, n
            self.query_zero = ~np.any(np.asarray(queries) != 0, axis=1)  # all-zero query rows
        # items pointing the same way (direction_classes, as tied_lists groups them):
        # a resample's positions whose lists are drawn by ties follow from the class sizes
        self.tie_class, self.zero = direction_classes(X)

    def tie_decided(self, ix: np.ndarray) -> str | None:
        """:func:`analysis.metrics.knn.tie_decided_reason` of the resampled rows ``X[ix]`` with
        ``groups=ix``, from the item classes found once (a position's ties are the positions of
        its class that hold other items)."""
        from analysis.metrics.knn import tie_verdict

        if self.queries is not None:
            return tie_verdict(self._query_ties(ix), len(ix), self.k)
        cls = self.tie_class[ix]
        others = np.bincount(cls)[cls] - np.bincount(ix, minlength=self.n)[ix]
        return tie_verdict(int(np.count_nonzero((others > self.k) | self.zero[ix])), len(ix), self.k)

    def _query_ties(self, ix: np.ndarray) -> int:
        """Positions of resample ``ix`` whose query list is drawn by ties: a zero query (cosine 0 to
        every row), or a query whose nearest class of rows pointing one way (the class of its
        nearest item on the full sample) holds more than k positions of other items."""
        cls = self.tie_class
        per_class = np.bincount(cls[ix], minlength=cls.max() + 1)
        top = cls[self.items[:, 0]]  # each item's query: the class at the top of its list
        own = np.where(cls == top, np.bincount(ix, minlength=self.n), 0)  # its own copies are left out
        others = per_class[top] - own
        return int(np.count_nonzero(((others > self.k) | self.query_zero)[ix]))

    def lists(self, ix: np.ndarray) -> np.ndarray | None:
        """``(N, k)`` neighbour positions of resample ``ix``, rows sorted; None when the resample
        is collapsed (the caller searches it, as ``knn_search`` decides that case)."""
        got = self._item_lists(ix)
        return None if got is None else got[2][got[1]]

    def nbytes(self, n_resamples: int = 0) -> int:
        """Bytes this space holds, with its memo full (``memo_bytes``, or what ``n_resamples``
        resamples' lists and states need when that is less)."""
        held = sum(a.nbytes for a in (self.norms, self.unit32, getattr(self, "items", np.zeros(0)),
                                      getattr(self, "s", np.zeros(0))))
        if self.queries is not None and not self.collapsed:
            held += self._scan_rows.nbytes  # the stacked rows and queries a scanned row reads
        return held + min(self.memo_bytes, n_resamples * self.n * (3 * self.k + 2) * 8)

    def _memoised(self, key, make):
        if not self.memo_bytes:
            return make()
        if key in self._memo:
            self.memo_hits += 1
            return self._memo[key]
        value = make()
        size = _held_bytes(value)
        if self._memo_used + size <= self.memo_bytes:
            self._memo[key] = value
            self._memo_used += size
        return value

    def _item_lists(self, ix: np.ndarray):
        """``(u, inv, nbr)``: the distinct items ``u`` of ``ix``, each position's row in ``u``, and
        the ``(U, k)`` neighbour positions of each distinct item (its copies share them); or None."""
        return self._memoised(("lists", ix.tobytes()), lambda: self._derive(ix))

    def _derive(self, ix: np.ndarray):
        k, n, K = self.k, self.n, self.K
        if self.collapsed:
            return None
        cnt = np.bincount(ix, minlength=n)
        u = np.flatnonzero(cnt)
        inv = (np.cumsum(cnt > 0) - 1)[ix]  # position of ix[p]'s item in u
        if collapse_check(self.unit32[u], self.unit32[ix[0]]):
            return None
        first = np.concatenate(([0], np.cumsum(cnt)[:-1]))  # item b's positions: order[first[b]:...]
        order = np.argsort(ix, kind="stable")
        L, S = self.items[u], self.s[u]  # (U, K), each row by decreasing s
        P = cnt[L]
        C = np.cumsum(P, axis=1)
        enough = C[:, -1] >= k
        v = S[np.arange(len(u)), np.argmax(C >= k, axis=1)]  # the value where k positions fill up
        # the tie block at v (contiguous in the sorted list) must end inside the list, unless the
        # list holds every other item: else an unlisted item could tie it
        hard = ~enough | ((S[:, -1] == v) if K < n - 1 else False)
        easy = np.flatnonzero(~hard)
        # every copy of every listed item down to the end of v's tie block, ordered by
        # (row, -s, position): the first k of each row are its neighbours
        use = np.where(S[easy] >= v[easy, None], P[easy], 0)
        reps = use.ravel()
        runs = np.cumsum(reps) - reps
        pos = order[np.repeat(first[L[easy]].ravel(), reps) + (np.arange(reps.sum()) - np.repeat(runs, reps))]
        per_row = use.sum(axis=1)
        row = np.repeat(np.arange(len(easy)), per_row)
        ranked = pos[np.lexsort((pos, -np.repeat(S[easy].ravel(), reps), row))]
        starts = np.cumsum(per_row) - per_row
        nbr = np.empty((len(u), k), dtype=np.int64)
        nbr[easy] = ranked[starts[:, None] + np.arange(k)]
        hard = np.flatnonzero(hard)
        self.rows_scanned += len(hard)
        if len(hard):  # their whole row: dot64 against every item, as the search defines it
            s_all = dot64(self._scan_rows, self._scan_norms, self._scan_offset + u[hard],
                          np.broadcast_to(np.arange(n), (len(hard), n)))
            vals = s_all[:, ix]
            vals[ix[None, :] == u[hard][:, None]] = -np.inf  # the item's own copies
            pick = np.lexsort((np.broadcast_to(np.arange(len(ix)), vals.shape), -vals), axis=-1)[:, :k]
            nbr[hard] = pick
        nbr.sort(axis=1)
        return u, inv, nbr

    def state(self, ix: np.ndarray, kernel, params: dict):
        """The kernel's prepared state of resample ``ix`` (lists derived, else searched).

        Its cosines (CKNNA's kernel values) are computed once per distinct item by
        ``cosines64_rows``, the arithmetic ``cosines64`` applies to the resampled rows (the
        same bits: a pair's value depends only on its two rows), and copied to every copy."""
        from analysis.metrics.knn import KnnState

        if self.queries is not None:
            raise ValueError("a space of query lists (queries=...) has no kernel state: use lists()")

        def make():
            got = self._item_lists(ix)
            if got is None:
                return kernel.prepare(self.X[ix], groups=ix, **params)
            u, inv, nbr = got
            return KnnState(nbr[inv], None, self.norms[ix], sim=cosines64_rows(self.X, self.norms, u, ix[nbr])[inv],
                            tie_decided=self.tie_decided(ix))

        # every k-NN kernel prepares with KnnKernel.prepare: one state serves them all
        return self._memoised(("state", ix.tobytes(), params.get("k"), params.get("knn", "exact")), make)


def _held_bytes(value) -> int:
    """Bytes of the arrays in a memoised value (a tuple of arrays, a KnnState, or None)."""
    if value is None:
        return 0
    if isinstance(value, tuple):
        return sum(v.nbytes for v in value)
    return sum(v.nbytes for v in vars(value).values() if isinstance(v, np.ndarray)) + 2 * value.idx.size * 8


def _kernel_resample(spec, X, Y, ix, params, spaces=None) -> float:
    """The metric on rows ``ix`` through its two-stage kernel, copies grouped by source item.

    ``spaces``: :class:`ResampleNeighbours` of X and Y (k-NN kernels), reused over resamples.
    """
    from analysis.metrics.knn import KnnKernel

    if not isinstance(spec.kernel, KnnKernel):
        return spec(X[ix], Y[ix], **params)
    p = spec.resolve(**params)
    if spaces is None:
        states = [spec.kernel.prepare(A[ix], groups=ix, **p) for A in (X, Y)]
    else:
        states = [space.state(ix, spec.kernel, p) for space in spaces]
    return float(spec.kernel.score_block([states[0]], [states[1]], **p)[0, 0])


def _mutual_knn_derived(spec, X, Y, ix, params, spaces) -> float:
    """Mutual k-NN on resample ``ix`` from derived lists: ``Σ_a c_a |NN_X(a) ∩ NN_Y(a)| / (k n)``
    over the distinct items ``a`` (drawn ``c_a`` times; every copy has the same position lists),
    the integer count the kernel finds on the searched lists of ``X[ix]`` and ``Y[ix]``, divided
    the same way (the same bits, tested). A resample collapsed in either space is searched (NaN)."""
    k = spec.resolve(**params)["k"]
    gx = spaces[0]._item_lists(ix)
    gy = None if gx is None else spaces[1]._item_lists(ix)
    if gy is None:
        return _kernel_resample(spec, X, Y, ix, params)
    if spaces[0].tie_decided(ix) or spaces[1].tie_decided(ix):
        return float("nan")  # as the kernel scores a layer whose lists are decided by ties
    return _shared_share(gx, gy, k, len(ix))


def _shared_share(gx, gy, k: int, n: int) -> float:
    """``Σ_a c_a |NN_X(a) ∩ NN_Y(a)| / (k n)`` from two spaces' item lists of one resample."""
    u, inv, nx = gx
    ny = gy[2]
    copies = np.bincount(inv, minlength=len(u))
    shared = (nx[:, :, None] == ny[:, None, :]).sum(axis=(1, 2))
    return float(int(np.dot(copies, shared)) / (k * n))


def list_overlap(space_x: ResampleNeighbours, space_y: ResampleNeighbours, ix: np.ndarray) -> float:
    """Share of neighbour positions two spaces' lists have in common on resample ``ix`` ``(n,)``:
    ``Σ_p |NN_X(p) ∩ NN_Y(p)| / (k n)`` over the positions p, each list the one
    :class:`ResampleNeighbours` derives (copies of p's item left out, ties to the lower position).
    With two spaces of X's and Y's own rows it is mutual k-NN (:func:`score_resamples`); a space of
    query lists (``queries=``) makes it the reorder probe's negative. NaN when the resample holds
    ``<= k`` distinct items, is collapsed in either space, or either side's lists are decided by ties
    (:meth:`ResampleNeighbours.tie_decided`)."""
    k = space_x.k
    if space_y.k != k or space_y.n != space_x.n:
        raise ValueError(f"list_overlap needs two spaces of one k over one item set, got k={k}, {space_y.k} "
                         f"and N={space_x.n}, {space_y.n}")
    ix = np.asarray(ix)
    if len(np.unique(ix)) <= k:
        return float("nan")
    gx = space_x._item_lists(ix)
    gy = None if gx is None else space_y._item_lists(ix)
    if gy is None or space_x.tie_decided(ix) or space_y.tie_decided(ix):
        return float("nan")
    return _shared_share(gx, gy, k, len(ix))


def score_resamples(metric: str, X, Y=None, IX=None, IY=None, *, spaces=None, **params) -> np.ndarray:
    """The metric on each item resample, ``(B,)``; NaN where a resample is too small for it.

    Args:
        metric: a registry name.
        X: ``(N, p)``; Y: ``(N, q)`` for paired metrics, ``(M, q)`` for unpaired ones, None for
            single-space metrics.
        IX: ``(B, N)`` resampled row indices (:func:`resample_indices`); paired metrics apply
            them to X and Y alike (pairs stay together).
        IY: ``(B, M)`` indices for Y, unpaired metrics only.
        spaces: :class:`ResampleNeighbours` of X and Y with the metric's k, when the caller keeps
            them (the analysis engine does, per run, layer and k); else built here.
    Rules (the same for every caller):
        - neighbourhood metrics never let an item be its own neighbour: every copy of an item is
          excluded from that item's list. Mutual k-NN counts positions: item j drawn c times fills
          up to c of the k slots, copies taken in position order in both spaces, so two spaces
          that agree on items agree on positions (``|NN_X ∩ NN_Y| = Σ_j min(c_X(j), c_Y(j))``).
          Mutual k-NN, cycle k-NN and CKNNA (exact neighbours) take each resample's lists as
          a search on the resampled rows with ``groups=ix`` finds them (ties to the lower
          position), derived from lists computed once per space (:class:`ResampleNeighbours`);
          with ``knn="ann"`` mutual k-NN gathers item cosines computed once per space (ties to
          the lower item) and the other two search each resample.
        - linear (biased) CKA is scored on all resamples at once from the Grams of the items,
          weighted by how often each is drawn (:func:`_cka_linear_resamples`; equal to CKA on the
          resampled rows up to rounding).
        - a resample with fewer distinct items than the metric needs (k + 1 for k-NN metrics and
          LID) scores NaN instead of raising.
        - ranking metrics (recall@k, mAP, median rank) get the resample's item indices as
          ``groups``: copies of one item are relevant to each other (a duplicate of the partner
          is a right answer, not a wrong one). ``groups`` given by the caller are resampled alike.
        - other metrics see the resampled rows as they are.
    """
    spec = get_metric(metric)
    X = np.asarray(X, dtype=np.float64)
    Y = None if Y is None else np.asarray(Y, dtype=np.float64)
    IX = np.atleast_2d(np.asarray(IX))
    need = _needs_distinct(spec, params)
    out = np.full(len(IX), np.nan)
    if spec.kind == "unpaired":
        IY = np.atleast_2d(np.asarray(IY))
        for b, (ix, iy) in enumerate(zip(IX, IY)):
            if min(len(np.unique(ix)), len(np.unique(iy))) >= need:
                out[b] = spec(X[ix], Y[iy], **params)
        return out
    if spec.name == "cka" and len(X) <= CKA_GRAM_MAX_N:
        p = spec.resolve(**params)
        if p.get("kernel") == "linear" and not p.get("debiased"):
            out = _cka_linear_resamples(X, Y, IX)
            few = np.array([len(np.unique(ix)) < need for ix in IX])
            out[few] = np.nan
            return out
    if spec.name == "mutual_knn":
        k = spec.resolve(**params)["k"]
        if not _derives_lists(spec, params):  # approximate neighbours: item cosines, gathered
            cx, cy = _Cosine(X), _Cosine(Y)
            return np.array([_mutual_knn_resample(cx, cy, ix, k) for ix in IX])
        spaces = _spaces(spaces, X, Y, k)
        return np.array([_mutual_knn_derived(spec, X, Y, ix, params, spaces) if len(np.unique(ix)) > k
                         else np.nan for ix in IX])
    ranking = spec.name in RANKING_METRICS
    given = params.pop("groups", None) if ranking else None
    if Y is not None and not ranking and _derives_lists(spec, params):
        spaces = _spaces(spaces, X, Y, spec.resolve(**params)["k"])
    else:
        spaces = None
    for b, ix in enumerate(IX):
        if len(np.unique(ix)) < need:
            continue
        if ranking:
            # an item's copies are relevant to each other: they are one item, not wrong answers
            groups = ix if given is None else np.asarray(given)[ix]
            out[b] = spec(X[ix], Y[ix], groups=groups, **params)
        else:
            out[b] = spec(X[ix], **params) if Y is None else _kernel_resample(spec, X, Y, ix, params, spaces)
    return out


def _spaces(given, X, Y, k: int) -> tuple:
    """The caller's spaces (checked against X, Y and k), else new ones."""
    if given is None:
        return ResampleNeighbours(X, k), ResampleNeighbours(Y, k)
    for space, A, name in zip(given, (X, Y), "XY"):
        if space.k != k or space.n != len(A) or space.X.shape != A.shape:
            raise ValueError(f"resample space for {name} was built for k={space.k} on {space.X.shape}, "
                             f"the metric needs k={k} on {A.shape}")
    return tuple(given)


def derived_lists_k(metric: str, params: dict) -> int | None:
    """The ``k`` whose :class:`ResampleNeighbours` resamples of ``metric`` use (exact k-NN
    metrics), for a caller that keeps spaces; None for every other metric."""
    spec = get_metric(metric)
    return spec.resolve(**params)["k"] if _derives_lists(spec, params) else None


def _derives_lists(spec, params) -> bool:
    """Whether resamples of this metric take derived exact neighbour lists (exact k-NN kernels)."""
    from analysis.metrics.knn import KnnKernel

    return isinstance(spec.kernel, KnnKernel) and spec.resolve(**params).get("knn", "exact") == "exact"


def score_resample(metric: str, X, Y=None, ix=None, iy=None, **params) -> float:
    """The metric on one resample ``ix`` ``(N,)`` (and ``iy`` for unpaired metrics); see
    :func:`score_resamples` for the rules. NaN when the resample has too few distinct items."""
    IY = None if iy is None else np.asarray(iy)[None]
    return float(score_resamples(metric, X, Y, np.asarray(ix)[None], IY, **params)[0])


@dataclass(frozen=True)
class BootstrapCI:
    estimate: float  # the metric on the full sample
    low: float  # NaN when fewer than 2 resamples could be scored (then ``reason`` says why)
    high: float
    level: float
    n_boot: int
    samples: np.ndarray  # (n_boot,) resampled values (NaN where a resample was degenerate)
    raw_low: float = float("nan")  # plain percentile bounds, before the median shift
    raw_high: float = float("nan")
    n_valid: int = 0  # resamples that could be scored
    reason: str | None = None  # why there is no interval, or why some resamples were skipped


def bootstrap_ci(metric: str, X, Y=None, *, n_boot: int = 200, level: float = 0.95, seed: int = 0,
                 estimate: float | None = None, spaces=None, **params) -> BootstrapCI:
    """Confidence interval of ``metric(X[, Y])`` by resampling items with replacement.

    Paired metrics draw one index set for both X and Y (pairs stay together); unpaired metrics
    resample X and Y independently. Resamples are scored by :func:`score_resamples` (an item
    drawn twice is never its own neighbour; a resample with too few distinct items for k is
    skipped). Interval: the ``(1-level)/2`` and ``(1+level)/2`` percentiles of the valid resampled
    values (Efron's percentile method), shifted by ``estimate - median(resamples)`` and clipped to
    the metric's bounds. The shift removes the resampling bias that neighbourhood metrics have (a
    resample holds ~63% distinct items, so neighbourhoods reach further); the raw percentiles are
    kept as ``raw_low``/``raw_high``. Small datasets never raise here: with fewer than 2 valid
    resamples ``low``/``high`` are NaN and ``reason`` says why. ``estimate``: the metric on the full
    sample when the caller already has it (a grid's cell equals the one-pair value bit for bit),
    else it is computed. ``spaces``: see :func:`score_resamples`.
    """
    spec = get_metric(metric)
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    if n_boot < 2:
        raise ValueError(f"n_boot must be at least 2, got {n_boot}")
    X = np.asarray(X, dtype=np.float64)
    needs_y = spec.kind != "single"
    if needs_y and Y is None:
        raise ValueError(f"metric {metric!r} compares two spaces: pass Y")
    if not needs_y and Y is not None:
        raise ValueError(f"metric {metric!r} scores one space: do not pass Y")
    Y = None if Y is None else np.asarray(Y, dtype=np.float64)
    args = (X,) if Y is None else (X, Y)
    estimate = spec(*args, **params) if estimate is None else estimate
    rng = np.random.default_rng(seed)
    IX = resample_indices(len(X), n_boot, rng)
    IY = resample_indices(len(Y), n_boot, rng) if spec.kind == "unpaired" else None
    samples = score_resamples(metric, X, Y, IX, IY, spaces=spaces, **params)
    ok = samples[np.isfinite(samples)]
    skipped = n_boot - len(ok)
    reason = None
    if skipped:
        reason = (f"{skipped} of {n_boot} resamples skipped: too few distinct items "
                  f"(of N={len(X)}) for {metric!r} or a degenerate value")
    if len(ok) < 2:
        return BootstrapCI(float(estimate), float("nan"), float("nan"), float(level), int(n_boot), samples,
                           n_valid=len(ok), reason=f"no interval: {reason}")
    alpha = (1 - level) / 2
    raw_low, raw_high = np.quantile(ok, [alpha, 1 - alpha])
    shift = estimate - float(np.median(ok))
    lo_b, hi_b = spec.bounds
    low = raw_low + shift if lo_b is None else max(lo_b, raw_low + shift)
    high = raw_high + shift if hi_b is None else min(hi_b, raw_high + shift)
    return BootstrapCI(float(estimate), float(low), float(high), float(level), int(n_boot), samples,
                       float(raw_low), float(raw_high), len(ok), reason)
