"""Embedding maps (UMAP): the exact k-NN graph against an independent search, shapes, determinism,
planted structure kept, duplicates drawn together, and degenerate layers refused with a sentence."""

import base64
import io

import numpy as np
import pytest
from PIL import Image
from sklearn.neighbors import NearestNeighbors

from analysis.methods.embedding_map import (
    MIN_DISTINCT,
    MapUndefined,
    exact_knn,
    frame_data_uri,
    sample_items,
    two_sided_coords,
    umap_coords,
)


def _clusters(n_per=30, d=16, seed=0, offset=6.0):
    """Two Gaussian clusters far apart in direction (cosine geometry): labels 0 / 1."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(2, d))
    centres *= offset / np.linalg.norm(centres, axis=1, keepdims=True)
    X = np.vstack([c + rng.normal(size=(n_per, d)) for c in centres])
    return X, np.repeat([0, 1], n_per)


def _map_neighbour_purity(Y, labels, k=5):
    """Share of each point's k nearest points in the 2-D map that carry its label."""
    D = np.linalg.norm(Y[:, None] - Y[None], axis=-1)
    np.fill_diagonal(D, np.inf)
    nn = np.argsort(D, axis=1)[:, :k]
    return float((labels[nn] == labels[:, None]).mean())


def test_exact_knn_matches_sklearn_brute_force(rng):
    X = rng.normal(size=(50, 7))
    idx, dist = exact_knn(X, 6, chunk=16)  # several row chunks, the last one short
    ref_d, ref_i = NearestNeighbors(n_neighbors=6, algorithm="brute").fit(X).kneighbors(X)
    assert (idx[:, 0] == np.arange(50)).all() and np.allclose(dist[:, 0], 0)
    np.testing.assert_array_equal(idx, ref_i)
    np.testing.assert_allclose(dist, ref_d, atol=1e-6)  # both use the Gram expansion: rounding ~1e-8


def test_exact_knn_breaks_distance_ties_by_index_and_takes_k_equal_to_n():
    X = np.array([[0.0, 0.0], [1, 0], [-1, 0], [0, 1], [0, -1]])
    idx, dist = exact_knn(X, 5)
    assert idx[0].tolist() == [0, 1, 2, 3, 4] and dist[0].tolist() == [0, 1, 1, 1, 1]
    assert idx[1].tolist()[:2] == [1, 0] and sorted(idx[1].tolist()) == [0, 1, 2, 3, 4]


def test_a_map_has_one_point_per_row_and_is_deterministic_for_a_seed():
    X, _ = _clusters()
    a = umap_coords(X, seed=3)
    b = umap_coords(X, seed=3)
    c = umap_coords(X, seed=4)
    assert a.coords.shape == (60, 2) and np.isfinite(a.coords).all()
    np.testing.assert_array_equal(a.coords, b.coords)
    assert not np.array_equal(a.coords, c.coords)
    assert a.n_neighbors == 15 and a.n_distinct == 60 and a.n_duplicates == 0 and a.side is None


def test_planted_clusters_stay_apart_on_the_map():
    X, labels = _clusters(seed=1)
    m = umap_coords(X, seed=0)
    assert _map_neighbour_purity(m.coords, labels) == 1.0


def test_the_map_uses_cosine_geometry_so_scaling_rows_changes_nothing(rng):
    X, _ = _clusters(seed=2)
    scaled = X * rng.uniform(0.1, 10, size=(len(X), 1))
    np.testing.assert_allclose(umap_coords(X, seed=0).coords, umap_coords(scaled, seed=0).coords, atol=1e-4)


def test_two_sides_with_a_gap_form_two_clouds_and_pairs_are_labelled_by_side():
    rng = np.random.default_rng(5)
    Z = rng.normal(size=(40, 12))
    gap = np.zeros(12)
    gap[0] = 8.0  # every text vector shifted one way: a modality gap
    m = two_sided_coords(Z + gap, Z - gap + 0.1 * rng.normal(size=Z.shape), seed=0, names=("video", "text"))
    assert m.coords.shape == (80, 2)
    np.testing.assert_array_equal(m.side, np.repeat([0, 1], 40))
    assert _map_neighbour_purity(m.coords, m.side) == 1.0


