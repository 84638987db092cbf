"""Every selection lives in the URL: change a control, copy the link, open it fresh, see the same view.
Also the defaults a first visit gets, the heatmap → Neighbours carry-over, and the comparison views.
All on the small analysed store of tests/stores.py (write_dashboard_store), named like the demo's."""

import json

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from analysis.storage import results as R
from analysis.views.store_info import UNTRAINED_ICON
from tests.helpers import app

#: some 80 AppTest sessions on the dashboard store: CI runs them, the fast tier leaves them out
pytestmark = pytest.mark.slow

MS = {"dataset": "moving_shapes"}


def widget(at, kind, key):
    found = [w for w in at.get(kind) if getattr(w, "key", None) == key]
    assert found, f"no {kind} with key {key!r} on the page"
    return found[0]


def as_list(v):
    return v if isinstance(v, list) else [v]


# (page, URL it opens with, widget kind, widget key, new value, URL parameter, that parameter's text)
ROUND_TRIPS = [
    ("heatmap", MS, "selectbox", "pick_a", "vit-tiny", "a", "vit-tiny"),
    ("heatmap", MS, "selectbox", "pick_b", "llama-tiny", "b", "llama-tiny"),
    ("heatmap", MS, "selectbox", "pick_metric", "cka", "metric", "cka"),
    ("heatmap", MS, "selectbox", "pick_nf", 2, "nf", "2"),
    ("heatmap", MS, "selectbox", "pick_nc", 1, "nc", "1"),
    ("heatmap", MS, "selectbox", "sel_la", 1, "la", "1"),
    ("heatmap", MS, "selectbox", "sel_lb", 2, "lb", "2"),
    ("heatmap", MS, "radio", "pick_view", "side by side", "view", "side by side"),
    ("heatmap", {**MS, "view": "difference"}, "selectbox", "pick_vs", "metric", "vs", "metric"),
    ("heatmap", {**MS, "view": "difference", "vs": "metric"}, "selectbox", "pick_with_metric", "cknna",
     "with_metric", "cknna"),
    ("heatmap", {**MS, "view": "side by side", "vs": "budgets"}, "selectbox", "pick_with_budgets",
     "n_f=2, n_c=1", "with_budgets", "n_f=2, n_c=1"),
    ("heatmap", {**MS, "view": "side by side", "vs": "model B"}, "selectbox", "pick_with_model",
     "llama-tiny (n_f=4, n_c=4)", "with_model", "llama-tiny (n_f=4, n_c=4)"),
    ("curves", MS, "selectbox", "pick_metric", "lid", "metric", "lid"),
    ("curves", MS, "multiselect", "pick_models", ["llama-tiny", "vit-tiny"], "models", ["llama-tiny", "vit-tiny"]),
    ("curves", MS, "multiselect", "pick_models", [], "models", [""]),
    ("scaling", MS, "selectbox", "pick_pair", "vit-tiny|llama-tiny|cka", "pair", "vit-tiny|llama-tiny|cka"),
    ("scaling", MS, "selectbox", "pick_compare", "vit-tiny|llama-tiny|cka", "compare", "vit-tiny|llama-tiny|cka"),
    ("neighbours", MS, "selectbox", "pick_item", "shape0005", "item", "shape0005"),
    ("neighbours", MS, "slider", "pick_k", 3, "k", "3"),
    ("neighbours", MS, "multiselect", "pick_models", ["vit-tiny", "llama-tiny"], "models", ["vit-tiny", "llama-tiny"]),
    ("neighbours", {**MS, "models": "vit-tiny"}, "slider", "nn_layer_vit-tiny", 2, "layers", "2"),
    ("neighbours", {**MS, "models": "llama-tiny"}, "selectbox", "nn_run_llama-tiny", "r1", "runs", "r1"),
    ("model_map", MS, "selectbox", "pick_dataset", "test_of_time", "dataset", "test_of_time"),
    ("embedding_map", MS, "text_input", "pick_q", "shape0005", "q", "shape0005"),
    ("embedding_map", {**MS, "q": "shape000[1-3]"}, "toggle", "pick_regex", True, "regex", "1"),
    ("temporal", MS, "selectbox", "pick_dataset", "test_of_time", "dataset", "test_of_time"),
    ("overview", {}, "selectbox", None, None, None, None),
]


