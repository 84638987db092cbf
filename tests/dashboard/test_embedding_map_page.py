"""The Embedding map page driven headlessly: the demo's maps with frames on hover, a degenerate layer's
sentence, captions only when the videos are elsewhere, random-init labels, and the command for
another layer (the page never computes)."""

import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from analysis.studies import analyze_store
from analysis.views.embedding_map import categorical_metadata
from precompute.synthetic.store import write_run

APP = str(Path(__file__).resolve().parents[2] / "app.py")


def page(store, monkeypatch, params=None):
    monkeypatch.setenv("LAYERSCOPE_STORE", str(store))
    at = AppTest.from_file(APP, default_timeout=180)
    for k, v in (params or {}).items():
        at.query_params[k] = v
    at.run()
    at.switch_page("pages/embedding_map.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def texts(elements):
    return " ".join(str(e.value) for e in elements)


def tooltip_fields(at):
    (chart,) = at.get("vega_lite_chart")
    spec = json.loads(chart.proto.spec)
    marks = spec.get("layer", [spec])
    return [t["field"] for m in marks for t in m.get("encoding", {}).get("tooltip", [])]


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """Two runs whose videos do not exist here; the video run's last layer is collapsed."""
    path = tmp_path_factory.mktemp("mappage") / "s.duckdb"
    rng = np.random.default_rng(0)
    V = rng.normal(size=(3, 24, 6))
    V[2] = V[2][0]
    write_run(path, "vid", V, model="vid", modality="video", n_frames=2)
    write_run(path, "txt", rng.normal(size=(3, 24, 6)), model="txt", modality="text", n_captions=1)
    analyze_store(path, k=3, n_boot=0, log=lambda m: None)
    return path


def test_the_demo_store_shows_a_map_with_captions_and_frames_on_hover(demo_like, monkeypatch):
    at = page(demo_like, monkeypatch, {"dataset": "moving_shapes"})
    assert len(at.get("vega_lite_chart")) == 1
    assert tooltip_fields(at) == ["series", "item_id", "caption", "image"]
    assert "no frame on hover" not in texts(at.caption)  # the demo's videos are on this machine
    assert "points; UMAP n\\_neighbors=" in texts(at.caption)
    assert at.code[0].value.startswith("layerscope map --store ")


def test_items_metadata_colours_the_map(demo_like, monkeypatch):
    at = page(demo_like, monkeypatch, {"dataset": "moving_shapes", "colour": "scene_shape"})
    (chart,) = at.get("vega_lite_chart")
    spec = json.loads(chart.proto.spec)
    mark = spec.get("layer", [spec])[-1]
    assert mark["encoding"]["color"]["field"] == "scene_shape"
    assert "scene_shape" in tooltip_fields(at)
    assert "scene_colour" in at.selectbox(key="pick_colour").options


def test_categorical_metadata_keeps_fields_with_a_few_values():
    md = [{"scene": {"colour": c, "start": [0.1, 0.2], "n": 30}, "event": e, "_video_content": f"h{i}",
           "item_id": f"i{i}"}
          for i, (c, e) in enumerate([("red", "a"), ("blue", None), ("red", "b"), ("green", "a")])]
    df = categorical_metadata(md, max_levels=3)
    # scene_n has one value, item_id four (> 3), start is a list, _video_content is private
    assert list(df.columns) == ["event", "scene_colour"]
    assert df["event"].tolist() == ["a", "none", "b", "a"]
    assert df["scene_colour"].tolist() == ["red", "blue", "red", "green"]


def test_a_random_init_model_is_labelled(demo_like, monkeypatch):
    at = page(demo_like, monkeypatch, {"dataset": "moving_shapes", "map": "vit-tiny · image L4"})
    assert at.selectbox(key="pick_map").value == "vit-tiny · image L4"
    assert any(o.startswith("vit-tiny · image L4 (random init) — ") for o in at.selectbox(key="pick_map").options)
    assert any(o.startswith("all-MiniLM-L6-v2 · text L6 — ") for o in at.selectbox(key="pick_map").options)
    assert "random-init weights" in texts(at.info)


def test_a_collapsed_layer_shows_why_there_is_no_map(synthetic, monkeypatch):
    at = page(synthetic, monkeypatch, {"map": "vid · video L2"})
    assert not at.get("vega_lite_chart")
    assert "No map of vid · video L2" in texts(at.warning) and "collapsed" in texts(at.warning)


def test_missing_videos_leave_captions_only_with_a_note(synthetic, monkeypatch):
    at = page(synthetic, monkeypatch, {"map": "txt · text L2"})
    assert len(at.get("vega_lite_chart")) == 1
    assert "24 of 24 item(s) have no frame on hover (captions only)" in texts(at.caption)
    assert "does not exist" in texts(at.caption)


def test_another_layer_gives_the_command_not_a_computation(synthetic, monkeypatch):
    at = page(synthetic, monkeypatch, {"map": "txt · text L2"})
    at.selectbox(key="other_model").set_value("txt").run()
    at.number_input(key="other_layer").set_value(0).run()
    assert at.code[0].value == f"layerscope map --store {synthetic} --dataset synthetic --model txt --layer 0"


def test_an_unknown_map_in_the_link_falls_back_with_a_note(synthetic, monkeypatch):
    at = page(synthetic, monkeypatch, {"map": "<script>"})
    assert "unknown map" in texts(at.warning)
    assert len(at.get("vega_lite_chart")) == 1


def test_a_store_without_maps_says_how_to_get_them(tmp_path, monkeypatch):
    path = tmp_path / "s.duckdb"
    write_run(path, "txt", np.random.default_rng(0).normal(size=(2, 12, 4)), model="txt", modality="text",
              n_captions=1)
    at = page(path, monkeypatch)
    assert "No embedding maps in this store yet" in texts(at.info)


@pytest.fixture(scope="module")
def paired(tmp_path_factory):
    """One model with a video and a text run of one width (a shared space): its pair map by UMAP, PCA, t-SNE."""
    path = tmp_path_factory.mktemp("mappair") / "s.duckdb"
    rng = np.random.default_rng(1)
    write_run(path, "m-v", rng.normal(size=(2, 20, 6)) + 2.0, model="m", modality="video", n_frames=1)
    write_run(path, "m-t", rng.normal(size=(2, 20, 6)) - 2.0, model="m", modality="text", n_captions=1)
    analyze_store(path, k=3, n_boot=0, log=lambda m: None)
    return path


def test_the_method_lives_in_the_link_and_picks_its_maps(paired, monkeypatch):
    at = page(paired, monkeypatch, {"method": "pca", "map": "m · video L1 + text L1 · pca"})
    assert at.radio(key="pick_method").value == "pca"
    picker = at.selectbox(key="pick_map")
    assert picker.value == "m · video L1 + text L1 · pca" and len(picker.options) == 1  # only the PCA maps
    assert "PCA of the unit rows" in texts(at.caption)
    spec = json.loads(at.get("vega_lite_chart")[0].proto.spec)
    assert spec  # drawn
    at = page(paired, monkeypatch, {"method": "tsne"})
    assert at.selectbox(key="pick_map").value == "m · video L1 + text L1 · tsne"
    assert "t-SNE (sklearn, seed=0)" in texts(at.caption)
    at = page(paired, monkeypatch)  # no method in the link: UMAP
    assert at.radio(key="pick_method").value == "umap" and "UMAP n\\_neighbors" in texts(at.caption)


def test_another_layer_by_pca_gives_its_command(synthetic, monkeypatch):
    at = page(synthetic, monkeypatch, {"map": "txt · text L2"})
    at.selectbox(key="other_model").set_value("txt").run()
    at.number_input(key="other_layer").set_value(0).run()
    at.radio(key="other_method").set_value("pca").run()
    assert at.code[0].value.endswith("--model txt --layer 0 --method pca")
