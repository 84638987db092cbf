"""Metrics of one representation: effective rank, intrinsic dimension, uniformity."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from analysis.metrics.degenerate import gram_spectrum
from analysis.metrics.neighbors import l2_normalize, row_chunks
from analysis.metrics.validation import as_matrix, check_k, check_positive

LID_METHODS = ("mle", "twonn")


def rankme(X) -> float:
    """RankMe effective rank of ``X`` ``(N, d)``, in ``[1, min(N, d)]``; higher is better.

    ``σ`` = singular values of X (no centring); ``p = σ/||σ||₁ + 1e-7``; ``exp(-Σ p log p)``.
    Reference: Garrido et al. (2023), RankMe.

    >>> import numpy as np
    >>> round(rankme(np.eye(8)), 3)  # a flat spectrum: the full rank
    8.0
    """
    X = as_matrix(X)
    s = np.linalg.svd(X, compute_uv=False)
    if s.sum() == 0:
        raise ValueError("rankme: X is all zeros")
    p = s / np.sum(np.abs(s)) + 1e-7
    return float(np.exp(-np.sum(p * np.log(p))))


#: relative accuracy :func:`rankme_fast` guarantees against :func:`rankme`; where its error bound
#: is larger (rank-deficient or collapsed layers) it computes the SVD instead
RANKME_RTOL = 1e-6
_U64 = 2.0**-53
#: ``|log p + 1|`` for every ``p = σ/||σ||₁ + 1e-7`` in ``[1e-7, 1 + 1e-7]``
_LOG_P_MAX = 1.0 - np.log(1e-7)


def _rankme_from(s: np.ndarray) -> float:
    p = s / np.sum(np.abs(s)) + 1e-7
    return float(np.exp(-np.sum(p * np.log(p))))


def rankme_fast(X, *, spectrum: tuple[np.ndarray, float] | None = None) -> float:
    """:func:`rankme` from the eigenvalues of the smaller Gram matrix, within :data:`RANKME_RTOL`.

    ``X`` ``(N, d)``. The Gram ``G`` (``XᵀX`` or ``XXᵀ``, ``m = min(N, d)`` square) costs one
    matrix product and an ``m × m`` symmetric eigensolve, several times cheaper than the SVD;
    ``σ_i = sqrt(max(λ_i, 0))``. Its error is bounded: forming and diagonalising ``G`` moves every
    eigenvalue by at most ``δ = (max(N, d) + m) · u · trace(G)`` (``u = 2⁻⁵³``; the float64 Gram's
    rounding, Higham 2002 §3.5, plus a backward-stable eigensolver), so each ``σ_i`` lies in
    ``[sqrt(λ_i − δ), sqrt(λ_i + δ)]``. RankMe's entropy moves by at most
    ``2 · max|log p + 1| · Σ width_i / Σ σ_lo`` (first order; ``p >= 1e-7`` bounds the log), which
    is its relative error. When that bound exceeds :data:`RANKME_RTOL` (singular values near 0,
    where the square root loses half the digits: rank-deficient or collapsed layers) the value is
    :func:`rankme`'s own SVD. Range and direction as :func:`rankme`.

    ``spectrum``: :func:`analysis.metrics.degenerate.gram_spectrum` of this same ``X`` when the caller has it
    (the engine's layer status computed it for the rank-1 check): the same function on the same
    float64 matrix, so the same value, without forming and diagonalising the Gram twice.
    """
    X = as_matrix(X, dtype=None)  # validated; widened to float64 by gram_spectrum (and rankme)
    n, d = X.shape
    lam, trace = gram_spectrum(X) if spectrum is None else spectrum
    if len(lam) != min(n, d):
        raise ValueError(f"rankme_fast: spectrum has {len(lam)} eigenvalues, X {X.shape} needs {min(n, d)}")
    delta = (max(n, d) + min(n, d)) * _U64 * trace
    lo = np.sqrt(np.maximum(lam - delta, 0.0))
    hi = np.sqrt(np.maximum(lam, 0.0) + delta)
    s = np.sqrt(np.maximum(lam, 0.0))
    if s.sum() == 0:
        raise ValueError("rankme: X is all zeros")
    if lo.sum() > 0 and 2 * _LOG_P_MAX * float(np.sum(hi - lo)) / float(lo.sum()) <= RANKME_RTOL:
        return _rankme_from(s)
    return rankme(X)


_U32 = 2.0**-24

#: extra columns per row asked of faiss's exhaustive L2 search beyond ``k + 1`` (the row itself):
#: the last one returned bounds every column not returned, which proves most rows' candidates
LID_FAISS_EXTRA = 16
#: query rows per faiss call of :func:`knn_distances` (bounds the ``(rows, k + 1 + extra)`` results)
LID_FAISS_ROWS = 1 << 14
#: rows per float64 re-rank of candidate pairs (bounds the gathered ``(rows·c, d)`` differences)
LID_RERANK_ROWS = 1024
#: ``"auto"`` (numpy), ``"faiss"`` or ``"numpy"``: which float32 search proposes
#: :func:`knn_distances`'s candidates (same distances). ``auto`` takes numpy's row blocks and
#: ``np.partition`` at every N: they beat ``faiss.knn`` at every size measured, quiet and with a
#: busy core beside, on one thread and on the whole pool (``bench/routes.py --busy 1``; figures
#: in bench/README.md), and faiss's OpenMP threads spin-wait on cores other work needs.
LID_ROUTES = ("auto", "faiss", "numpy")


def _float32_error(d: int) -> float:
    """``ε`` with ``|D̃_ij − D_ij| <= ε (s_i + s_j)`` for any float32 squared distance of the
    float32 copies of centred rows (``s_i = ||c_i||²``; ``u = u₃₂``, ``γ_d = d u / (1 − d u)``).

    Covers both forms a float32 search uses (Higham 2002 §3.1; any summation order, FMA or not):
    the norm trick ``||c̃_i||² + ||c̃_j||² − 2 c̃_i·c̃_j`` (input rounding ``4u``, the dot and the two
    float32 norms ``3γ_d``, the additions ``4u``; ``D <= 2(s_i + s_j)`` bounds what is relative
    to the result) and the difference form ``Σ_t (c̃_it − c̃_jt)²`` faiss uses for a few queries
    (``2γ_d + 10u``); clamping a negative ``D̃`` to 0 only moves it towards ``D >= 0``."""
    gamma = d * _U32 / (1 - d * _U32)
    return 1.01 * (12 * _U32 + 3 * gamma)


def knn_distances(X, k: int, *, route: str = "auto", queries: np.ndarray | None = None) -> np.ndarray:
    """``(N, k)`` Euclidean distances of each row of ``X`` ``(N, d)`` (or of the rows ``queries``,
    ``(q, k)``) to its ``k`` nearest other rows, ascending, each measured from differences in float64 (``sqrt(sum_t (x_it - x_jt)²)``,
    within ``(d + 2) u`` relative, ``u = 2⁻⁵³``).

    Which rows are nearest is found in float32, then proven: rows are centred (``c_i = x_i − μ``,
    distances do not change) and scaled by a power of two; a float32 search gives approximate
    squared distances ``D̃_ij`` within ``e_ij = ε (s_i + s_j)`` of the true ``D_ij``
    (``s_i = ||c_i||²``, ``ε`` from :func:`_float32_error`). Since ``D <= D̃ + e`` entrywise, the
    true k-th smallest distance is at most ``D̃_(k) + e_i`` (``e_i = ε (s_i + max_j s_j)``), so
    every column among the k nearest, ties included, has ``D̃_ij <= D̃_(k) + 2 e_i``: those
    candidates (usually k or a few more) are measured exactly and their k smallest kept. Duplicated
    rows give exact zeros.

    ``route`` (:data:`LID_ROUTES`; ``auto`` is numpy): faiss's exhaustive L2 search (``faiss.knn``, a blocked sgemm and
    a heap per query: no ``N × N`` block, no partition) returns ``k + 1 +`` :data:`LID_FAISS_EXTRA`
    columns per row; a row is proven when the last value returned (a lower bound on every column
    not returned) exceeds ``D̃_(k) + 2 e_i``. Rows not proven (many near ties), and every row on
    the numpy route, compare against all columns: one float32 row block (``CHUNK_ENTRIES``) and
    ``np.partition``. Both routes give the same distances (the same float64 re-rank of a superset
    of the same candidates). Memory: a float64 and a float32 centred copy of ``X``, plus one block.
    """
    from analysis.metrics.neighbors_faiss import faiss_module

    if route not in LID_ROUTES:
        raise ValueError(f"knn_distances route must be one of {LID_ROUTES}, got {route!r}")
    X = np.asarray(as_matrix(X), dtype=np.float64)
    n, d = X.shape
    check_k(n, k)
    C = X - X.mean(axis=0)
    # scaled by a power of two (exact) to max |c| in [1, 2): the float32 copy neither overflows nor
    # loses small layers to subnormals, and the candidates do not depend on the scale
    top = float(np.max(np.abs(C), initial=0.0))
    if top > 0:
        C *= 2.0 ** -np.floor(np.log2(top))
    C32 = C.astype(np.float32)
    sq = np.einsum("ij,ij->i", C, C)
    eps = _float32_error(d)
    queries = np.arange(n) if queries is None else np.asarray(queries, dtype=np.int64)
    out = np.empty((len(queries), k))
    todo = np.arange(len(queries))  # positions in queries
    faiss = faiss_module() if route == "faiss" else None
    if route == "faiss" and faiss is None:
        raise ValueError("knn_distances route 'faiss' needs faiss installed")
    take = k + 1 + LID_FAISS_EXTRA
    if faiss is not None and take <= n:
        todo = _faiss_sqdists(faiss, C32, sq, X, k, take, eps, queries, out)
    _block_sqdists(C32, sq, X, k, eps, queries, todo, out)
    return np.sqrt(out)


def _faiss_sqdists(faiss, C32, sq, X, k, take, eps, queries, out) -> np.ndarray:
    """Fill ``out`` for the query rows whose candidates faiss's ``take`` columns prove; return
    the positions (in ``queries``) of the others."""
    smax = float(sq.max())
    failed = []
    for start in range(0, len(queries), LID_FAISS_ROWS):
        stop = min(len(queries), start + LID_FAISS_ROWS)
        rows = queries[start:stop]
        D, I = faiss.knn(np.ascontiguousarray(C32[rows]), C32, take, metric=faiss.METRIC_L2)
        D = D.astype(np.float64)
        # the row itself (and padding, I = -1) is no candidate; faiss sorts ascending, so the
        # (k)-th smallest valid value is read after pushing excluded entries to +inf
        D[(I == rows[:, None]) | (I < 0)] = np.inf
        kth = np.partition(D, k - 1, axis=1)[:, k - 1]
        limit = kth + 2 * eps * (sq[rows] + smax)
        # a column not returned has D̃ >= the largest value returned (a heap keeps the smallest)
        last = np.max(np.where(I < 0, -np.inf, np.where(I == rows[:, None], -np.inf, D)), axis=1)
        proven = (last > limit) & np.isfinite(kth)
        for s0 in range(0, stop - start, LID_RERANK_ROWS):
            sl = slice(s0, min(stop - start, s0 + LID_RERANK_ROWS))
            ok = np.nonzero(proven[sl])[0] + s0
            if len(ok):
                r, j = np.nonzero(D[ok] <= limit[ok, None])
                out[start + ok] = _k_smallest_exact(X, rows[ok], r, I[ok][r, j], k)
        failed.append(start + np.nonzero(~proven)[0])
    return np.concatenate(failed) if failed else np.arange(0)


def _block_sqdists(C32, sq, X, k, eps, queries, todo, out) -> None:
    """Fill ``out`` at the positions ``todo`` of ``queries`` against every column: float32 row blocks, the proof's
    candidate limit, the float64 re-rank (compiled where numba is available)."""
    from analysis.metrics import neighbors_jit

    if not len(todo):
        return
    n = C32.shape[0]
    sq32 = np.einsum("ij,ij->i", C32, C32, dtype=np.float64).astype(np.float32)
    smax = float(sq.max())
    near = neighbors_jit.near_kernel()
    for start, stop in row_chunks(len(todo), n):
        rows = queries[todo[start:stop]]
        D = C32[rows] @ C32.T  # (||c_i||² + ||c_j||²) − 2 c_i·c_j in the product's buffer
        D *= -2.0
        D += sq32[rows, None]
        D += sq32[None, :]
        D[np.arange(len(rows)), rows] = np.inf  # a row is not its own neighbour
        kth = np.partition(D, k - 1, axis=1)[:, k - 1].astype(np.float64)
        limit = kth + 2 * eps * (sq[rows] + smax)
        out[todo[start:stop]] = (near or _near_sqdists)(D, limit, X, rows, k)


def _k_smallest_exact(X, rows, r, c, k) -> np.ndarray:
    """``(len(rows), k)`` the k smallest float64 squared distances of ``X[rows[r]]`` to ``X[c]``
    per local row ``r`` (pairs listed row-major; each row has at least k)."""
    from analysis.metrics.neighbors_jit import lane_sqdists

    d2 = lane_sqdists(X[rows[r]], X[c])
    order = np.lexsort((d2, r))
    r, d2 = r[order], d2[order]
    first = np.searchsorted(r, np.arange(len(rows)))
    return d2[first[:, None] + np.arange(k)]


def _near_sqdists(approx, limit, X, rows, k) -> np.ndarray:
    """numpy form of the compiled ``near_sqdists`` (same candidates, same bits): the k smallest
    exact squared distances per row among the columns with ``approx <= limit``."""
    r, c = np.nonzero(approx <= limit[:, None])
    return _k_smallest_exact(X, rows, r, c, k)


def lid_mle_from_distances(R: np.ndarray) -> float:
    """Levina–Bickel MLE of intrinsic dimension from ``R`` ``(N, k)`` ascending neighbour distances.

    Per point ``d_i = (k − 1) / Σ_j log(R_ik / R_ij)``, combined as ``1 / mean(1 / d_i)``, i.e.
    ``(k − 1) N / Σ_i Σ_j log(R_ik / R_ij)``: scikit-dimension's ``MLE().fit(X, n_neighbors=k)``
    (Haro approximation, no noise, ``comb="mle"``). ``> 0``; inf when every neighbourhood is a
    sphere (all k distances equal). Reference: Levina & Bickel (2005); MacKay & Ghahramani's
    combination.
    """
    R = np.asarray(R, dtype=np.float64)
    k = R.shape[1]
    with np.errstate(divide="ignore"):
        total = float(np.sum(np.log(R[:, -1:] / R)))
        return (k - 1) * R.shape[0] / total if total > 0 else float("inf")


def _lid_estimator(method: str):
    import skdim  # imported lazily: it pulls scikit-learn and numba-free extras

    if method == "mle":
        return skdim.id.MLE()
    if method == "twonn":
        return skdim.id.TwoNN()
    raise ValueError(f"lid method must be one of {LID_METHODS}, got {method!r}")


@dataclass(frozen=True)
class LidReport:
    """A LID estimate with what it rests on: ``value`` (NaN when undefined, then ``reason`` says
    why), ``n_distinct`` distinct rows used out of ``n_items``; when estimated from sampled query
    points (:data:`LID_EXACT_MAX_N`), ``n_queries`` of them and the standard error ``se``."""

    value: float
    n_distinct: int
    n_items: int
    reason: str | None = None
    se: float = 0.0
    n_queries: int | None = None

    def note(self) -> str | None:
        """The flag a stored profile carries for an estimated value (None when exact)."""
        if self.n_queries is None:
            return None
        return (f"LID estimated from {self.n_queries:,} seeded query points of {self.n_distinct:,} "
                f"(their neighbours among all): SE {self.se:.2g}")


#: Largest number of distinct rows whose MLE LID ``lid_report(fast=True)`` computes from every
#: point's neighbours (a k-NN search of all N rows: ``2 N² d`` flops); above it, from
#: :data:`LID_SAMPLE_QUERIES` seeded query points (each one's k neighbours among all N rows)
LID_EXACT_MAX_N = 16384
LID_SAMPLE_QUERIES = 8192
LID_SEED = 0


def lid_mle_sampled(X, k: int) -> tuple[float, float, int]:
    """``(LID, SE, q)``: the Levina–Bickel MLE from ``q = min(N,`` :data:`LID_SAMPLE_QUERIES` ``)``
    query points drawn without replacement (seed :data:`LID_SEED`), each with its exact k nearest
    neighbours among all ``N`` rows of ``X`` (:func:`knn_distances`).

    Per query ``s_i = Σ_j log(R_ik / R_ij) / (k − 1) = 1 / d_i``; the MLE over all points is
    ``1 / mean_i s_i`` (:func:`lid_mle_from_distances`), estimated by ``1 / s̄`` over the sample
    (a ratio estimator: consistent, bias ``O(1/q)``). SE by the delta method:
    ``(1 / s̄) · sd(s) / (s̄ sqrt(q))`` (``ddof = 1``; without the finite-population factor
    ``sqrt(1 − q/N)``, so conservative). inf with NaN SE when every sampled neighbourhood is a
    sphere (all ``s_i = 0``)."""
    n = X.shape[0]
    q = min(n, LID_SAMPLE_QUERIES)
    queries = np.sort(np.random.default_rng(LID_SEED).choice(n, size=q, replace=False))
    R = knn_distances(X, k, queries=queries)
    with np.errstate(divide="ignore"):
        s_i = np.sum(np.log(R[:, -1:] / R), axis=1) / (k - 1)
    mean = float(s_i.mean())
    if not mean > 0:
        return float("inf"), float("nan"), q
    value = 1.0 / mean
    return value, value * float(s_i.std(ddof=1)) / (mean * np.sqrt(q)), q


def distinct_rows(X) -> np.ndarray:
    """Indices of one representative row per group of duplicates (rows within float32 rounding of
    each other, see :mod:`analysis.metrics.degenerate`), in order of first appearance."""
    from analysis.metrics.degenerate import duplicate_labels, layer_status

    X = np.asarray(X, dtype=np.float64)
    if layer_status(X).collapsed:
        return np.array([0])
    labels = duplicate_labels(X)
    _, first = np.unique(labels, return_index=True)
    return np.sort(first)


def lid_report(X, *, method: str = "mle", k: int = 20, keep: np.ndarray | None = None,
               fast: bool = False) -> LidReport:
    """:func:`lid` on the distinct rows of ``X`` ``(N, d)``, with the number of rows it used.

    Duplicated items put zero distances into the estimators (``log(r_k / r_j)`` with ``r_j = 0``),
    which turns whole layers into LID 0 or inf; so duplicates are merged first. The value is NaN
    with a reason when fewer than ``k + 1`` distinct rows remain (MLE needs ``k`` neighbours) or
    fewer than 3 (TwoNN needs 2), e.g. on a collapsed layer. ``keep``: the distinct rows when the
    caller already knows them (:func:`distinct_rows`; the engine's layer status says when all are).

    ``fast=True`` (MLE only; what ``analyze`` uses) computes the estimator from exact k-NN
    distances (:func:`knn_distances`, :func:`lid_mle_from_distances`) instead of through
    scikit-dimension, whose per-point Python loop dominates its cost; the two agree to float64
    rounding of the distances (tests compare them). Otherwise scikit-dimension computes it. Above
    :data:`LID_EXACT_MAX_N` distinct rows it is :func:`lid_mle_sampled`'s estimate, with its SE.
    """
    X = as_matrix(X)
    if method not in LID_METHODS:
        raise ValueError(f"lid method must be one of {LID_METHODS}, got {method!r}")
    need = k + 1 if method == "mle" else 3
    if method == "mle":
        check_k(X.shape[0], k)
    else:
        check_k(X.shape[0], 2, name="N for TwoNN (needs 2 neighbours)")
    keep = distinct_rows(X) if keep is None else np.asarray(keep)
    n, nd = X.shape[0], len(keep)
    if nd < need:
        return LidReport(float("nan"), nd, n, f"only {nd} distinct rows of {n}: {method} LID needs at least "
                                              f"{need}" + (f" (k={k} neighbours)" if method == "mle" else ""))
    Xd = X if nd == n else X[keep]  # all rows distinct: LID does not depend on their order
    if method == "mle" and fast and nd > LID_EXACT_MAX_N:
        value, se, q = lid_mle_sampled(Xd, k)
        return LidReport(value, nd, n, None, se=se, n_queries=q)
    if method == "mle" and fast:
        return LidReport(lid_mle_from_distances(knn_distances(Xd, k)), nd, n, None)
    if method == "mle":
        est = _lid_estimator(method).fit(Xd, n_neighbors=k)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = _lid_estimator(method).fit(Xd)
    return LidReport(float(est.dimension_), nd, n, None)


def lid(X, *, method: str = "mle", k: int = 20) -> float:
    """Global local-intrinsic-dimension estimate through scikit-dimension, on distinct rows.

    ``method="mle"``: Levina–Bickel maximum likelihood on the ``k`` nearest neighbours of each
    point, combined as ``1 / mean(1/d_i)``. ``method="twonn"``: TwoNN (Facco et al., 2017), which
    uses only the two nearest neighbours (``k`` unused). Result ``> 0``; no preferred direction.
    Duplicated rows are merged first; NaN when too few distinct rows remain (see :func:`lid_report`).

    >>> import numpy as np; t = np.random.default_rng(0).uniform(size=(200, 1))
    >>> round(lid(t * np.ones((1, 8)), k=10), 1)  # points on a line in 8 dimensions
    1.0
    """
    return lid_report(X, method=method, k=k).value


def lid_pointwise(X, *, method: str = "mle", k: int = 20) -> np.ndarray:
    """Per-point LID ``(N,)``: MLE on each point's k neighbours, or TwoNN fitted in each point's k-neighbourhood.

    >>> import numpy as np; X = np.random.default_rng(0).normal(size=(50, 8))
    >>> lid_pointwise(X, k=5).shape  # one estimate per point
    (50,)
    """
    X = as_matrix(X)
    check_k(X.shape[0], k)
    est = _lid_estimator(method)
    if method == "mle":
        return np.asarray(est.fit(X, n_neighbors=k).dimension_pw_, dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(est.fit_pw(X, n_neighbors=k).dimension_pw_, dtype=np.float64)


#: rows per block in :func:`uniformity`: small enough that the strict upper triangle (the pairs it
#: needs) is most of what each block evaluates, large enough for an efficient matrix product
UNIFORMITY_BLOCK_ROWS = 128


def uniformity(X, *, t: float = 2.0) -> float:
    """Wang & Isola (2020) uniformity ``log mean_{i≠j} exp(-t ||x̂_i - x̂_j||²)``, in ``[-4t, 0]``; lower is better.

    ``X`` ``(N, d)``, ``N >= 2``; rows are L2-normalised in float64 (zero rows stay zero) and
    ``||x̂_i - x̂_j||² = max(2 - 2 x̂_i·x̂_j, 0)``. The potential is symmetric, so only pairs ``i < j``
    are evaluated and counted twice: blocks of :data:`UNIFORMITY_BLOCK_ROWS` rows against the columns
    from the block's start on, the block's own square keeping its strict upper triangle
    (``np.triu(·, 1)``), about half the exponentials of the full matrix.

    Rounding: the terms are ``exp(-t · max(2 - 2 ŝ_ij, 0))`` of float64 cosines ``ŝ_ij`` from a
    matrix product (``|ŝ - s| <= γ_d``, ``γ_n = n u / (1 - n u)``, ``u = 2⁻⁵³``, whatever the
    blocking); the ``N(N-1)/2`` positive terms are summed per row, then over rows, so the sum's
    relative error is at most ``γ_N + γ_N ≈ 2N·u`` in any order of summation (Higham 2002 §4.2;
    numpy's pairwise sums make it about ``2 log₂N · u``), which is the absolute error it adds to the
    value after the log: below ``3e-13`` for ``N = 1000``. Reference: Wang & Isola, ICML 2020.

    Raises ``ValueError`` when every row of ``X`` is zero (no direction is defined; the engine
    stores NaN with the layer's flag). A single zero row counts as orthogonal to every other.

    >>> import numpy as np
    >>> uniformity(np.eye(4))  # orthonormal points: every squared distance is 2, log e^(-2·2)
    -4.0
    """
    X = as_matrix(X)
    check_positive(t, "t")
    if not X.any():
        # every row zero: no directions at all. l2_normalize keeps zero rows zero, which would make
        # every pair look orthogonal (the value of a well-spread layer), so refuse, as rankme does
        raise ValueError("uniformity: X is all zeros (no directions to spread); the layer is degenerate")
    Xn = l2_normalize(X)
    n = Xn.shape[0]
    per_row = np.empty(n)
    step = UNIFORMITY_BLOCK_ROWS
    for start, stop in row_chunks(n, n):  # the memory cap: at most CHUNK_ENTRIES entries at a time
        for s0 in range(start, stop, step):
            s1 = min(stop, s0 + step)
            w = s1 - s0
            E = Xn[s0:s1] @ Xn[s0:].T
            # in place and bit for bit exp(-t * max(2 - 2 E, 0)): ×(−2) is exact and 2 + (−2E)
            # rounds as 2 − 2E does; no block-sized temporaries
            E *= -2.0
            E += 2.0
            np.maximum(E, 0.0, out=E)
            E *= -t
            np.exp(E, out=E)
            per_row[s0:s1] = E[:, w:].sum(axis=1) + np.triu(E[:, :w], 1).sum(axis=1)
    return float(np.log(2.0 * float(per_row.sum()) / (n * (n - 1))))


#: Largest N whose uniformity :func:`uniformity_report` computes exactly (all ``N(N-1)/2`` pairs,
#: ``N² d`` float64 flops: 2 s a layer at N = 16,384, d = 768 on two cores); above it, an unbiased
#: estimate with its standard error
UNIFORMITY_EXACT_MAX_N = 16384
#: rows per sampled subset of the estimate, and how many independent subsets: for a fixed cost
#: ``B m² d`` more, smaller subsets give a smaller variance (a U-statistic's leading term is
#: ``4 σ₁² / m`` per subset: ``4 σ₁² / (B m)`` for the mean), down to where small products lose
#: their speed; 128 × 512 rows is 16.7 M pairs, about 1 s a layer at d = 768 on two cores
UNIFORMITY_SAMPLE_ROWS = 512
UNIFORMITY_SAMPLE_BLOCKS = 128
#: the estimate's seed: the same store gives the same value
UNIFORMITY_SEED = 0


@dataclass(frozen=True)
class UniformityReport:
    """:func:`uniformity_report`'s value with what it rests on: ``se`` its standard error (0 when
    exact), ``n_pairs`` the distinct pairs evaluated, ``exact`` whether all pairs were."""

    value: float
    se: float
    n_pairs: int
    exact: bool

    def note(self) -> str | None:
        """The flag a stored profile carries for an estimated value (None when exact)."""
        if self.exact:
            return None
        return (f"uniformity estimated from {self.n_pairs:,} sampled pairs "
                f"({UNIFORMITY_SAMPLE_BLOCKS} seeded subsets of {UNIFORMITY_SAMPLE_ROWS} rows): SE {self.se:.2g}")


def uniformity_report(X, *, t: float = 2.0, max_exact_n: int | None = None) -> UniformityReport:
    """:func:`uniformity` of ``X`` ``(N, d)``: exact up to ``max_exact_n`` rows (default
    :data:`UNIFORMITY_EXACT_MAX_N`), an unbiased estimate with its standard error above.

    The estimate: ``B`` = :data:`UNIFORMITY_SAMPLE_BLOCKS` independent subsets of ``m`` =
    :data:`UNIFORMITY_SAMPLE_ROWS` rows, each drawn without replacement (seed
    :data:`UNIFORMITY_SEED`); each subset's mean of ``exp(-t ||x̂_i - x̂_j||²)`` over its pairs
    ``i < j`` (the exact routine) is unbiased for the mean over all ``N(N-1)/2`` pairs (every pair
    is equally likely to fall in a subset), so their mean ``Ê`` is too, with standard error
    ``sd(subset means) / sqrt(B)`` (the subsets are independent; sample sd, ``ddof = 1``). The value
    is ``log Ê`` and its SE ``SE(Ê) / Ê`` (delta method; ``log`` of an unbiased mean is biased by
    about ``−SE²/2``, far below the SE). Cost ``B m² d``, independent of N. Range and direction
    as :func:`uniformity`; all-zero ``X`` raises as it does.
    """
    X = as_matrix(X)
    n = X.shape[0]
    limit = UNIFORMITY_EXACT_MAX_N if max_exact_n is None else max_exact_n
    m = UNIFORMITY_SAMPLE_ROWS
    if n <= max(limit, m):
        return UniformityReport(uniformity(X, t=t), 0.0, n * (n - 1) // 2, True)
    if not X.any():
        raise ValueError("uniformity: X is all zeros (no directions to spread); the layer is degenerate")
    rng = np.random.default_rng(UNIFORMITY_SEED)
    means = np.empty(UNIFORMITY_SAMPLE_BLOCKS)
    for b in range(UNIFORMITY_SAMPLE_BLOCKS):
        rows = np.sort(rng.choice(n, size=m, replace=False))
        sub = X[rows]
        # a subset of all-zero rows has no directions: its pairs count as orthogonal, as one zero
        # row does in the exact form (exp(-2t))
        means[b] = np.exp(uniformity(sub, t=t)) if sub.any() else np.exp(-2.0 * t)
    mean = float(means.mean())
    se_mean = float(means.std(ddof=1) / np.sqrt(len(means)))
    return UniformityReport(float(np.log(mean)), se_mean / mean, UNIFORMITY_SAMPLE_BLOCKS * m * (m - 1) // 2, False)
