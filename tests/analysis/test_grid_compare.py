"""Comparing two layer grids: what can be compared, the difference, and cell labels."""

import numpy as np
import pandas as pd
import pytest

from analysis.methods.grid_compare import alternatives, budget_text, cell_labels, difference, shared_domain
from analysis.views.heatmap import grid_long


def grid(values, deg_a=None, deg_b=None):
    G = np.asarray(values, dtype=float)
    flags = {}
    if deg_a:
        flags["degenerate_a"] = deg_a
    if deg_b:
        flags["degenerate_b"] = deg_b
    return {"grid": G, "flags": flags, "best_a": 0, "best_b": 0, "n_rows": G.shape[0], "n_cols": G.shape[1]}


def test_difference_is_cellwise_and_undefined_where_either_is():
    g1 = grid([[0.5, 0.2], [np.nan, 0.9]])
    g2 = grid([[0.25, 0.4], [0.1, np.inf]])
    d = difference(g1, g2)
    np.testing.assert_allclose(d["grid"], [[0.25, -0.2], [np.nan, np.nan]])
    assert d["best_a"] is None and (d["n_rows"], d["n_cols"]) == (2, 2)
    long = grid_long(d)
    assert long["value"].isna().sum() == 2 and not long["best"].any()


def test_difference_keeps_degenerate_layers_of_either_grid_marked():
    g1 = grid(np.ones((3, 2)), deg_a={"1": "collapsed layer"})
    g2 = grid(np.zeros((3, 2)), deg_b={"0": "duplicates"})
    d = difference(g1, g2)
    assert d["flags"] == {"degenerate_a": {"1": "collapsed layer"}, "degenerate_b": {"0": "duplicates"}}
    long = grid_long(d)
    # row 1 (two cells) and column 0 (three cells) share one cell: 4 cells marked
    assert long["degenerate"].sum() == 4
    assert "collapsed layer" in long.loc[(long.layer_a == 1) & (long.layer_b == 1), "note"].iloc[0]


def test_difference_of_grids_of_other_shapes_says_why():
    with pytest.raises(ValueError, match="3×2 and 2×2 layers"):
        difference(grid(np.ones((3, 2))), grid(np.ones((2, 2))))


def test_shared_domain_spans_finite_cells_of_both():
    assert shared_domain(grid([[0.2, np.nan]]), grid([[0.9, -0.1]])) == [-0.1, 0.9]
    assert shared_domain(grid([[np.nan]])) is None


INDEX = pd.DataFrame([
    # dataset, kind, a, b, metric, n_f, n_c, n_f_b, id
    ("d", "vision_text", "v", "t", "mutual_knn", 4, 4, None, "r1"),
    ("d", "vision_text", "v", "t", "mutual_knn", 1, 4, None, "r2"),
    ("d", "vision_text", "v", "t", "mutual_knn", 4, 1, None, "r3"),
    ("d", "vision_text", "v", "t", "cka", 4, 4, None, "r4"),
    ("d", "vision_text", "v", "t2", "mutual_knn", 4, 4, None, "r5"),
    ("d", "vision_text", "v", "t2", "mutual_knn", 1, 4, None, "r6"),
    ("e", "vision_text", "v", "t", "mutual_knn", 1, 4, None, "r7"),
    ("d", "vision_text", "w", "t", "mutual_knn", 4, 4, None, "r8"),
], columns=["dataset", "pair_kind", "model_a", "model_b", "metric", "n_frames", "n_captions", "n_frames_b",
            "result_id"])


@pytest.mark.parametrize("vary,ids,labels", [
    ("budgets", ["r2", "r3"], ["n_f=1, n_c=4", "n_f=4, n_c=1"]),
    ("model B", ["r5"], ["t2 (n_f=4, n_c=4)"]),
    ("metric", ["r4"], ["cka"]),
])
def test_alternatives_vary_one_thing_only(vary, ids, labels):
    row = INDEX.iloc[0]
    out = alternatives(INDEX, row, vary)
    assert list(out["result_id"]) == ids and list(out["label"]) == labels


def test_alternatives_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown comparison 'dataset'"):
        alternatives(INDEX, INDEX.iloc[0], "dataset")


def test_budget_text_for_runs_and_vision_pairs():
    assert budget_text({"n_frames": 4, "n_captions": None, "n_frames_b": 8}) == "n_f=4, n_f(B)=8"
    assert budget_text({"n_frames": float("nan"), "n_captions": 2.0}) == "n_c=2"


def test_cell_labels_only_for_readable_grids_and_contrast_follows_the_colour():
    g = grid([[0.0, 1.0], [0.25, np.nan]])
    long = grid_long(g)
    lab = cell_labels(long, 2, 2)
    assert list(lab["label"]) == ["0.00", "1.00", "0.25", ""]
    assert list(lab["dark"]) == [True, False, True, False]  # below the middle (0.5) of the range: dark cells
    assert cell_labels(long, 17, 2).empty and cell_labels(long, 2, 17).empty
    div = cell_labels(grid_long(grid([[-1.0, 0.1], [0.7, 0.5]])), 2, 2, diverging=True)
    assert list(div["dark"]) == [True, False, True, False]  # |v| beyond 0.6 of the largest |v| (1.0)
