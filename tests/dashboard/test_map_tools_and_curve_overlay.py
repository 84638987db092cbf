"""The Embedding map's tools driven headlessly (issue #33) on a small synthetic store (tests/stores.py
``write_map_tools_store``): search by caption or id, a click's neighbours, a box selection and its
export, colour by a numeric or categorical metadata field, the density view; every value in the URL,
hostile links inert. A click or drag is simulated the way Streamlit delivers it: the chart's selection
state in ``st.session_state`` under the chart's key. Neighbours are checked against a brute-force
cosine k-NN of the vectors the store was written with."""

import json
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from streamlit.testing.v1 import AppTest

from analysis.storage import results as R
from tests.stores import TOOLS_N, tools_captions, tools_vectors, stored_map_payload

APP = str(Path(__file__).resolve().parents[2] / "app.py")
MAP = "vid · video L3"  # the video model's map at its largest budget (run vid-f2), layer 3
RUN, LAYER = "vid-f2", 3


@pytest.fixture(scope="module")
def store(map_tools_store):
    return map_tools_store


@pytest.fixture(scope="module")
def stored_map(store):
    """The map's result id and its stored coordinates ``{idx: (x, y)}``, read from the payload."""
    result_id, p = stored_map_payload(store, MAP)
    assert p["run_ids"] == [RUN] and list(p["layers"]) == [LAYER]
    return result_id, {int(i): (float(x), float(y)) for i, x, y in zip(p["items"], p["x"], p["y"])}


