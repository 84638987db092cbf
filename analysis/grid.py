"""Layer×layer grids of pairwise metrics and per-layer profiles of single-space metrics.

Per-layer work (normalising, neighbour lists, Gram blocks) happens once per layer, never per
pair; pair scoring then runs from the prepared states. Cells equal the one-pair functions exactly
because the one-pair functions run the same two stages.
"""

from __future__ import annotations

import numpy as np

from analysis.metrics.base import prepare_on_threads
from analysis.metrics.preprocess import clamp_outliers
from analysis.registry import get_metric
from analysis.metrics.validation import as_stack, check_k


def prepare_layers(spec, stack, params, clamp_quantile=None) -> list:
    """One prepared state per layer of ``stack`` ``(L, N, d)`` (the per-layer half of every grid),
    several layers at once where the kernel allows it (:func:`analysis.metrics.base.prepare_on_threads`)."""
    before = None if clamp_quantile is None else (lambda layer: clamp_outliers(layer, quantile=clamp_quantile))
    return prepare_on_threads(spec.kernel, stack, params, before)


def layer_grid(A, B=None, *, metric: str = "mutual_knn", k: int = 10, clamp_quantile: float | None = None,
               info: dict | None = None, **params) -> np.ndarray:
    """Score every layer of ``A`` against every layer of ``B``.

    Args:
        A: ``(La, N, p)`` stack of per-layer embeddings; B: ``(Lb, N, q)`` for the same N items
            (``None`` compares A with itself, preparing each layer once).
        metric: a registry name of kind pairwise, same_space or unpaired.
        k: neighbours for metrics that take ``k`` (ignored by the others).
        clamp_quantile: clamp each feature at this quantile of |x| before scoring (off by default).
        info: optional dict, filled with what the result should carry about how it was computed:
            for k-NN metrics ``analysis.metrics.knn.knn_summary`` of both sides (``knn``, and with
            ``knn="ann"`` the measured neighbour recall per layer of A then B, and its minimum).
        **params: further metric parameters (see ``layerscope metrics``), e.g. ``knn="ann"`` for
            approximate neighbours (faiss) on the k-NN metrics.
    Returns:
        ``(La, Lb)`` float64 array; ``out[a, b] = metric(A[a], B[b])``. k-NN cells are NaN when
        either layer is collapsed (every row the same point: neighbours undefined).
    Memory: float32 stacks are not copied; k-NN metrics hold per layer an ``(N, k)`` list and a
    float32 unit-row copy while it is searched; CKA holds per layer half its N x N kernel for
    N <= 1024, a float64 copy of the layer up to N = 8192 and nothing but column means above (see
    ``analysis.metrics.kernel``).
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
    states_a = prepare_layers(spec, A, params, clamp_quantile)
    states_b = states_a if self_grid else prepare_layers(spec, B, params, clamp_quantile)
    if info is not None and "knn" in params:
        from analysis.metrics.knn import knn_summary

        info.update(knn_summary(states_a if self_grid else list(states_a) + list(states_b)))
    return spec.kernel.score_block(states_a, states_b, **params)


def layer_profile(A, *, metric: str = "rankme", **params) -> np.ndarray:
    """``(L,)`` values of a single-space metric for each layer of ``A`` ``(L, N, d)``."""
    spec = get_metric(metric)
    if spec.kind != "single":
        raise ValueError(f"metric {metric!r} compares two spaces; use layer_grid for it")
    A = as_stack(A, "A", dtype=None)  # each metric call widens its one layer as it needs
    params = spec.resolve(**params)
    return np.array([spec.fn(layer, **params) for layer in A], dtype=np.float64)


class NoBestCell(ValueError):
    """A grid has no cell that can be called best (all invalid, non-finite, or all equal)."""


def best_cell(grid: np.ndarray, *, higher_is_better: bool = True, invalid=None,
              atol: float = 1e-12) -> tuple[int, int, float]:
    """``(layer_a, layer_b, value)`` of the best valid finite cell of a grid.

    Args:
        grid: ``(La, Lb)`` scores.
        higher_is_better: direction of the metric.
        invalid: optional boolean mask broadcastable to ``grid.shape``; True marks a cell to
            ignore (e.g. ``bad_a[:, None] | bad_b[None, :]`` from
            :func:`analysis.metrics.degenerate.stack_status` of each side).
        atol: cells within ``atol`` (plus float32 rounding, see :func:`analysis.metrics.degenerate.flat_grid`)
            of each other count as equal.
    Cells of exactly equal value go to the deepest layer of A, then of B (the verdicts' rule).
    Raises:
        NoBestCell (a ``ValueError``) with the reason when no cell is valid and finite, or when
        every remaining cell has the same value (a flat grid: every layer pair ties, so naming one
        would be arbitrary). "No best" is always this exception, never a placeholder cell.
    """
    from analysis.metrics.degenerate import flat_grid

    g = np.asarray(grid, dtype=np.float64)
    if g.ndim != 2 or g.size == 0:
        raise ValueError(f"grid must be a non-empty 2-D array, got shape {g.shape}")
    valid = np.isfinite(g)
    if invalid is not None:
        valid &= ~np.broadcast_to(np.asarray(invalid, dtype=bool), g.shape)
    if not valid.any():
        raise NoBestCell("no best cell: the grid has no finite cell on valid (non-degenerate) layers")
    if valid.sum() > 1 and flat_grid(np.where(valid, g, np.nan), atol=atol):
        raise NoBestCell(f"no best cell: all {int(valid.sum())} valid cells have the same value "
                         f"{float(g[valid][0]):.6g} (flat grid)")
    filled = np.where(valid, g, -np.inf if higher_is_better else np.inf)
    # one tie rule everywhere (the verdict's): equal cells go to the deepest layer of A, then of B,
    # i.e. the last occurrence in row-major order
    back = filled.ravel()[::-1]
    flat = g.size - 1 - int(np.argmax(back) if higher_is_better else np.argmin(back))
    a, b = np.unravel_index(flat, g.shape)
    return int(a), int(b), float(g[a, b])
