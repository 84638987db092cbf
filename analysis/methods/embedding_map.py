"""Embedding maps: one layer ``(N, d)``, or two sides sharing a space ``(N, d)`` + ``(N, d)``, as 2-D
points by UMAP (McInnes, Healy & Melville 2018, arXiv:1802.03426; the ``umap-learn`` package), PCA
(numpy SVD of the centred unit rows) or t-SNE (van der Maaten & Hinton 2008; ``sklearn.manifold.TSNE``,
seeded), :data:`METHODS`. TARA pictures the modality gap by PCA and t-SNE; UMAP is the default.

Geometry. Rows are L2-normalised first, so the map shows the cosine geometry every metric here
uses (Euclidean distance between unit vectors is ``sqrt(2 - 2 cos)``, a monotone function of the
cosine). The k-NN graph UMAP starts from is computed exactly here, in numpy (``O(N^2)`` distances,
fine for the few thousand points a map shows), and handed to UMAP as ``precomputed_knn``: the
numbers are the exact neighbours, and umap-learn's nearest-neighbour code is never compiled.

Cost. ``import umap`` takes a few seconds. umap-learn's graph and layout code is numba-compiled
on first use and umap-learn asks numba to cache little of it on disk, so every process paid 10-25 s
of JIT before its first map. :func:`_umap` turns numba's on-disk cache on for umap-learn's compiled
functions (``Dispatcher.enable_caching``, what ``cache=True`` does; the same machine code, kept
beside the package or in numba's user cache dir): only the first process on a machine compiles,
later ones load it (a first map then takes ~0.3 s instead of ~10 s for 200 points). Where no cache
location is writable, compilation happens as before. ``layerscope analyze`` imports umap only when a
map must be (re)computed.

Determinism. With ``seed`` set, umap-learn runs single-threaded and the layout is a function of the
input and the seed (same machine, same library versions): the same call gives the same points.

Degenerate input gives :class:`MapUndefined` with a sentence, never a meaningless picture:
a collapsed or rank-1 layer (:mod:`analysis.metrics.degenerate`), or fewer than :data:`MIN_DISTINCT`
distinct points (UMAP needs ``n_neighbors < N``). Duplicated items are mapped once and drawn on
one point (their count is returned).
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass

import numpy as np

from analysis.metrics.degenerate import duplicate_labels, layer_status
from analysis.metrics.neighbors import l2_normalize
from analysis.metrics.validation import as_matrix, check_paired, check_same_space

#: UMAP's defaults (umap-learn 0.5): neighbours of the fuzzy graph and the minimum spacing in the map
N_NEIGHBORS = 15
MIN_DIST = 0.1
#: fewer distinct points than this give no map: n_neighbors would drop below 5 and the layout is noise
MIN_DISTINCT = 6


#: the map methods, as stored in a map's payload and picked on the page
METHODS = ("umap", "pca", "tsne")
#: t-SNE's perplexity (sklearn's default); it must stay below the number of points, so it shrinks on small maps
PERPLEXITY = 30.0


class MapUndefined(ValueError):
    """No meaningful map of this input; the message says why (shown in place of the picture)."""


@dataclass(frozen=True)
class EmbeddingMap:
    """A 2-D map of ``N`` points.

    ``coords``: ``(N, 2)`` float; duplicated rows share their coordinates. ``n_distinct``: points
    after merging duplicates (what UMAP saw). ``n_neighbors``: the k of the graph actually used
    (``min(requested, n_distinct - 1)``). ``side``: ``(N,)`` 0/1 for a two-sided map (0 = first).
    """

    coords: np.ndarray
    n_distinct: int
    n_neighbors: int
    side: np.ndarray | None = None

    @property
    def n_duplicates(self) -> int:
        return int(len(self.coords) - self.n_distinct)


def exact_knn(X: np.ndarray, k: int, *, chunk: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest neighbours by Euclidean distance, each point first in its own list.

    Args:
        X: ``(N, d)`` float rows, pairwise distinct.
        k: list length including the point itself, ``2 <= k <= N``.
        chunk: rows scored at a time (memory ``chunk x N`` floats, never ``N x N``).

    Returns:
        ``(indices, distances)``, both ``(N, k)``; row ``i`` starts with ``i`` at distance 0, then
        neighbours by increasing distance (equal distances by index).
    """
    X = np.asarray(X, dtype=np.float64)
    n = len(X)
    sq = np.sum(X * X, axis=1)
    idx = np.empty((n, k), dtype=np.int64)
    dist = np.empty((n, k))
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        D2 = np.maximum(sq[a:b, None] + sq[None, :] - 2.0 * (X[a:b] @ X.T), 0.0)
        D2[np.arange(b - a), np.arange(a, b)] = -1.0  # the point itself first whatever the rounding
        part = np.argpartition(D2, k - 1, axis=1)[:, :k] if k < n else np.tile(np.arange(n), (b - a, 1))
        d2 = np.take_along_axis(D2, part, axis=1)
        order = np.lexsort((part, d2), axis=1)  # by distance, then by index
        idx[a:b] = np.take_along_axis(part, order, axis=1)
        dist[a:b] = np.sqrt(np.maximum(np.take_along_axis(d2, order, axis=1), 0.0))
    return idx, dist


