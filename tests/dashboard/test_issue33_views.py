"""Issue #33 on a small store with named layers and a dual encoder's shared space
(:func:`tests.stores.write_named_layers_store`): the embedding map's spec is valid Vega-Lite (checked by
vl-convert, which raises on specs the browser cannot draw), its legends are not cut, and its caption
states the modality gap's number."""

import json

import numpy as np
import pyarrow as pa
import pytest

from analysis.views import fmt_number
from tests.helpers import app, charts


@pytest.fixture(scope="module")
def named_store(tmp_path_factory):
    from tests.stores import write_named_layers_store

    path = tmp_path_factory.mktemp("named") / "named.duckdb"
    write_named_layers_store(path)
    return path


def spec_of(chart) -> dict:
    """A chart's spec with its data inlined as the browser receives it (Streamlit sends the rows
    apart, as Arrow IPC in the chart proto, under the name the spec's ``data`` refers to)."""
    spec = json.loads(chart.proto.spec)
    spec["datasets"] = {}
    for ds in chart.proto.datasets:
        table = pa.ipc.open_stream(ds.data.data).read_all().to_pandas()
        spec["datasets"][ds.name] = json.loads(table.to_json(orient="records"))
    return spec


def assert_draws(spec: dict):
    """vl-convert compiles and renders the spec as the browser's Vega-Lite would; it raises on a spec
    that fails there (the "Connect each item's two points" TypeError of issue #33)."""
    import vl_convert as vlc

    svg = vlc.vegalite_to_svg(json.dumps(spec))
    assert "<svg" in svg
    return svg


def layers_of(spec):
    return spec.get("layer", [spec])


@pytest.mark.parametrize("links", ["0", "1"])
def test_the_two_sided_map_draws_with_and_without_links(named_store, monkeypatch, links):
    at = app(named_store, monkeypatch, "embedding_map", {"dataset": "pairs", "links": links, "frames": "0"})
    (chart,) = charts(at)
    spec = spec_of(chart)
    marks = [m["mark"]["type"] if isinstance(m["mark"], dict) else m["mark"] for m in layers_of(spec)]
    assert marks == (["line", "point"] if links == "1" else ["point"])
    assert at.toggle(key="pick_links").value is (links == "1")
    assert at.query_params["links"] == links
    # the spec as Streamlit sends it has its data in "datasets": vl-convert draws it as the browser would
    assert_draws(spec)


def test_map_legend_keeps_the_side_names_whole(named_store, monkeypatch):
    at = app(named_store, monkeypatch, "embedding_map", {"dataset": "pairs", "frames": "0"})
    spec = spec_of(charts(at)[0])
    legend = layers_of(spec)[-1]["encoding"]["color"]["legend"]
    assert legend["labelLimit"] == 0 and legend["orient"] == "bottom"
    svg = assert_draws(spec)
    # both series names are drawn whole in the rendered legend
    assert "dual-tiny (random init) · image L5 (joint)" in svg and "dual-tiny (random init) · text L5 (joint)" in svg


def test_map_caption_states_the_modality_gap(named_store, monkeypatch):
    from analysis.storage.store import load_embeddings

    V = load_embeddings(named_store, model="dual-tiny", dataset="pairs", n_frames=1)[5].astype(float)
    T = load_embeddings(named_store, model="dual-tiny", dataset="pairs", n_captions=1)[5].astype(float)
    unit = lambda X: X / np.linalg.norm(X, axis=1, keepdims=True)  # noqa: E731
    gap = np.linalg.norm(unit(V).mean(0) - unit(T).mean(0))  # Liang et al. 2022, on the joint layers
    at = app(named_store, monkeypatch, "embedding_map", {"dataset": "pairs", "frames": "0"})
    text = " ".join(c.value for c in at.caption)
    assert f"modality gap {fmt_number(gap)}" in text, text
    assert "95% interval" in text


def test_a_one_sided_map_has_no_link_toggle_and_no_gap_sentence(named_store, monkeypatch):
    at = app(named_store, monkeypatch, "embedding_map", {"dataset": "pairs", "frames": "0",
                                                          "map": "plain-txt · text L5"})
    assert not [t for t in at.toggle if t.key == "pick_links"]
    assert "modality gap 0" not in " ".join(c.value for c in at.caption)
    assert "last numbered layer" in " ".join(c.value for c in at.caption)  # the map asked for is shown
    assert_draws(spec_of(charts(at)[0]))
