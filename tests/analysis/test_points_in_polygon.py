"""The lasso's point-in-polygon (analysis.methods.polygon): even-odd inside tests against matplotlib's
Path.contains_points on seeded points (convex, concave, self-intersecting), the boundary rule on
hand-checked points, and the polygon thinning the URL needs."""

import numpy as np
import pytest

from analysis.methods.polygon import points_in_polygon, simplify_polygon
from tests.reference import ref_points_in_polygon

#: a "C" shape: its notch (x in 1..3, y in 1..2) is outside although it lies within the hull
CONCAVE = [[0, 0], [3, 0], [3, 1], [1, 1], [1, 2], [3, 2], [3, 3], [0, 3]]
_a = np.pi / 2 + np.arange(5) * 4 * np.pi / 5
#: a pentagram drawn in one stroke: its centre pentagon is enclosed twice, so even-odd leaves it out
PENTAGRAM = np.c_[np.cos(_a), np.sin(_a)]
#: a bow tie (the stroke crosses itself once): both lobes inside, one crossing point between them
BOWTIE = [[0, 0], [2, 2], [2, 0], [0, 2]]
SQUARE = [[0, 0], [1, 0], [1, 1], [0, 1]]


def seeded_points(polygon, n=4000, seed=0):
    """Uniform points over the polygon's bounding box and a margin around it."""
    poly = np.asarray(polygon, float)
    lo, hi = poly.min(0) - 0.5, poly.max(0) + 0.5
    return np.random.default_rng(seed).uniform(lo, hi, size=(n, 2))


@pytest.mark.parametrize("name,polygon", [("square", SQUARE), ("concave", CONCAVE), ("pentagram", PENTAGRAM),
                                          ("bowtie", BOWTIE), ("triangle", [[0, 0], [5, 1], [2, 4]])])
def test_inside_agrees_with_matplotlib_on_seeded_points(name, polygon):
    pts = seeded_points(polygon)
    got = points_in_polygon(pts, polygon)
    want = ref_points_in_polygon(pts, polygon)
    assert got.dtype == bool and got.shape == (len(pts),)
    assert 0 < want.sum() < len(pts)  # the case tests both answers
    np.testing.assert_array_equal(got, want)


def test_a_concave_polygons_notch_is_outside_and_its_arms_inside():
    got = points_in_polygon([[2, 1.5], [0.5, 1.5], [2, 0.5], [2, 2.5], [3.5, 1.5]], CONCAVE)
    assert list(got) == [False, True, True, True, False]


def test_a_self_intersecting_polygon_follows_the_even_odd_rule():
    # the pentagram's centre is enclosed twice (outside), a tip once (inside)
    assert list(points_in_polygon([[0, 0], [0, 0.7]], PENTAGRAM)) == [False, True]
    # the bow tie's lobes are each enclosed once; outside above and below the crossing
    assert list(points_in_polygon([[0.3, 1], [1.7, 1], [1, 0.3], [1, 1.7]], BOWTIE)) == [True, True, False, False]


def test_a_rectangles_left_and_bottom_edges_are_in_its_right_and_top_edges_out():
    edges = [[0, 0.5], [0.5, 0], [1, 0.5], [0.5, 1], [0, 0], [1, 1]]
    assert list(points_in_polygon(edges, SQUARE)) == [True, True, False, False, True, False]


def test_two_polygons_sharing_an_edge_count_each_point_on_it_once():
    left, right = [[0, 0], [1, 0.3], [1.2, 1], [0, 1]], [[1, 0.3], [3, 0], [3, 1], [1.2, 1]]
    t = np.linspace(0.05, 0.95, 19)
    shared = np.c_[1 + 0.2 * t, 0.3 + 0.7 * t]  # points on the common edge (1, 0.3)-(1.2, 1)
    counts = points_in_polygon(shared, left).astype(int) + points_in_polygon(shared, right).astype(int)
    assert list(counts) == [1] * len(t)


def test_fewer_than_three_vertices_enclose_nothing_and_bad_shapes_say_what_arrived():
    assert not points_in_polygon([[0, 0]], [[-1, -1], [1, 1]]).any()
    with pytest.raises(ValueError, match=r"shape \(n, 2\), got shape \(3,\)"):
        points_in_polygon([0, 1, 2], SQUARE)
    with pytest.raises(ValueError, match="finite polygon"):
        points_in_polygon([[0, 0]], [[0, 0], [1, np.nan], [1, 1]])


def test_a_long_polygon_is_thinned_to_evenly_spaced_vertices_the_first_kept():
    theta = np.linspace(0, 2 * np.pi, 500, endpoint=False)
    circle = np.c_[np.cos(theta), np.sin(theta)]
    thin = simplify_polygon(np.vstack([circle, circle[:1]]), 64)  # a repeated closing vertex is dropped too
    assert thin.shape == (64, 2)
    np.testing.assert_array_equal(thin[0], circle[0])
    steps = np.diff(np.unwrap(np.arctan2(thin[:, 1], thin[:, 0])))
    assert steps.min() > 0 and steps.max() / steps.min() < 1.2  # evenly spaced round the circle
    assert simplify_polygon(SQUARE, 64).shape == (4, 2)
