"""One notion of degenerate input: collapsed layers, duplicated items, near-zero denominators.

Embeddings are stored as float32, so "zero" means "zero up to float32 rounding". Every
tolerance here is relative to ``EPS32 = np.finfo(np.float32).eps`` (about 1.19e-7):

- ``REL_TOL = 16 * EPS32`` (about 1.9e-6). Rounding a float32 vector of norm s moves it by about
  ``EPS32 * s``; a margin of 16 covers the few float32 operations a model's last layers apply
  after the values that differ (a LayerNorm, a projection) without reaching real variation,
  which in trained encoders is orders of magnitude larger.
- A layer is **collapsed** when its spread (RMS distance of the rows to their mean) is at most
  ``REL_TOL`` times its scale (RMS row norm), or when every row is zero: all items sit on one point.
- A layer is **rank-1** when its second singular value (rows not centred) is at most ``REL_TOL``
  times the first: all rows are multiples of one direction, so every cosine is ±1 and every
  neighbour list is a tie. A collapsed, non-zero layer is rank-1 as well.
- Two rows are **duplicates** when their distance is at most ``REL_TOL`` times the layer's scale.
- A denominator is **negligible** when ``|den| <= REL_TOL * scale``, ``scale`` being the size the
  denominator would have on healthy data (1 for cosine distances of unit vectors).

All checks are cheap: singular values come from the Gram matrix of the smaller side
(``min(N, d)`` squared), and duplicates are found by sorting one random projection and checking
only rows whose projections lie within the tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import sparse
from scipy.sparse.csgraph import connected_components

EPS32 = float(np.finfo(np.float32).eps)
REL_TOL = 16 * EPS32


@dataclass(frozen=True)
class LayerStatus:
    """What is degenerate about one layer ``(N, d)``.

    ``spread``: RMS distance of the rows to their mean; ``scale``: RMS row norm;
    ``n_distinct``: rows left after merging duplicates; ``reason``: a sentence, or None when healthy.
    ``spectrum``: the :func:`gram_spectrum` the rank-1 check used (None for an all-zero layer), kept
    so that RankMe on the same layer need not diagonalise the same Gram again
    (:func:`analysis.metrics.single.rankme_fast`); not part of equality.
    """

    collapsed: bool
    rank1: bool
    n_distinct: int
    n_items: int
    spread: float
    scale: float
    reason: str | None
    spectrum: tuple[np.ndarray, float] | None = field(default=None, repr=False, compare=False)

    @property
    def degenerate(self) -> bool:
        """True when neighbour, kernel or ratio metrics are undefined on this layer."""
        return self.collapsed or self.rank1 or self.n_distinct < 2


def negligible(value: float, scale: float = 1.0, *, rtol: float = REL_TOL) -> bool:
    """``|value| <= rtol * |scale|``: a denominator indistinguishable from zero at float32 precision."""
    return bool(abs(float(value)) <= rtol * abs(float(scale)))


def gram_spectrum(X: np.ndarray) -> tuple[np.ndarray, float]:
    """``(λ, trace G)``: eigenvalues ``(m,)``, descending, of the Gram ``G`` of the smaller side of
    ``X`` ``(N, d)`` in float64 (``XXᵀ`` when ``N <= d``, else ``XᵀX``; not centred; ``m = min(N, d)``),
    and ``G``'s trace. ``λ_i = σ_i²`` up to rounding (may come out slightly negative for σ near 0).
    One function so that every user of these eigenvalues (:func:`singular_values`, the layer status,
    :func:`analysis.metrics.single.rankme_fast`) gets the same numbers bit for bit."""
    X = np.asarray(X, dtype=np.float64)
    G = X @ X.T if X.shape[0] <= X.shape[1] else X.T @ X
    return np.linalg.eigvalsh(G)[::-1], float(np.trace(G))


def singular_values(X: np.ndarray, *, spectrum: tuple[np.ndarray, float] | None = None) -> np.ndarray:
    """Singular values of ``X`` ``(N, d)`` (not centred), descending, from the Gram of the smaller
    side (:func:`gram_spectrum`, or ``spectrum`` when the caller already computed it for this X)."""
    ev = (spectrum or gram_spectrum(X))[0]
    return np.sqrt(np.maximum(ev, 0.0))


def duplicate_labels(X: np.ndarray, *, rtol: float = REL_TOL, seed: int = 0) -> np.ndarray:
    """``(N,)`` integer labels, equal for rows within ``rtol * scale`` of each other (transitively).

    Rows are sorted by one random projection ``p = X r`` (``|p_i - p_j| <= ||x_i - x_j|| ||r||``),
    exact copies (equal neighbours in that order) are joined and represented by one row, and only
    pairs of representatives whose projections differ by at most the tolerance are compared in
    full, so the cost is ``O(N d + N log N)`` plus the candidate pairs. Labels run from 0 to
    ``n_distinct - 1``, numbered by first appearance.
    """
    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    scale = float(np.sqrt(np.mean(np.sum(X * X, axis=1)))) if n else 0.0
    tol = rtol * scale
    r = np.random.default_rng(seed).normal(size=X.shape[1])
    return _close_labels(X @ r, lambda idx: X[idx], tol, tol * float(np.linalg.norm(r)))


def _close_labels(p: np.ndarray, rows_at, tol: float, window: float, q: np.ndarray | None = None,
                  q_window: float = 0.0) -> np.ndarray:
    """Labels of :func:`duplicate_labels` from the rows' projections ``p`` ``(N,)``, ``rows_at(idx)``
    giving the rows themselves (only candidate pairs and runs of equal projections are read), the
    distance tolerance and the projection window (any pair within ``tol`` lies within it).

    ``q``: an optional second projection with its own window: a pair close in ``p`` is read in full
    only when it is close in ``q`` too. At large N the sorted projections lie closer than the
    window (N = 65,536 rows of width 768: most neighbours in the order), and reading their rows
    cost 1.3 s a layer; a second, independent projection drops nearly all of them, never a pair
    within ``tol`` (it is within both windows)."""
    n = len(p)
    order = np.argsort(p, kind="stable")
    ps = p[order]
    rows, cols = [], []
    # exact copies first: identical rows have identical projections, so a copy sits next to another
    # copy in the sorted order (or is joined below); only one row of each run of copies goes on to
    # the pair search, which would otherwise compare every pair inside a group of c copies (c² / 2:
    # 12 captions repeated over 8,000 items took 1.3 s)
    eq = np.flatnonzero(ps[1:] == ps[:-1])
    if eq.size:
        same = eq[np.all(rows_at(order[eq]) == rows_at(order[eq + 1]), axis=1)]
        rows.append(order[same])
        cols.append(order[same + 1])
        keep = np.ones(n, dtype=bool)
        keep[same + 1] = False
        order, ps = order[keep], ps[keep]
    m = len(order)
    for s in range(1, m):
        cand = np.flatnonzero(ps[s:] - ps[:-s] <= window)
        if cand.size == 0:
            break  # sorted: if no pair s apart is close, no pair further apart is
        i, j = order[cand], order[cand + s]
        if q is not None:
            near = np.abs(q[i] - q[j]) <= q_window
            i, j = i[near], j[near]
        close = np.linalg.norm(rows_at(i) - rows_at(j), axis=1) <= tol
        if close.any():
            rows.append(i[close])
            cols.append(j[close])
    i, j = (np.concatenate(rows), np.concatenate(cols)) if rows else (np.zeros(0, int), np.zeros(0, int))
    if not len(i):  # no duplicates: every row its own component, as connected_components would label them
        return np.arange(n)
    graph = sparse.coo_matrix((np.ones(len(i)), (i, j)), shape=(n, n))
    return connected_components(graph, directed=False)[1]


#: Row entries per step of a per-row float64 pass over a layer (here :func:`direction_classes`;
#: :mod:`analysis.metrics.neighbors` uses it for norms, unit rows and the collapse check): the float64
#: temporaries (2 MB) stay in cache, where one whole-layer step (24 MB at N = 1024, d = 768) spent
#: 4x longer on memory. Per-row results do not depend on the step (tests).
ROW_PASS_ENTRIES = 1 << 18


def direction_classes(X: np.ndarray, *, rtol: float = REL_TOL) -> tuple[np.ndarray, np.ndarray]:
    """``(labels, zero)`` for the rows of ``X`` ``(N, d)``: one label per group of rows pointing the
    same way (unit rows within ``rtol`` of each other, :func:`duplicate_labels`: cosine 1 up to
    float32 rounding), and which rows are zero (their cosine is 0 to every row)."""
    X = np.asarray(X)
    n, d = X.shape
    rng = np.random.default_rng(0)
    r = rng.normal(size=d)
    r2 = rng.normal(size=d)  # the second projection: a filter only (see _close_labels)
    R = np.stack([r, r2], axis=1)
    # norms and projections of float64 rows, a cache-sized block at a time (the layer is not
    # copied to float64 whole: 4x slower at N = 1024, d = 768, for the same per-row values)
    norms, proj = np.empty(n), np.empty((n, 2))
    step = max(1, ROW_PASS_ENTRIES // max(1, d))
    for a in range(0, n, step):
        block = X[a:a + step].astype(np.float64)
        norms[a:a + step] = np.sqrt(np.einsum("ij,ij->i", block, block))
        proj[a:a + step] = block @ R
    safe = np.where(norms == 0, 1.0, norms)
    # duplicate_labels of the unit rows without forming them all: their RMS norm is sqrt(share of
    # non-zero rows), their projections are (x·r)/||x||, and only the rows of candidate pairs are
    # divided out; the window gains the rounding of both ways of projecting ((d+2)u|r| each), so it
    # still holds every pair within the tolerance, which the exact distances then decide
    tol = rtol * float(np.sqrt(np.count_nonzero(norms) / n)) if n else 0.0
    windows = [tol * rn + 4 * (d + 2) * 2.0**-53 * rn for rn in (float(np.linalg.norm(r)), float(np.linalg.norm(r2)))]
    labels = _close_labels(proj[:, 0] / safe, lambda idx: X[idx].astype(np.float64) / safe[idx, None], tol,
                           windows[0], proj[:, 1] / safe, windows[1])
    return labels, norms == 0


def tied_lists(X: np.ndarray, k: int, groups: np.ndarray | None = None, *, rtol: float = REL_TOL) -> int:
    """Rows of ``X`` ``(N, d)`` whose cosine k-NN list is drawn by tie-breaking alone: a zero row
    (cosine 0 to every row), or a row with more than ``k`` other rows pointing its way
    (:func:`direction_classes`), k of which the search picks by index. ``groups``: rows of one
    group are never each other's neighbours (a resample's copies of one item), so they are not
    counted as each other's ties."""
    labels, zero = direction_classes(X, rtol=rtol)
    others = np.bincount(labels)[labels] - 1
    if groups is not None:  # minus the row's own group within its class
        _, pair, count = np.unique(np.stack([labels, np.asarray(groups)]), axis=1, return_inverse=True,
                                   return_counts=True)
        others = others - (count[pair.ravel()] - 1)
    return int(np.count_nonzero((others > k) | zero))


