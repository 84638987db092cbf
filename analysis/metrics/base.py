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


def gram_inner(Ga: np.ndarray, Gb: np.ndarray) -> np.ndarray:
    """``Ga @ Gb.T`` for flattened per-layer blocks, computed tile by fixed-shape tile.

    BLAS picks its kernel and summation order from the operand shapes (a 1-row operand goes to
    dot/gemv, small products to a "small matrix" kernel), so the same cell can differ in the last
    bits between a 1x1 and a 24x24 call. Running every product on zero-padded ``(TILE, K)`` tiles
    makes a cell depend only on its two rows, so one-pair calls and grid cells agree exactly.
    """
    la, lb = Ga.shape[0], Gb.shape[0]
    out = np.empty((la, lb), dtype=np.result_type(Ga, Gb))
    for i, ta in _tiles(Ga):
        for j, tb in _tiles(Gb):
            block = ta @ tb.T
            out[i : i + TILE, j : j + TILE] = block[: min(TILE, la - i), : min(TILE, lb - j)]
    return out


def gram_self(G: np.ndarray) -> np.ndarray:
    """``diag(G @ G.T)`` through the same fixed-shape tiles as :func:`gram_inner`."""
    out = np.empty(G.shape[0], dtype=G.dtype)
    for i, t in _tiles(G):
        d = np.diag(t @ t.T)
        out[i : i + TILE] = d[: min(TILE, G.shape[0] - i)]
    return out
