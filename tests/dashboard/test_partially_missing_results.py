"""Issue #33 item 7: "what is missing" counts partially missing results: runs precomputed after the
last analysis (no per-layer profile, vision×text pairs without a grid), per dataset."""

import shutil

import duckdb
import numpy as np

from analysis.storage.store import read_store
from analysis.views.store_info import overview
from tests.helpers import app


def test_an_analysed_store_has_nothing_partially_missing(dashboard_store):
    ov = read_store(dashboard_store, overview, str(dashboard_store))
    assert not [m for m in ov["missing"] if "dataset " in m["what"] and "no grid" in m["what"]]
    assert not [m for m in ov["missing"] if "per-layer results" in m["what"]]


def test_a_run_added_after_the_analysis_is_counted(dashboard_store, tmp_path, monkeypatch):
    from precompute.synthetic.store import write_run

    path = tmp_path / "partial.duckdb"
    shutil.copy(dashboard_store, path)
    con = duckdb.connect(str(path), read_only=True)
    runs = con.execute("SELECT modality, count(*) FROM runs WHERE dataset = 'moving_shapes' AND status = 'done' "
                       "GROUP BY modality").fetchall()
    n_items, n_layers, dim = con.execute(
        "SELECT d.n_items, m.n_layers, m.dim FROM datasets d, models m WHERE d.dataset = 'moving_shapes' "
        "AND m.model = 'all-MiniLM-L6-v2'").fetchall()[0]
    con.close()
    counts = dict(runs)
    n_vision = sum(n for m, n in counts.items() if m != "text")
    X = np.random.default_rng(3).normal(size=(n_layers, n_items, dim))
    write_run(path, "late-text-run", X, model="all-MiniLM-L6-v2", modality="text", n_captions=7,
              dataset="moving_shapes")
    ov = read_store(path, overview, str(path))
    whats = [m["what"] for m in ov["missing"]]
    n_runs = sum(counts.values()) + 1
    assert f"dataset moving_shapes: 1 of {n_runs} done run(s) have no per-layer results (late-text-run)" in whats
    pairs = n_vision * (counts["text"] + 1)
    assert f"dataset moving_shapes: {n_vision} of {pairs} vision×text run pair(s) have no grid yet" in whats
    assert not any("test_of_time" in w for w in whats)
    at = app(path, monkeypatch)
    shown = " ".join(m.value for m in at.markdown).replace("\\", "")
    assert f"{n_vision} of {pairs} vision×text run pair(s) have no grid yet" in shown