def _check_layer(X: np.ndarray, what: str) -> None:
    st = layer_status(X)
    if st.collapsed or st.rank1:
        raise MapUndefined(f"{what} is degenerate: {st.reason}; a map would show one point or one line")


_UMAP = None


def _umap():
    """``umap`` imported once, with numba's on-disk cache enabled for its compiled functions (see
    the module docstring); a function whose cache cannot be set up keeps compiling in memory."""
    global _UMAP
    if _UMAP is None:
        import umap
        import umap.layouts
        import umap.spectral
        import umap.umap_
        import umap.utils

        try:
            from numba.core.caching import NullCache
            from numba.core.dispatcher import Dispatcher
        except ImportError:  # another numba layout: compile per process, as before
            _UMAP = umap
            return umap
        for mod in (umap.umap_, umap.layouts, umap.utils, umap.spectral):
            for fn in vars(mod).values():
                if isinstance(fn, Dispatcher) and isinstance(getattr(fn, "_cache", None), NullCache):
                    try:
                        fn.enable_caching()
                    except Exception:  # no writable cache location: compile per process, as before
                        pass
        _UMAP = umap
    return _UMAP


def umap_coords(X, *, n_neighbors: int = N_NEIGHBORS, min_dist: float = MIN_DIST, seed: int = 0,
                name: str = "X") -> EmbeddingMap:
    """UMAP of the rows of ``X`` ``(N, d)`` in cosine geometry, deterministic for a given ``seed``.

    Duplicates (rows within :data:`analysis.metrics.degenerate.REL_TOL` of each other after normalising)
    are mapped once; ``n_neighbors`` shrinks to ``n_distinct - 1`` when the data are smaller.

    Raises:
        MapUndefined: the layer is collapsed or rank 1, or has fewer than :data:`MIN_DISTINCT`
            distinct rows.
        ValueError: ``X`` is not a finite 2-D array.
    """
    X = as_matrix(X, name, min_rows=1)
    if n_neighbors < 2:
        raise ValueError(f"n_neighbors must be at least 2, got {n_neighbors}")
    # one representative row per duplicate group; every member is drawn at its position
    R, labels, n_distinct = _distinct_unit_rows(X, name, why=" (UMAP needs n_neighbors < N)")
    k = int(min(n_neighbors, n_distinct - 1))
    idx, dist = exact_knn(R, k)

    import warnings

    umap = _umap()  # lazy: a few seconds to import

    with warnings.catch_warnings():
        # "n_jobs overridden by random_state" and "knn_search_index is not an NNDescent object" are
        # the intended consequences of a seed and of the exact graph
        warnings.simplefilter("ignore", UserWarning)
        reducer = umap.UMAP(n_neighbors=k, min_dist=min_dist, n_components=2, metric="euclidean",
                            random_state=int(seed), precomputed_knn=(idx, dist, None), transform_mode="embedding")
        Y = reducer.fit_transform(R)
    return EmbeddingMap(coords=np.asarray(Y, dtype=np.float64)[labels], n_distinct=n_distinct, n_neighbors=k)


def _distinct_unit_rows(X, name: str, why: str = "") -> tuple[np.ndarray, np.ndarray, int]:
    """``(R, labels, n_distinct)``: the unit rows of ``X`` with duplicates merged (``R[labels]`` gives
    every row back), after the degenerate-layer and too-few-points checks every method shares
    (``why`` ends the too-few-points message: the method's own reason)."""
    X = as_matrix(X, name, min_rows=1)
    _check_layer(X, name)
    U = l2_normalize(X)
    labels = duplicate_labels(U)
    n_distinct = int(labels.max()) + 1
    if n_distinct < MIN_DISTINCT:
        raise MapUndefined(f"{name} has {n_distinct} distinct point(s) of {len(X)}; a map needs at least "
                           f"{MIN_DISTINCT}{why}")
    first = np.array([np.flatnonzero(labels == g)[0] for g in range(n_distinct)])
    return U[first], labels, n_distinct


def pca_coords(X, *, name: str = "X") -> EmbeddingMap:
    """The first two principal components of the unit rows of ``X`` ``(N, d)``.

    With ``U`` the L2-normalised distinct rows and ``C = U - mean(U)``, ``C = P S Q^T`` (thin SVD):
    coordinates ``C Q[:, :2]`` (= ``P[:, :2] S[:2]``), each axis's sign fixed so that its largest-|.|
    loading in ``Q`` is positive (the same convention as ``sklearn.decomposition.PCA``'s
    ``svd_flip(u_based_decision=False)``). Deterministic; a gap between two sides' clouds along the
    first axis is the modality gap as TARA draws it. Duplicates are merged before the fit (a repeated
    item would tilt the axes towards itself) and drawn on their point. ``n_neighbors`` is 0 (no graph).

    Raises:
        MapUndefined: the layer is collapsed or rank 1, or has fewer than :data:`MIN_DISTINCT` distinct rows.
    """
    R, labels, n_distinct = _distinct_unit_rows(X, name)
    C = R - R.mean(axis=0)
    _, S, Qt = np.linalg.svd(C, full_matrices=False)
    axes = Qt[:2]
    signs = np.sign(axes[np.arange(len(axes)), np.argmax(np.abs(axes), axis=1)])
    signs[signs == 0] = 1.0
    Y = C @ (axes * signs[:, None]).T
    return EmbeddingMap(coords=np.asarray(Y, dtype=np.float64)[labels], n_distinct=n_distinct, n_neighbors=0)


