"""The Embedding map's item-level tools driven headlessly on the tools store (tests/stores.py
``write_map_tools_store``): the per-item agreement table between the map's layer and another run's
layer (outliers first), a metadata filter over the map, search and table, and a box's alignment with its
chance level. Expected values from the vectors the store was written with (sklearn NearestNeighbors)."""

import json

import numpy as np
import pyarrow as pa
import pytest
from sklearn.neighbors import NearestNeighbors

from tests.helpers import app
from tests.stores import TOOLS_N, tools_metadata, tools_vectors

MAP = "vid · video L3"  # run vid-f2, layer 3


@pytest.fixture(scope="module")
def store(map_tools_store):
    return map_tools_store


def page(store, monkeypatch, params=None):
    return app(store, monkeypatch, "embedding_map", {"dataset": "tools", "map": MAP, **(params or {})})


def sk_lists(X, k):
    nn = NearestNeighbors(n_neighbors=k + 1, metric="cosine", algorithm="brute").fit(X)
    return [set(int(j) for j in row if j != i) for i, row in enumerate(nn.kneighbors(X)[1])]


def agreement(run_b, layer_b, k, rows=None):
    A, B = tools_vectors("vid-f2", 4)[3], tools_vectors(run_b, 4 if run_b.startswith("vid") else 3)[layer_b]
    rows = list(range(TOOLS_N)) if rows is None else list(rows)
    la, lb = sk_lists(A[rows], k), sk_lists(B[rows], k)
    return {f"clip{i:02d}": len(a & b) / k for i, a, b in zip(rows, la, lb)}


def item_rows(at):
    (t,) = [d.value for d in at.dataframe if "agreement" in d.value.columns]
    return t


def test_the_table_compares_the_maps_layer_with_another_models_last_layer_by_default(store, monkeypatch):
    at = page(store, monkeypatch)
    assert at.selectbox(key="pick_cmp").value == "txt-c1" and at.slider(key="pick_cmpl").value == 2
    assert at.slider(key="pick_ak").value == 10
    t = item_rows(at)
    assert dict(zip(t["item_id"], t["agreement"])) == pytest.approx(agreement("txt-c1", 2, 10))
    assert list(t["agreement"]) == sorted(t["agreement"])  # outliers first


def test_the_compared_layer_and_k_come_from_the_link(store, monkeypatch):
    at = page(store, monkeypatch, {"cmp": "vid-f1", "cmpl": "1", "ak": "4"})
    t = item_rows(at)
    assert dict(zip(t["item_id"], t["agreement"])) == pytest.approx(agreement("vid-f1", 1, 4))
    assert {k: at.query_params[k] for k in ("cmp", "cmpl", "ak")} == {"cmp": "vid-f1", "cmpl": "1", "ak": "4"}


def test_a_metadata_filter_narrows_the_map_the_search_and_the_table(store, monkeypatch):
    at = page(store, monkeypatch, {"ff": "shade", "fv": ["red", "blue"], "q": "ball"})
    want = sorted(f"clip{i:02d}" for i in range(TOOLS_N) if tools_metadata(i)["shade"] in ("red", "blue"))
    assert sorted(item_rows(at)["item_id"]) == want
    (found,) = [d.value for d in at.dataframe if "matched" in d.value.columns]
    assert sorted(found["item_id"]) == want
    (chart,) = at.get("vega_lite_chart")
    tables = [pa.ipc.open_stream(d.data.data).read_pandas() for d in chart.proto.datasets]
    drawn = {i for t in tables if "item_id" in t for i in t["item_id"]}
    assert drawn == set(want)
    assert any("the filter shows 20 of 30 items" in c.value for c in at.caption)
    kept = [int(i[4:]) for i in want]
    (line,) = [m.value.replace("\\", "") for m in at.markdown if "Alignment on the filtered items" in m.value]
    assert f"mutual k-NN {np.mean(list(agreement('txt-c1', 2, 10, kept).values())):.3f} between" in line
    assert f"among its 20 items; chance {10 / 19:.3f})" in line


