"""Model×model similarity: hierarchical clustering, leaf order, and a 2-D map."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.cluster.hierarchy import leaves_list, linkage
from scipy.spatial.distance import squareform


@dataclass
class ModelMap:
    names: list[str]
    similarity: np.ndarray  # (M, M), symmetric, 1 on the diagonal
    order: list[int]  # leaf order of the dendrogram
    linkage: np.ndarray  # scipy linkage matrix (M-1, 4)
    coords: np.ndarray  # (M, 2) classical-MDS coordinates of the distances 1 - similarity
    clusters: list[int]  # flat cluster label per model (cut where the merge distance jumps most)


def classical_mds(D: np.ndarray, dims: int = 2) -> np.ndarray:
    """Torgerson MDS: coordinates whose Euclidean distances best match ``D`` ``(M, M)``.

    Chosen over UMAP for a model map: a handful of points, and distances should mean something.
    """
    M = len(D)
    J = np.eye(M) - 1.0 / M
    B = -0.5 * J @ (D**2) @ J
    w, V = np.linalg.eigh(B)
    idx = np.argsort(w)[::-1][:dims]
    w = np.clip(w[idx], 0, None)
    out = V[:, idx] * np.sqrt(w)
    if out.shape[1] < dims:
        out = np.hstack([out, np.zeros((M, dims - out.shape[1]))])
    # fix the sign of each axis so the map does not flip between runs
    signs = np.sign(out[np.argmax(np.abs(out), axis=0), range(dims)])
    return out * np.where(signs == 0, 1, signs)


def model_map(similarity, names, *, method: str = "average") -> ModelMap:
    """Cluster models by a similarity matrix (e.g. best-layer mutual k-NN between every two models).

    Args:
        similarity: ``(M, M)``, values in ``[0, 1]``; symmetrised as ``(S + S') / 2``, diagonal set to 1.
        names: M model names.
        method: scipy linkage method on distances ``1 - S``.
    """
    S = np.asarray(similarity, dtype=float)
    if S.ndim != 2 or S.shape[0] != S.shape[1]:
        raise ValueError(f"similarity must be square, got shape {S.shape}")
    if len(names) != len(S):
        raise ValueError(f"{len(names)} names for a {len(S)}x{len(S)} matrix")
    if len(S) < 2:
        raise ValueError("a model map needs at least 2 models")
    if not np.all(np.isfinite(S)):
        raise ValueError("similarity contains NaN or inf")
    S = (S + S.T) / 2
    np.fill_diagonal(S, 1.0)
    D = np.clip(1.0 - S, 0.0, None)
    np.fill_diagonal(D, 0.0)
    Z = linkage(squareform(D, checks=False), method=method)
    order = [int(i) for i in leaves_list(Z)]
    # flat clusters: cut at the largest gap between successive merge heights
    heights = Z[:, 2]
    if len(heights) > 1:
        gaps = np.diff(heights)
        cut = heights[int(np.argmax(gaps))] + gaps.max() / 2
    else:
        cut = heights[0] + 1
    from scipy.cluster.hierarchy import fcluster

    labels = fcluster(Z, t=cut, criterion="distance")
    return ModelMap(list(names), S, order, Z, classical_mds(D), [int(x) for x in labels])
