"""The scaling-law forms (DR's saturating law and the two it is compared with): each
:class:`LawForm` names its parameters, its prediction and Jacobian, its box bounds and the design columns its linear parameters multiply (:class:`Grid` finds
every distinct n once); :data:`FORMS` holds the three compared (``saturating`` — the video–text
alignment paper's ``S∞ − (C_f n_f^−α + C_c n_c^−β)`` — ``log_linear`` and ``joint_power``), and
:func:`predict_from_params` evaluates a stored fit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

@dataclass(frozen=True)
class LawForm:
    name: str
    formula: str
    params: tuple[str, ...]
    fn: Callable  # fn(theta, nf, nc) -> predictions
    jac: Callable  # jac(theta, nf, nc) -> (P, n_params) derivatives of the predictions
    lower: tuple
    upper: tuple
    limit: int | None = None  # index of S∞ (the value as n -> inf), bounded by the metric's range
    exponents: tuple = ()  # indices of the exponents, whose box bounds mean "no power law here"
    needs: tuple = ()  # what must vary: "nf", "nc" (each needs 3 distinct values), "product"
    # columns(axes, grid, rows, out) -> sign: the columns multiplying the linear parameters (every
    # parameter that is not an exponent, in order) for G exponent settings, on a Grid of P points
    # (rows: None for one grid, or (G,) the grid row of each setting); axes[d] = (values, index)
    # gives exponent d of setting g as values[index[g]]. The first linear parameter multiplies a
    # column of ones (implied); the j-th other one multiplies sign * out[:, j], written into out
    # (P, k, G)
    columns: Callable | None = None


class Grid:
    """The (n_f, n_c) points of one grid, ``(P,)``, or of B grids of P points each, ``(B, P)``
    (leave-one-out subsets, resamples), with each distinct n_f, n_c and n_f·n_c found once.

    A law's columns raise each distinct n to each distinct exponent value once and gather: the same
    numbers, bit for bit, as raising every point to every setting's exponent (``pow`` is
    elementwise). A zoom level of 11×11 settings takes 11 values per exponent, so on a 3×3 grid
    that is 3·11 ``pow`` calls per exponent instead of 9·121."""

    def __init__(self, nf, nc):
        self.nf, self.nc = np.asarray(nf, float), np.asarray(nc, float)
        self.P = self.nf.shape[-1]
        self._distinct = {}
        self._gather = {}  # (key, id(rows)) -> (rows, inverse indices (P, G) of rows' points)

    def _values(self, key):
        if key not in self._distinct:
            n = self.nf if key == "nf" else self.nc if key == "nc" else self.nf * self.nc
            u, inv = np.unique(n, return_inverse=True)
            self._distinct[key] = (u, inv.reshape(n.shape))
        return self._distinct[key]

    def power(self, key, values, index, rows, out):
        """``out`` ``(P, G)`` = ``n ** -values[index[g]]`` for n = ``key`` ("nf", "nc" or "nfnc") at
        the points of setting g's grid (grid row ``rows[g]``; ``rows`` None: the one grid)."""
        u, inv = self._values(key)
        pw = u[:, None] ** -values[None, :]  # (distinct n, distinct exponent values)
        at = (inv[:, None] if rows is None else self._rows_inverse(key, inv, rows)) * len(values) + index
        np.take(pw.ravel(), at, out=out, mode="clip")

    def _rows_inverse(self, key, inv, rows):
        """``inv[rows].T`` ``(P, G)``, kept per ``rows`` array (a batched search reuses one for
        every zoom level)."""
        hit = self._gather.get((key, id(rows)))
        if hit is None or hit[0] is not rows:
            hit = (rows, inv[rows].T)
            self._gather[(key, id(rows))] = hit
        return hit[1]

    def log(self, key, rows, out):
        """``out`` ``(P, G)`` = ``log n`` for n = ``key`` at the points of each setting's grid."""
        u, inv = self._values(key)
        lg = np.log(u)
        out[...] = lg[inv][:, None] if rows is None else lg[inv[rows].T]