def test_a_box_shows_the_layer_pairs_alignment_on_its_items_with_chance(store, monkeypatch):
    import duckdb

    from analysis.storage import results as R

    con = duckdb.connect(str(store), read_only=True)
    (row,) = [r for r in R.read_studies(con, study="embedding_map", dataset="tools") if r["subject"] == MAP]
    con.close()
    p = row["payload"]
    xs = sorted(p["x"])
    box = (xs[4], xs[22], min(p["y"]), max(p["y"]))
    inside = sorted(int(i) for i, x in zip(p["items"], p["x"]) if box[0] <= x <= box[1])
    at = page(store, monkeypatch, {"ak": "3", "box": ",".join(map(repr, box))})
    want = np.mean(list(agreement("txt-c1", 2, 3, inside).values()))
    (line,) = [m.value.replace("\\", "") for m in at.markdown if "Alignment on this selection" in m.value]
    assert f"mutual k-NN {want:.3f} between" in line
    assert f"(k=3, neighbours searched among its {len(inside)} items; chance {3 / (len(inside) - 1):.3f})" in line


def chart_tables(chart):
    """The spec's layers and every dataset the chart shipped (Arrow IPC in the chart proto)."""
    spec = json.loads(chart.proto.spec)
    return spec.get("layer", [spec]), [pa.ipc.open_stream(d.data.data).read_pandas() for d in chart.proto.datasets]


def stored_points(store, subject):
    import duckdb

    from analysis.storage import results as R

    con = duckdb.connect(str(store), read_only=True)
    (row,) = [r for r in R.read_studies(con, study="embedding_map", dataset="tools") if r["subject"] == subject]
    con.close()
    p = row["payload"]
    return {int(i): (x, y) for i, x, y in zip(p["items"], p["x"], p["y"])}


def test_the_linked_map_follows_the_box_and_the_clicked_item_on_the_compared_layer(store, monkeypatch):
    main = stored_points(store, MAP)
    xs = sorted(x for x, _ in main.values())
    box = (xs[3], xs[12], -1e9, 1e9)
    inside = {f"clip{i:02d}" for i, (x, _) in main.items() if box[0] <= x <= box[1]}
    at = page(store, monkeypatch, {"linked": "1", "focus": "clip05", "nk": "2", "box": ",".join(map(repr, box))})
    first, second = at.get("vega_lite_chart")
    marks, tables = chart_tables(second)
    assert not any(m.get("params") for m in marks)  # the linked map selects nothing itself
    other = stored_points(store, "txt · text L2")  # the compared layer's stored map, drawn as stored
    (points,) = [t for t in tables if "series" in t and len(t) == TOOLS_N]
    for r in points.itertuples():
        assert (r.x, r.y) == pytest.approx(other[r.idx])
    rings = {m["mark"].get("color"): m for m in marks if m["mark"].get("filled") is False}
    assert set(rings) >= {"#ff7f0e", "#d62728"}
    ring_ids = [set(t["item_id"]) for t in tables if "item_id" in t and len(t) < TOOLS_N]
    assert inside in ring_ids  # the box's items, ringed on the other layer
    near = sk_lists(tools_vectors("vid-f2", 4)[3], 2)[5]  # the clicked item's 2 neighbours at the map's layer
    assert {"clip05"} in ring_ids and {f"clip{j:02d}" for j in near} in ring_ids
    assert "**txt · text · n\\_c=1 L2**" in [m.value for m in at.markdown]


def test_a_compared_layer_without_a_stored_map_gives_its_command(store, monkeypatch):
    at = page(store, monkeypatch, {"linked": "1", "cmp": "vid-f1", "cmpl": "2"})
    assert len(at.get("vega_lite_chart")) == 1
    assert any(c.value.endswith("--dataset tools --model vid --layer 2") for c in at.code)


def test_a_row_picked_in_the_table_becomes_the_inspected_item(store, monkeypatch):
    at = page(store, monkeypatch)
    third = item_rows(at)["item_id"].iloc[2]
    at.session_state["item_table"] = {"selection": {"rows": [2], "columns": []}}
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="pick_focus").value == third and at.query_params["focus"] == third
    # the focus can still be changed elsewhere while the row stays picked
    at.selectbox(key="pick_focus").set_value("clip09").run()
    assert at.query_params["focus"] == "clip09"
