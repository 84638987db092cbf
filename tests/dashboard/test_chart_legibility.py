"""Issue #33, items 8 and 9 on the dashboard's synthetic store (tests.stores.write_dashboard_store):
scaling tooltips name the score and round intervals to 3 significant digits on every hoverable mark
(error bars included), and the axis labels of the pages this issue changed stay upright and whole."""

import json

import pytest

from tests.helpers import app, charts


@pytest.fixture(scope="module")
def store(dashboard_store):
    return dashboard_store  # built once per run (tests/conftest.py); read only


def walk_layers(spec):
    for key in ("layer", "vconcat", "hconcat", "concat"):
        for sub in spec.get(key, []):
            yield from walk_layers(sub)
    if "mark" in spec:
        yield spec


def test_scaling_tooltips_show_the_score_and_three_digit_intervals(store, monkeypatch):
    at = app(store, monkeypatch, "scaling", {"dataset": "moving_shapes"})
    specs = [json.loads(c.proto.spec) for c in charts(at)]
    assert specs
    seen_bars = 0
    for spec in specs:
        for layer in walk_layers(spec):
            enc = layer.get("encoding", {})
            fields = {enc.get(ch, {}).get("field") for ch in ("y", "y2")}
            if not fields & {"ci_low", "ci_high"}:
                continue
            seen_bars += 1
            tips = {t["field"]: t for t in enc["tooltip"]}
            assert tips["ci_low"]["format"] == ".3g" and tips["ci_high"]["format"] == ".3g"
            assert "score" in tips and tips["score"]["format"] == ".3g"
    assert seen_bars >= 2  # the points and the error bars of both panels


def test_curves_axes_are_upright_and_uncut(store, monkeypatch):
    at = app(store, monkeypatch, "curves", {"dataset": "moving_shapes"})
    spec = json.loads(charts(at)[0].proto.spec)
    x = spec["layer"][0]["encoding"]["x"]
    assert x["axis"]["labelAngle"] == 0 and x["axis"]["titleLimit"] == 0
    assert spec["layer"][0]["encoding"]["y"]["axis"]["titleLimit"] == 0
    assert spec["layer"][0]["encoding"]["color"]["legend"]["orient"] == "bottom"


def test_heatmap_names_chance_in_its_legend_and_title(store, monkeypatch):
    at = app(store, monkeypatch, "heatmap", {"dataset": "moving_shapes", "a": "vit-tiny", "b": "llama-tiny",
                                             "metric": "mutual_knn"})
    spec = json.loads(charts(at)[0].proto.spec)
    k, n = 5, 24  # the store's analysis: k = 5 on 24 items; mutual k-NN's chance is k / (N - 1)
    want = f"chance {k / (n - 1):.3f}"
    color = next(layer["encoding"]["color"] for layer in walk_layers(spec) if "color" in layer.get("encoding", {})
                 and layer["encoding"]["color"].get("field") == "value")
    assert color["title"] == ["mutual_knn", want]
    assert spec["title"]["subtitle"] == [f"chance level (unrelated spaces): {k / (n - 1):.3f}"]


def test_heatmap_ticks_upright_and_tooltips_named_for_people(store, monkeypatch):
    at = app(store, monkeypatch, "heatmap", {"dataset": "moving_shapes", "a": "vit-tiny", "b": "llama-tiny",
                                             "metric": "cknna"})
    spec = json.loads(charts(at)[0].proto.spec)
    heat = next(layer for layer in walk_layers(spec) if (layer.get("encoding") or {}).get("color", {}).get("field")
                == "value")
    enc = spec.get("encoding") or heat["encoding"]
    assert enc["x"]["axis"]["labelAngle"] == 0
    titles = [t["title"] for t in heat["encoding"]["tooltip"]]
    assert titles == ["vit-tiny layer", "llama-tiny layer", "cknna", "95% interval", "note"]
