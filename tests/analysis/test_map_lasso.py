"""The embedding map's lasso outside Streamlit (analysis.views.map_lasso): Plotly's lasso event to a
polygon, the polygon to URL text and back (rounded to the map's scale, never losing an item for
points off its edge), bad link text refused in one line, and the Plotly figure's points, colours,
hover text and rings."""

import numpy as np
import pandas as pd
import pytest

from analysis.views import map_lasso
from tests.reference import ref_points_in_polygon


def map_points(n=300, seed=1, span=12.0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"x": rng.uniform(-span / 2, span / 2, n), "y": rng.uniform(-span / 2, span / 2, n),
                         "idx": np.arange(n), "series": np.where(np.arange(n) % 3, "m · video L3", "m · text L3"),
                         "item_id": [f"clip{i:03d}" for i in range(n)],
                         "caption": [f"<b>caption {i}" for i in range(n)],
                         "side": "video"})


def test_a_plotly_lasso_event_gives_its_polygon_thinned_to_64_vertices():
    theta = np.linspace(0, 2 * np.pi, 300, endpoint=False)
    event = {"points": [], "point_indices": [], "box": [],
             "lasso": [{"xref": "x", "yref": "y", "x": list(3 * np.cos(theta)), "y": list(3 * np.sin(theta))}]}
    poly = map_lasso.lasso_from_selection(event)
    assert poly.shape == (64, 2)
    assert np.allclose(np.hypot(poly[:, 0], poly[:, 1]), 3)
    assert map_lasso.lasso_from_selection({"lasso": []}) is None
    assert map_lasso.lasso_from_selection({"lasso": [{"x": [0, 1], "y": [0, 1]}]}) is None  # a line, no area


def test_a_click_names_its_item_and_a_lasso_is_not_a_click():
    click = {"points": [{"curve_number": 1, "point_index": 4, "customdata": [17, "s", "clip17", "c"]}], "lasso": []}
    assert map_lasso.clicked_idx(click) == 17
    assert map_lasso.clicked_idx({**click, "lasso": [{"x": [0, 1, 1], "y": [0, 0, 1]}]}) is None
    assert map_lasso.clicked_idx({"points": []}) is None


def test_the_url_text_round_trip_selects_the_same_items_as_the_drawn_polygon():
    pts = map_points()
    rng = np.random.default_rng(2)
    angles = np.sort(rng.uniform(0, 2 * np.pi, 40))
    radii = rng.uniform(1.5, 5, 40)  # a star-shaped, concave lasso
    drawn = np.c_[radii * np.cos(angles), radii * np.sin(angles)]
    text = map_lasso.lasso_param(drawn, map_lasso.decimals_for(pts))
    back, message = map_lasso.parse_lasso(text)
    assert message is None and back.shape == drawn.shape
    assert np.abs(back - drawn).max() <= 0.5 * 10 ** -map_lasso.decimals_for(pts)
    xy = pts[["x", "y"]].to_numpy()
    # rounding moves an edge by under 1/5,000 of the map: only a point that close to it could change side
    want = ref_points_in_polygon(xy, drawn)
    got = map_lasso.points_in_lasso(pts, back)
    assert 0 < len(got) < len(pts)
    assert list(got["idx"]) == list(np.flatnonzero(want))
    assert len(text) < 40 * 16


@pytest.mark.parametrize("text", ["1,2;3,4", "a,b;c,d;e,f", "1,2;3,4;5", "1,2,3;4,5,6;7,8,9", "1,2;3,inf;5,6",
                                  ";".join(["1,1"] * 300), "nan,0;1,1;2,0"])
def test_bad_lasso_text_gives_one_line_and_no_polygon(text):
    poly, message = map_lasso.parse_lasso(text)
    assert poly is None and "in the link" in message and "\n" not in message


def test_the_plotly_map_draws_every_point_once_coloured_and_described_as_the_altair_map():
    pts = map_points(30)
    fig = map_lasso.lasso_figure(pts, highlight=[1, 2], focus=[3], lasso=np.array([[0, 0], [1, 0], [1, 1.0]]))
    series = [t for t in fig.data if t.showlegend is not False]
    assert sorted(t.name for t in series) == ["m · text L3", "m · video L3"]
    assert sorted(int(c[0]) for t in series for c in t.customdata) == list(range(30))
    # Vega-Lite's default scheme in its sorted domain order
    assert [t.marker.color for t in series] == map_lasso.TABLEAU10[:2]
    assert "&lt;b&gt;caption" in str(series[0].customdata[0][3])  # hover text is escaped
    assert "caption: %{customdata[3]}" in series[0].hovertemplate
    rings = [t for t in fig.data if t.marker and t.marker.symbol == "circle-open"]
    assert sorted(int(c[0]) for t in rings for c in t.customdata) == [1, 2, 3]
    assert fig.layout.dragmode == "lasso"
