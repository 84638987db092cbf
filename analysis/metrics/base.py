"""The two-stage shape every pairwise metric shares: per-layer ``prepare``, then ``score_block``.

A layer×layer grid prepares each layer once (neighbour lists, centred Gram pieces) and then
scores all pairs from the prepared states; the one-pair public functions run the very same two
stages on one layer each, so a grid cell equals the one-pair value exactly.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np


class PairKernel:
    """Base class: subclasses implement ``prepare`` and ``score`` (or a faster ``score_block``)."""

    #: whether ``prepare`` needs paired rows (all pairwise metrics do; unpaired ones don't)
    paired: bool = True

    def prepare(self, X: np.ndarray, **params) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def score(self, sa: Any, sb: Any, **params) -> float:  # pragma: no cover - interface
        raise NotImplementedError

    def score_block(self, states_a: Sequence[Any], states_b: Sequence[Any], **params) -> np.ndarray:
        """``(len(states_a), len(states_b))`` scores; the default loops over pairs."""
        out = np.empty((len(states_a), len(states_b)), dtype=np.float64)
        for i, sa in enumerate(states_a):
            for j, sb in enumerate(states_b):
                out[i, j] = self.score(sa, sb, **params)
        return out

    def one_pair(self, X: np.ndarray, Y: np.ndarray, **params) -> float:
        return float(self.score_block([self.prepare(X, **params)], [self.prepare(Y, **params)], **params)[0, 0])


class FunctionKernel(PairKernel):
    """Wraps a plain ``f(X, Y, **params)`` whose only per-layer work is trivial (e.g. normalising)."""

    def __init__(self, fn, *, paired: bool = True):
        self.fn = fn
        self.paired = paired

    def prepare(self, X, **params):
        return X

    def score(self, sa, sb, **params):
        return float(self.fn(sa, sb, **params))


#: Layers per gemm tile. Every contraction runs on tiles of this fixed shape.
TILE = 8


def _tiles(G: np.ndarray):
    """Split rows of ``G`` into zero-padded ``(TILE, K)`` tiles."""
    for start in range(0, G.shape[0], TILE):
        part = G[start : start + TILE]
        if part.shape[0] < TILE:
            part = np.vstack([part, np.zeros((TILE - part.shape[0], G.shape[1]), dtype=G.dtype)])
        yield start, part


#: Columns per contraction step; fixed, so partial sums always add up in the same order.
K_CHUNK = 1 << 13


def gram_inner(Ga: np.ndarray, Gb: np.ndarray) -> np.ndarray:
    """``Ga @ Gb.T`` for flattened per-layer blocks, computed on fixed-shape tiles.

    BLAS picks its kernel and summation order from the operand shapes (a 1-row operand goes to
    dot/gemv, small products to a "small matrix" kernel), so the same cell can differ in the last
    bits between a 1x1 and a 24x24 call. Running every product on zero-padded ``(TILE, K_CHUNK)``
    tiles, accumulated chunk by chunk in a fixed order, makes a cell depend only on its two rows,
    so one-pair calls and grid cells agree exactly; the column chunks keep tiles in cache.
    """
    la, lb = Ga.shape[0], Gb.shape[0]
    tiles_a, tiles_b = list(_tiles(Ga)), list(_tiles(Gb))
    acc = np.zeros((len(tiles_a) * TILE, len(tiles_b) * TILE), dtype=np.result_type(Ga, Gb))
    for c in range(0, Ga.shape[1], K_CHUNK):
        for i, ta in tiles_a:
            part = ta[:, c : c + K_CHUNK]
            for j, tb in tiles_b:
                acc[i : i + TILE, j : j + TILE] += part @ tb[:, c : c + K_CHUNK].T
    return acc[:la, :lb]


def gram_self(G: np.ndarray) -> np.ndarray:
    """``diag(G @ G.T)``: one 1-D dot per row, a routine that does not depend on how many rows there are."""
    return np.array([np.dot(row, row) for row in G], dtype=G.dtype)
