"""The Embedding map's search reads every caption and metadata value of the items (not the shortened
caption a point shows), a regular expression included; a box's listed and exported rows carry every
caption whole, the metadata, the run and the layer; a drag after a click keeps the clicked item.
Driven headlessly on the tools store (tests/stores.py ``write_map_tools_store``: two captions per item,
the second long); expected rows come from the values the store was written with."""

import re

import pytest

from tests.helpers import app
from tests.stores import TOOLS_N, tools_captions, tools_metadata, tools_second_caption, stored_map_payload

MAP = "vid · video L3"
BOX_COLUMNS = ["item_id", "series", "run_id", "layer", "x", "y", "caption_1", "caption_2"]


@pytest.fixture(scope="module")
def store(map_tools_store):
    return map_tools_store


@pytest.fixture(scope="module")
def stored_map(store):
    """The map's result id and its stored coordinates ``{idx: (x, y)}``."""
    result_id, p = stored_map_payload(store, MAP)
    return result_id, {int(i): (float(x), float(y)) for i, x, y in zip(p["items"], p["x"], p["y"])}


def page(store, monkeypatch, params=None):
    return app(store, monkeypatch, "embedding_map", {"dataset": "tools", "map": MAP, **(params or {})})


def select(at, result_id, selection):
    """What Streamlit stores after a click or drag on the chart: its selection under the chart's key."""
    at.session_state[f"embedding_map_{result_id}"] = {"selection": selection}
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def table(at, first_columns):
    found = [d.value for d in at.dataframe if list(d.value.columns)[:len(first_columns)] == first_columns]
    assert len(found) == 1, [list(d.value.columns) for d in at.dataframe]
    return found[0]


def texts_of(i):
    """Every searchable text of item ``i`` as written: its id, both captions, each metadata value."""
    md = tools_metadata(i)
    return [f"clip{i:02d}", tools_captions(i), tools_second_caption(i),
            *(", ".join(v) if isinstance(v, list) else str(v) for v in md.values())]


@pytest.mark.parametrize("query", ["wooden cube at angle 49", "angle 14", "t3", "toy"])
def test_a_phrase_from_any_caption_or_metadata_value_finds_its_items(store, monkeypatch, query):
    at = page(store, monkeypatch, {"q": query})
    want = [f"clip{i:02d}" for i in range(TOOLS_N) if any(query.lower() in t.lower() for t in texts_of(i))]
    assert want
    found = table(at, ["item_id", "caption", "matched"])
    assert list(found["item_id"]) == want


def test_a_regular_expression_from_the_link_is_searched(store, monkeypatch):
    pattern = r"angle (7|14)$"
    at = page(store, monkeypatch, {"q": pattern, "regex": "1"})
    assert at.toggle(key="pick_regex").value is True
    want = [f"clip{i:02d}" for i in range(TOOLS_N) if any(re.search(pattern, t, re.I) for t in texts_of(i))]
    assert want == ["clip01", "clip02"]
    assert list(table(at, ["item_id", "caption", "matched"])["item_id"]) == want


def test_a_bad_regular_expression_says_so_in_one_line(store, monkeypatch):
    at = page(store, monkeypatch, {"q": "ball (", "regex": "1"})
    (note,) = [w.value for w in at.warning if "not a regular expression" in w.value]
    assert "\n" not in note


def test_a_box_lists_every_caption_whole_with_the_metadata_run_and_layer(store, stored_map, monkeypatch):
    result_id, xy = stored_map
    at = select(page(store, monkeypatch), result_id, {"box": {"x": [-1e9, 1e9], "y": [-1e9, 1e9]}})
    rows = table(at, BOX_COLUMNS)
    assert len(rows) == TOOLS_N
    for r in rows.itertuples():
        i = int(r.item_id[4:])
        assert (r.caption_1, r.caption_2) == (tools_captions(i), tools_second_caption(i))
        assert (r.run_id, int(r.layer)) == ("vid-f2", 3)
        md = tools_metadata(i)
        assert (r.shade, r.note, r.tags) == (md["shade"], md["note"], ", ".join(md["tags"]))
        assert (r.x, r.y) == pytest.approx(xy[i])


def test_a_drag_after_a_click_keeps_the_clicked_item(store, stored_map, monkeypatch):
    result_id, _ = stored_map
    at = select(page(store, monkeypatch), result_id, {"pick": [{"idx": 7}]})
    assert at.selectbox(key="pick_focus").value == "clip07"
    # a drag ends in a click on the chart's background, which empties the point selection
    select(at, result_id, {"pick": [], "box": {"x": [0, 1], "y": [0, 1]}})
    assert at.selectbox(key="pick_focus").value == "clip07" and at.query_params["focus"] == "clip07"
    assert at.query_params["box"] == "0,1,0,1"
    # a click on the background alone (no new box) clears the item
    select(at, result_id, {"pick": [], "box": {"x": [0, 1], "y": [0, 1]}})
    select(at, result_id, {"pick": [{"idx": 3}], "box": {"x": [0, 1], "y": [0, 1]}})
    assert at.selectbox(key="pick_focus").value == "clip03"
    select(at, result_id, {"pick": [], "box": {"x": [0, 1], "y": [0, 1]}})
    assert at.selectbox(key="pick_focus").value == "(none)"
