"""Fitting a scaling-law form (:mod:`.forms`) by bounded variable projection: the law is linear in S∞
and the C's once the exponents are fixed, so those are solved exactly under their bounds on a zooming
grid of exponents (deterministic, and fast even where the optimum sits on a bound). Every fit carries a
``status`` (:data:`STATUSES`) saying whether its parameters mean anything; :func:`refit_many` refits
many grids of one shape at once (leave-one-out subsets, bootstrap resamples)."""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field

import numpy as np

from .forms import FORMS, LawForm, Grid, plain_axes, report_params

#: fit statuses, most serious first:
#: - ``"flat"``: every score is the same (up to float32 rounding); there is no trend to fit.
#: - ``"not_identifiable"``: the grid cannot separate the parameters (too few distinct n_f or
#:   n_c, or a rank-deficient Jacobian at the solution); values are one of many equal fits.
#: - ``"exponent_at_bound"``: an exponent sits on its box bound (0 or 5): the data show no power
#:   law in that budget (e.g. a straight line), so C and S∞ trade off freely.
#: - ``"s_inf_at_bound"``: S∞ sits on the metric's bound (e.g. mutual k-NN's 1): the fit wants a
#:   limit outside the reachable range, so S∞ is the constraint, not an estimate.
#: - ``"ok"``: none of the above.
STATUSES = ("flat", "not_identifiable", "exponent_at_bound", "s_inf_at_bound", "ok")

#: an exponent within this distance of its bound counts as on it: n^-0.01 changes by under 4 %
#: over n in [1, 48], so such a "power law" is a straight line in log n and S∞ is not determined
EXPONENT_ATOL = 1e-2
#: scaled-Jacobian condition number above which parameters are not identifiable
JAC_COND_MAX = 1e8


class TooFewPoints(ValueError):
    """A fit needs more distinct grid points than it has parameters."""


@dataclass
class ScalingFit:
    """One fitted law. ``params`` are in the metric's own units (S∞ is the limit as n -> inf);
    ``status`` (one of :data:`STATUSES`) and ``reason`` say whether they can be trusted;
    ``sign`` is +1 when the law rises towards S∞ (higher-is-better), -1 when it falls."""

    form: str
    params: dict[str, float]
    r2: float
    rmse: float
    n_points: int
    theta: np.ndarray = field(repr=False)  # parameters of the rising law fitted to sign * scores
    status: str = "ok"
    reason: str | None = None
    sign: float = 1.0
    bounds: tuple = (None, None)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def predict(self, n_frames, n_captions) -> np.ndarray:
        return self.sign * FORMS[self.form].fn(self.theta, np.asarray(n_frames, float),
                                               np.asarray(n_captions, float))

    def __getattr__(self, name):  # fit.s_inf, fit.alpha, ...
        params = self.__dict__.get("params", {})
        if name in params:
            return params[name]
        raise AttributeError(name)


def check_points(n_frames, n_captions, scores, n_params, form):
    nf = np.asarray(n_frames, dtype=float).ravel()
    nc = np.asarray(n_captions, dtype=float).ravel()
    y = np.asarray(scores, dtype=float).ravel()
    if not (len(nf) == len(nc) == len(y)):
        raise ValueError(f"n_frames, n_captions and scores must have one entry per grid point: "
                         f"got {len(nf)}, {len(nc)}, {len(y)}")
    if np.any(nf < 1) or np.any(nc < 1):
        raise ValueError("n_frames and n_captions must be >= 1")
    if not np.all(np.isfinite(y)):
        raise ValueError("scores contain NaN or inf")
    distinct = len(set(zip(nf, nc)))
    if distinct <= n_params:
        raise TooFewPoints(
            f"the {form} law has {n_params} parameters but only {distinct} distinct (n_f, n_c) grid points: "
            f"need at least {n_params + 1}. Precompute more settings (--frames / --captions)."
        )
    return nf, nc, y


def _sign_and_box(law: LawForm, bounds, higher_is_better: bool):
    """Sign of the law and its box bounds in the fitted (rising) units."""
    sign = 1.0 if higher_is_better is not False else -1.0
    lower, upper = np.array(law.lower, float), np.array(law.upper, float)
    lo, hi = (None, None) if bounds is None else bounds
    lo = -np.inf if lo is None else float(lo)
    hi = np.inf if hi is None else float(hi)
    if lo > hi:
        raise ValueError(f"bounds must be (lo, hi) with lo <= hi, got {bounds!r}")
    if law.limit is not None:  # S∞ in [lo, hi] in the metric's units
        lower[law.limit], upper[law.limit] = (lo, hi) if sign > 0 else (-hi, -lo)
    return sign, lower, upper, (None if lo == -np.inf else lo, None if hi == np.inf else hi)


#: points per exponent on the start grid over [0, 5] (steps of 0.25; the refinement does the rest)
EXPONENT_GRID = 21
#: zoom levels of a refit started from a full fit (leave-one-out): exponents resolved to ~1e-4,
#: far below what a held-out prediction error can tell apart
INIT_LEVELS = 5


