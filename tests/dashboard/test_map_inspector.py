"""The Embedding map's inspector: a clicked item shows every caption whole and a strip of its frames,
and its neighbours' first frames sit in rows tall enough to see them. On the tools store (tests/stores.py
``write_map_tools_store``): even items have a frame folder, odd items a missing video."""

import pytest

from tests.helpers import app
from tests.stores import tools_captions, tools_second_caption


@pytest.fixture(scope="module")
def store(map_tools_store):
    return map_tools_store


def page(store, monkeypatch, focus):
    return app(store, monkeypatch, "embedding_map", {"dataset": "tools", "map": "vid · video L3", "focus": focus})


def test_a_clicked_item_shows_its_captions_and_a_frame_strip(store, monkeypatch):
    at = page(store, monkeypatch, "clip04")
    captions = [c.value.replace("\\", "") for c in at.caption]
    assert f"{tools_captions(4)} · {tools_second_caption(4)}" in captions
    (strip,) = at.get("image")
    assert strip.proto.imgs and all(i.url.endswith(".jpg") for i in strip.proto.imgs)
    (table,) = [d for d in at.dataframe if "frame" in d.value.columns]
    assert table.proto.row_height == 64  # the 72-pixel first frames show, not 24-pixel specks


def test_an_item_whose_video_is_elsewhere_says_so_in_one_line(store, monkeypatch):
    at = page(store, monkeypatch, "clip05")
    assert not at.get("image")
    (note,) = [c.value for c in at.caption if c.value.startswith("frames unavailable")]
    assert "clip5.mp4" in note and "\n" not in note


def test_hover_frames_show_for_every_item_whose_video_is_here(store, monkeypatch):
    """Half the videos are missing, and their paths sort first: the page still tries the rest."""
    at = app(store, monkeypatch, "embedding_map", {"dataset": "tools", "map": "vid · video L3"})
    (chart,) = at.get("vega_lite_chart")
    import pyarrow as pa

    tables = [pa.ipc.open_stream(d.data.data).read_pandas() for d in chart.proto.datasets]
    (points,) = [t for t in tables if "image" in t and len(t) == 30]
    has_frame = {i: isinstance(u, str) and u.startswith("data:image/jpeg") for i, u in zip(points["idx"],
                                                                                          points["image"])}
    assert has_frame == {i: i % 2 == 0 for i in range(30)}
    assert any(c.value.startswith("15 of 30 item(s) have no frame on hover") for c in at.caption)