def page(store, monkeypatch, params=None, name="embedding_map"):
    monkeypatch.setenv("LAYERSCOPE_STORE", str(store))
    at = AppTest.from_file(APP, default_timeout=180)
    for k, v in {"dataset": "tools", "map": MAP, **(params or {})}.items():
        at.query_params[k] = v
    at.run()
    at.switch_page(f"pages/{name}.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def click(at, result_id, selection):
    at.session_state[f"embedding_map_{result_id}"] = {"selection": selection}
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def frame_with(at, columns):
    found = [d.value for d in at.dataframe if list(d.value.columns) == columns]
    assert len(found) == 1, [list(d.value.columns) for d in at.dataframe]
    return found[0]


def brute_knn(run, layer, idx, k):
    X = tools_vectors(run, 4)[layer].astype(np.float64)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    sims = [(float(X[idx] @ X[j]), j) for j in range(len(X)) if j != idx]
    best = sorted(sims, reverse=True)[:k]
    return [f"clip{j:02d}" for _, j in best], [s for s, _ in best]


def spec(at):
    (chart,) = at.get("vega_lite_chart")
    s = json.loads(chart.proto.spec)
    return s, s.get("layer", [s])


NN_COLUMNS = ["rank", "frame", "item_id", "cosine", "caption"]
#: a box selection's table: tests/dashboard/test_map_search_and_export.py checks its captions and metadata
BOX_COLUMNS = ["item_id", "series", "run_id", "layer", "x", "y", "caption_1", "caption_2", "lane", "note", "shade",
               "speed", "tags"]


def assert_thumbnails(at, nn, store):
    """Even items have a frame folder (tests/stores.py ``tools_video``): each shows its first frame as a
    JPEG; odd items have none, and a note counts them."""
    even = nn["item_id"].map(lambda i: int(i[4:]) % 2 == 0)
    assert nn.loc[even, "frame"].map(lambda u: str(u).startswith("data:image/jpeg;base64,")).all()
    assert nn.loc[~even, "frame"].isna().all()
    if (~even).any():
        note = f"{int((~even).sum())} of {len(nn)} item(s) have no frame (captions only)"
        assert any(note in c.value for c in at.caption), [c.value for c in at.caption]


def test_the_tools_read_the_link_and_write_it_back(store, monkeypatch):
    params = {"q": "RED", "focus": "clip04", "nk": "4", "density": "1", "colour": "speed", "box": "0,1,0,1"}
    at = page(store, monkeypatch, params)
    assert at.text_input(key="pick_q").value == "RED"
    assert at.selectbox(key="pick_focus").value == "clip04"
    assert at.slider(key="pick_nk").value == 4
    assert at.toggle(key="pick_density").value is True
    assert at.selectbox(key="pick_colour").value == "speed"
    assert {k: at.query_params[k] for k in params} == params
    at.text_input(key="pick_q").set_value("blue").run()
    at.selectbox(key="pick_focus").set_value("clip09").run()
    at.slider(key="pick_nk").set_value(3).run()
    at.toggle(key="pick_density").set_value(False).run()
    assert {k: at.query_params[k] for k in ("q", "focus", "nk", "density")} == {
        "q": "blue", "focus": "clip09", "nk": "3", "density": "0"}
    at.text_input(key="pick_q").set_value("").run()
    at.selectbox(key="pick_focus").set_value("(none)").run()
    assert "q" not in at.query_params and "focus" not in at.query_params


@pytest.mark.parametrize("query", ["RED", "clip1", "ball number 2"])
def test_search_results_equal_a_substring_filter(store, monkeypatch, query):
    at = page(store, monkeypatch, {"q": query})
    want = [f"clip{i:02d}" for i in range(TOOLS_N)
            if query.lower() in tools_captions(i).lower() or query.lower() in f"clip{i:02d}"]
    got = frame_with(at, ["item_id", "caption", "matched"])
    assert list(got["item_id"]) == want
    assert list(got["caption"]) == [tools_captions(int(i[4:])) for i in want]
    (_, marks) = spec(at)
    ring = [m for m in marks if m["mark"].get("color") == "black"]
    assert len(ring) == 1


def test_a_clicked_point_lists_its_brute_force_neighbours(store, stored_map, monkeypatch):
    result_id, _ = stored_map
    at = page(store, monkeypatch, {"nk": "6"})
    click(at, result_id, {"pick": [{"idx": 7}]})
    assert at.selectbox(key="pick_focus").value == "clip07"
    assert at.query_params["focus"] == "clip07"
    ids, cos = brute_knn(RUN, LAYER, 7, 6)
    nn = frame_with(at, NN_COLUMNS)
    assert list(nn["item_id"]) == ids
    np.testing.assert_allclose(nn["cosine"], cos, rtol=1e-5)
    assert list(nn["caption"]) == [tools_captions(int(i[4:])) for i in ids]
    assert_thumbnails(at, nn, store)
    # the same list from a link alone
    again = frame_with(page(store, monkeypatch, {"nk": "6", "focus": "clip07"}), NN_COLUMNS)
    assert list(again["item_id"]) == ids
    # a drag after the click keeps the clicked item
    click(at, result_id, {"pick": [{"idx": 7}], "box": {"x": [0, 1], "y": [0, 1]}})
    assert at.selectbox(key="pick_focus").value == "clip07" and at.query_params["box"] == "0,1,0,1"
    # a double-click clears the selection, and the focus and box with it
    click(at, result_id, {})
    assert at.selectbox(key="pick_focus").value == "(none)" and "focus" not in at.query_params
    assert "box" not in at.query_params


def test_a_dragged_box_lists_exactly_its_points_and_offers_them_as_csv(store, stored_map, monkeypatch):
    result_id, xy = stored_map
    xs = sorted(x for x, _ in xy.values())
    ys = sorted(y for _, y in xy.values())
    box = (xs[5], xs[20], ys[3], ys[25])  # corners on points: the edges count as inside
    at = page(store, monkeypatch)
    click(at, result_id, {"box": {"x": [box[1], box[0]], "y": [box[2], box[3]]}})
    want = sorted(f"clip{i:02d}" for i, (x, y) in xy.items() if box[0] <= x <= box[1] and box[2] <= y <= box[3])
    assert 0 < len(want) < TOOLS_N
    listed = frame_with(at, BOX_COLUMNS)
    assert sorted(listed["item_id"]) == want
    assert at.get("download_button")  # the CSV's content is tested in tests/analysis/test_embedding_tools.py
    assert [b for b in at.get("download_button") if "dl_selection" in b.proto.id]
    # the box is in the link, and the link alone gives the same list
    again = frame_with(page(store, monkeypatch, {"box": at.query_params["box"]}), BOX_COLUMNS)
    assert sorted(again["item_id"]) == want


def test_colour_by_a_numeric_or_a_categorical_field(store, monkeypatch):
    at = page(store, monkeypatch, {"colour": "speed"})
    assert {"speed", "lane", "shade", "note"} <= set(at.selectbox(key="pick_colour").options)
    _, marks = spec(at)
    assert marks[0]["encoding"]["color"] == {**marks[0]["encoding"]["color"], "field": "speed",
                                             "type": "quantitative"}
    _, marks = spec(page(store, monkeypatch, {"colour": "shade"}))
    assert marks[0]["encoding"]["color"]["type"] == "nominal"


def test_the_density_view_counts_every_point(store, monkeypatch):
    at = page(store, monkeypatch, {"density": "1"})
    _, marks = spec(at)
    assert marks[0]["mark"]["type"] == "rect"
    (chart,) = at.get("vega_lite_chart")
    tables = [pa.ipc.open_stream(d.data.data).read_pandas() for d in chart.proto.datasets]
    (cells,) = [t for t in tables if "count" in t]
    assert cells["count"].sum() == TOOLS_N


def test_hostile_links_are_inert(store, monkeypatch):
    evil = "[x](javascript:alert(1))"
    at = page(store, monkeypatch, {"q": evil, "focus": "<script>alert(1)</script>", "box": "javascript:alert(1)",
                                   "nk": "1e9", "colour": evil})
    warnings = " ".join(w.value for w in at.warning)
    assert "unknown item" in warnings and "not four numbers" in warnings
    assert at.selectbox(key="pick_focus").value == "(none)"
    markdown = " ".join(str(e.value) for e in list(at.markdown) + list(at.caption) + list(at.warning))
    assert "](javascript:" not in markdown and "<script>" not in markdown
    # the hostile caption of item 0 matches its own text literally, and only that
    got = frame_with(page(store, monkeypatch, {"colour": "note", "q": "ball number 0"}),
                     ["item_id", "caption", "matched"])
    assert list(got["item_id"]) == ["clip00"]


def test_the_neighbours_page_shows_each_neighbours_thumbnail_column(store, monkeypatch):
    at = page(store, monkeypatch, {"item": "clip03", "models": "vid", "runs": "vid-f2", "layers": "3", "k": "4"},
              name="neighbours")
    nn = frame_with(at, NN_COLUMNS)
    ids, _ = brute_knn("vid-f2", 3, 3, 4)
    assert list(nn["item_id"]) == ids
    assert_thumbnails(at, nn, store)


# ---------------------------------------------------------------- Layer curves: overlaid runs and a baseline
def curves_page(store, monkeypatch, params):
    monkeypatch.setenv("LAYERSCOPE_STORE", str(store))
    at = AppTest.from_file(APP, default_timeout=180)
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    at.switch_page("pages/curves.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def overlay_spec(at):
    charts = [c for c in at.get("vega_lite_chart") if '"title": "budget"' in c.proto.spec]  # dash by budget
    assert len(charts) == 1
    s = json.loads(charts[0].proto.spec)
    tables = [pa.ipc.open_stream(d.data.data).read_pandas() for d in charts[0].proto.datasets]
    return s.get("layer", [s]), tables


def stored_profile(store, run, metric):
    con = duckdb.connect(str(store), read_only=True)
    try:
        (v,) = con.execute("SELECT layer_values FROM result_profiles WHERE run_id = ? AND metric = ?",
                           [run, metric]).fetchone()
    finally:
        con.close()
    return np.asarray(v, dtype=float)


def test_the_overlay_reads_its_runs_and_baseline_from_the_link_and_writes_them_back(store, monkeypatch):
    at = curves_page(store, monkeypatch, {"dataset": "tools", "metric": "rankme", "oruns": ["vid-f1", "vid-f2"],
                                          "base": "vid-f1"})
    assert at.multiselect(key="pick_oruns").value == ["vid-f1", "vid-f2"]
    assert set(at.multiselect(key="pick_oruns").options) == {"vid (random init) · n_f 1", "vid (random init) · n_f 2",
                                                             "txt (random init) · n_c 1"}  # run ids shown by label
    assert at.selectbox(key="pick_base").value == "vid-f1"
    assert at.toggle(key="pick_diff").value is False
    at.toggle(key="pick_diff").set_value(True).run()
    assert at.query_params["diff"] == "1"
    at.multiselect(key="pick_oruns").select("txt-c1").run()
    assert at.query_params["oruns"] == ["vid-f1", "vid-f2", "txt-c1"]
    at.selectbox(key="pick_base").set_value("(none)").run()
    assert at.query_params["base"] == "(none)" and "pick_diff" not in [t.key for t in at.toggle]
    assert "diff" not in at.query_params  # a control not on screen leaves the link


def test_the_difference_to_the_baseline_is_each_layers_difference(store, monkeypatch):
    at = curves_page(store, monkeypatch, {"dataset": "tools", "metric": "rankme", "oruns": ["vid-f1", "vid-f2"],
                                          "base": "vid-f1", "diff": "1"})
    marks, tables = overlay_spec(at)
    assert marks[-1]["mark"]["type"] == "rule" and marks[-1]["mark"]["strokeDash"]  # the baseline is zero
    (line,) = [t for t in tables if "run_id" in t and set(t["run_id"]) == {"vid-f2"}]
    want = stored_profile(store, "vid-f2", "rankme") - stored_profile(store, "vid-f1", "rankme")  # same depths
    np.testing.assert_allclose(line.sort_values("layer")["value"], want)
    assert any("each curve minus the baseline" in c.value for c in at.caption)


def test_the_baseline_is_drawn_dashed_with_the_others_in_colour(store, monkeypatch):
    at = curves_page(store, monkeypatch, {"dataset": "tools", "metric": "rankme", "base": "txt-c1"})
    marks, _ = overlay_spec(at)
    assert marks[-1]["mark"]["type"] == "line" and marks[-1]["mark"]["color"] == "black"
    assert "txt" not in " ".join(marks[0]["encoding"]["color"]["scale"]["domain"])
    assert any("point estimates only" in c.value for c in at.caption)  # profiles store no intervals


def test_alignment_curves_overlay_with_their_stored_interval(dashboard_store, monkeypatch):
    metric = "alignment with vit-tiny"  # the two text models' curves, each with its best cell's interval
    at = curves_page(dashboard_store, monkeypatch, {"dataset": "moving_shapes", "metric": metric})
    marks, tables = overlay_spec(at)
    bars = [m for m in marks if m["mark"]["type"] == "rule" and "y2" in m["encoding"]]
    assert bars, [m["mark"] for m in marks]
    con = duckdb.connect(str(dashboard_store), read_only=True)
    try:
        from analysis.views.curves import curve_intervals

        iv = curve_intervals(con, "moving_shapes")
    finally:
        con.close()
    iv = iv[iv["metric"] == metric]
    got = pd.concat([t for t in tables if "low" in t]).dropna(subset=["low"]).drop_duplicates(["model", "layer"])
    assert sorted(zip(got["model"], got["low"], got["high"])) == sorted(zip(iv["model"], iv["low"], iv["high"]))


def test_hostile_overlay_links_fall_back_with_a_note(store, monkeypatch):
    at = curves_page(store, monkeypatch, {"dataset": "tools", "metric": "rankme",
                                          "oruns": ["[x](javascript:alert(1))", "vid-f2", "vid-f1"],
                                          "base": "<script>"})
    warnings = " ".join(w.value for w in at.warning)
    assert "unknown runs to overlay" in warnings and "unknown baseline run" in warnings
    assert at.multiselect(key="pick_oruns").value == ["vid-f2", "vid-f1"]
    assert at.selectbox(key="pick_base").value == "(none)"
    markdown = " ".join(str(e.value) for e in list(at.markdown) + list(at.caption) + list(at.warning))
    assert "](javascript:" not in markdown and "<script>" not in markdown


# ---------------------------------------------------------------- a two-sided map: each side's neighbours
@pytest.fixture(scope="module")
def named_store(named_layers_store):
    return named_layers_store  # built once per run (tests/conftest.py); read only


def test_a_two_sided_map_lists_the_items_neighbours_on_each_side(named_store, monkeypatch):
    from analysis.storage.store import load_layer

    con = duckdb.connect(str(named_store), read_only=True)
    try:
        (row,) = [r for r in R.read_studies(con, study="embedding_map", dataset="pairs")
                  if r["payload"]["kind"] == "pair" and r["payload"].get("method", "umap") == "umap"]
        sides = [load_layer(con, run, int(layer), with_idx=True)
                 for run, layer in zip(row["payload"]["run_ids"], row["payload"]["layers"])]
    finally:
        con.close()
    at = page(named_store, monkeypatch, {"dataset": "pairs", "map": row["subject"], "focus": "pair003", "nk": "4"})
    tables = [d.value for d in at.dataframe if list(d.value.columns) == NN_COLUMNS]
    assert len(tables) == 2
    for (X, ids), nn in zip(sides, tables):
        X = X.astype(np.float64) / np.linalg.norm(X.astype(np.float64), axis=1, keepdims=True)
        q = X[list(ids).index(3)]
        best = sorted(((float(q @ X[j]), int(ids[j])) for j in range(len(ids)) if ids[j] != 3), reverse=True)[:4]
        assert list(nn["item_id"]) == [f"pair{i:03d}" for _, i in best]
        np.testing.assert_allclose(nn["cosine"], [c for c, _ in best], rtol=1e-5)
