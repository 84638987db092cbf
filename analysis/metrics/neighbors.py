"""Cosine nearest neighbours: float32 speed, float64 answers, never N x N in memory.

How ``knn_search`` stays exact
------------------------------
The answer is defined in float64: ``s(i, j) = sum_t x̂_it x̂_jt`` with ``x̂ = x / ||x||`` in float64
(``dot64``; elementwise product then numpy's sum over the last axis, so a pair's value does not
depend on which other pairs are computed with it, and ``s(i, j) == s(j, i)`` bit for bit). The
neighbours of ``i`` are the ``k`` largest ``s(i, ·)`` over the other rows (not the row itself, not
its own group), ties broken by the lower column index.

The search runs on float32 unit rows ``a`` (each stored row times its float32 reciprocal norm, in
float32: every entry within ``u_in = U_IN ≈ 2 u32`` relative of ``x̂``'s) and a float32 matmul
``s̃``. For every entry (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §3.1,
any summation order, FMA or not; ``u`` the unit roundoff, ``γ_n = n u / (1 - n u)``,
``ν = 1 + γ_{d+3}(u64)`` a bound on ``||x̂||``)::

    |s̃ - s| <= E = ν² [ (2 u_in + u_in²) + (1 + u_in)² γ_d(u32) + γ_d(u64) ]

(input rounding ``|a·b - x̂·ŷ| <= (2u_in + u_in²) ||x̂|| ||ŷ||``, float32 dot
``γ_d Σ|a_t b_t| <= γ_d ||a|| ||b||`` by Cauchy–Schwarz, float64 reference ``γ_d(u64)``);
``similarity_error_bound(d, u_in)`` returns it with a 1e-4 relative margin for the float64
arithmetic of the checks (d = 768: E ≈ 4.6e-5; the input term is 0.5 % of it).

Per row, take the top ``c = k + EXTRA_CANDIDATES`` float32 candidates, sorted
``s̃_(1) >= ... >= s̃_(c)``, and ``nxt = s̃_(c+1)`` (the best column left out). Then (``_settle``):

1. *sure*: a column with ``s̃ > s̃_(k+1) + 2E`` has ``s >= s̃ - E > s̃_l + E >= s_l`` for every column
   l outside the float32 top-k, so at most k-1 columns can outrank it: it is in the answer.
2. *out*: a column with ``s̃ < s̃_(k) - 2E`` has ``s <= s̃ + E < s̃_(k) - E``, strictly below all k
   float32 top-k columns: it cannot be in the answer (strictly, so tie-breaking cannot matter).
3. *band*: the columns in between get their float64 ``s`` and fill the remaining slots, ties by
   the lower index. Usually the band is empty or a few columns, so the float64 work is tiny.
4. *proof*: every band column must be a candidate, i.e. ``nxt < s̃_(k) - 2E`` (columns outside
   have ``s̃ <= nxt``). If not (near-ties deeper than c), the row is retried with 8x more
   candidates, and finally with all N columns, where the check holds trivially (*fallback*).

``KnnSearch.resolved`` counts the rows proven at each candidate width (the check firing shows
there); ``KnnSearch.reranked`` the float64 cosines computed.
By default (``"auto"``) the float32 top-c candidates of a whole layer of 2048 rows or more come
from the symmetric blocked search (:mod:`analysis.metrics.neighbors_blocks`: each pair's product
computed once, half the flops of faiss's ``IndexFlatIP``, compiled heaps), of smaller layers (and
without numba) from numpy's matmul and argpartition; faiss's exhaustive inner-product search
(:mod:`analysis.metrics.neighbors_faiss`) runs when asked for (``device="faiss"``). Every route's
values obey the same bound ``E``, and the proof and the float64 re-rank are the same code on every
route. The float32 similarities and top-c can run on
a torch device (``device="cuda"``, or ``"auto"`` when torch sees CUDA); candidates and the
float64 re-rank always come back to numpy, so any device returns the same answer bit for bit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from analysis.metrics import neighbors_blocks
from analysis.metrics.degenerate import REL_TOL, ROW_PASS_ENTRIES
from analysis.metrics.neighbors_faiss import faiss_module, faiss_top, largest_group

#: Largest number of similarity entries materialised at once (~16 MB of float32).
CHUNK_ENTRIES = 1 << 22
#: The same for a GPU (1 GiB of float32), where bigger blocks keep the device busy.
DEVICE_CHUNK_ENTRIES = 1 << 28
#: Extra float32 candidates per row re-ranked in float64 when the float32 top-k is not proven.
EXTRA_CANDIDATES = 32
#: ``"auto"`` (torch's CUDA when an NVIDIA driver is present and torch, if installed, sees the
#: GPU; else, for layers of ``SYMMETRIC_MIN_ROWS`` rows or more, the symmetric blocked search of
#: :mod:`analysis.metrics.neighbors_blocks` when numba can run, which computes each pair once:
#: half faiss's flops; else numpy, without importing torch: see ``SYMMETRIC_MIN_ROWS``),
#: ``"symmetric"``, ``"faiss"``, ``"numpy"``, or a torch device name (``"cpu"`` runs the torch
#: code on CPU; tests use it). The symmetric route serves whole-layer searches; its retries and
#: searches of some rows only go to numpy. Every route feeds the same proof and float64 re-rank:
#: the same lists. Read at call time.
DEVICE = os.environ.get("LAYERSCOPE_KNN_DEVICE", "auto")

U32 = 2.0**-24
U64 = 2.0**-53
#: relative error of an entry of the search's float32 unit rows against the float64 unit row:
#: ``fl32(x · fl32(fl64(1/||x||)))`` for a float32 ``x`` (two float32 roundings and two float64
#: ones, against ``fl64(x / ||x||)``): ``2u₃₂ + u₃₂² + 3u₆₄``, rounded up
U_IN = 2 * U32 * (1 + 2.0**-20)
F32_MAX = float(np.finfo(np.float32).max)
#: rows within this max-abs distance of row 0 after normalisation count as one point (collapse):
#: the float32 tolerance of :mod:`analysis.metrics.degenerate` (16 float32 epsilons, ~1.9e-6)
COLLAPSE_ATOL = REL_TOL


def l2_normalize(X: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm; all-zero rows stay zero (their cosine is 0 to everything)."""
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return X / np.where(norms == 0, 1.0, norms)