def tsne_coords(X, *, seed: int = 0, perplexity: float = PERPLEXITY, name: str = "X") -> EmbeddingMap:
    """t-SNE (``sklearn.manifold.TSNE``, Barnes-Hut, PCA initialisation, ``random_state=seed``) of the
    unit rows of ``X`` ``(N, d)`` with the Euclidean metric (a monotone function of the cosine on unit
    rows). ``perplexity`` shrinks to ``(n_distinct - 1) / 3`` on small maps (sklearn requires it below
    the number of points; ~3 perplexity neighbours per point). The same seed gives the same points
    (same machine and library versions). Distances between t-SNE clusters carry little meaning: read
    the gap's presence from it, its size from PCA or the ``modality_gap`` number.

    Raises:
        MapUndefined: as :func:`pca_coords`.
    """
    R, labels, n_distinct = _distinct_unit_rows(X, name)
    from sklearn.manifold import TSNE  # lazy: sklearn is imported only when a t-SNE map is computed

    perp = float(min(perplexity, max(1.0, (n_distinct - 1) / 3.0)))
    Y = TSNE(n_components=2, perplexity=perp, init="pca", random_state=int(seed), method="barnes_hut",
             n_jobs=1).fit_transform(R)
    return EmbeddingMap(coords=np.asarray(Y, dtype=np.float64)[labels], n_distinct=n_distinct, n_neighbors=0)


def map_coords(X, *, method: str = "umap", seed: int = 0, name: str = "X") -> EmbeddingMap:
    """The 2-D map of ``X`` by ``method`` (:data:`METHODS`): :func:`umap_coords`, :func:`pca_coords`
    or :func:`tsne_coords`. Raises ``ValueError`` naming an unknown method."""
    if method == "umap":
        return umap_coords(X, seed=seed, name=name)
    if method == "pca":
        return pca_coords(X, name=name)
    if method == "tsne":
        return tsne_coords(X, seed=seed, name=name)
    raise ValueError(f"map method must be one of {', '.join(METHODS)}, got {method!r}")


def two_sided_coords(A, B, *, n_neighbors: int = N_NEIGHBORS, min_dist: float = MIN_DIST, seed: int = 0,
                     names: tuple[str, str] = ("A", "B"), method: str = "umap") -> EmbeddingMap:
    """One map of two paired sides sharing a space (a video and a text run of one model; a dual
    encoder's ``joint`` layer on both towers): rows of ``A`` ``(N, d)`` then of ``B`` ``(N, d)``.

    ``coords`` is ``(2N, 2)`` (A's points first), ``side`` 0 for A and 1 for B. A gap between the
    two clouds is the modality gap (Liang et al. 2022, arXiv:2203.02053) made visible. ``method``:
    :data:`METHODS` (the one map is fitted on both sides together).

    Raises:
        MapUndefined: either side is collapsed or rank 1 (named), or too few distinct points.
        ValueError: the sides are not paired ``(N, d)`` arrays of one width.
    """
    A = as_matrix(A, names[0], min_rows=1)
    B = as_matrix(B, names[1], min_rows=1)
    check_paired(A, B, names[0], names[1])
    check_same_space(A, B, names[0], names[1])
    _check_layer(A, names[0])
    _check_layer(B, names[1])
    name = f"{names[0]} + {names[1]}"
    if method == "umap":
        m = umap_coords(np.vstack([A, B]), n_neighbors=n_neighbors, min_dist=min_dist, seed=seed, name=name)
    else:
        m = map_coords(np.vstack([A, B]), method=method, seed=seed, name=name)
    side = np.repeat(np.array([0, 1]), len(A))
    return EmbeddingMap(coords=m.coords, n_distinct=m.n_distinct, n_neighbors=m.n_neighbors, side=side)


def sample_items(n: int, cap: int, seed: int = 0) -> np.ndarray:
    """Sorted item positions to show: all ``n`` when ``n <= cap``, else ``cap`` drawn without
    replacement by ``seed`` (the same draw for every map of a dataset, so maps compare)."""
    if n <= cap:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=cap, replace=False))


def frame_data_uri(frame, *, size: int = 72, quality: int = 70) -> str:
    """A small JPEG of one ``(H, W, 3)`` uint8 frame as a ``data:image/jpeg;base64,...`` URI (the
    longer side ``size`` pixels, about 1-3 kB): what a Vega-Lite tooltip shows for an ``image``
    field, with no file server."""
    from PIL import Image

    im = Image.fromarray(np.asarray(frame, dtype=np.uint8)).convert("RGB")
    im.thumbnail((size, size))
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=quality)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
