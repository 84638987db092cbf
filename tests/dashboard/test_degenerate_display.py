"""Degenerate input on screen: marked on the heatmap, never a best cell, said in words; the same in
the report (trust issue: one notion of degenerate, carried to every page and the report)."""

import json

import numpy as np
import pyarrow as pa
import pytest

from analysis.studies import analyze_store
from precompute.cli import main
from precompute.synthetic.store import write_run
from tests.helpers import app, charts

N, D = 30, 8


@pytest.fixture
def collapsed_store(tmp_path):
    """A video model whose layers 0 and 1 are collapsed (a constant first frame) and a whole
    second video model collapsed, against one healthy text model."""
    rng = np.random.default_rng(0)
    z = rng.normal(size=(N, 4))
    V = np.stack([z @ rng.normal(size=(4, D)) + 0.3 * rng.normal(size=(N, D)) for _ in range(4)]).astype(np.float32)
    V[0] = V[0][0]
    V[1] = V[1][3]
    T = np.stack([z @ rng.normal(size=(4, D)) + 0.3 * rng.normal(size=(N, D)) for _ in range(3)]).astype(np.float32)
    dead = np.repeat(V[:, :1], N, axis=1)
    path = tmp_path / "c.duckdb"
    write_run(path, "v", V, model="vid", modality="video", n_frames=1)
    write_run(path, "dead", dead, model="deadvid", modality="video", n_frames=1)
    write_run(path, "t", T, model="txt", modality="text", n_captions=1)
    analyze_store(path, k=5, metrics=("mutual_knn",), n_boot=10, log=lambda m: None)
    return path


def _heat_data(at):
    """The heatmap's data rows as the browser receives them (Arrow IPC inside the chart proto)."""
    proto = charts(at)[0].proto
    (ds,) = proto.datasets
    table = pa.ipc.open_stream(ds.data.data).read_all().to_pandas()
    rows = table.astype(object).where(table.notna(), None).to_dict(orient="records")
    return json.loads(proto.spec), rows


def test_heatmap_crosses_out_degenerate_cells_and_never_names_them_best(collapsed_store, monkeypatch):
    at = app(collapsed_store, monkeypatch, "heatmap", {"a": "vid", "b": "txt", "metric": "mutual_knn"})
    _, values = _heat_data(at)
    crossed = {(v["layer_a"], v["layer_b"]) for v in values if v.get("degenerate")}
    assert crossed == {(a, b) for a in (0, 1) for b in range(3)}
    best = [v for v in values if v.get("best")]
    assert len(best) == 1 and best[0]["layer_a"] >= 2
    assert any("degenerate layer(s) marked and excluded" in c.value for c in at.caption)


def test_an_all_collapsed_model_has_no_best_cell_and_the_page_says_why(collapsed_store, monkeypatch):
    at = app(collapsed_store, monkeypatch, "heatmap", {"a": "deadvid", "b": "txt", "metric": "mutual_knn"})
    _, values = _heat_data(at)
    assert not any(v.get("best") for v in values)
    assert all(v["value"] is None for v in values)  # k-NN is undefined on collapsed layers: grey, not dropped
    assert len(values) == 4 * 3
    assert any("No layer pair can be called best" in w.value for w in at.warning)
    mm = app(collapsed_store, monkeypatch, "model_map")
    assert any("deadvid" in w.value and "unrelated" in w.value for w in mm.warning)


def test_the_report_marks_degenerate_grids(collapsed_store, tmp_path):
    out = tmp_path / "r.html"
    assert main(["report", "--store", str(collapsed_store), "--out", str(out)]) == 0
    data = json.loads(out.with_suffix(".json").read_text())
    (ds,) = data["datasets"]
    by_model = {m["model"]: m for m in ds["sections"]["summary"]["models"]}
    dead = by_model["deadvid"]["alignment"]["txt"]
    assert dead["value"] is None and "no best cell" in dead["note"]
    heat = {(h["model_a"], h["model_b"]): h for h in ds["sections"]["heatmaps"]}
    assert set(heat[("vid", "txt")]["flags"]["degenerate_a"]) == {"0", "1"}
    assert heat[("vid", "txt")]["best"][0] >= 2


def test_curve_notes_are_grouped_per_model_and_note():
    import pandas as pd

    from analysis.views.curves import flag_lines

    data = pd.DataFrame({"model": ["a", "a", "a", "b"], "layer": [0, 1, 2, 0],
                         "flagged": [True, True, False, True],
                         "note": ["LID on 4 distinct of 6 items", "LID on 4 distinct of 6 items", "", ""]})
    assert flag_lines(data) == ["a: LID on 4 distinct of 6 items (layers 0, 1)", "b: undefined (layer 0)"]



def test_the_heatmap_draws_the_shuffled_null_and_never_on_degenerate_cells(collapsed_store, monkeypatch):
    """Issue #29, item 5: cells past the null's 95th percentile are outlined, the caption says the
    best cell's p; a degenerate cell is never one of them, as it is never best."""
    at = app(collapsed_store, monkeypatch, "heatmap", {"a": "vid", "b": "txt", "metric": "mutual_knn"})
    _, values = _heat_data(at)
    beyond = {(v["layer_a"], v["layer_b"]) for v in values if v.get("beyond_null")}
    assert beyond and all(a >= 2 for a, _ in beyond)  # planted structure: past the null, healthy layers only
    assert any("White dotted outline" in c.value and "shuffles" in c.value for c in at.caption)
    assert any("beyond chance\\: p = " in c.value for c in at.caption)  # ":" is Markdown-escaped


def test_the_alignment_curves_draw_each_model_s_null_rule(collapsed_store, monkeypatch):
    at = app(collapsed_store, monkeypatch, "curves", {"metric": "alignment with txt", "models": ["vid"]})
    spec = json.loads(charts(at)[0].proto.spec)
    assert any(layer.get("mark", {}).get("strokeDash") == [2, 3] for layer in spec["layer"])
    assert any("Dotted rules" in c.value for c in at.caption)
