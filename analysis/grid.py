"""Layer×layer grids of pairwise metrics and per-layer profiles of single-space metrics.

Per-layer work (normalising, neighbour lists, Gram blocks) happens once per layer, never per
pair; pair scoring then runs from the prepared states. Cells equal the one-pair functions exactly
because the one-pair functions run the same two stages.
"""

from __future__ import annotations

import numpy as np

from .preprocess import clamp_outliers
from .registry import get_metric
from .validation import as_stack, check_k


def _prepared(spec, stack, params, clamp_quantile):
    states = []
    for layer in stack:
        if clamp_quantile is not None:
            layer = clamp_outliers(layer, quantile=clamp_quantile)
        states.append(spec.kernel.prepare(layer, **params))
    return states


def layer_grid(A, B=None, *, metric: str = "mutual_knn", k: int = 10, clamp_quantile: float | None = None,
               **params) -> np.ndarray:
    """Score every layer of ``A`` against every layer of ``B``.

    Args:
        A: ``(La, N, p)`` stack of per-layer embeddings; B: ``(Lb, N, q)`` for the same N items
            (``None`` compares A with itself, preparing each layer once).
        metric: a registry name of kind pairwise, same_space or unpaired.
        k: neighbours for metrics that take ``k`` (ignored by the others).
        clamp_quantile: clamp each feature at this quantile of |x| before scoring (off by default).
        **params: further metric parameters (see ``layerscope metrics``).
    Returns:
        ``(La, Lb)`` float64 array; ``out[a, b] = metric(A[a], B[b])``. k-NN cells are NaN when
        either layer is collapsed (every row the same point: neighbours undefined).
    Memory: float32 stacks are not copied; k-NN metrics hold per layer an ``(N, k)`` list and a
    float32 unit-row copy while it is searched; CKA holds a float64 copy of every layer.
    """
    spec = get_metric(metric)
    if spec.kind == "single":
        raise ValueError(f"metric {metric!r} scores one space; use layer_profile for it")
    if "k" in spec.params:
        params["k"] = k
    params = spec.resolve(**params)
    # float32 stacks stay float32: each kernel picks its own precision per layer (k-NN searches
    # in float32 with exact float64 answers, CKA casts one layer at a time), so no L x N x d copy
    A = as_stack(A, "A", dtype=None)
    self_grid = B is None
    B = A if self_grid else as_stack(B, "B", dtype=None)
    if spec.kernel.paired and A.shape[1] != B.shape[1]:
        raise ValueError(f"A and B must hold the same items: got N={A.shape[1]} and N={B.shape[1]}")
    if spec.kind in ("same_space", "unpaired") and A.shape[2] != B.shape[2]:
        raise ValueError(
            f"metric {metric!r} needs A and B in one embedding space: got d={A.shape[2]} and d={B.shape[2]}"
        )
    if "k" in params and metric != "recall_at_k":
        check_k(A.shape[1], params["k"])
    states_a = _prepared(spec, A, params, clamp_quantile)
    states_b = states_a if self_grid else _prepared(spec, B, params, clamp_quantile)
    return spec.kernel.score_block(states_a, states_b, **params)


def layer_profile(A, *, metric: str = "rankme", **params) -> np.ndarray:
    """``(L,)`` values of a single-space metric for each layer of ``A`` ``(L, N, d)``."""
    spec = get_metric(metric)
    if spec.kind != "single":
        raise ValueError(f"metric {metric!r} compares two spaces; use layer_grid for it")
    A = as_stack(A, "A", dtype=None)  # each metric call widens its one layer as it needs
    params = spec.resolve(**params)
    return np.array([spec.fn(layer, **params) for layer in A], dtype=np.float64)


def best_cell(grid: np.ndarray, *, higher_is_better: bool = True) -> tuple[int, int, float]:
    """``(layer_a, layer_b, value)`` of the best finite cell of a grid."""
    g = np.asarray(grid, dtype=np.float64)
    if g.ndim != 2 or g.size == 0:
        raise ValueError(f"grid must be a non-empty 2-D array, got shape {g.shape}")
    finite = np.isfinite(g)
    if not finite.any():
        raise ValueError("grid has no finite cell")
    filled = np.where(finite, g, -np.inf if higher_is_better else np.inf)
    flat = int(np.argmax(filled) if higher_is_better else np.argmin(filled))
    a, b = np.unravel_index(flat, g.shape)
    return int(a), int(b), float(g[a, b])