def run_id(store, model, dataset="moving_shapes", n_captions=None, n_frames=None):
    con = duckdb.connect(str(store), read_only=True)
    sql = "SELECT run_id FROM runs WHERE model = ? AND dataset = ? AND variant = 'original'"
    args = [model, dataset]
    if n_captions is not None:
        sql, args = sql + " AND n_captions = ?", args + [n_captions]
    if n_frames is not None:
        sql, args = sql + " AND n_frames = ?", args + [n_frames]
    (row,) = con.execute(sql, args).fetchall()
    con.close()
    return row[0]


def round_trip(store, monkeypatch, page, start, kind, key, value, param, text):
    """Set the widget, check the URL's text, open that URL in a fresh session and see the same value."""
    at = app(store, monkeypatch, page, start)
    widget(at, kind, key).set_value(value).run()
    assert not at.exception, [e.value for e in at.exception]
    assert as_list(at.query_params[param]) == as_list(text)
    # the link as the browser now shows it, opened in a fresh session
    again = app(store, monkeypatch, page, dict(at.query_params))
    shown = widget(again, kind, key).value
    assert (list(shown) if kind == "multiselect" else shown) == value
    assert not [w.value for w in again.warning if "in the link" in w.value]


@pytest.mark.parametrize("page,start,kind,key,value,param,text", [r for r in ROUND_TRIPS if r[3]],
                         ids=[f"{r[0]}-{r[5]}" for r in ROUND_TRIPS if r[3]])
def test_control_round_trips_through_the_url(dashboard_store, monkeypatch, page, start, kind, key, value, param, text):
    if value == "r1":  # a run id is only known once the store exists: llama-tiny's smallest caption budget
        value = text = run_id(dashboard_store, "llama-tiny", n_captions=1)
    round_trip(dashboard_store, monkeypatch, page, start, kind, key, value, param, text)


#: the Embedding map's item tools on the tools store (tests/stores.py), whose items carry metadata
MAP_TOOLS = {"dataset": "tools", "map": "vid · video L3"}
MAP_ROUND_TRIPS = [
    ("selectbox", "pick_ff", "shade", "ff", "shade"),
    ("multiselect", "pick_fv", ["red", "blue"], "fv", ["red", "blue"]),
    ("selectbox", "pick_cmp", "vid-f1", "cmp", "vid-f1"),
    ("slider", "pick_cmpl", 1, "cmpl", "1"),
    ("slider", "pick_ak", 4, "ak", "4"),
    ("toggle", "pick_linked", True, "linked", "1"),
    ("radio", "pick_select", "lasso", "select", "lasso"),
]


@pytest.fixture(scope="module")
def tools_store(map_tools_store):
    return map_tools_store


@pytest.mark.parametrize("kind,key,value,param,text", MAP_ROUND_TRIPS, ids=[r[3] for r in MAP_ROUND_TRIPS])
def test_map_item_tool_round_trips_through_the_url(tools_store, monkeypatch, kind, key, value, param, text):
    start = {**MAP_TOOLS, "ff": "shade"} if param == "fv" else MAP_TOOLS
    round_trip(tools_store, monkeypatch, "embedding_map", start, kind, key, value, param, text)


def test_a_lasso_round_trips_through_the_url(tools_store, monkeypatch):
    """The lasso's polygon stays in the link as written, and the link opened fresh lists the same items."""
    lasso = "-1e3,-1e3;1e3,-1e3;0,1e3"  # a triangle round every point
    at = app(tools_store, monkeypatch, "embedding_map", {**MAP_TOOLS, "select": "lasso", "lasso": lasso})
    assert at.query_params["select"] == "lasso" and at.query_params["lasso"] == lasso
    again = app(tools_store, monkeypatch, "embedding_map", dict(at.query_params))
    assert again.radio(key="pick_select").value == "lasso"
    listed = [[list(d.value["item_id"]) for d in t.dataframe if list(d.value.columns)[:1] == ["item_id"]
               and "series" in d.value] for t in (at, again)]
    assert listed[0] == listed[1] and len(listed[0]) == 1 and 0 < len(listed[0][0])
    assert not [w.value for w in again.warning if "in the link" in w.value]


