"""A heatmap names its two models as a person reads them: a dual encoder's image tower against its own
text tower (``clip-tiny × clip-tiny``, vision×text) reads ``clip-tiny (random init) [image] × clip-tiny
(random init) [text]`` in the chart's title, the report's caption and the page, its axes ``clip-tiny
[image] layer`` and ``clip-tiny [text] layer``; the dual encoder's side is named in vision×vision and
text×text grids too; a pair of one-sided models keeps its plain labels.

The expected names are spelled out by hand from what tests.stores.write_demo_like_store writes: clip-tiny
is a random-init image model with a text run too; vit-tiny (image) and llama-tiny (text) are random-init,
one-sided; videomae-tiny (video) and all-MiniLM-L6-v2 (text) are trained, one-sided."""

import json

import duckdb
import pytest

from analysis.views import heatmap as heatmap_view
from analysis.views.store_info import dataset_runs, model_labels
from analysis.views.text import md_escape
from tests.helpers import app, charts

DATASET = "moving_shapes"

#: (pair kind, model_a, model_b) -> the pair as the title must read it
NAMED = {
    ("vision_text", "clip-tiny", "clip-tiny"): "clip-tiny (random init) [image] × clip-tiny (random init) [text]",
    ("vision_vision", "clip-tiny", "vit-tiny"): "clip-tiny (random init) [image] × vit-tiny (random init)",
    ("text_text", "clip-tiny", "llama-tiny"): "clip-tiny (random init) [text] × llama-tiny (random init)",
    ("vision_text", "videomae-tiny", "all-MiniLM-L6-v2"): "videomae-tiny × all-MiniLM-L6-v2",
}


@pytest.fixture(scope="module")
def store(demo_like):
    con = duckdb.connect(str(demo_like), read_only=True)
    try:
        index = heatmap_view.grid_index(con)
        yield con, index[(index["dataset"] == DATASET) & (index["metric"] == "mutual_knn")]
    finally:
        con.close()


def grid_row(index, kind, a, b):
    return index[(index["pair_kind"] == kind) & (index["model_a"] == a) & (index["model_b"] == b)].iloc[0]


def test_each_grids_title_names_the_dual_encoders_side(store):
    con, index = store
    labels, runs = model_labels(con), dataset_runs(con, DATASET)
    for (kind, a, b), pair in NAMED.items():
        assert heatmap_view.grid_title(grid_row(index, kind, a, b), labels, runs).startswith(f"{pair} · mutual_knn · ")


def test_the_report_caption_chart_title_and_axes_name_the_two_towers(store):
    con, index = store
    row = grid_row(index, "vision_text", "clip-tiny", "clip-tiny")
    ((caption, chart),) = heatmap_view.section(con, DATASET, result_ids=(row["result_id"],)).charts
    pair = NAMED[("vision_text", "clip-tiny", "clip-tiny")]
    assert caption.startswith(f"{pair} (vision×text, mutual_knn, ")
    spec = chart.to_dict()
    assert spec["title"]["text"].startswith(f"{pair} · mutual_knn · ")
    heat = next(layer for layer in spec["layer"] if (layer.get("encoding") or {}).get("color", {}).get("field") == "value")
    assert [t["title"] for t in heat["encoding"]["tooltip"][:2]] == ["clip-tiny [image] layer", "clip-tiny [text] layer"]


def test_the_heatmap_page_names_the_two_towers(demo_like, monkeypatch):
    at = app(demo_like, monkeypatch, "heatmap", {"dataset": DATASET, "kind": "vision_text", "a": "clip-tiny",
                                                 "b": "clip-tiny", "metric": "mutual_knn"})
    spec = json.loads(charts(at)[0].proto.spec)
    assert spec["title"]["text"].startswith(f"{NAMED[('vision_text', 'clip-tiny', 'clip-tiny')]} · mutual_knn · ")
    best = at.caption[0].value  # the best cell in words, Markdown-escaped
    assert md_escape("of clip-tiny [image] × layer") in best and md_escape("of clip-tiny [text] = ") in best
