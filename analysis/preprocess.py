"""Optional clean-up applied before pairwise metrics."""

from __future__ import annotations

import numpy as np


def clamp_outliers(X: np.ndarray, *, quantile: float = 0.95) -> np.ndarray:
    """Clamp each feature (column) of ``X`` ``(N, d)`` to ``±q`` where q is that feature's
    ``quantile`` of absolute values. Research code (platonic-rep) clamps at the 0.95 quantile so a
    few massive activations do not dominate kernels and neighbour lists. Returns a new array.
    """
    if not 0 < quantile <= 1:
        raise ValueError(f"clamp quantile must be in (0, 1], got {quantile!r}")
    X = np.asarray(X, dtype=np.float64)
    q = np.quantile(np.abs(X), quantile, axis=-2, keepdims=True)
    return np.clip(X, -q, q)
