"""SVCCA: singular-vector canonical correlation analysis (Raghu et al., 2017)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.metrics.validation import as_matrix, check_paired
from analysis.metrics.base import PairKernel


@dataclass(frozen=True)
class SvccaState:
    basis: np.ndarray  # (N, r) orthonormal basis of the centred, SVD-reduced representation


def svd_reduce_basis(X: np.ndarray, keep: float) -> np.ndarray:
    """Left singular vectors of the centred ``X`` that explain a ``keep`` share of variance."""
    Xc = X - X.mean(axis=0)
    U, s, _ = np.linalg.svd(Xc, full_matrices=False)
    var = s**2
    if var.sum() == 0:
        raise ValueError("svcca: the representation is constant (zero variance)")
    r = int(np.searchsorted(np.cumsum(var) / var.sum(), keep - 1e-12) + 1)
    return U[:, : min(r, len(s))]


class SvccaKernel(PairKernel):
    def prepare(self, X, *, keep=0.99, **_):
        if not 0 < keep <= 1:
            raise ValueError(f"svcca keep must be in (0, 1], got {keep!r}")
        return SvccaState(basis=svd_reduce_basis(np.asarray(X), keep))

    def score(self, sa, sb, **_):
        if sa.basis.shape[0] != sb.basis.shape[0]:
            raise ValueError(
                f"X and Y must have the same number of rows (items): got {sa.basis.shape[0]} and {sb.basis.shape[0]}"
            )
        # canonical correlations of two subspaces = singular values of Qa^T Qb
        rho = np.linalg.svd(sa.basis.T @ sb.basis, compute_uv=False)
        return float(np.clip(rho, 0.0, 1.0).mean())


_SVCCA = SvccaKernel()


def svcca(X, Y, *, keep: float = 0.99) -> float:
    """Mean canonical correlation after reducing each space to the directions holding ``keep`` of its variance.

    Args:
        X: ``(N, p)``; Y: ``(N, q)`` of the same N items. N should exceed the kept ranks by a
            wide margin: with ``r_x + r_y >= N`` the correlations are trivially 1.
    Returns:
        Mean of the ``min(r_x, r_y)`` canonical correlations, in ``[0, 1]``; higher is more similar.
        Invariant to invertible linear maps of either space (after the SVD step, to rotations and scaling).
    Reference: Raghu et al. (2017), SVCCA.

    >>> import numpy as np; X = np.random.default_rng(0).normal(size=(50, 8))
    >>> Q = np.linalg.qr(np.random.default_rng(1).normal(size=(8, 8)))[0]  # a rotation
    >>> round(svcca(X, X @ Q), 12)  # invariant to invertible linear maps
    1.0
    """
    X = as_matrix(X, "X")
    Y = as_matrix(Y, "Y")
    check_paired(X, Y)
    return _SVCCA.one_pair(X, Y, keep=keep)