@pytest.mark.parametrize("page,params,fragment", [
    ("heatmap", {**MS, "view": "sideways"}, "unknown view"),
    ("heatmap", {**MS, "view": "difference", "vs": "colour"}, "unknown compare with another"),
    ("heatmap", {**MS, "view": "difference", "vs": "metric", "with_metric": "nope"}, "unknown second grid"),
    ("curves", {**MS, "metric": "no-such"}, "unknown metric"),
    ("curves", {**MS, "models": ["vit-tiny", "ghost"]}, "unknown models 'ghost'"),
    ("scaling", {**MS, "compare": "a|b|c"}, "unknown compare with"),
    ("neighbours", {**MS, "k": "1e9"}, "k '1e9' in the link is not a whole number"),
    ("neighbours", {**MS, "models": "vit-tiny", "layers": "99"}, "layer of vit-tiny '99'"),
    ("neighbours", {**MS, "models": "vit-tiny", "runs": "r-unknown"}, "unknown run of vit-tiny"),
    ("neighbours", {**MS, "item": "<script>"}, "unknown item"),
])
def test_invalid_link_values_fall_back_with_a_note(dashboard_store, monkeypatch, page, params, fragment):
    at = app(dashboard_store, monkeypatch, page, params)  # never an exception
    assert any(fragment in w.value.replace("\\", "") for w in at.warning), [w.value for w in at.warning]


def test_first_visit_defaults(dashboard_store, monkeypatch):
    at = app(dashboard_store, monkeypatch, "heatmap", MS)
    a, b = at.selectbox(key="pick_a").value, at.selectbox(key="pick_b").value
    con = duckdb.connect(str(dashboard_store), read_only=True)
    nf, nc = con.execute("SELECT max(n_frames), max(n_captions) FROM result_grids WHERE dataset = ? AND model_a = ? "
                         "AND model_b = ? AND metric = 'mutual_knn'", ["moving_shapes", a, b]).fetchall()[0]
    con.close()
    assert at.selectbox(key="pick_metric").value == "mutual_knn"  # not CKA, the alphabetical first
    assert (at.selectbox(key="pick_nf").value, at.selectbox(key="pick_nc").value) == (nf, nc) == (4, 4)
    assert at.radio(key="pick_view").value == "one grid"
    curves = app(dashboard_store, monkeypatch, "curves", MS)
    assert curves.selectbox(key="pick_metric").value.startswith("alignment with")  # not LID
    scaling = app(dashboard_store, monkeypatch, "scaling", MS)
    assert scaling.selectbox(key="pick_pair").value.endswith("|mutual_knn")


def test_heatmap_cell_carries_to_neighbours_with_the_same_layers_and_runs(dashboard_store, monkeypatch):
    params = {**MS, "a": "vit-tiny", "b": "llama-tiny", "metric": "cknna", "nf": "2", "nc": "1", "la": "3", "lb": "1"}
    at = app(dashboard_store, monkeypatch, "heatmap", params)
    at.button(key="to_neighbours").click().run()
    assert not at.exception
    assert at.title[0].value == "Neighbours"
    assert at.slider(key="nn_layer_vit-tiny").value == 3 and at.slider(key="nn_layer_llama-tiny").value == 1
    # the runs behind the grid: vit-tiny at n_f=2, llama-tiny at n_c=1 (looked up in the store directly)
    assert at.selectbox(key="nn_run_vit-tiny").value == run_id(dashboard_store, "vit-tiny", n_frames=2)
    assert at.selectbox(key="nn_run_llama-tiny").value == run_id(dashboard_store, "llama-tiny", n_captions=1)
    assert as_list(at.query_params["models"]) == ["vit-tiny", "llama-tiny"]
    assert as_list(at.query_params["layers"]) == ["3", "1"]
    assert not [w for w in at.warning if w.icon != UNTRAINED_ICON]  # no URL notice; the random-init banner is expected