def test_two_sides_must_be_paired_and_share_a_width(rng):
    with pytest.raises(ValueError, match="video and text must have the same number of rows"):
        two_sided_coords(rng.normal(size=(10, 4)), rng.normal(size=(9, 4)), names=("video", "text"))
    with pytest.raises(ValueError, match="video and text must live in one embedding space"):
        two_sided_coords(rng.normal(size=(10, 4)), rng.normal(size=(10, 5)), names=("video", "text"))


def test_duplicated_items_are_mapped_once_and_drawn_on_one_point(rng):
    X, _ = _clusters(n_per=15, seed=3)
    dup = np.vstack([X, X[:7], 2.5 * X[3:5]])  # 2.5 x: the same direction, the same cosine point
    m = umap_coords(dup, seed=0)
    assert m.n_distinct == len(X) and m.n_duplicates == 9
    np.testing.assert_array_equal(m.coords[30:37], m.coords[:7])
    np.testing.assert_array_equal(m.coords[37:], m.coords[3:5])


def test_n_neighbors_shrinks_below_the_number_of_distinct_points(rng):
    m = umap_coords(rng.normal(size=(MIN_DISTINCT, 5)), seed=0)
    assert m.n_neighbors == MIN_DISTINCT - 1 and m.coords.shape == (MIN_DISTINCT, 2)


@pytest.mark.parametrize("case, message", [
    ("collapsed", "collapsed: all 20 rows are one point"),
    ("rank1", "rank 1"),
    ("tiny", f"has 5 distinct point\\(s\\) of 5; a map needs at least {MIN_DISTINCT}"),
    ("duplicates", f"has 3 distinct point\\(s\\) of 30; a map needs at least {MIN_DISTINCT}"),
])
def test_degenerate_layers_say_why_there_is_no_map(case, message):
    rng = np.random.default_rng(0)
    X = {"collapsed": np.tile(rng.normal(size=8), (20, 1)),
         "rank1": np.outer(rng.uniform(1, 2, size=20), rng.normal(size=8)),
         "tiny": rng.normal(size=(5, 8)),
         "duplicates": np.repeat(rng.normal(size=(3, 8)), 10, axis=0)}[case]
    with pytest.raises(MapUndefined, match=message):
        umap_coords(X, name="vit layer 3")


def test_a_degenerate_side_of_a_pair_is_named(rng):
    with pytest.raises(MapUndefined, match="^text is degenerate: collapsed"):
        two_sided_coords(rng.normal(size=(20, 6)), np.ones((20, 6)), names=("video", "text"))


def test_bad_input_is_a_clear_error(rng):
    X = rng.normal(size=(20, 4))
    X[3, 1] = np.nan
    with pytest.raises(ValueError, match="contains NaN or inf"):
        umap_coords(X)
    with pytest.raises(ValueError, match="n_neighbors must be at least 2"):
        umap_coords(rng.normal(size=(20, 4)), n_neighbors=1)


def test_sample_items_keeps_all_below_the_cap_and_draws_a_fixed_sample_above():
    np.testing.assert_array_equal(sample_items(5, 10), np.arange(5))
    s = sample_items(100, 10, seed=1)
    assert len(s) == len(set(s.tolist())) == 10 and (np.diff(s) > 0).all() and s.max() < 100
    np.testing.assert_array_equal(s, sample_items(100, 10, seed=1))


def test_a_frame_becomes_a_small_jpeg_data_uri():
    frame = np.zeros((120, 200, 3), dtype=np.uint8)
    frame[:, 100:] = (255, 0, 0)
    uri = frame_data_uri(frame, size=72)
    assert uri.startswith("data:image/jpeg;base64,")
    im = Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1])))
    assert im.format == "JPEG" and im.size == (72, 43)  # the aspect ratio kept, longer side 72
    right = np.asarray(im.convert("RGB"))[:, -5:].mean(axis=(0, 1))
    assert right[0] > 200 and right[1] < 60  # still red on the right


def test_umap_compiled_functions_cache_on_disk_so_a_process_does_not_recompile_them():
    from numba.core.caching import NullCache

    from analysis.methods.embedding_map import _umap

    umap = _umap()
    compiled = [fn for fn in (umap.umap_.smooth_knn_dist, umap.umap_.compute_membership_strengths)]
    assert all(not isinstance(fn._cache, NullCache) for fn in compiled)
    assert _umap() is umap  # set up once per process
