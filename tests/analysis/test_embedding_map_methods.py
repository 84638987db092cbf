"""PCA and t-SNE embedding maps beside UMAP (issue #31, TARA's pictures of the modality gap): PCA
against sklearn's PCA of the unit rows (up to each axis's sign), t-SNE seeded and shaped, the
planted gap visible along PCA's first axis, duplicates and degenerate layers as for UMAP."""

import numpy as np
import pytest
from sklearn.decomposition import PCA
from sklearn.manifold import TSNE

from analysis.methods.embedding_map import (
    MIN_DISTINCT,
    MapUndefined,
    map_coords,
    pca_coords,
    tsne_coords,
    two_sided_coords,
)


def _unit(X):
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def test_pca_is_sklearns_pca_of_the_unit_rows_up_to_sign(rng):
    X = rng.normal(size=(40, 9)) * np.linspace(3, 0.5, 9)  # distinct variances: a well-defined pair of axes
    got = pca_coords(X).coords
    want = PCA(n_components=2, svd_solver="full").fit_transform(_unit(X))
    for j in range(2):
        sign = np.sign(got[:, j] @ want[:, j])
        np.testing.assert_allclose(got[:, j], sign * want[:, j], atol=1e-10)
    # variance along the first axis is the largest eigenvalue of the unit rows' covariance
    lam = np.linalg.eigvalsh(np.cov(_unit(X).T, bias=True))[::-1]
    np.testing.assert_allclose(got.var(axis=0), lam[:2], rtol=1e-10)


def test_pca_shows_a_planted_gap_as_the_distance_between_the_sides_centroids(rng):
    # two sides of one space, each a cloud around its own direction: the gap is ||mean(a) - mean(b)||
    d, n = 12, 30
    shift = np.zeros(d)
    shift[0] = 4.0
    A = rng.normal(size=(n, d)) * 0.2 + shift
    B = rng.normal(size=(n, d)) * 0.2 - shift
    m = two_sided_coords(A, B, method="pca")
    assert m.coords.shape == (2 * n, 2) and list(m.side) == [0] * n + [1] * n
    gap = np.linalg.norm(_unit(A).mean(0) - _unit(B).mean(0))
    # the first component is the between-sides direction: the centroids' distance along it is the gap
    ca, cb = m.coords[:n].mean(0), m.coords[n:].mean(0)
    assert abs(ca[0] - cb[0]) == pytest.approx(gap, rel=0.02)


@pytest.mark.slow  # three t-SNE runs (~2 s of CPU)
def test_tsne_is_seeded_and_shaped(rng):
    X = rng.normal(size=(30, 8))
    a, b = tsne_coords(X, seed=3), tsne_coords(X, seed=3)
    assert a.coords.shape == (30, 2) and np.isfinite(a.coords).all()
    np.testing.assert_array_equal(a.coords, b.coords)
    # what sklearn gives for the unit rows with the same settings (perplexity shrunk to (n - 1) / 3)
    want = TSNE(n_components=2, perplexity=29 / 3, init="pca", random_state=3, method="barnes_hut",
                n_jobs=1).fit_transform(_unit(X))
    np.testing.assert_allclose(a.coords, want, atol=1e-8)


def test_duplicates_share_one_point_and_are_fitted_once(rng):
    X = rng.normal(size=(20, 6))
    Xd = np.vstack([X, X[:5] * 3.0])  # a positive multiple is the same direction: a duplicate
    for method in ("pca", "tsne"):
        m = map_coords(Xd, method=method, seed=0)
        assert m.n_distinct == 20 and m.n_duplicates == 5
        np.testing.assert_allclose(m.coords[20:], m.coords[:5])
    np.testing.assert_allclose(pca_coords(Xd).coords[:20], pca_coords(X).coords)


@pytest.mark.parametrize("method", ["pca", "tsne"])
def test_degenerate_layers_give_a_sentence(method, rng):
    with pytest.raises(MapUndefined, match="collapsed"):
        map_coords(np.ones((10, 4)), method=method)
    with pytest.raises(MapUndefined, match="distinct point"):
        map_coords(rng.normal(size=(MIN_DISTINCT - 1, 4)), method=method)


def test_an_unknown_method_is_named():
    with pytest.raises(ValueError, match="map method must be one of umap, pca, tsne, got 'mds'"):
        map_coords(np.eye(8), method="mds")
