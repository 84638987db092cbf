"""Cosine nearest neighbours computed in row chunks so N x N is never held at once."""

from __future__ import annotations

import numpy as np

#: Largest number of similarity entries materialised at once (~32 MB of float64).
CHUNK_ENTRIES = 1 << 22


def l2_normalize(X: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm; all-zero rows stay zero (their cosine is 0 to everything)."""
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return X / np.where(norms == 0, 1.0, norms)


def row_chunks(n_rows: int, n_cols: int):
    """Yield ``(start, stop)`` row ranges holding at most ``CHUNK_ENTRIES`` entries each."""
    step = max(1, CHUNK_ENTRIES // max(1, n_cols))  # read at call time so tests can shrink it
    for start in range(0, n_rows, step):
        yield start, min(n_rows, start + step)


def cosine_topk(Xn: np.ndarray, k: int, groups: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Indices and cosine similarities of each row's ``k`` nearest other rows.

    Args:
        Xn: ``(N, d)`` rows already L2-normalised.
        k: neighbours per row, ``1 <= k < N``.
        groups: optional ``(N,)`` labels; rows sharing a label are never each other's neighbours.
            The bootstrap passes source indices, so an item resampled twice does not find its own
            copy (which would inflate every neighbourhood metric).
    Returns:
        ``(idx, sim)``, both ``(N, k)``, ordered by decreasing similarity. The row itself is
        excluded (its similarity is set to -inf before selection). Exact ties are broken by
        ``np.argpartition``; they do not occur on continuous data.
    """
    n = Xn.shape[0]
    idx = np.empty((n, k), dtype=np.int64)
    sim = np.empty((n, k), dtype=np.float64)
    for start, stop in row_chunks(n, n):
        S = Xn[start:stop] @ Xn.T
        rows = np.arange(stop - start)
        # set the diagonal to -inf to exclude the points themselves
        S[rows, rows + start] = -np.inf
        if groups is not None:
            S[groups[start:stop, None] == groups[None, :]] = -np.inf
        part = np.argpartition(-S, k - 1, axis=1)[:, :k]
        vals = np.take_along_axis(S, part, axis=1)
        order = np.argsort(-vals, axis=1, kind="stable")
        idx[start:stop] = np.take_along_axis(part, order, axis=1)
        sim[start:stop] = np.take_along_axis(vals, order, axis=1)
    return idx, sim