@dataclass(frozen=True)
class _Faces:
    """Every assignment of "free, at lo, at hi" to the parameters of one box (finite bounds only),
    in the order of ``itertools.product`` with "free" first, with the masks :func:`_box_faces`
    applies; built once per box."""

    fixed: np.ndarray  # (C, m) bool
    values: np.ndarray  # (C, m)
    solve: np.ndarray  # assignments with something free, other than "all free" (the first)
    fixed_rc: np.ndarray  # (S, 1, m, m): fixed rows and columns of each solved assignment
    free_eye: np.ndarray  # (S, 1, m, m): the identity on each solved assignment's free parameters
    fixed_s: np.ndarray  # (S, 1, m)
    values_s: np.ndarray  # (S, 1, m): the values on fixed entries, 0 on free ones
    fixed_c: np.ndarray  # (C, 1, m)
    values_c: np.ndarray  # (C, 1, m)
    lo_tol: np.ndarray  # bounds widened by the feasibility tolerance 1e-12
    hi_tol: np.ndarray


@functools.lru_cache(maxsize=64)
def _faces_of(lo: tuple, hi: tuple) -> _Faces:
    choices = [[(False, 0.0)] + [(True, v) for v in (a, b) if np.isfinite(v)] for a, b in zip(lo, hi)]
    combos = list(itertools.product(*choices))
    m = len(lo)
    fixed = np.array([[f for f, _ in c] for c in combos], dtype=bool).reshape(len(combos), m)
    values = np.array([[v for _, v in c] for c in combos], dtype=float).reshape(len(combos), m)
    some_free = ~fixed.all(axis=1)
    some_free[0] = False  # every parameter free: the unconstrained solve, known before the faces
    solve = np.flatnonzero(some_free)
    fx = fixed[solve]
    out = _Faces(fixed, values, solve, (fx[:, :, None] | fx[:, None, :])[:, None],
                 (~fx[:, None, :, None]) * np.eye(m), fx[:, None, :], values[solve][:, None, :],
                 fixed[:, None, :], values[:, None, :],
                 np.array(lo) - 1e-12, np.array(hi) + 1e-12)
    for a in vars(out).values():
        a.flags.writeable = False
    return out


@dataclass(frozen=True)
class _Target:
    """The rising-law target of one grid, ``z`` ``(P,)`` (``zz``, ``zsum``: floats), or of B grid
    rows, ``z`` ``(B, P)`` (``zz``, ``zsum``: ``(B,)``): ``z'z`` as ``_box_lstsq`` computes it and
    ``sum(z)`` in point order from 0 (the ones column's ``X'z``), computed once per grid."""

    z: np.ndarray
    zz: float | np.ndarray
    zsum: float | np.ndarray

    @classmethod
    def of(cls, z: np.ndarray) -> _Target:
        if z.ndim == 1:
            total = 0.0
            for v in z.tolist():
                total += v
            return cls(z, float(z @ z), total)
        total = np.zeros(len(z))
        for p in range(z.shape[1]):
            total += z[:, p]
        return cls(z, np.einsum("gp,gp->g", z, z), total)


_EYE = {m: np.eye(m) for m in (1, 2, 3, 4)}


@dataclass(frozen=True)
class _Layout:
    """Where the sums of :func:`_normal_equations` go, for k non-constant columns (m = k + 1).

    Per point, rows of ``Q``: the k columns, their products (squares, then the cross product),
    then each column times the target; the sums over points follow, in ``U``, a row holding P (the
    ones column with itself) and one holding ``sum(z)``. ``A`` and ``X'z`` are gathered from ``U``."""

    k: int
    n2: int  # products of two columns
    a_rows: tuple  # U rows of A's m*m entries, row-major
    xz_rows: tuple  # U rows of X'z's m entries
    signed: tuple  # U rows that change sign with the columns' sign (a column or column × target)


_LAYOUTS = {
    # U = [P, sum z, S_f, S_ff, S_fz]
    1: _Layout(1, 1, (0, 2, 2, 3), (1, 4), (2, 4)),
    # U = [P, sum z, S_f, S_c, S_ff, S_cc, S_fc, S_fz, S_cz]
    2: _Layout(2, 3, (0, 2, 3, 2, 4, 6, 3, 6, 5), (1, 7, 8), (2, 3, 7, 8)),
}


