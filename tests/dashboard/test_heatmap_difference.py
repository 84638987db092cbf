"""Issue #33: the heatmap's difference view gives the difference of the two grids' best values with a
conservative interval (the grids keep no paired resamples), or says why none."""

import duckdb
import pytest

from analysis.storage import results as R
from analysis.views.heatmap_diff import best_difference, best_difference_text
from tests.helpers import app


def grid(best=0.5, lo=0.4, hi=0.6, metric="mutual_knn"):
    return {"metric": metric, "best_value": best, "ci_low": lo, "ci_high": hi, "best_a": 1, "best_b": 1}


def test_conservative_interval_is_the_difference_of_the_interval_ends():
    d = best_difference(grid(0.5, 0.4, 0.6), grid(0.3, 0.25, 0.32))
    assert d["diff"] == pytest.approx(0.2)
    assert (d["low"], d["high"]) == pytest.approx((0.4 - 0.32, 0.6 - 0.25))
    assert d["level"] == 0.90  # Bonferroni: both 95% intervals cover with probability ≥ 0.90
    assert "excludes 0" in best_difference_text(d, "", "other")
    # equal grids: the difference is 0 and its interval straddles it
    d = best_difference(grid(), grid())
    assert d["diff"] == 0 and d["low"] < 0 < d["high"]
    assert "includes 0" in best_difference_text(d, "", "other")


def test_no_interval_or_no_best_cell_says_why():
    d = best_difference(grid(), grid(lo=None, hi=None))
    assert d["diff"] == 0 and d["low"] is None and "no bootstrap interval" in d["reason"]
    assert "point estimate" in best_difference_text(d, "", "x")
    d = best_difference(grid(best=float("nan")), grid())
    assert d["diff"] is None and "no best cell" in best_difference_text(d, "", "x")
    assert "different metrics" in best_difference(grid(), grid(metric="cknna"))["reason"]


def stored(store, **where):
    con = duckdb.connect(str(store), read_only=True)
    try:
        (rid,) = con.execute("SELECT result_id FROM result_grids WHERE " + " AND ".join(f"{k} = ?" for k in where),
                             list(where.values())).fetchall()[0]
        (g,) = R.read_grids(con, result_id=rid)
    finally:
        con.close()
    return g


def test_difference_view_states_the_best_values_difference(dashboard_store, monkeypatch):
    params = {"dataset": "moving_shapes", "a": "vit-tiny", "b": "llama-tiny", "metric": "mutual_knn", "nf": "4",
              "nc": "4", "view": "difference", "vs": "budgets", "with_budgets": "n_f=1, n_c=1"}
    at = app(dashboard_store, monkeypatch, "heatmap", params)
    base = {"dataset": "moving_shapes", "model_a": "vit-tiny", "model_b": "llama-tiny", "metric": "mutual_knn"}
    g1, g2 = stored(dashboard_store, **base, n_frames=4, n_captions=4), stored(dashboard_store, **base, n_frames=1,
                                                                               n_captions=1)
    lines = [c.value for c in at.caption if "Best value here minus best at" in c.value]
    assert len(lines) == 1
    assert f"{g1['best_value'] - g2['best_value']:+.3f}" in lines[0]
    assert f"{g1['ci_low'] - g2['ci_high']:+.3f} to {g1['ci_high'] - g2['ci_low']:+.3f}" in lines[0]