def layer_status(X, *, rtol: float = REL_TOL) -> LayerStatus:
    """Is layer ``X`` ``(N, d)`` collapsed, rank-1, or full of duplicates? See the module docstring."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < 1:
        raise ValueError(f"Expected a layer of shape (N, d), got shape {X.shape}")
    n = X.shape[0]
    scale = float(np.sqrt(np.mean(np.sum(X * X, axis=1))))
    spread = float(np.sqrt(np.mean(np.sum((X - X.mean(axis=0)) ** 2, axis=1))))
    if scale == 0.0:
        return LayerStatus(True, True, 1, n, spread, scale, f"all {n} rows are zero")
    collapsed = spread <= rtol * scale
    spectrum = gram_spectrum(X)
    sv = singular_values(X, spectrum=spectrum)
    rank1 = len(sv) < 2 or sv[1] <= rtol * sv[0]
    n_distinct = 1 if collapsed else int(duplicate_labels(X, rtol=rtol).max()) + 1
    reason = None
    if collapsed:
        reason = (f"collapsed: all {n} rows are one point (spread {spread:.3g} <= {rtol:.2g} x scale {scale:.3g})")
    elif rank1:
        reason = f"rank 1: all {n} rows lie on one line through 0 (second singular value {sv[1]:.3g} of {sv[0]:.3g})"
    elif n_distinct < n:
        reason = f"{n - n_distinct} of {n} rows duplicate others ({n_distinct} distinct)"
    return LayerStatus(bool(collapsed), bool(rank1), n_distinct, n, spread, scale, reason, spectrum)


def stack_status(A, *, rtol: float = REL_TOL) -> list[LayerStatus]:
    """:func:`layer_status` of every layer of ``A`` ``(L, N, d)``."""
    A = np.asarray(A)
    if A.ndim != 3:
        raise ValueError(f"Expected A to be 3-D (layers, N, d), got shape {A.shape}")
    return [layer_status(layer, rtol=rtol) for layer in A]


def one_input(statuses: list) -> bool:
    """Whether a run's layers look like one input repeated for every item: every layer, the first
    included, is collapsed (all items at one point, :func:`layer_status`), the first is not all
    zero, and there are at least 2 items (``statuses``: :func:`stack_status` of the run, ``(L,)``).

    A model maps identical inputs to identical rows at every layer, so this is what identical inputs
    look like (e.g. every video opening on the same frame, sampled with one frame per video). The
    first layer decides: a class-token model's layer 0 is one point for any input (the class
    embedding before any attention) but its later layers are not; a model whose first layer tells the
    items apart had distinct inputs, however its later layers collapse; an all-zero first layer says
    nothing about the input (an extraction that wrote zeros looks the same).

    >>> one_input(stack_status(np.ones((3, 4, 2)))), one_input(stack_status(np.zeros((3, 4, 2))))
    (True, False)
    """
    return (len(statuses) > 0 and statuses[0].n_items >= 2 and statuses[0].scale > 0
            and all(st.collapsed for st in statuses))


def lost_distinctions(statuses: list, layer: int) -> str | None:
    """Why a score on ``layer`` of a run deserves a caveat although it is defined, or None: the
    layer keeps fewer than half the distinct rows that the run's best-resolving layer keeps
    (``statuses``: :func:`stack_status` of the run). E.g. a text layer that gives 180 items 3
    distinct embeddings where the others give 12 (the distinct captions): CKA is defined there and
    can be the highest cell, yet it compares 3 points, not the items. k-NN metrics on such a
    layer are usually undefined already (tie-decided lists)."""
    st = statuses[layer]
    most = max(s.n_distinct for s in statuses)
    if st.degenerate or 2 * st.n_distinct >= most:
        return None
    return (f"layer {layer} tells its {st.n_items} items apart as only {st.n_distinct} distinct points "
            f"(another layer of this run keeps {most})")


def flat_grid(grid, *, atol: float = 1e-12, rtol: float = REL_TOL) -> bool:
    """True when every finite cell of ``grid`` has one value (max - min <= atol + rtol * max|cell|),
    or no cell is finite: then no cell can be called best."""
    g = np.asarray(grid, dtype=np.float64)
    ok = g[np.isfinite(g)]
    if ok.size == 0:
        return True
    return bool(np.ptp(ok) <= atol + rtol * float(np.max(np.abs(ok))))