def chart_rows(chart):
    """A chart's spec and data rows as the browser receives them (Arrow IPC in the chart proto)."""
    (ds,) = chart.proto.datasets
    table = pa.ipc.open_stream(ds.data.data).read_all().to_pandas()
    return json.loads(chart.proto.spec), table.astype(object).where(table.notna(), None).to_dict(orient="records")


def stored_grid(store, **where):
    con = duckdb.connect(str(store), read_only=True)
    (rid,) = con.execute("SELECT result_id FROM result_grids WHERE " + " AND ".join(f"{k} = ?" for k in where),
                         list(where.values())).fetchall()[0]
    (g,) = R.read_grids(con, result_id=rid)
    con.close()
    return g["grid"]


def test_difference_view_draws_this_grid_minus_the_other_with_values_in_cells(dashboard_store, monkeypatch):
    params = {**MS, "a": "vit-tiny", "b": "llama-tiny", "metric": "mutual_knn", "nf": "4", "nc": "4",
              "view": "difference", "vs": "budgets", "with_budgets": "n_f=1, n_c=1"}
    at = app(dashboard_store, monkeypatch, "heatmap", params)
    (_, diff) = at.get("vega_lite_chart")  # this grid, then the difference beside it
    spec, rows = chart_rows(diff)
    base = {"dataset": "moving_shapes", "model_a": "vit-tiny", "model_b": "llama-tiny", "metric": "mutual_knn"}
    want = (stored_grid(dashboard_store, **base, n_frames=4, n_captions=4)
            - stored_grid(dashboard_store, **base, n_frames=1, n_captions=1))
    got = np.full(want.shape, np.nan)
    for r in rows:
        got[r["layer_a"], r["layer_b"]] = np.nan if r["value"] is None else r["value"]
    np.testing.assert_allclose(got, want, atol=1e-9)
    # a 5 × 5 grid is small enough to read: every defined cell carries its value as text
    assert any(layer.get("mark", {}).get("type") == "text" and layer["encoding"].get("text", {}).get("field") == "label"
               for layer in spec["layer"])
    assert {r["label"] for r in rows if r["value"] is not None} == {f"{v:.2f}" for v in want[np.isfinite(want)]}
    assert "minus n_f=1, n_c=1" in json.dumps(spec["title"])


def test_side_by_side_of_one_metric_shares_one_colour_scale(dashboard_store, monkeypatch):
    params = {**MS, "a": "vit-tiny", "b": "llama-tiny", "metric": "mutual_knn", "view": "side by side",
              "vs": "budgets", "with_budgets": "n_f=1, n_c=1"}
    at = app(dashboard_store, monkeypatch, "heatmap", params)
    left, right = at.get("vega_lite_chart")
    (ls, lrows), (rs, rrows) = chart_rows(left), chart_rows(right)
    values = [r["value"] for r in lrows + rrows if r["value"] is not None]
    for spec in (ls, rs):
        scale = spec["layer"][0]["encoding"]["color"]["scale"]
        assert scale["domain"] == pytest.approx([min(values), max(values)])


def test_difference_of_grids_of_other_shapes_falls_back_to_side_by_side(dashboard_store, monkeypatch):
    # all-MiniLM has 7 layers and llama-tiny 5: model B differs in shape
    params = {**MS, "a": "vit-tiny", "b": "all-MiniLM-L6-v2", "metric": "mutual_knn", "view": "difference",
              "vs": "model B"}
    at = app(dashboard_store, monkeypatch, "heatmap", params)
    second = next(s for s in at.selectbox if s.label == "Second grid")
    at = second.select(next(o for o in second.options if o.startswith("llama-tiny"))).run()
    assert any("a difference needs grids of one shape" in w.value for w in at.warning)
    left, right = at.get("vega_lite_chart")
    assert "all-MiniLM-L6-v2" in json.dumps(json.loads(left.proto.spec)["title"])
    assert "llama-tiny" in json.dumps(json.loads(right.proto.spec)["title"])
