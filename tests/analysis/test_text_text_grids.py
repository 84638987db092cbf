"""Text×text grids on small synthetic text-only stores (issue #31): which pairs are scored, and the
degenerate cases: N close to k, duplicated items, a one-layer text model."""

import duckdb
import numpy as np
import pytest

from analysis.studies.context import DatasetRuns
from analysis.studies.grids import pair_list, same_budget_pairs
from tests.reference import ref_mutual_knn
from tests.stores import write_text_store


def run(model, modality, **budget):
    return {"run_id": f"{model}-{budget}", "model": model, "modality": modality, "variant": "original",
            "n_frames": budget.get("n_frames"), "n_captions": budget.get("n_captions")}


def test_pair_list_labels_every_kind_and_pairs_same_modality_models_at_equal_budgets_only():
    runs = [run("v1", "video", n_frames=2), run("v2", "image", n_frames=2), run("v2", "image", n_frames=4),
            run("t1", "text", n_captions=1), run("t1", "text", n_captions=4), run("t2", "text", n_captions=4),
            run("t2", "text", n_captions=8)]
    pairs = pair_list(DatasetRuns("d", runs, 10), ["mutual_knn"])
    got = sorted((kind, a["run_id"], b["run_id"]) for kind, a, b, _ in pairs)
    cross = [("vision_text", v["run_id"], t["run_id"]) for v in runs[:3] for t in runs[3:]]
    same = [("vision_vision", runs[0]["run_id"], runs[1]["run_id"]), ("text_text", runs[4]["run_id"], runs[5]["run_id"])]
    assert got == sorted(cross + same)


def test_same_budget_pairs_never_pairs_a_model_with_itself():
    runs = [run("t1", "text", n_captions=1), run("t1", "text", n_captions=2)]
    assert same_budget_pairs(runs, "n_captions") == []


def _grids_scored(runs):
    """The grid rows the grids study stores for ``runs`` (mutual k-NN), values left out."""
    return [{"result_id": f"{a['run_id']}|{b['run_id']}", "pair_kind": kind, "model_a": a["model"],
             "model_b": b["model"], "metric": metric, "n_frames": a["n_frames"], "n_captions": b["n_captions"]}
            for kind, a, b, metric in pair_list(DatasetRuns("d", runs, 10), ["mutual_knn"])]


def test_a_text_model_meets_a_two_sided_reference_with_no_shared_caption_budget_in_its_vision_grid():
    """minilm (captions 1) and clip (image tower, text tower at captions 2): no text×text grid is
    scored, so the heatmap and the Overview show clip's image side × minilm, the only grid of the two."""
    from analysis.views.heatmap import best_grid, heat_grids

    runs = [run("clip", "image", n_frames=1), run("clip", "text", n_captions=2), run("minilm", "text", n_captions=1)]
    grids = _grids_scored(runs)
    assert not [g for g in grids if g["pair_kind"] == "text_text"]
    (only,) = [g for g in grids if {g["model_a"], g["model_b"]} == {"clip", "minilm"}]
    assert (only["pair_kind"], only["model_a"], only["model_b"]) == ("vision_text", "clip", "minilm")
    assert best_grid(grids, "minilm", "clip") is only
    assert heat_grids(grids, ["minilm"], ["clip"]) == [only]
    # with a caption budget in common the text×text grid of the two text sides is the one shown
    shared = _grids_scored(runs + [run("clip", "text", n_captions=1)])
    g = best_grid(shared, "minilm", "clip")
    assert (g["pair_kind"], {g["model_a"], g["model_b"]}, g["n_captions"]) == ("text_text", {"clip", "minilm"}, 1)


def stored(store, metric="mutual_knn"):
    con = duckdb.connect(str(store), read_only=True)
    try:
        rows = con.execute("SELECT pair_kind, model_a, model_b, n_rows, n_cols, grid_values, best_value, flags "
                           "FROM result_grids WHERE metric = ? ORDER BY model_a, model_b", [metric]).fetchall()
    finally:
        con.close()
    return [{"kind": r[0], "a": r[1], "b": r[2], "grid": np.array(r[5], dtype=float).reshape(r[3], r[4]),
             "best": r[6], "flags": r[7]} for r in rows]


def test_n_close_to_k_gives_every_item_as_a_neighbour_so_mutual_knn_is_one(tmp_path):
    """N = k + 1: each item's k neighbours are all the other items, in both spaces."""
    rng = np.random.default_rng(0)
    k, n = 4, 5
    write_text_store(tmp_path / "s.duckdb", {("a", 1): rng.normal(size=(2, n, 6)), ("b", 1): rng.normal(size=(3, n, 4))},
                     analyze=dict(k=k, n_boot=0, n_null=0, maps=0, jobs=1))
    (g,) = stored(tmp_path / "s.duckdb")
    assert g["kind"] == "text_text" and g["grid"].shape == (2, 3)
    assert np.allclose(g["grid"], 1.0)


def test_the_model_map_labels_each_cell_with_its_pair_kind(tmp_path):
    from analysis.views.store_info import study
    from analysis.views.studies import model_map_view

    rng = np.random.default_rng(2)
    write_text_store(tmp_path / "s.duckdb", {("a", 1): rng.normal(size=(2, 9, 4)), ("b", 1): rng.normal(size=(2, 9, 4))},
                     analyze=dict(k=2, n_boot=0, n_null=0, maps=0, jobs=1))
    con = duckdb.connect(str(tmp_path / "s.duckdb"), read_only=True)
    try:
        cells = model_map_view(study(con, "model_map", "sentences"))["cells"]
        (g,) = stored(tmp_path / "s.duckdb")
    finally:
        con.close()
    off = cells[cells["model_a"] != cells["model_b"]]
    assert list(off["pair_kind"]) == ["text_text", "text_text"]
    assert (cells[cells["model_a"] == cells["model_b"]]["pair_kind"] == "").all()
    # the map's cell is the stored text×text grid's best cell (the grids study's, reused)
    assert off["similarity"].iloc[0] == pytest.approx(g["best"])


def test_duplicated_items_and_a_one_layer_model_score_as_the_brute_force_reference(tmp_path):
    """Items 0 and 1 are one caption (identical vectors in every layer of both models); model ``one``
    stores a single layer."""
    rng = np.random.default_rng(1)
    n, k = 14, 3
    A, B = rng.normal(size=(1, n, 5)), rng.normal(size=(4, n, 7))
    A[:, 1], B[:, 1] = A[:, 0], B[:, 0]
    write_text_store(tmp_path / "s.duckdb", {("one", 2): A, ("four", 2): B},
                     analyze=dict(k=k, n_boot=0, n_null=0, maps=0, jobs=1))
    (g,) = stored(tmp_path / "s.duckdb")
    assert (g["a"], g["b"], g["grid"].shape) == ("four", "one", (4, 1))  # rows: the first model by name
    import json

    flags = json.loads(g["flags"] or "{}")
    bad_a = {int(i) for i in flags.get("degenerate_a", {})}
    for i in range(4):
        if i in bad_a:
            assert np.isnan(g["grid"][i, 0])
        else:
            want = ref_mutual_knn(B[i].astype(np.float32), A[0].astype(np.float32), k)
            assert g["grid"][i, 0] == pytest.approx(want, abs=1e-12)
