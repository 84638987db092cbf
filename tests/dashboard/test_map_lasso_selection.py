"""A lasso on the Embedding map (``?select=lasso``): the map is drawn with Plotly, a lasso's polygon
goes to the link as ``lasso=x,y;...``, and the items inside it are recomputed from that polygon, so
the link opened fresh lists exactly the same items (table, CSV, alignment on the selection). Driven
headlessly on the tools store (tests/stores.py); the expected items come from matplotlib's
point-in-polygon over the stored coordinates."""

import json

import numpy as np
import pyarrow as pa
import pytest

from tests.helpers import app
from tests.reference import ref_points_in_polygon
from tests.stores import TOOLS_N, stored_map_payload

MAP = "vid · video L3"
FIRST = ["item_id", "series", "run_id", "layer", "x", "y"]


@pytest.fixture(scope="module")
def store(map_tools_store):
    return map_tools_store


@pytest.fixture(scope="module")
def stored_map(store):
    """The map's result id, its items' ids and their stored coordinates ``(n, 2)``, in the payload's order."""
    result_id, p = stored_map_payload(store, MAP)
    return result_id, [f"clip{int(i):02d}" for i in p["items"]], np.c_[p["x"], p["y"]].astype(float)


def concave_lasso(xy):
    """A "C"-shaped polygon over the map's extent, its notch open to the right: concave on purpose."""
    (x0, y0), (x1, y1) = xy.min(0), xy.max(0)
    w, h = x1 - x0, y1 - y0
    unit = np.array([[0, 0], [1, 0], [1, 0.35], [0.4, 0.35], [0.4, 0.65], [1, 0.65], [1, 1], [0, 1]])
    return np.c_[x0 - 0.01 * w + unit[:, 0] * 1.02 * w, y0 - 0.01 * h + unit[:, 1] * 1.02 * h]


def page(store, monkeypatch, params=None):
    return app(store, monkeypatch, "embedding_map", {"dataset": "tools", "map": MAP, "select": "lasso",
                                                     **(params or {})})


def listed(at):
    found = [d.value for d in at.dataframe if list(d.value.columns)[:len(FIRST)] == FIRST]
    assert len(found) == 1, [list(d.value.columns) for d in at.dataframe]
    return sorted(found[0]["item_id"])


def text_of(polygon):
    return ";".join(f"{x:.6f},{y:.6f}" for x, y in polygon)


def test_a_lasso_in_the_link_lists_exactly_the_items_inside_it(store, stored_map, monkeypatch):
    _, ids, xy = stored_map
    lasso = concave_lasso(xy)
    want = sorted(i for i, inside in zip(ids, ref_points_in_polygon(xy, lasso)) if inside)
    assert 0 < len(want) < TOOLS_N  # the notch leaves some items out
    at = page(store, monkeypatch, {"lasso": text_of(lasso)})
    assert at.get("plotly_chart") and not [w.value for w in at.warning if "lasso" in w.value]
    assert any(f"**Lasso selection** — {len(want)} point(s)" in m.value for m in at.markdown)
    assert listed(at) == want


def test_a_drawn_lasso_goes_to_the_link_and_the_link_selects_the_same_items(store, stored_map, monkeypatch):
    result_id, ids, xy = stored_map
    lasso = concave_lasso(xy)
    dense = np.vstack([np.linspace(a, b, 20, endpoint=False) for a, b in zip(lasso, np.roll(lasso, -1, 0))])
    at = page(store, monkeypatch)
    at.session_state[f"embedding_map_{result_id}_lasso"] = {"selection": {
        "points": [], "point_indices": [], "box": [],
        "lasso": [{"xref": "x", "yref": "y", "x": list(dense[:, 0]), "y": list(dense[:, 1])}]}}
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    text = at.query_params["lasso"]
    assert text.count(";") + 1 <= 64  # 160 drawn vertices thinned
    again = page(store, monkeypatch, {"lasso": text})
    polygon = np.array([[float(v) for v in p.split(",")] for p in text.split(";")])
    want = sorted(i for i, inside in zip(ids, ref_points_in_polygon(xy, polygon)) if inside)
    assert listed(at) == listed(again) == want


def test_a_click_on_the_plotly_map_inspects_its_item(store, stored_map, monkeypatch):
    result_id, _, _ = stored_map
    at = page(store, monkeypatch)
    at.session_state[f"embedding_map_{result_id}_lasso"] = {"selection": {
        "points": [{"curve_number": 0, "point_index": 0, "customdata": [7, "s", "clip07", "c"]}],
        "point_indices": [0], "box": [], "lasso": []}}
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="pick_focus").value == "clip07" and at.query_params["focus"] == "clip07"


@pytest.mark.parametrize("bad", ["1,2;3,4", "1,2;x,y;5,6", "1e999,0;1,1;2,0"])
def test_a_bad_lasso_in_the_link_says_so_in_one_line(store, monkeypatch, bad):
    at = page(store, monkeypatch, {"lasso": bad})
    (note,) = [w.value for w in at.warning if "lasso" in w.value]
    assert "\n" not in note and "no lasso is shown" in note
    assert "lasso" not in at.query_params


def test_the_box_mode_ignores_a_lasso_and_draws_the_altair_map(store, stored_map, monkeypatch):
    _, _, xy = stored_map
    at = page(store, monkeypatch, {"select": "box", "lasso": text_of(concave_lasso(xy))})
    assert not at.get("plotly_chart") and at.get("vega_lite_chart")
    assert not any("Lasso selection" in m.value for m in at.markdown)


def test_a_lasso_feeds_the_alignment_and_the_linked_maps_orange_rings(store, stored_map, monkeypatch):
    _, ids, xy = stored_map
    lasso = concave_lasso(xy)
    want = sorted(i for i, inside in zip(ids, ref_points_in_polygon(xy, lasso)) if inside)
    at = page(store, monkeypatch, {"lasso": text_of(lasso), "linked": "1"})
    assert any(m.value.startswith("Alignment on this selection") for m in at.markdown)
    (linked,) = at.get("vega_lite_chart")  # the main map is Plotly's; the linked one is Vega-Lite
    marks = json.loads(linked.proto.spec)["layer"]
    assert [m["mark"].get("color") for m in marks if m["mark"].get("filled") is False] == ["#ff7f0e"]
    tables = [pa.ipc.open_stream(d.data.data).read_pandas() for d in linked.proto.datasets]
    (ringed,) = [sorted(t["item_id"]) for t in tables if len(t) < TOOLS_N]  # the one ring layer's items
    assert ringed == want


def test_an_emptied_selection_keeps_the_lasso_and_the_sidebar_button_clears_it(store, stored_map, monkeypatch):
    result_id, _, xy = stored_map
    at = page(store, monkeypatch, {"lasso": text_of(concave_lasso(xy))})
    # a figure with new rings is a new chart to Streamlit, which starts it with an empty selection
    at.session_state[f"embedding_map_{result_id}_lasso"] = {"selection": {
        "points": [], "point_indices": [], "box": [], "lasso": []}}
    at.run()
    assert at.query_params["lasso"] == text_of(concave_lasso(xy))
    at.button(key="clear_lasso").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert "lasso" not in at.query_params
    assert not any("Lasso selection" in m.value for m in at.markdown)