def _normal_equations(law: LawForm, G: int, axes, grid: Grid, target: _Target, rows) -> tuple[np.ndarray, np.ndarray]:
    """``A = X'X`` ``(G, m, m)`` and ``X'z`` ``(G, m)`` for the G designs ``X = [1, sign * cols]``
    of a law's columns at G exponent settings (``axes``, see ``LawForm.columns``); ``rows`` None for
    one target, or ``(G,)``.

    Each entry is summed over the points in point order, starting from 0, one rounded product at a
    time: exactly what ``np.einsum("gpi,gpj->gij", X, X)`` and ``np.einsum("gpi,gp->gi", X, z)``
    compute (the tests check it bit for bit; a sign flip and a product with 1 are exact), in a few
    whole-array operations instead of einsum's strided loop."""
    P = grid.P
    lay = _LAYOUTS[len(law.params) - len(law.exponents) - 1]
    k, n2 = lay.k, lay.n2
    Q = np.empty((P, 2 * k + n2, G))
    sign = law.columns(axes, grid, rows, Q[:, :k])
    if k == 1:
        np.multiply(Q[:, 0], Q[:, 0], out=Q[:, 1])
    else:
        np.multiply(Q[:, :2], Q[:, :2], out=Q[:, 2:4])
        np.multiply(Q[:, 0], Q[:, 1], out=Q[:, 4])
    np.multiply(Q[:, :k], target.z[:, None, None] if rows is None else target.z[rows].T[:, None, :],
                out=Q[:, k + n2:])
    U = np.empty((len(Q[0]) + 2, G))
    S = U[2:]
    np.add(Q[0], 0.0, out=S)  # einsum's sums start from 0
    for p in range(1, P):
        S += Q[p]
    if sign != 1.0:
        U[list(lay.signed)] *= sign
    U[0] = P
    U[1] = target.zsum if rows is None else target.zsum[rows]
    A = U[list(lay.a_rows)].T.reshape(G, k + 1, k + 1)
    return A, np.ascontiguousarray(U[list(lay.xz_rows)].T)


