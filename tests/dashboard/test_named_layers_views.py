"""Issue #33 on a small store with named layers and a dual encoder's shared space
(:func:`tests.stores.write_named_layers_store`): the embedding map's spec is valid Vega-Lite (checked by
vl-convert, which raises on specs the browser cannot draw), its legends are not cut, and its caption
states the modality gap's number."""

import json
import re

import numpy as np
import pyarrow as pa
import pytest

from analysis.views.text import fmt_number
from tests.helpers import app, charts


@pytest.fixture(scope="module")
def named_store(named_layers_store):
    return named_layers_store  # built once per run (tests/conftest.py); read only


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


def chart_layers(spec):
    """``[(mark type, rows)]`` of a layered chart whose layers each name their dataset."""
    out = []
    for m in layers_of(spec):
        mark = m["mark"]["type"] if isinstance(m["mark"], dict) else m["mark"]
        name = (m.get("data") or spec.get("data") or {}).get("name")
        out.append((mark, spec["datasets"].get(name, [])))
    return out


def rankme_reference(X) -> float:
    """RankMe (Garrido et al. 2023): exp of the entropy of the normalised singular values (+1e-7)."""
    s = np.linalg.svd(np.asarray(X, dtype=np.float64), compute_uv=False)
    p = s / s.sum() + 1e-7
    return float(np.exp(-(p * np.log(p)).sum()))


def test_named_layers_are_labelled_levels_not_points_past_the_depth_axis(named_store, monkeypatch):
    from analysis.storage.store import load_embeddings

    at = app(named_store, monkeypatch, "curves", {"dataset": "pairs", "metric": "rankme", "models": "dual-tiny"})
    spec = spec_of(charts(at)[0])
    parts = chart_layers(spec)
    lines = [rows for mark, rows in parts if mark == "line"]
    assert lines and all(0 <= r["depth"] <= 1 for rows in lines for r in rows)
    # dual-tiny stores layers 0-3 numbered, then default (4) and joint (5): depths 0, 1/3, 2/3, 1
    assert sorted(r["depth"] for r in lines[0]) == pytest.approx([0, 1 / 3, 2 / 3, 1])
    assert spec["layer"][0]["encoding"]["x"]["scale"]["domain"] == [0, 1]
    texts = [rows for mark, rows in parts if mark == "text" and rows and "layer_name" in rows[0]]
    assert texts, parts
    # the labels alternate below and above their levels, one text layer each side
    named = {r["layer_name"]: r for rows in texts for r in rows}
    assert set(named) == {"default", "joint"}
    # the chart's value is the store's, which is the formula's on the stored layer (largest setting: n_f 1)
    X = load_embeddings(named_store, model="dual-tiny", dataset="pairs", n_frames=1)
    for name, layer in (("default", 4), ("joint", 5)):
        assert named[name]["value"] == pytest.approx(rankme_reference(X[layer]), rel=1e-4)
        assert named[name]["label"].startswith(f"{name} {fmt_number(rankme_reference(X[layer]))}")
    legend = spec["layer"][0]["encoding"]["color"]["legend"]
    assert legend["orient"] == "bottom" and legend["labelLimit"] == 0
    svg = assert_draws(spec)
    assert ">joint " in svg and ">default " in svg and ">model<" in svg  # labels and the legend's title drawn
    assert "Named layers have no depth" in " ".join(c.value for c in at.caption)


def test_alignment_curves_put_named_layers_aside_too(named_store, monkeypatch):
    at = app(named_store, monkeypatch, "curves", {"dataset": "pairs", "metric": "alignment with plain-txt",
                                                   "models": "dual-tiny"})
    spec = spec_of(charts(at)[0])
    for mark, rows in chart_layers(spec):
        for r in rows:
            if r.get("depth") is not None:
                assert 0 <= r["depth"] <= 1, (mark, r)
    assert_draws(spec)
    picks = at.dataframe[-1].value
    assert set(picks["layer"]) <= {"0", "1", "2", "3", "default", "joint"}


def test_predictors_name_the_default_layer(named_store, monkeypatch):
    at = app(named_store, monkeypatch, "predictors", {"dataset": "pairs"})
    best = at.dataframe[2].value.set_index("model")
    # the planted results: dual-tiny's best is its default layer (0.9 against at most 0.5)
    assert best.loc["dual-tiny", "truly best layer"] == "default"
    assert best.loc["dual-tiny", "default layer"] == "default"
    assert best.loc["plain-txt", "truly best layer"] == "5"
    (spec,) = [s for s in map(spec_of, charts(at)) if s.get("encoding", {}).get("x", {}).get("field") == "layer_name"]
    assert spec["encoding"]["x"]["sort"] == ["0", "1", "2", "3", "4", "5", "default", "joint"]
    assert spec["encoding"]["x"]["axis"]["labelAngle"] == 0


