"""Heatmap cells that the best cell's interval cannot tell apart from it (analysis.views.heatmap.near_best_cells)."""

import numpy as np

from analysis.views.heatmap import grid_long, near_best_cells


def _grid(G, best, ci, metric="mutual_knn", flags=None):
    return {"grid": np.asarray(G, dtype=float), "best_a": best[0], "best_b": best[1], "best_value": G[best[0]][best[1]],
            "ci_low": ci[0], "ci_high": ci[1], "n_boot": 200, "metric": metric, "flags": flags or {}}


def test_cells_inside_the_best_cells_interval_are_near_best_and_nan_never():
    G = [[0.10, 0.48, 0.50], [0.44, float("nan"), 0.30]]
    got = near_best_cells(_grid(G, (0, 2), (0.45, 0.55)))
    # 0.48 >= 0.45: inside; 0.44 and 0.30 below; the best itself and the NaN cell are not marked
    np.testing.assert_array_equal(got, [[False, True, False], [False, False, False]])


def test_lower_is_better_uses_the_upper_bound():
    # median rank: lower is better, the best is the smallest value
    G = [[3.0, 5.0], [4.0, 9.0]]
    got = near_best_cells(_grid(G, (0, 0), (2.0, 4.5), metric="median_rank"))
    np.testing.assert_array_equal(got, [[False, False], [True, False]])


def test_no_interval_or_no_best_marks_nothing():
    G = [[0.5, 0.5], [0.5, 0.5]]
    assert not near_best_cells(_grid(G, (0, 0), (None, None))).any()
    g = _grid(G, (0, 0), (0.4, 0.6))
    g["best_a"] = g["best_b"] = None  # a flat grid has no best cell
    assert not near_best_cells(g).any()


def test_degenerate_cells_are_crossed_not_near_best():
    G = [[0.50, 0.49], [0.49, 0.10]]
    df = grid_long(_grid(G, (0, 0), (0.45, 0.55), flags={"degenerate_b": {"1": "collapsed"}}))
    near = {(a, b) for a, b, n in zip(df["layer_a"], df["layer_b"], df["near_best"]) if n}
    assert near == {(1, 0)}  # (0, 1) sits on B's collapsed layer 1: crossed out instead
    assert "interval" in df[(df.layer_a == 1) & (df.layer_b == 0)]["note"].iloc[0]