def _box_lstsq(X: np.ndarray, z: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``min ||X b - z||² s.t. lo <= b <= hi`` for a stack of small designs ``X`` ``(G, P, m)``;
    ``z`` ``(P,)`` shared by all, or ``(G, P)`` one per design. Returns ``(b (G, m), cost (G,))``;
    see :func:`_box_solve`."""
    G = len(X)
    A = np.einsum("gpi,gpj->gij", X, X)
    if z.ndim == 1:
        Xz = np.einsum("gpi,p->gi", X, z)
        zz = np.full(G, float(z @ z))
    else:
        Xz = np.einsum("gpi,gp->gi", X, z)
        zz = np.einsum("gp,gp->g", z, z)
    return _box_solve(A, Xz, zz, lo, hi)


def _spd_solve(M: np.ndarray, r: np.ndarray) -> np.ndarray:
    """``x`` with ``M x = r`` for symmetric positive definite ``M`` ``(..., m, m)``, ``r`` ``(..., m)``,
    by Cholesky (``M = L L'``, then two triangular solves), one elementwise operation at a time
    over the leading axes.

    Why not ``np.linalg.solve``: it calls LAPACK once per matrix (~0.3 µs each; a fit solves ~10⁴
    3×3 systems, more on bound faces), and this does the same arithmetic for all matrices in ~40
    whole-array operations (fits 15-25 % faster, ``bench/scaling.py``). Each ``x`` depends only on its own ``M`` and ``r`` (no reduction runs
    across the batch), so a system gives the same bits in any batch. Cholesky is backward stable for
    SPD matrices (Higham 2002, Thm 10.3); the callers' ridge keeps ``M`` positive definite. A matrix
    that is not (a non-positive pivot) gives NaN, which the callers treat as infeasible."""
    m = M.shape[-1]
    L = [[None] * m for _ in range(m)]
    with np.errstate(invalid="ignore", divide="ignore"):
        for j in range(m):
            s = M[..., j, j]
            for k in range(j):
                s = s - L[j][k] * L[j][k]
            L[j][j] = np.sqrt(s)
            for i in range(j + 1, m):
                t = M[..., i, j]
                for k in range(j):
                    t = t - L[i][k] * L[j][k]
                L[i][j] = t / L[j][j]
        y = []
        for i in range(m):
            t = r[..., i]
            for k in range(i):
                t = t - L[i][k] * y[k]
            y.append(t / L[i][i])
        x = [None] * m
        for i in reversed(range(m)):
            t = y[i]
            for k in range(i + 1, m):
                t = t - L[k][i] * x[k]
            x[i] = t / L[i][i]
    return np.stack(x, axis=-1)


def _cost(zz, b: np.ndarray, Xz: np.ndarray, A: np.ndarray) -> np.ndarray:
    """``z'z − 2 b'X'z + b'X'X b`` for stacks ``b``, ``Xz`` ``(..., m)``, ``A`` ``(..., m, m)``
    (broadcast), the sums written out term by term in index order: a design's cost is the same bits
    in any batch (an einsum may pick its summation order from the operands' shapes)."""
    m = b.shape[-1]
    lin = b[..., 0] * Xz[..., 0]
    for i in range(1, m):
        lin = lin + b[..., i] * Xz[..., i]
    quad = None
    for i in range(m):
        for j in range(m):
            t = b[..., i] * A[..., i, j] * b[..., j]
            quad = t if quad is None else quad + t
    return zz - 2 * lin + quad


def _box_solve(A: np.ndarray, Xz: np.ndarray, zz: np.ndarray, lo: np.ndarray, hi: np.ndarray):
    """``min ||X b - z||² s.t. lo <= b <= hi`` from the Gram pieces of G designs: ``A = X'X``
    ``(G, m, m)``, ``X'z`` ``(G, m)``, ``z'z`` ``(G,)``. Returns ``(b (G, m), cost (G,))``.

    Exact for every design at once: a convex quadratic's box-constrained minimum has each parameter
    free, or at one of its bounds; every such assignment (3^m, m <= 3) is solved by least squares on
    the free parameters, infeasible ones are dropped, and the cheapest feasible one is the optimum
    (the first in assignment order among equal costs). Designs whose unconstrained optimum is
    feasible stop there (it is the optimum); the others go through the assignments
    (:func:`_box_faces`). Cost: ``||X b - z||² = z'z - 2 b'X'z + b'X'X b`` (:func:`_cost`). Every
    design's answer depends on its own pieces only (:func:`_spd_solve`, :func:`_cost`): the same
    bits in any batch of settings, so searches may solve a setting once for several chains."""
    m = Xz.shape[1]
    # a relative ridge of 1e-12 on the free parameters: collinear columns (an exponent of 0 makes
    # its column constant, like S∞'s) get some split of an equally good fit, and every system is
    # positive definite for the Cholesky solve
    ridge = 1e-12 * np.trace(A, axis1=1, axis2=2) + 1e-300
    # the unconstrained optimum, where it is feasible, is the box optimum (a strictly convex
    # quadratic): only the other designs need the assignments
    b0 = _spd_solve(A + ridge[:, None, None] * _EYE[m], Xz)
    ok0 = ((b0 >= lo - 1e-12) & (b0 <= hi + 1e-12)).all(axis=1)
    cost0 = _cost(zz, b0, Xz, A)
    if not ok0.all():
        rest = np.flatnonzero(~ok0)
        b0[rest], cost0[rest] = _box_faces(A[rest], Xz[rest], zz[rest], ridge[rest], b0[rest], lo, hi)
    return b0, np.maximum(cost0, 0.0)


def _box_faces(A, Xz, zz, ridge, b_free, lo, hi) -> tuple[np.ndarray, np.ndarray]:
    """The cheapest feasible bound assignment for R designs whose unconstrained optimum ``b_free``
    ``(R, m)`` is infeasible, ``(b (R, m), cost (R,))`` (NaN, inf where none is feasible).

    All assignments are solved in one batched :func:`_spd_solve`: a fixed parameter ``b_j = v_j``
    leaves the free parameters' equations ``A_FF b_F = (X'z)_F − A_F,fixed v_fixed``, which is the
    symmetric system with the fixed rows and columns of ``A`` replaced by the identity and the
    right-hand side ``v`` on the fixed entries. Two kinds need no solve: "all free" is ``b_free``
    (infeasible, by the caller's test), and "all fixed" is the values themselves."""
    f = _faces_of(tuple(map(float, lo)), tuple(map(float, hi)))
    m = A.shape[1]
    b = np.empty((len(f.fixed), len(A), m))
    b[0] = b_free
    b[1:] = f.values_c[1:]  # the fixed entries (all of them, where nothing is free)
    if len(f.solve):
        M = np.where(f.fixed_rc, _EYE[m], A[None])  # (S, R, m, m)
        M = M + (ridge[None, :, None, None] * f.free_eye)
        # (X'z)_i − sum over fixed j of A_ij v_j, term by term in j order (free j add exact zeros)
        moved = Xz[None]
        for j in range(m):
            moved = moved - A[None, :, :, j] * f.values_s[..., j:j + 1]
        rhs = np.where(f.fixed_s, f.values_s, moved)  # (S, R, m)
        b[f.solve] = _spd_solve(M, rhs)
    b = np.where(f.fixed_c, f.values_c, b)  # exactly on the bound, whatever the rounding
    ok = np.all(f.fixed_c | ((b >= f.lo_tol) & (b <= f.hi_tol)), axis=2)  # (C, R)
    cost = _cost(zz, b, Xz, A)  # (C, R), each design's cost from its own pieces
    cost = np.where(ok, cost, np.inf)
    pick = np.argmin(cost, axis=0)
    g = np.arange(len(A))
    best_b, best_c = b[pick, g], cost[pick, g]
    best_b[~np.isfinite(best_c)] = np.nan
    return best_b, best_c


def _solve_on(law: LawForm, E: np.ndarray, grid: Grid, target: _Target, lower, upper, *,
              rows=None, axes=None) -> tuple[np.ndarray, np.ndarray]:
    """Full parameter vectors ``(G, n_params)`` and costs ``(G,)`` for exponent settings ``E``
    ``(G, e)`` on ``grid``: ``rows`` None for one grid and target, or ``rows`` ``(G,)`` (each
    setting's grid row) for B grids and targets. ``axes``: ``E``'s distinct values per exponent
    (see ``LawForm.columns``), when the caller knows them."""
    exps = list(law.exponents)
    lin = [i for i in range(len(law.params)) if i not in exps]
    A, Xz = _normal_equations(law, len(E), axes or plain_axes(E), grid, target, rows)
    zz = np.full(len(E), target.zz) if rows is None else target.zz[rows]
    b, cost = _box_solve(A, Xz, zz, lower[lin], upper[lin])
    theta = np.empty((len(E), len(law.params)))
    theta[:, lin] = b
    theta[:, exps] = E
    return theta, cost


def _twin_chains(centers: np.ndarray) -> np.ndarray:
    """For each zoom chain, the first chain with a bitwise-equal centre (itself if none)."""
    bits = centers.view(np.int64)
    same = np.all(bits[:, None, :] == bits[None, :, :], axis=2)  # (K, K)
    return np.argmax(same, axis=1)


#: zoom offsets per exponent, in steps around a centre
ZOOM = np.linspace(-1, 1, 11)


@functools.lru_cache(maxsize=8)
def _grid_index(n: int, e: int) -> np.ndarray:
    """``(n^e, e)``: the indices along each exponent of an n-per-exponent grid in ``meshgrid``'s
    "ij" order (the last exponent fastest), read-only."""
    out = np.stack(np.meshgrid(*[np.arange(n)] * e, indexing="ij"), axis=-1).reshape(-1, e)
    out.flags.writeable = False
    return out


def _grid_settings(axes_values: list) -> tuple[np.ndarray, tuple]:
    """Settings ``E`` ``(n^e, e)`` of the grid whose exponent d takes ``axes_values[d]`` (``(n,)``
    each; ``meshgrid`` "ij" order), with their axes (see ``LawForm.columns``)."""
    idx = _grid_index(len(axes_values[0]), len(axes_values))
    E = np.stack([v[i] for v, i in zip(axes_values, idx.T)], axis=-1)
    return E, tuple((v, i) for v, i in zip(axes_values, idx.T))


def _zoom_settings(centers: np.ndarray, step: np.ndarray, lo: np.ndarray, hi: np.ndarray):
    """One zoom level around K centres ``(K, e)``: ``clip(centre + offset * step, lo, hi)`` for
    the 11^e offsets of :data:`ZOOM` per exponent, as ``(E (K, 11^e, e), axes)`` (each chain's 11
    values per exponent; see ``LawForm.columns``). Each value is the one sum and clip per element
    that the whole (K, 11^e, e) array would hold."""
    K, e = centers.shape
    vals = np.clip(centers[:, :, None] + ZOOM[None, None, :] * step[None, :, None], lo[None, :, None],
                   hi[None, :, None])  # (K, e, 11)
    vals = np.ascontiguousarray(vals.transpose(1, 0, 2)).reshape(e, -1)  # (e, K * 11): chain-major
    index = _zoom_index(K, e)  # (e, K * 11^e)
    E = np.take_along_axis(vals, index, axis=1).T.reshape(K, -1, e)
    return E, tuple(zip(vals, index))


@functools.lru_cache(maxsize=64)
def _zoom_index(K: int, e: int) -> np.ndarray:
    """``(e, K * 11^e)``: where each setting of a K-chain zoom level finds its exponent d among the
    chain-major ``(K * 11,)`` values, read-only."""
    idx = _grid_index(len(ZOOM), e)  # (O, e)
    chain = np.arange(K)[:, None] * len(ZOOM)
    out = np.stack([(chain + idx[:, d][None, :]).ravel() for d in range(e)])
    out.flags.writeable = False
    return out


def _varpro_fit(law: LawForm, grid: Grid, z, lower, upper, *, init=None, keep: int = 3, levels: int = 9) -> np.ndarray:
    """Least squares by variable projection: for given exponents the law is linear in the other
    parameters, whose box-constrained optimum :func:`_box_solve` gives exactly; the exponents are
    searched on a grid over their box (:data:`EXPONENT_GRID` points each), then around the ``keep``
    best cells by repeated zooms (11 points over ± one step, the step shrinking 5× a level; after
    ``levels`` zooms the exponents are resolved to ~1e-7). Deterministic, and as fast where the
    optimum sits on a bound (a straight line: exponent -> 0) as elsewhere, where local optimisers crawl.
    With ``init`` (a refit of a subset, e.g. leave-one-out) the zoom starts at its exponents alone.
    Chains whose centres meet (bitwise) zoom identically from then on: a level solves each such
    group of chains once (about half of all settings on the 3×3 bench grid), which gives the same
    bits as solving each (every design's answer depends on its own numbers only, :func:`_box_solve`)."""
    exps = list(law.exponents)
    z = _Target.of(z)
    if not exps:
        theta, _ = _solve_on(law, np.zeros((1, 0)), grid, z, lower, upper)
        return theta[0]
    lo, hi = lower[exps], upper[exps]
    if init is not None:  # a refit of a subset: its optimum lies near the full fit's, fewer zooms
        E, axes = np.asarray(init, float)[exps][None, :], None
        levels = min(levels, INIT_LEVELS)
    else:
        E, axes = _grid_settings([np.linspace(a, b, EXPONENT_GRID) for a, b in zip(lo, hi)])
    theta, cost = _solve_on(law, E, grid, z, lower, upper, axes=axes)
    order = np.argsort(cost)[:keep]
    centers, best, best_theta = E[order], cost[order], theta[order]
    step = (hi - lo) / (EXPONENT_GRID - 1)
    for _ in range(levels):  # all candidates zoomed together: one solve per level
        twin = _twin_chains(centers)
        own = np.flatnonzero(twin == np.arange(len(centers)))
        Ez, axes = _zoom_settings(centers[own], step, lo, hi)  # (own, 11^e, e)
        tz, cz = _solve_on(law, Ez.reshape(-1, len(exps)), grid, z, lower, upper, axes=axes)
        tz, cz = tz.reshape(len(own), -1, tz.shape[1]), cz.reshape(len(own), -1)
        if len(own) < len(centers):  # a chain that met another has its twin's candidates and costs
            slot = np.searchsorted(own, twin)
            Ez, tz, cz = Ez[slot], tz[slot], cz[slot]
        j = np.argmin(cz, axis=1)
        r = np.arange(len(centers))
        better = cz[r, j] <= best
        centers[better] = Ez[r, j][better]
        best[better] = cz[r, j][better]
        best_theta[better] = tz[r, j][better]
        step = step / 5
    return best_theta[int(np.argmin(best))]


def _identifiability(law: LawForm, nf, nc) -> str | None:
    """Why the grid cannot separate the law's parameters, or None."""
    n_f, n_c, n_p = len(np.unique(nf)), len(np.unique(nc)), len(np.unique(nf * nc))
    for need in law.needs:
        if need == "nf" and n_f < 3:
            return f"only {n_f} distinct n_f: C_f and α cannot be separated from S∞ (need 3)"
        if need == "nc" and n_c < 3:
            return f"only {n_c} distinct n_c: C_c and β cannot be separated from S∞ (need 3)"
        if need == "nf2" and n_f < 2:
            return f"only {n_f} distinct n_f: the n_f slope is undefined (need 2)"
        if need == "nc2" and n_c < 2:
            return f"only {n_c} distinct n_c: the n_c slope is undefined (need 2)"
        if need == "product" and n_p < 3:
            return f"only {n_p} distinct n_f·n_c: C and γ cannot be separated from S∞ (need 3)"
    return None


def _status(law: LawForm, theta, lower, upper, nf, nc) -> tuple[str, str | None]:
    names = law.params
    for i in law.exponents:
        for edge, label in ((lower[i], "lower"), (upper[i], "upper")):
            if abs(theta[i] - edge) <= EXPONENT_ATOL:
                return "exponent_at_bound", (f"{names[i]} = {theta[i]:.4g} sits on (within {EXPONENT_ATOL:g} of) its "
                                             f"{label} bound {edge:g}: "
                                             "no power law in this budget, so C and S∞ are not determined")
    J = law.jac(theta, nf, nc)
    norms = np.linalg.norm(J, axis=0)
    if np.any(norms <= 1e-12 * max(float(norms.max()), 1e-300)):
        dead = [names[i] for i in np.flatnonzero(norms <= 1e-12 * norms.max())]
        return "not_identifiable", f"the fit does not depend on {', '.join(dead)} (zero Jacobian column)"
    sv = np.linalg.svd(J / norms, compute_uv=False)
    cond = float(sv[0] / sv[-1]) if sv[-1] > 0 else np.inf
    if cond > JAC_COND_MAX:
        return "not_identifiable", (f"the Jacobian is rank-deficient (condition number {cond:.2g} > "
                                    f"{JAC_COND_MAX:.0e}): several parameter sets fit equally well")
    if law.limit is not None:
        i = law.limit
        for edge in (lower[i], upper[i]):
            if np.isfinite(edge) and abs(theta[i] - edge) <= 1e-6 * max(1.0, abs(edge)):
                return "s_inf_at_bound", (f"S∞ sits on the metric's bound {abs(edge):g}: the data point to a limit "
                                          "outside the reachable range, so S∞ is the constraint, not an estimate")
    return "ok", None


def fit_scaling_law(n_frames, n_captions, scores, *, form: str = "saturating",
                    init=None, bounds: tuple | None = None, higher_is_better: bool | None = True,
                    flat_atol: float = 1e-9) -> ScalingFit:
    """Fit a scaling law by bounded least squares (variable projection, :func:`_varpro_fit`).

    Args:
        n_frames, n_captions, scores: one entry per grid point (flat arrays of equal length).
        form: ``"saturating"`` (the paper's), ``"log_linear"`` or ``"joint_power"``.
        init: a known good start (e.g. the full-data fit's ``theta`` when refitting subsets): the
            exponent search then zooms around its exponents only.
        bounds: ``(lo, hi)`` range of the metric (``registry.BOUNDS[metric]``; None = unbounded):
            S∞ is constrained to it.
        higher_is_better: the metric's direction. False flips the law,
            ``S = S∞ + (C_f n_f^−α + C_c n_c^−β)`` with ``C >= 0``: the score falls towards S∞
            (internally the rising law is fitted to ``-scores``). None counts as True.
        flat_atol: scores whose range is within this (plus float32 rounding) are "flat".
    Returns:
        A :class:`ScalingFit` with ``params`` in the metric's units (for the saturating form:
        ``s_inf, c_f, c_c, alpha, beta``), in-sample ``r2`` and ``rmse``, ``predict``, and
        ``status``/``reason`` (:data:`STATUSES`). A flat grid is not fitted: S∞ is the mean
        score (clipped to ``bounds``), the C's are 0 and the exponents NaN.
    Raises:
        TooFewPoints when there are not more distinct grid points than parameters.
    """
    from analysis.metrics.degenerate import flat_grid

    law = FORMS[form]
    nf, nc, y = check_points(n_frames, n_captions, scores, len(law.params), form)
    sign, lower, upper, box = _sign_and_box(law, bounds, higher_is_better)
    z = sign * y
    if flat_grid(y, atol=flat_atol):
        theta = _flat_theta(law, z, lower, upper)
        params = report_params(law, theta, sign)
        params.update({law.params[i]: float("nan") for i in law.exponents})
        rmse = float(np.sqrt(np.mean((sign * law.fn(theta, nf, nc) - y) ** 2)))
        return ScalingFit(form, params, float("nan"), rmse, len(y), theta, "flat",
                          f"all {len(y)} scores equal {float(y[0]):.6g}: no trend to fit", sign, box)
    theta = _varpro_fit(law, Grid(nf, nc), z, lower, upper, init=init)
    return _finish(law, theta, nf, nc, y, sign, lower, upper, box)


def _flat_theta(law: LawForm, z, lower, upper) -> np.ndarray:
    """A flat grid's parameters: C = 0 (exponents then irrelevant; reported as NaN), the level the
    mean of ``z`` (clipped to S∞'s box)."""
    theta = np.zeros(len(law.params))
    if law.limit is not None:
        theta[law.limit] = np.clip(np.mean(z), lower[law.limit], upper[law.limit])
    else:
        theta[0] = np.mean(z)
    return theta


def _finish(law: LawForm, theta, nf, nc, y, sign, lower, upper, box) -> ScalingFit:
    """A fitted (non-flat) law's :class:`ScalingFit`: in-sample R² and RMSE, status, reported params."""
    z = sign * y
    pred = law.fn(theta, nf, nc)
    ss_res = float(np.sum((z - pred) ** 2))
    ss_tot = float(np.sum((z - z.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan")
    why = _identifiability(law, nf, nc)
    status, reason = ("not_identifiable", why) if why else _status(law, theta, lower, upper, nf, nc)
    return ScalingFit(law.name, report_params(law, theta, sign), r2, float(np.sqrt(ss_res / len(y))), len(y),
                      theta, status, reason, sign, box)


def _varpro_refits(law: LawForm, NF, NC, Z, lower, upper, init) -> np.ndarray:
    """:func:`_varpro_fit` started from ``init`` for B problems at once, ``(B, n_params)``.

    ``NF``, ``NC``, ``Z``: ``(B, P)``, one grid and rising-law target per problem (leave-one-out
    subsets, or item resamples of one grid). The same search as ``_varpro_fit(init=...)`` (the
    zoom from ``init``'s exponents, :data:`INIT_LEVELS` levels), each level one batched solve."""
    B = len(Z)
    grid, rows0, target = Grid(NF, NC), np.arange(B), _Target.of(Z)
    exps = list(law.exponents)
    if not exps:
        theta, _ = _solve_on(law, np.zeros((B, 0)), grid, target, lower, upper, rows=rows0)
        return theta
    e = len(exps)
    lo, hi = lower[exps], upper[exps]
    centers = np.broadcast_to(np.asarray(init, float)[exps], (B, e)).copy()
    step = (hi - lo) / (EXPONENT_GRID - 1)
    O = len(ZOOM) ** e
    rows = np.repeat(rows0, O)
    # the start and the first zoom in one batch (a row's numbers do not depend on the batch)
    Ez, axes = _zoom_settings(centers, step, lo, hi)
    both = tuple((np.concatenate([centers[:, d], v]), np.concatenate([rows0, B + i]))
                 for d, (v, i) in enumerate(axes))
    tz, cz = _solve_on(law, np.concatenate([centers, Ez.reshape(-1, e)]), grid, target, lower, upper,
                       rows=np.concatenate([rows0, rows]), axes=both)
    best_theta, best, pending = tz[:B], cz[:B], (Ez, tz[B:], cz[B:])
    r = np.arange(B)
    for _ in range(INIT_LEVELS):
        if pending is None:
            Ez, axes = _zoom_settings(centers, step, lo, hi)  # (B, O, e)
            tz, cz = _solve_on(law, Ez.reshape(-1, e), grid, target, lower, upper, rows=rows, axes=axes)
        else:
            (Ez, tz, cz), pending = pending, None
        tz, cz = tz.reshape(B, O, -1), cz.reshape(B, O)
        j = np.argmin(cz, axis=1)
        better = cz[r, j] <= best
        centers[better] = Ez[r, j][better]
        best[better] = cz[r, j][better]
        best_theta[better] = tz[r, j][better]
        step = step / 5
    return best_theta


def _check_rows(NF, NC, Y, n_params, form) -> None:
    """:func:`check_points` of every row of ``(B, P)`` grids, raising what the first failing row raises;
    the common case (budgets >= 1, finite scores) is checked on all rows at once."""
    if not (np.all(NF >= 1) and np.all(NC >= 1) and np.all(np.isfinite(Y))):
        for nf, nc, y in zip(NF, NC, Y):
            check_points(nf, nc, y, n_params, form)
        return
    f = np.unique(NF, return_inverse=True)[1]
    c = np.unique(NC, return_inverse=True)[1]
    pair = np.sort(f.reshape(NF.shape) * (NC.size + 1) + c.reshape(NC.shape), axis=1)  # an id per (n_f, n_c)
    distinct = 1 + np.count_nonzero(np.diff(pair, axis=1), axis=1)  # distinct (n_f, n_c) per row
    for b in np.flatnonzero(distinct <= n_params)[:1]:
        check_points(NF[b], NC[b], Y[b], n_params, form)  # raises TooFewPoints with this row's count


def _flat_rows(Y, atol: float) -> np.ndarray:
    """``[degenerate.flat_grid(y, atol=atol) for y in Y]`` for finite rows ``Y`` ``(B, P)``, at once
    (the same comparisons)."""
    from analysis.metrics.degenerate import REL_TOL

    return np.ptp(Y, axis=1) <= atol + REL_TOL * np.max(np.abs(Y), axis=1)


def refits(law: LawForm, NF, NC, Y, init, bounds, higher_is_better, flat_atol):
    """Checked refits of B grids ``(B, P)`` from ``init``: ``(theta (B, n_params), flat (B,), sign,
    lower, upper, box)``; a flat row gets :func:`_flat_theta` (not fitted)."""
    _check_rows(NF, NC, Y, len(law.params), law.name)
    sign, lower, upper, box = _sign_and_box(law, bounds, higher_is_better)
    flat = _flat_rows(Y, flat_atol)
    theta = np.empty((len(Y), len(law.params)))
    for b in np.flatnonzero(flat):
        theta[b] = _flat_theta(law, sign * Y[b], lower, upper)
    todo = np.flatnonzero(~flat)
    if len(todo):
        theta[todo] = _varpro_refits(law, NF[todo], NC[todo], sign * Y[todo], lower, upper, init)
    return theta, flat, sign, lower, upper, box


def refit_many(NF, NC, Y, *, init, form: str = "saturating", bounds=None, higher_is_better=True,
               flat_atol: float = 1e-9) -> list[ScalingFit]:
    """``[fit_scaling_law(NF[b], NC[b], Y[b], init=init, ...) for b]``, the searches batched.

    ``NF``, ``NC``, ``Y``: ``(B, P)`` (or ``(P,)`` grids shared by every row of ``Y``). Every refit
    is checked and reported as :func:`fit_scaling_law` does (:class:`TooFewPoints` for a grid with
    too few distinct points; a flat row is not fitted). Values equal the one-at-a-time fits up to
    rounding of the batched solves (tests compare them)."""
    law = FORMS[form]
    Y = np.atleast_2d(np.asarray(Y, float))
    NF = np.broadcast_to(np.asarray(NF, float), Y.shape)
    NC = np.broadcast_to(np.asarray(NC, float), Y.shape)
    theta, flat, sign, lower, upper, box = refits(law, NF, NC, Y, init, bounds, higher_is_better, flat_atol)
    out: list = [None] * len(Y)
    for b in np.flatnonzero(flat):
        out[b] = fit_scaling_law(NF[b], NC[b], Y[b], form=form, init=init, bounds=bounds,
                                 higher_is_better=higher_is_better, flat_atol=flat_atol)
    for b in np.flatnonzero(~flat):
        out[b] = _finish(law, theta[b], NF[b], NC[b], Y[b], sign, lower, upper, box)
    return out