def _columns_saturating(axes, grid, rows, out):
    grid.power("nf", *axes[0], rows, out[:, 0])
    grid.power("nc", *axes[1], rows, out[:, 1])
    return -1.0


def _columns_loglinear(axes, grid, rows, out):
    grid.log("nf", rows, out[:, 0])
    grid.log("nc", rows, out[:, 1])
    return 1.0


def _columns_joint_power(axes, grid, rows, out):
    grid.power("nfnc", *axes[0], rows, out[:, 0])
    return -1.0


def plain_axes(E: np.ndarray) -> tuple:
    """Axes (see ``LawForm.columns``) of exponent settings ``E`` ``(G, e)`` taken as they are."""
    return tuple((E[:, d], np.arange(len(E))) for d in range(E.shape[1]))


def _saturating(theta, nf, nc):
    s_inf, c_f, c_c, a, b = theta
    return s_inf - (c_f * nf ** (-a) + c_c * nc ** (-b))


def _saturating_jac(theta, nf, nc):
    _, c_f, c_c, a, b = theta
    pf, pc = nf ** (-a), nc ** (-b)
    return np.stack([np.ones_like(nf), -pf, -pc, c_f * pf * np.log(nf), c_c * pc * np.log(nc)], axis=1)


def _loglinear_jac(theta, nf, nc):
    return np.stack([np.ones_like(nf), np.log(nf), np.log(nc)], axis=1)


def _joint_power_jac(theta, nf, nc):
    _, c, g = theta
    p = nf * nc
    q = p ** (-g)
    return np.stack([np.ones_like(p), -q, c * q * np.log(p)], axis=1)


def _loglinear(theta, nf, nc):
    a, b, c = theta
    return a + b * np.log(nf) + c * np.log(nc)


def _joint_power(theta, nf, nc):
    s_inf, c, g = theta
    return s_inf - c * (nf * nc) ** (-g)


FORMS = {
    "saturating": LawForm(
        "saturating", "S∞ − (C_f·n_f^−α + C_c·n_c^−β)", ("s_inf", "c_f", "c_c", "alpha", "beta"), _saturating, _saturating_jac,
        (-np.inf, 0.0, 0.0, 0.0, 0.0), (np.inf, np.inf, np.inf, 5.0, 5.0),
        limit=0, exponents=(3, 4), needs=("nf", "nc"), columns=_columns_saturating),
    "log_linear": LawForm(
        "log_linear", "a + b·log n_f + c·log n_c", ("a", "b", "c"), _loglinear, _loglinear_jac,
        (-np.inf, -np.inf, -np.inf), (np.inf, np.inf, np.inf), needs=("nf2", "nc2"), columns=_columns_loglinear),
    "joint_power": LawForm(
        "joint_power", "S∞ − C·(n_f·n_c)^−γ", ("s_inf", "c", "gamma"), _joint_power, _joint_power_jac,
        (-np.inf, 0.0, 0.0), (np.inf, np.inf, 5.0), limit=0, exponents=(2,), needs=("product",),
        columns=_columns_joint_power),
}


def report_params(law: LawForm, theta, sign) -> dict[str, float]:
    out = dict(zip(law.params, map(float, theta)))
    if law.limit is not None:
        out[law.params[law.limit]] = float(sign * theta[law.limit])
    else:  # log-linear: every coefficient changes sign with the scores
        out = {k: float(sign * v) for k, v in out.items()}
    return out


def predict_from_params(form: str, params: dict, n_frames, n_captions, *, higher_is_better=True) -> np.ndarray:
    """Predictions of a stored fit (``params`` as :attr:`ScalingFit.params` reports them, in the
    metric's units) at ``(n_frames, n_captions)``: the inverse of :func:`report_params`."""
    law = FORMS[form]
    sign = 1.0 if higher_is_better is not False else -1.0
    theta = np.array([params[p] for p in law.params], dtype=float)
    if law.limit is not None:
        theta[law.limit] *= sign
    else:
        theta *= sign
    return sign * law.fn(theta, np.asarray(n_frames, float), np.asarray(n_captions, float))