def test_predictors_correlation_and_signals_live_in_the_url(named_store, monkeypatch):
    at = app(named_store, monkeypatch, "predictors", {"dataset": "pairs", "stat": "ρ pooled", "kinds": "profile"})
    assert at.radio(key="pred_stat").value == "ρ pooled"
    assert at.multiselect(key="pred_kinds").value == ["profile"]
    assert set(at.dataframe[1].value["kind"]) == {"profile"}
    at.radio(key="pred_stat").set_value("ρ across layers").run()
    assert at.query_params["stat"] == "ρ across layers"


def test_neighbours_name_the_joint_layer(named_store, monkeypatch):
    at = app(named_store, monkeypatch, "neighbours", {"dataset": "pairs", "models": "dual-tiny",
                                                       "runs": "dual-tiny-image", "layers": "5"})
    heads = " ".join(m.value for m in at.markdown)
    assert "the joint layer (5)" in heads


#: URL values that GFM (Streamlit's Markdown) would turn into links: Markdown links, javascript: URLs,
#: and the autolink literals no backslash escape stops (bare www., https://, e-mail addresses)
LINKS = ["[click](https://evil.example/a)", "[a](javascript:alert(1))", "<javascript:alert(2)>",
         "www.evil.example/b", "https://evil.example/c", "javascript:alert(3)", "x@evil.example"]


def unescaped(md: str) -> str:
    """The text a Markdown source shows: backslash escapes of ASCII punctuation resolved (CommonMark)."""
    import re

    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", md)


def gfm_autolinks(text: str) -> list[str]:
    """The GFM autolink literals in shown text (GFM spec, extension "Autolinks"): ``www.`` and
    ``http(s)://`` after a line start, space or ``*_~(``, and e-mail addresses ``a@b.c``."""
    import re

    return re.findall(r"(?:^|[\s*_~(])((?:www\.|https?://)\S+)|([\w.+-]+@[\w-]+\.[\w.-]*\w)", text, flags=re.I)


# seven page runs a page: the fast tier keeps one page, CI runs all five
@pytest.mark.parametrize("page", [pytest.param(p, marks=() if p == "neighbours" else pytest.mark.slow)
                                  for p in ("heatmap", "curves", "embedding_map", "neighbours", "predictors")])
def test_link_parameters_stay_text(named_store, monkeypatch, page):
    from tests.hostile import assert_inert, markdown_sources

    for value in LINKS:
        params = {p: value for p in ("dataset", "a", "b", "metric", "item", "map", "colour", "task", "stat")}
        at = app(named_store, monkeypatch, page, params)
        sources = markdown_sources(at)
        assert any("unknown" in s for s in sources), page  # refused, and said so
        for md in sources:
            assert_inert(md)  # no link, image or raw HTML (CommonMark)
            assert not gfm_autolinks(unescaped(md)), (value, md)  # nor a GFM autolink literal
            assert not re.search(r"(?<!\\)\]\(", md), md  # every "](" of a parameter is escaped


def test_predictors_draw_rho_intervals_a_zero_line_and_mark_those_that_exclude_zero(named_store, monkeypatch):
    at = app(named_store, monkeypatch, "predictors", {"dataset": "pairs"})
    spec = spec_of(charts(at)[0])
    parts = chart_layers(spec)
    (zero,) = [rows for mark, rows in parts if mark == "rule" and rows and set(rows[0]) == {"rho"}]
    assert zero == [{"rho": 0.0}]
    (points,) = [rows for mark, rows in parts if mark == "point"]
    table = at.dataframe[1].value.set_index("signal")  # the study's own verdict, per signal
    for r in points:
        assert -1 <= r["rho"] <= 1 and r["low"] <= r["rho"] + 1e-9 or r["interval"] != "excludes 0"
        excludes = r["low"] > 0 or r["high"] < 0
        assert (r["interval"] == "excludes 0") == excludes == bool(table.loc[r["signal"], "interval excludes 0"])
    assert_draws(spec)


def test_rho_chart_marks_each_interval_by_whether_it_excludes_zero():
    import pandas as pd

    from analysis.views.predictors import rho_chart
    from analysis.views.predictors import _with_zero_verdict

    rhos = _with_zero_verdict(pd.DataFrame({
        "task": "t", "signal": ["pos", "neg", "straddle", "none"], "rank": [1, 2, 3, 4], "statistic": "ρ pooled",
        "rho": [0.8, -0.6, 0.1, 0.3], "low": [0.2, -0.9, -0.4, None], "high": [0.95, -0.1, 0.5, None],
        "coverage": "3 models"}))
    assert list(rhos["interval"]) == ["excludes 0", "excludes 0", "includes 0", "no interval"]
    spec = rho_chart(rhos, "ρ pooled").to_dict()
    fill = spec["layer"][2]["encoding"]["fill"]["scale"]
    assert dict(zip(fill["domain"], fill["range"]))["includes 0"] == "white"  # hollow: sign not established
    assert spec["layer"][2]["encoding"]["y"]["sort"] == ["pos", "neg", "straddle", "none"]






