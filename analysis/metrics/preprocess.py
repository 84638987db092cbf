"""Optional clean-up applied before pairwise metrics: clamping outlier activations."""

from __future__ import annotations

import numpy as np

CLAMP_MODES = ("platonic", "feature", "off")


def _check_quantile(q):
    if not 0 < q <= 1:
        raise ValueError(f"clamp quantile must be in (0, 1], got {q!r}")


def clamp_outliers(X: np.ndarray, *, quantile: float = 0.95) -> np.ndarray:
    """Clamp each feature (column) of ``X`` ``(N, d)`` to ``±q`` where q is that feature's
    ``quantile`` of absolute values over the items. Returns a new array. This is the "feature"
    rule of :func:`clamp`; it is *not* what platonic-rep does (see ``mode="platonic"``).
    """
    _check_quantile(quantile)
    X = np.asarray(X, dtype=np.float64)
    q = np.quantile(np.abs(X), quantile, axis=-2, keepdims=True)
    return np.clip(X, -q, q)


def platonic_threshold(stack, *, q: float = 0.95, exact: bool = False) -> float:
    """The one scalar threshold platonic-rep's ``remove_outliers`` clamps a model's features at.

    platonic-rep (Huh et al. 2024, ``metrics.remove_outliers`` called by
    ``measure_alignment.prepare_features`` on the whole ``(N, L, D)`` feature tensor of a model, all
    layers at once, always on with ``q=0.95``):

    - ``exact=False`` (its default, used unless ``--precise``): for each item, the ``q`` quantile
      (linear interpolation) of ``|x|`` over all its layers and dimensions; the threshold is the
      mean of these per-item quantiles.
    - ``exact=True``: sort ``|x|`` over the whole tensor and take the element at index
      ``int(q * numel)`` (no interpolation).

    Args:
        stack: ``(L, N, d)`` (our layout; items on axis 1) or one layer ``(N, d)``.
    """
    _check_quantile(q)
    A = np.abs(np.asarray(stack, dtype=np.float64))
    if A.ndim == 2:
        A = A[None]
    if A.ndim != 3:
        raise ValueError(f"Expected a stack (L, N, d) or a layer (N, d), got shape {np.shape(stack)}")
    if exact:
        flat = np.sort(A, axis=None)
        return float(flat[min(int(q * flat.size), flat.size - 1)])
    per_item = A.transpose(1, 0, 2).reshape(A.shape[1], -1)  # (N, L*d)
    return float(np.mean(np.quantile(per_item, q, axis=1)))


def clamp(stack, *, mode: str = "platonic", q: float = 0.95, exact: bool = False) -> np.ndarray:
    """Clamp outlier activations of a model's features before scoring.

    Args:
        stack: ``(L, N, d)`` all layers of one model (or one layer ``(N, d)``).
        mode: ``"platonic"``: one scalar threshold for the whole tensor, all layers together, as
            platonic-rep does (see :func:`platonic_threshold`; ``exact`` picks its variant);
            values are clipped to ``[-t, t]``. ``"feature"``: per layer and per feature, clip to
            ``±`` the ``q`` quantile of that feature's ``|x|`` over the items
            (:func:`clamp_outliers`). ``"off"``: a float64 copy, unchanged.
        q: quantile in ``(0, 1]``; ``q = 1`` leaves the data unchanged in every mode.
    Returns:
        a new float64 array of the input's shape.
    """
    if mode not in CLAMP_MODES:
        raise ValueError(f"clamp mode must be one of {CLAMP_MODES}, got {mode!r}")
    _check_quantile(q)
    A = np.array(stack, dtype=np.float64)
    if A.ndim not in (2, 3):
        raise ValueError(f"Expected a stack (L, N, d) or a layer (N, d), got shape {A.shape}")
    if mode == "off" or q == 1:
        return A
    if mode == "feature":
        return clamp_outliers(A, quantile=q)  # quantile over axis -2 (items), per layer and feature
    t = platonic_threshold(A, q=q, exact=exact)
    return np.clip(A, -t, t)