def row_chunks(n_rows: int, n_cols: int, entries: int | None = None):
    """Yield ``(start, stop)`` row ranges holding at most ``entries`` (default ``CHUNK_ENTRIES``) each."""
    step = max(1, (entries or CHUNK_ENTRIES) // max(1, n_cols))  # read at call time so tests can shrink it
    for start in range(0, n_rows, step):
        yield start, min(n_rows, start + step)


def _gamma(n: int, u: float) -> float:
    return n * u / (1.0 - n * u)


def similarity_error_bound(d: int, u_in: float = U32, u_acc: float = U32) -> float:
    """Bound ``E`` on ``|s̃ - s|`` for one cosine of ``d``-dim rows (see the module docstring).

    ``u_in``: unit roundoff of the stored unit rows (float32: 2^-24; TF32 inputs: 2^-11);
    ``u_acc``: of the dot-product arithmetic. Example: d = 768 gives about 4.6e-5.
    """
    nu = 1.0 + _gamma(d + 3, U64)
    e = nu * nu * ((2 * u_in + u_in * u_in) + (1 + u_in) ** 2 * _gamma(d, u_acc) + _gamma(d, U64))
    return e * (1 + 1e-4)


def row_norms(X: np.ndarray) -> np.ndarray:
    """``(N,)`` float64 L2 norms (the same values ``l2_normalize`` divides by), chunked."""
    out = np.empty(X.shape[0])
    for start, stop in row_chunks(X.shape[0], X.shape[1], ROW_PASS_ENTRIES):
        out[start:stop] = norms64(X[start:stop])
    return np.where(out == 0, 1.0, out)


def norms64(block: np.ndarray) -> np.ndarray:
    """``(r,)`` float64 L2 norms of the rows of ``block`` ``(r, d)``: the bits of
    ``np.linalg.norm(block.astype(np.float64), axis=1)`` (the same squares, the same reduction, the
    same square root) without its float64 copy of the block (a third less time)."""
    return np.sqrt(np.add.reduce(np.square(block, dtype=np.float64), axis=1))


def unit_rows(X: np.ndarray, norms: np.ndarray, rows) -> np.ndarray:
    """float64 unit rows ``X[rows] / ||X[rows]||`` (``rows`` any index array; shape ``rows.shape + (d,)``)."""
    return X[rows].astype(np.float64) / norms[rows][..., None]


#: float64 entries gathered per step of ``dot64``: small enough to stay in cache and to reuse
#: freed memory (large fresh temporaries cost more in page faults than in arithmetic).
DOT_CHUNK_ENTRIES = 1 << 16


def dot64(X: np.ndarray, norms: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``(r, c)`` float64 cosines ``s(rows[i], cols[i, j])``; one fixed summation per pair.

    Each pair is ``sum((x̂_j * x̂_i))`` over one contiguous row of d products, so its value does not
    depend on the other pairs of the call, on chunking, or on the order of i and j.
    """
    r, c = cols.shape
    d = X.shape[1]
    out = np.empty((r, c))
    cc = min(c, max(1, DOT_CHUNK_ENTRIES // max(1, d)))
    rr = max(1, DOT_CHUNK_ENTRIES // (cc * d))
    for r0 in range(0, r, rr):
        r1 = min(r, r0 + rr)
        Q = unit_rows(X, norms, rows[r0:r1])[:, None, :]  # each row's unit vector once per block
        for c0 in range(0, c, cc):
            c1 = min(c, c0 + cc)
            C = unit_rows(X, norms, cols[r0:r1, c0:c1])
            C *= Q
            out[r0:r1, c0:c1] = C.sum(axis=-1)
    return out


#: float64 entries gathered per step of ``cosines64``'s numpy path
COS_CHUNK_ENTRIES = 1 << 18
#: Compute pair cosines in compiled code (:mod:`analysis.metrics.neighbors_jit`) when numba is there; the
#: numpy path gives the same bits (tests switch this off to compare)
USE_JIT = True


def cosines64(X: np.ndarray, norms: np.ndarray, idx: np.ndarray, recip: np.ndarray | None = None) -> np.ndarray:
    """``(N, c)`` float64 cosines ``s(i, idx[i, j]) = (x_i · x_j) / (||x_i|| ||x_j||)`` of every row
    with its listed neighbours.

    The dot product runs on the rows as stored, accumulated in float64 in a fixed order of eight
    running sums (:mod:`analysis.metrics.neighbors_jit`): products of float32 entries are exact in float64,
    so the sum is within ``d · u`` (``u = 2⁻⁵³``) of the exact dot, as a float64 dot of the unit rows
    would be; the division by ``norms[i] * norms[j]`` (float64 norms, the same multiply either way
    round) adds two roundings. The same fixed loop runs for every pair, so ``s(i, j)`` is the same
    bits as ``s(j, i)`` whatever the chunking (tests check both). ``recip`` (``(N, c)``, the slot of
    i in j's list or -1: :func:`analysis.metrics.knn.reciprocal_slots`) lets the compiled path copy
    ``s(j, i)`` instead of recomputing it. Used for CKNNA's kernel values. Memory: the output, plus
    ``COS_CHUNK_ENTRIES`` gathered entries per step on the numpy path.
    """
    return cosines64_rows(X, norms, None, idx, recip)


def cosines64_rows(X: np.ndarray, norms: np.ndarray, rows: np.ndarray | None, idx: np.ndarray,
                   recip: np.ndarray | None = None) -> np.ndarray:
    """``(r, c)`` float64 cosines ``s(rows[i], idx[i, j])`` by :func:`cosines64`'s arithmetic (the
    same bits for the same pair of rows); ``rows=None`` means ``0..r-1`` (then ``recip`` may be given)."""
    from analysis.metrics import neighbors_jit

    r, c = idx.shape
    d = X.shape[1]
    jit = neighbors_jit.kernel() if USE_JIT else None
    if jit is not None:
        X = np.ascontiguousarray(X)  # the compiled dot reads 8 entries of a row at a time
        own_rows = np.arange(r) if rows is None else np.asarray(rows)
        symmetric = rows is None and recip is not None
        rec = recip if symmetric else np.empty((0, 0), dtype=np.int64)
        return jit(X, norms, own_rows, idx, rec, symmetric)
    out = np.empty((r, c))
    step = max(1, COS_CHUNK_ENTRIES // max(1, c * d))
    for r0 in range(0, r, step):
        r1 = min(r, r0 + step)
        own = X[r0:r1] if rows is None else X[rows[r0:r1]]
        out[r0:r1] = neighbors_jit.lane_dots(own, X[idx[r0:r1]])
    out /= (norms[:r] if rows is None else norms[rows])[:, None] * norms[idx]
    return out


def collapse_check(U: np.ndarray, first: np.ndarray) -> bool:
    """Whether the unit rows ``U`` all lie within ``COLLAPSE_ATOL`` (max-abs) of the unit row ``first``."""
    return bool(np.max(np.abs(U - first), initial=0.0) <= COLLAPSE_ATOL)


def is_collapsed(X: np.ndarray, norms: np.ndarray | None = None) -> bool:
    """Whether every row is the same point after L2 normalisation (all-zero rows included).

    The k-NN metrics' own test of :mod:`analysis.metrics.degenerate`'s "rank 1" on the unit rows they
    already hold (no extra pass over the layer): on such a layer every cosine is equal, so "the k nearest" is decided by tie-breaking alone and any k-NN score is an
    artefact of the index order (mutual k-NN gives a believable ~0.39 on identical vectors).
    "Same point" allows ``COLLAPSE_ATOL`` (~1.9e-6, 16 float32 epsilons on a unit vector's entry)
    so that float32 noise on a constant vector still counts; ``knn_search`` checks the same on its
    float32 unit rows.
    """
    norms = row_norms(X) if norms is None else norms
    first = unit_rows(X, norms, np.array([0]))[0]
    return all(collapse_check(X[a:b].astype(np.float64) / norms[a:b, None], first)
               for a, b in row_chunks(X.shape[0], X.shape[1], ROW_PASS_ENTRIES))


def _nvidia_driver() -> bool:
    """Cheap test for an NVIDIA GPU, so ``"auto"`` never pays torch's import on a CPU machine."""
    return os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/nvidia0")


def _resolve_device(device, n: int | None = None):
    """``None`` (numpy), ``"symmetric"``, ``"faiss"``, or a torch device for the float32 candidates
    (``n``: rows of the layer, which ``"auto"`` weighs on a CPU)."""
    device = DEVICE if device is None else device
    if device == "symmetric":
        if not neighbors_blocks.available():
            raise ValueError("k-NN device 'symmetric' needs numba (it comes with umap-learn) and "
                             "LAYERSCOPE_NO_JIT unset")
        return "symmetric"
    if device == "faiss":
        if faiss_module() is None:
            raise ValueError("k-NN device 'faiss' needs faiss: pip install 'layerscope[ann]' (or: pip install faiss-cpu)")
        return "faiss"
    if device == "auto" and not _nvidia_driver():
        return _cpu_route(n)
    if device == "numpy":
        return None
    try:
        import torch
    except ImportError:
        if device == "auto":
            return None
        raise ValueError(f"k-NN device {device!r} needs torch, which is not installed") from None
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return _cpu_route(n)
    return torch.device(device)


#: ``"auto"`` takes the symmetric blocked search from this many rows (where numba runs); below,
#: and everywhere without numba, numpy's row blocks and ``argpartition``: below it the heaps'
#: filling costs more than the half product saves. faiss's exhaustive search is no ``auto`` route:
#: a route is chosen by what it costs quiet *and* with a busy core beside (``bench/routes.py
#: --busy 1``, figures in bench/README.md), and faiss lost to numpy at every N measured, 2-8x,
#: on one thread and on the whole pool (its OpenMP threads spin-wait and lose the cores to any
#: other process; its speed also swings by CPU far more than numpy's BLAS).
SYMMETRIC_MIN_ROWS = 2048


def cpu_search(n: int) -> bool:
    """Whether the exact search of a layer of ``n`` rows runs on this machine's CPU (numpy or the
    symmetric blocks, as ``DEVICE`` resolves now), not on faiss's pool or a torch device."""
    route = _resolve_device(None, n)
    return route is None or (isinstance(route, str) and route == "symmetric")


def _cpu_route(n: int | None = None):
    """``"auto"`` on a CPU: symmetric blocks (numba) for layers of ``SYMMETRIC_MIN_ROWS`` rows or
    more (``n`` None: a whole layer of unknown size), else numpy (None)."""
    if neighbors_blocks.available() and (n is None or n >= SYMMETRIC_MIN_ROWS):
        return "symmetric"
    return None


class _Float32Sims:
    """Row blocks of float32 cosines with excluded entries at -inf, on numpy or a torch device."""

    def __init__(self, X, groups, device):
        n = X.shape[0]
        self.n, self.groups, self.device = n, groups, device
        self.symmetric = isinstance(device, str) and device == "symmetric"
        # the symmetric route's retries and row subsets run on numpy (as auto's small layers)
        self.faiss = isinstance(device, str) and device == "faiss"
        A = np.empty(X.shape, dtype=np.float32)
        self.norms = norms = np.empty(n)
        self.collapsed = True
        self.zero_rows = 0
        for start, stop in row_chunks(n, X.shape[1], ROW_PASS_ENTRIES):
            # the norms as row_norms computes them (float64), then the unit rows by one float32
            # multiply of each stored row by its float32 reciprocal norm: within 2u₃₂ + u₃₂² + 3u₆₄
            # of the float64 unit row entry by entry (U_IN), a float32 pass instead of a float64
            # division and cast (0.3 ms a layer at N = 1024, d = 768)
            block = X[start:stop]
            nrm = norms64(block)
            self.zero_rows += int(np.count_nonzero(nrm == 0))
            norms[start:stop] = np.where(nrm == 0, 1.0, nrm)
            inv = 1.0 / norms[start:stop]
            if block.dtype == np.float32 and inv.max(initial=0.0) < F32_MAX:
                np.multiply(block, inv.astype(np.float32)[:, None], out=A[start:stop])
            else:  # float64 rows, or norms so small their float32 reciprocal would overflow
                A[start:stop] = block.astype(np.float64) / norms[start:stop, None]
            # the last row of the block first: one row tells most layers apart from a collapse
            self.collapsed = (self.collapsed and collapse_check(A[stop - 1:stop], A[0])
                              and collapse_check(A[start:stop], A[0]))
        self.u_in = U_IN
        if device is None or isinstance(device, str):
            self.A = A
            # faiss and the symmetric heaps skip at most this many columns per row (itself or its group)
            self.extra = largest_group(groups) if (self.faiss or self.symmetric) else 0
        else:
            import torch

            self.A = torch.from_numpy(A).to(device)
            self.G = None if groups is None else torch.from_numpy(np.asarray(groups)).to(device)

    def top_all(self, c: int):
        """:meth:`top` for every row, by the symmetric blocked search where that route was chosen
        and every heap can fill (``c + 1 + g <= N``)."""
        if self.symmetric and c + 1 + self.extra <= self.n:
            return neighbors_blocks.symmetric_top(self.A, c, self.groups)
        return self.top(np.arange(self.n), c)

    def top(self, rows: np.ndarray, c: int):
        """For ``rows``: the ``c`` columns of largest float32 cosine (unordered) with their values,
        and the ``(c+1)``-th largest value (``-inf`` when ``c`` covers every column)."""
        if self.faiss:
            if c + 1 + self.extra <= self.n:
                return faiss_top(self.A, rows, c, self.groups, self.extra)
        elif self.device is not None and not self.symmetric:  # a torch device
            return self._top_torch(rows, c)
        cand = np.empty((len(rows), c), dtype=np.int64)
        vals = np.empty((len(rows), c), dtype=np.float32)
        nxt = np.full(len(rows), -np.inf, dtype=np.float32)
        # a run of consecutive rows is sliced, not gathered: no copy, and the whole layer in one
        # chunk is ``A @ A.T`` of one buffer, which numpy sends to syrk (half gemm's flops; its
        # values obey the same bound E, and the proof decides the lists either way)
        run = len(rows) > 0 and rows[-1] - rows[0] == len(rows) - 1 and bool(np.all(np.diff(rows) == 1))
        for start, stop in row_chunks(len(rows), self.n):
            r = rows[start:stop]
            negS = (self.A[r[0]:r[-1] + 1] if run else self.A[r]) @ self.A.T
            negS *= -1  # exact in float32; partition the negation without another N-wide temporary
            # +inf on the diagonal (and the own group) excludes the points themselves
            negS[np.arange(len(r)), r] = np.inf
            if self.groups is not None:
                negS[self.groups[r, None] == self.groups[None, :]] = np.inf
            if c < self.n:
                part = np.argpartition(negS, c if c < self.n - 1 else c - 1, axis=1)
                if c < self.n - 1:
                    nxt[start:stop] = -np.take_along_axis(negS, part[:, c : c + 1], axis=1)[:, 0]
                part = part[:, :c]
            else:
                part = np.broadcast_to(np.arange(self.n), (len(r), self.n))
            cand[start:stop] = part
            vals[start:stop] = -np.take_along_axis(negS, part, axis=1)
        return cand, vals, nxt

    def _top_torch(self, rows, c):
        import torch

        cand = np.empty((len(rows), c), dtype=np.int64)
        vals = np.empty((len(rows), c), dtype=np.float32)
        nxt = np.full(len(rows), -np.inf, dtype=np.float32)
        take = min(c + 1, self.n)
        tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False  # TF32 inputs would void the float32 bound
        try:
            for start, stop in row_chunks(len(rows), self.n, DEVICE_CHUNK_ENTRIES):
                r = torch.from_numpy(rows[start:stop]).to(self.device)
                S = self.A[r] @ self.A.T
                S[torch.arange(len(r), device=self.device), r] = -torch.inf
                if self.G is not None:
                    S[self.G[r, None] == self.G[None, :]] = -torch.inf
                v, i = torch.topk(S, take, dim=1, sorted=True)
                v, i = v.cpu().numpy(), i.cpu().numpy()
                cand[start:stop] = i[:, :c]
                vals[start:stop] = v[:, :c]
                if take > c:
                    nxt[start:stop] = v[:, c]
        finally:
            torch.backends.cuda.matmul.allow_tf32 = tf32
        return cand, vals, nxt


@dataclass
class KnnSearch:
    """Result of ``knn_search``: ``idx`` ``(N, k)`` neighbours, each row sorted by column index."""

    idx: np.ndarray
    norms: np.ndarray  # (N,) float64 row norms (zero rows stored as 1)
    #: rows proven with the first candidate list, then with each wider one (the last may be all columns)
    resolved: tuple
    bound: float  # the E of the module docstring used for this search
    collapsed: bool = False  # every row the same point (see is_collapsed): idx is a placeholder
    reranked: int = 0  # (row, column) pairs whose cosine was computed in float64
    method: str = "exact"  # "exact" (proven) or "ann" (approximate, see ann_search)
    recall: float | None = None  # ann: mean share of the exact neighbours found, on a sample
    recall_rows: int = 0  # ann: rows in that sample
    dims: int | None = None  # ann: dimensions of the subspace searched (d: the full rows)
    candidates: int | None = None  # ann: valid candidates per row re-ranked in float64 (k + extra)
    #: exact search: (N,) each row's (k+1)-th largest float32 cosine ``s̃`` (self and own group left
    #: out; -inf when there is no (k+1)-th), within ``bound`` of the float64 value (None: not kept)
    next_sim: np.ndarray | None = None
    zero_rows: int = 0  # rows that are all zeros (cosine 0 to every row)


def _excluded(rows, cols, groups):
    out = cols == rows[:, None]
    if groups is not None:
        out |= groups[cols] == groups[rows][:, None]
    return out


def _settle(todo, cand, vals, nxt, k, E, X, norms, groups):
    """Proven neighbours for the rows ``todo`` from their top-``c`` float32 candidates.

    Per row, with candidate values sorted ``s̃_(1) >= ... >= s̃_(c)`` and ``nxt = s̃_(c+1)``:
    *sure* columns (``s̃ > s̃_(k+1) + 2E``) beat every column outside the float32 top-k, so at
    most k-1 columns can outrank them: they are in the answer without any float64 work. Columns
    with ``s̃ < s̃_(k) - 2E`` are strictly beaten by all k float32 top-k columns: never in the answer.
    The *band* between is re-ranked in float64 (ties by lower index) to fill the other slots.
    The row is proven when no column outside the candidates can be in the band:
    ``nxt < s̃_(k) - 2E`` (or there is no such column).
    Returns ``(ok, idx, pairs, sk1)``: proven rows, their neighbours, float64 cosines computed,
    and their ``s̃_(k+1)`` (``-inf`` where the candidates are every other column and k of them).
    """
    # thresholds need only the k-th and (k+1)-th largest values; the masks work on unsorted rows
    part = -np.partition(-vals, [k - 1, k] if vals.shape[1] > k else [k - 1], axis=1)
    nxt = nxt.astype(np.float64)
    sk = part[:, k - 1].astype(np.float64)
    sk1 = part[:, k].astype(np.float64) if vals.shape[1] > k else nxt
    with np.errstate(invalid="ignore"):
        ok = (nxt == -np.inf) | (nxt < sk - 2 * E)
    v, cs, sk, sk1, rows = vals[ok].astype(np.float64), cand[ok], sk[ok], sk1[ok], todo[ok]
    sure = v > sk1[:, None] + 2 * E
    band = ~sure & (v >= sk[:, None] - 2 * E)
    idx = np.empty((len(rows), k), dtype=np.int64)
    plain = ~band.any(axis=1)  # no band: the k sure columns are the answer
    idx[plain] = cs[plain][sure[plain]].reshape(-1, k)
    hard = np.flatnonzero(~plain)
    if len(hard):
        cs_h, band_h = cs[hard], band[hard]
        s = np.where(sure[hard], np.inf, -np.inf)
        r, j = np.nonzero(band_h)
        s[r, j] = dot64(X, norms, rows[hard][r], cs_h[r, j][:, None])[:, 0]
        s[band_h & _excluded(rows[hard], cs_h, groups)] = -np.inf
        pick = np.lexsort((cs_h, -s), axis=-1)[:, :k]
        idx[hard] = np.take_along_axis(cs_h, pick, axis=1)
    return ok, idx, int(band.sum()), sk1


def _exact_rows(sims, rows, k, E, X, groups, all_rows=False):
    """Proven neighbours of ``rows`` (see the module docstring): ``(idx, resolved, reranked,
    next_sim)``, ``next_sim`` each row's ``s̃_(k+1)``. ``all_rows``: ``rows`` is every row in
    order, so the first candidates may come from a whole-layer search (:meth:`_Float32Sims.top_all`)."""
    n = sims.n
    idx = np.empty((len(rows), k), dtype=np.int64)
    next_sim = np.empty(len(rows))
    counts, reranked = [], 0
    c = min(k + EXTRA_CANDIDATES, n)
    todo = np.arange(len(rows))
    while len(todo):
        if all_rows and len(todo) == n:
            cand, vals, nxt = sims.top_all(c)
        else:
            cand, vals, nxt = sims.top(rows[todo], c)
        ok, found, pairs, sk1 = _settle(rows[todo], cand, vals, nxt, k, E, X, sims.norms, groups)
        idx[todo[ok]] = found
        next_sim[todo[ok]] = sk1
        counts.append(int(ok.sum()))
        reranked += pairs
        todo = todo[~ok]
        c = min(8 * c, n)  # wider candidate lists for the rows not proven yet; c = n always proves
    idx.sort(axis=1)
    return idx, tuple(counts), reranked, next_sim


def _placeholder(n, k):
    """Every row the same point: neighbours are undefined; the first k other rows keep shapes."""
    slots = np.arange(k)[None, :]
    return slots + (slots >= np.arange(n)[:, None])


def knn_search(X: np.ndarray, k: int, groups: np.ndarray | None = None, *, device=None) -> KnnSearch:
    """Exact cosine k-NN of each row among the other rows, computed mostly in float32.

    Args:
        X: ``(N, d)`` rows, any float dtype (float32 stays float32; nothing ``N x N`` is held).
        k: neighbours per row, ``1 <= k < N``.
        groups: optional ``(N,)`` labels; rows sharing a label are never each other's neighbours.
            The bootstrap passes source indices, so an item resampled twice does not find its own
            copy (which would inflate every neighbourhood metric).
        device: see ``DEVICE``; ``None`` reads it.
    Returns:
        ``KnnSearch``: the k columns of largest float64 cosine ``s`` per row, ties by lower index
        (definition and proof in the module docstring and ``_settle``), each row sorted by column
        index; ``collapsed`` (and a placeholder ``idx``) when every row is the same point.
    Memory: X, one float32 unit-row copy (on the device when there is one), ``N`` norms and
    ``CHUNK_ENTRIES`` (``DEVICE_CHUNK_ENTRIES``) similarities at a time (faiss: its own sgemm
    blocks, 4096 × 1024, and ``FAISS_QUERY_ROWS · (c + 1 + g)`` results).
    """
    n, d = X.shape
    groups = None if groups is None else np.asarray(groups)
    sims = _Float32Sims(X, groups, _resolve_device(device, n))
    E = similarity_error_bound(d, u_in=sims.u_in)
    if sims.collapsed:
        return KnnSearch(idx=_placeholder(n, k), norms=sims.norms, resolved=(), bound=E, collapsed=True)
    idx, counts, reranked, next_sim = _exact_rows(sims, np.arange(n), k, E, X, groups, all_rows=True)
    return KnnSearch(idx=idx, norms=sims.norms, resolved=counts, bound=E, reranked=reranked,
                     next_sim=next_sim, zero_rows=sims.zero_rows)


# ---------------------------------------------------------------------------------------------
# Approximate search (exhaustive search in a principal subspace, float64 re-rank), recall measured
# ---------------------------------------------------------------------------------------------

#: ``knn=`` choices of the k-NN metrics
KNN_METHODS = ("exact", "ann")
#: rows per approximate search whose neighbours are compared with the exact answer (recall)
RECALL_SAMPLE = 256
#: The approximate search ranks in ``p = min(d, max(ANN_MIN_DIMS, ANN_DIMS_SHARE · d))``
#: principal dimensions (d = 768: p = 64). Chosen by measurement (bench/README.md;
#: N = 16,384, d = 768, one layer, one run on the 2-core VM under load): exact (faiss's exhaustive
#: search) 19 s; faiss IVF-Flat (512 cells) 44 s for recall 0.86 (64 probes), 66 s for 0.955
#: (128 probes): its per-cell scans are not BLAS-shaped, so scanning 1/4 of the rows costs more
#: than all of them exhaustively; HNSW (M = 32, efConstruction 40) 66 s for recall 0.988, the
#: graph's build alone twice the exact search (and multi-threaded builds are not reproducible).
#: The projected search is one BLAS-shaped pass over ``p / d`` of the data, yet costs about 0.3 of
#: the exact one, not 1/12: below p ≈ 128 faiss's top-k selection, not the product, sets the time
#: (p = 128: 0.40-0.46, p = 64: 0.29-0.31). What it can miss is the inner product in the
#: discarded directions, so its recall depends on the layer's spectrum: this is where ``p`` starts,
#: and ``ann_search`` doubles it while the held-out recall stays below ``ANN_RECALL_TARGET``. At
#: N = 16,384 on a power-law spectrum (eigenvalues ∝ 1/i) p = 64 gave recall 0.984 with 43
#: candidates (p = 32: 0.943); a flatter one (∝ i^-0.8) needed p = 128 (bench/grid.py
#: --scaling-spectrum powerlaw, second layer).
ANN_DIMS_SHARE = 1 / 12
ANN_MIN_DIMS = 32
#: held-out recall the approximate search grows its subspace for (``ann_search``); also the floor
#: below which a grid is flagged (``analysis.metrics.knn.RECALL_FLOOR``)
ANN_RECALL_TARGET = 0.95
#: Candidates per row re-ranked in float64 beyond k (the approximation's slack), tried in this order
#: at each p before p doubles: the first that reaches the tuning recall is kept. Fewer candidates
#: make the subspace's top-k selection (which sets its time) cheaper: N = 32,768, one layer, 2-core
#: VM: latent data 2.19 s with 32 and 1.53 s with 16 (recall 1.000 both); a power-law layer
#: (eigenvalues ∝ 1/i) needs 32 at p = 64 (16 only passed at p = 128, for more time).
ANN_EXTRAS = (16, 32)
#: rows (seeded sample, the recall rows left out) whose second moment places the subspace
ANN_FIT_ROWS = 16384
#: rows per faiss query batch (bounds the candidate arrays)
ANN_QUERY_ROWS = 1 << 14

INSTALL_FAISS = "knn='ann' needs faiss: pip install 'layerscope[ann]' (or: pip install faiss-cpu)"


def check_knn_method(knn: str) -> str:
    if knn not in KNN_METHODS:
        raise ValueError(f"knn must be one of {KNN_METHODS}, got {knn!r}")
    return knn


def _faiss():
    try:
        import faiss
    except ImportError:
        raise ImportError(INSTALL_FAISS) from None
    return faiss


def ann_dims(d: int) -> int:
    """Projected dimensions of the approximate search for rows of width ``d`` (see ``ANN_DIMS_SHARE``)."""
    return int(min(d, max(ANN_MIN_DIMS, round(ANN_DIMS_SHARE * d))))


def candidate_values32(A: np.ndarray, rows: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """``(r, c)`` float32 inner products ``A[rows[i]] · A[cand[i, j]]`` of float32 unit rows.

    The values the exact route's proof works on (``s̃``, within ``E`` of the float64 ``s``: any
    summation order), for listed pairs only: each candidate row is gathered once in float32, half
    the traffic of ``dot64``'s float64 copies and none of its divisions (measured at N = 32,768,
    d = 768, 43 candidates a row: ``dot64`` of every candidate cost 0.15x the exact search).
    """
    if USE_JIT and neighbors_blocks.available():  # rows read in place, on the BLAS pool's threads
        return neighbors_blocks.pair_values(A, rows, cand)
    r, c = cand.shape
    out = np.empty((r, c), dtype=np.float32)
    step = max(1, (4 * DOT_CHUNK_ENTRIES) // max(1, c * A.shape[1]))
    for r0 in range(0, r, step):
        r1 = min(r, r0 + step)
        out[r0:r1] = np.matmul(A[cand[r0:r1]], A[rows[r0:r1], :, None])[..., 0]
    return out


def _rerank_candidates(sims, rows, cand, k, E, X, groups):
    """``(idx, few)``: per row, the ``k`` candidates of largest float64 cosine ``s`` (``dot64``),
    ties by lower index, the row itself and its group left out; ``few`` marks the rows with fewer
    than ``k`` valid candidates (their ``idx`` is meaningless: they are searched exactly).

    The same answer as ``dot64`` of every candidate and a stable sort, computed as the exact
    route does (``_settle``): float32 values ``s̃`` of the candidates, float64 only for the band of
    columns within ``2E`` of the k-th/(k+1)-th value. ``nxt = -inf``: the candidates are the whole
    universe here (what the approximate search missed, it missed; the recall says how much).
    """
    bad = cand < 0
    cand = np.where(bad, rows[:, None], cand)  # a missing slot becomes the row itself: excluded
    vals = candidate_values32(sims.A, rows, cand)
    vals[_excluded(rows, cand, groups) | bad] = -np.inf
    few = np.isinf(vals).sum(axis=1) > cand.shape[1] - k
    idx = np.zeros((len(rows), k), dtype=np.int64)
    keep = ~few
    if keep.any():
        _, idx[keep], _, _ = _settle(rows[keep], cand[keep], vals[keep], np.full(int(keep.sum()), -np.inf),
                                     k, E, X, sims.norms, groups)
    return idx, few


def ann_search(X: np.ndarray, k: int, groups: np.ndarray | None = None, *, sample: int = RECALL_SAMPLE,
               seed: int = 0) -> KnnSearch:
    """Approximate cosine k-NN: exhaustive search in a principal subspace, re-ranked in float64.

    The float32 unit rows are projected on the ``p`` leading eigenvectors of their uncentred second
    moment (``neighbors_faiss.principal_directions``, fitted on up to ``ANN_FIT_ROWS`` seeded rows
    other than the held-out rows below); faiss's exhaustive inner-product search there proposes
    ``k + extra`` candidates per row (``extra`` from ``ANN_EXTRAS``; plus the row's own group; every row at once by
    :mod:`analysis.metrics.neighbors_blocks`'s symmetric search where numba runs), of which the k of largest
    float64 cosine are kept, ties by lower index (``_rerank_candidates``: the exact route's proof
    within the candidates, float64 only near the k-th value): where the candidates hold the true
    neighbours the answer equals ``knn_search`` exactly. Rows left with fewer than k valid
    candidates, and every row when N is too small for the candidate lists, are searched exactly.

    Choice of ``p`` (adaptive, by held-out recall): it starts at ``ann_dims(d)`` (64 at d = 768)
    and doubles while the recall on ``sample`` seeded *tuning* rows (searched exactly, left out of
    the fit) is below ``ANN_RECALL_TARGET``; at ``p = d`` the search is faiss's exhaustive search of
    the full rows. At each p the candidate counts of ``ANN_EXTRAS`` are tried fewest first (the
    final search's selection costs more with more). The tuning search costs ``sample / N`` of a
    full one per try. A layer whose inner products the leading directions hold (low rank,
    fast-decaying spectrum) stays at 64 with k + 16 candidates; a flat spectrum grows p. Cost at
    N = 65,536 (2-core VM, latent data): about 0.3 of the exact search at p = 64; the top-k
    selection, not the ``p / d`` product, sets it below p = 128.

    Recall (what is stored and flagged): measured on ``sample`` *other* held-out rows (seeded, not
    the tuning rows, not fitted), so stopping at the first p that passed on the tuning rows does not
    bias it upward: the mean share of their exact k neighbours that the approximate lists hold
    (1.0 = none missed), on ``recall_rows`` rows. When N < 2 ``sample`` the two sets are the same
    rows. A grid below ``analysis.metrics.knn.RECALL_FLOOR`` (= ``ANN_RECALL_TARGET``) is flagged.
    Cost of the checks: ``2 sample · N · d`` flops (the exact searches of the held-out rows).
    Args and returns as ``knn_search`` (``method="ann"``; ``dims`` the final p). Needs faiss.
    Memory: the float32 unit rows, their ``(N, p)`` projection, ``d × d`` eigenvectors, ``N`` norms.
    """
    from analysis.metrics.neighbors_faiss import principal_directions

    _faiss()
    n, d = X.shape
    groups = None if groups is None else np.asarray(groups)
    # the exact searches of the held-out rows (and of rows left short) by faiss's exhaustive
    # search: half numpy's time for 256 rows at N = 65,536
    sims = _Float32Sims(X, groups, "faiss")
    E = similarity_error_bound(d, u_in=sims.u_in)
    if sims.collapsed:
        return KnnSearch(idx=_placeholder(n, k), norms=sims.norms, resolved=(), bound=E, collapsed=True,
                         method="ann")
    rng = np.random.default_rng(seed)
    held = rng.choice(n, size=min(2 * sample, n), replace=False)
    tune = np.sort(held[:sample])
    audit = np.sort(held[sample:]) if len(held) >= 2 * sample else tune
    # the row itself and its own group come back from the search too: ask for that many more
    g = largest_group(groups)
    p = ann_dims(d)
    V = exact_tune = None
    if p < d and min(n, k + ANN_EXTRAS[-1] + g) < n:
        fit = np.setdiff1d(np.arange(n), held)
        fit = np.sort(rng.choice(fit, size=min(ANN_FIT_ROWS, len(fit)), replace=False)) if len(fit) else held
        V = principal_directions(sims.A, d, fit)  # every direction, largest first: p can grow
        exact_tune = _exact_rows(sims, tune, k, E, X, groups)[0]
    P, take = _tuned_projection(sims, V, p, n, d, k, g, tune, exact_tune, E, X, groups)
    idx = _ann_lists(sims, P, take, g, k, E, X, groups)
    exact = _exact_rows(sims, audit, k, E, X, groups)[0]
    return KnnSearch(idx=idx, norms=sims.norms, resolved=(), bound=E, method="ann",
                     recall=_recall(idx[audit], exact), recall_rows=len(audit), dims=P.shape[1],
                     candidates=take - g)


def _tuned_projection(sims: "_Float32Sims", V, p: int, n: int, d: int, k: int, g: int, tune, exact_tune,
                      E: float, X, groups) -> tuple[np.ndarray, int]:
    """``(P, take)``: the rows projected on the fewest leading directions ``V`` (p doubling from ``p``)
    with the fewest candidates (:data:`ANN_EXTRAS`) whose recall on the ``tune`` rows reaches
    :data:`ANN_RECALL_TARGET`; the full rows when p reaches d or no directions were fitted."""
    from analysis.metrics.neighbors_faiss import projected_candidates

    while True:
        # the full space when p reaches d (narrow layers, or N too small for the candidate lists)
        P = np.ascontiguousarray(sims.A @ V[:, :p]) if V is not None and p < d else sims.A
        if P is sims.A:
            return P, min(n, k + ANN_EXTRAS[-1] + g)
        for extra in ANN_EXTRAS:  # fewest candidates first: the final search's cost grows with them
            take = min(n, k + extra + g)
            got, few = _rerank_candidates(sims, tune, projected_candidates(P, tune, take).astype(np.int64),
                                          k, E, X, groups)
            got[few] = exact_tune[few]
            if _recall(got, exact_tune) >= ANN_RECALL_TARGET:
                return P, take
        p = min(d, 2 * p)


def _ann_lists(sims: "_Float32Sims", P: np.ndarray, take: int, g: int, k: int, E: float, X, groups) -> np.ndarray:
    """Every row's k nearest (sorted ``(N, k)`` indices) from ``take`` candidates in the projection
    ``P``, re-ranked in float64; rows left with fewer than k valid candidates searched exactly."""
    from analysis.metrics.neighbors_faiss import projected_candidates

    n = len(P)
    idx = np.empty((n, k), dtype=np.int64)
    short = []
    # every row's candidates at once by the symmetric blocked search where numba runs (each pair's
    # projected product once; ~2x faiss's search, whose top-k selection sets its time at p = 64);
    # it leaves the row and its group out itself, so it asks for the valid candidates only
    whole = None
    if neighbors_blocks.available() and take < n:
        whole = neighbors_blocks.symmetric_top(P, take - g, groups)[0]
    for start, stop in row_chunks(n, take, ANN_QUERY_ROWS * take):
        rows = np.arange(start, stop)
        cand = whole[start:stop] if whole is not None else projected_candidates(P, rows, take).astype(np.int64)
        idx[start:stop], few = _rerank_candidates(sims, rows, cand, k, E, X, groups)
        short.extend(rows[few])
    if short:
        short = np.asarray(short)
        idx[short] = _exact_rows(sims, short, k, E, X, groups)[0]
    idx.sort(axis=1)
    return idx


def _recall(got: np.ndarray, exact: np.ndarray) -> float:
    """Mean share of each row's ``exact`` neighbours (``(r, k)``) that ``got`` (``(r, k)``) holds."""
    return float((got[:, :, None] == exact[:, None, :]).any(axis=2).sum() / exact.size)


def cosine_topk(Xn: np.ndarray, k: int, groups: np.ndarray | None = None, *, device=None
                ) -> tuple[np.ndarray, np.ndarray]:
    """Indices and float64 cosines of each row's ``k`` nearest other rows.

    Args:
        Xn: ``(N, d)`` rows (normalised or not: cosines do not depend on scale).
        k, groups, device: as in ``knn_search``.
    Returns:
        ``(idx, sim)``, both ``(N, k)``, ordered by decreasing similarity (ties: lower index
        first). The row itself is excluded. Exact in float64 (see ``knn_search``).
    """
    res = knn_search(Xn, k, groups, device=device)
    sim = dot64(Xn, res.norms, np.arange(len(Xn)), res.idx)
    order = np.lexsort((res.idx, -sim), axis=-1)
    return np.take_along_axis(res.idx, order, axis=1), np.take_along_axis(sim, order, axis=1)


def stacked_queries(Q: np.ndarray, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(Z, norms)``: the rows of ``X`` then the queries ``Q`` in one matrix, with its float64 row norms,
    so that :func:`dot64` gives a query–row pair ``s(q_i, x_j) = dot64(Z, norms, [N + i], [[j]])`` the
    arithmetic of the rows' own cosines (:func:`cross_topk`, and a resample's rows scanned whole)."""
    Q, X = np.asarray(Q), np.asarray(X)
    if Q.shape != X.shape or Q.ndim != 2:
        raise ValueError(f"queries and rows must have one shape (N, d), got {Q.shape} and {X.shape}")
    Z = np.concatenate([X, Q])
    return Z, row_norms(Z)


def cross_topk(Q: np.ndarray, X: np.ndarray, k: int, *, stacked=None, device=None
               ) -> tuple[np.ndarray, np.ndarray]:
    """Indices and float64 cosines of the ``k`` rows of ``X`` nearest each query row of ``Q``, row ``i``
    of ``X`` left out for query ``i`` (the query's own item: the reorder probe's negative caption of
    item i looks among the *other* items' positives).

    The search is ``knn_search``'s (float32 candidates, proven and re-ranked in float64) on the
    stacked rows ``Z = [X; Q]`` (:func:`stacked_queries`) for the query rows, with every query in one
    group (never each other's neighbours): ``k + 1`` neighbours among the rows of X, then row i left
    out when it is among them, else the last (the k nearest of the others, ties unchanged).

    Args:
        Q: ``(N, d)`` queries; X: ``(N, d)`` the rows searched, row i belonging to the same item as query i.
        k: neighbours per query, ``1 <= k < N``.
        stacked: :func:`stacked_queries` of ``(Q, X)`` when the caller holds it. device: as ``knn_search``.
    Returns:
        ``(idx, sim)``, both ``(N, k)``, ordered by decreasing cosine, ties to the lower index; the
        cosine is :func:`dot64`'s, the definition ``knn_search`` answers to (exact in float64).
    """
    n = len(X)
    if not 1 <= k < n:
        raise ValueError(f"cross_topk: k must be in [1, N-1] = [1, {n - 1}], got {k}")
    Z, norms = stacked_queries(Q, X) if stacked is None else stacked
    groups = np.concatenate([np.arange(n), np.full(n, -1)])  # the queries: one group
    dev = _resolve_device(device)
    # faiss skips a query's whole group before its top c (here N rows per query): numpy's top c is faster
    sims = _Float32Sims(Z, groups, None if isinstance(dev, str) else dev)
    E = similarity_error_bound(Z.shape[1], u_in=sims.u_in)
    kk = min(k + 1, n)
    rows = n + np.arange(n)
    idx = _exact_rows(sims, rows, kk, E, Z, groups)[0]
    sim = dot64(Z, norms, rows, idx)
    sim[idx == np.arange(n)[:, None]] = -np.inf  # the query's own item, when it was found
    order = np.lexsort((idx, -sim), axis=-1)[:, :k]
    return np.take_along_axis(idx, order, axis=1), np.take_along_axis(sim, order, axis=1)
