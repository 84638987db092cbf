"""Input checks shared by every metric; each message names the argument at fault."""

from __future__ import annotations

import numpy as np


def _float_dtype(arr: np.ndarray, dtype):
    """``dtype=None`` keeps float32/float64 as stored (no copy) and widens anything else to float64."""
    if dtype is not None:
        return np.dtype(dtype)
    return arr.dtype if arr.dtype in (np.float32, np.float64) else np.dtype(np.float64)


def as_matrix(X, name: str = "X", *, min_rows: int = 2, dtype=np.float64) -> np.ndarray:
    """Return ``X`` as a finite array of shape ``(N, d)`` or raise ``ValueError``.

    ``dtype``: float64 by default (metrics summing over N^2 entries lose digits in float32);
    ``None`` keeps float32 stacks float32 for metrics that choose their own precision (k-NN:
    float32 search with float64 answers; CKA casts each layer itself).
    """
    arr = np.asarray(X)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise ValueError(f"{name} must be a numeric array, got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(f"Expected {name} to be 2-D (N, d), got {arr.ndim}-D with shape {arr.shape}")
    if arr.shape[0] < min_rows:
        raise ValueError(f"{name} needs at least {min_rows} rows (items), got {arr.shape[0]}")
    if arr.shape[1] < 1:
        raise ValueError(f"{name} has no features (shape {arr.shape})")
    arr = arr.astype(_float_dtype(arr, dtype), copy=False)
    # one summing pass (no N x d boolean temporary); only a non-finite sum needs the full check
    if not np.isfinite(arr.sum()) and not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(
            f"{name} contains NaN or inf (first at row {bad[0]}, column {bad[1]}); "
            "clean the embeddings before computing metrics"
        )
    return arr


def as_stack(A, name: str = "A", *, min_rows: int = 2, dtype=np.float64) -> np.ndarray:
    """Return ``A`` as a finite array of shape ``(L, N, d)`` or raise ``ValueError``.

    ``dtype`` as in ``as_matrix``; ``None`` keeps a float32 stack float32 (no L x N x d copy).
    """
    arr = np.asarray(A)
    if arr.ndim != 3:
        raise ValueError(f"Expected {name} to be 3-D (layers, N, d), got {arr.ndim}-D with shape {arr.shape}")
    if arr.shape[0] < 1:
        raise ValueError(f"{name} has no layers")
    for layer in range(arr.shape[0]):
        as_matrix(arr[layer], f"{name}[layer {layer}]", min_rows=min_rows, dtype=dtype)
    return arr.astype(_float_dtype(arr, dtype), copy=False)


def check_paired(X: np.ndarray, Y: np.ndarray, xname: str = "X", yname: str = "Y") -> None:
    """Rows of X and Y describe the same items, so their counts must agree."""
    if X.shape[0] != Y.shape[0]:
        raise ValueError(
            f"{xname} and {yname} must have the same number of rows (items): "
            f"got {X.shape[0]} and {Y.shape[0]}"
        )


def check_same_space(X: np.ndarray, Y: np.ndarray, xname: str = "X", yname: str = "Y") -> None:
    """Same-space metrics compare coordinates directly, so the dimensions must agree."""
    if X.shape[1] != Y.shape[1]:
        raise ValueError(
            f"{xname} and {yname} must live in one embedding space (same dimension): "
            f"got d={X.shape[1]} and d={Y.shape[1]}"
        )


def check_k(n: int, k: int, *, name: str = "k") -> int:
    """k neighbours need at least k+1 items (the item itself is excluded)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {k!r}")
    if k < 1:
        raise ValueError(f"{name} must be >= 1, got {k}")
    if n <= k:
        raise ValueError(
            f"N={n} items is too few for {name}={k}: neighbours exclude the item itself, "
            f"so N must be at least {k + 1}; lower {name} or add items"
        )
    return int(k)


def check_positive(value, name: str) -> float:
    if not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)
