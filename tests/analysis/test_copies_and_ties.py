"""A model's identical copy is flagged and never evidence in a verdict (its alignment is 1 by
construction), and one tie rule holds everywhere: equal cells and equal layers go to the deepest
layer, on the heatmap's best cell and in the verdict alike."""

import duckdb
import numpy as np

from analysis.views.verdicts import verdicts
from analysis.grid import best_cell
from analysis.methods.layer_selection import layer_verdict, near_identical, verdict_sentence
from tests.stores import write_text_store


def test_near_identical_runs_are_copies_and_others_are_not():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3, 40, 8))
    assert near_identical(X, X.astype(np.float32))  # float32 rounding: cosine within 1e-6
    assert near_identical(X, 3.0 * X)  # a rescaled copy points the same way
    nudged = X.copy()
    nudged[2, 7] += 0.01 * rng.normal(size=8)  # one item of one layer moved by ~1%: not a copy
    assert not near_identical(X, nudged)
    assert not near_identical(X, X[:, :, :7]) and not near_identical(X, X[:2])


def test_alignment_with_a_copy_never_votes_and_is_said():
    curves = {"alignment with minilm-copy": [0, 1.0, 1.0, 1.0], "alignment with mpnet": [0, .2, .5, .3]}
    hib = {m: True for m in curves}
    v = layer_verdict(curves, hib, copies={"alignment with minilm-copy": "a copy"})
    assert "alignment with minilm-copy" not in v.picks and v.layer == 2
    assert "alignment with minilm-copy" in v.copies
    assert "not voting (an identical copy of this model" in verdict_sentence("minilm", v)
    only = layer_verdict({"alignment with minilm-copy": [0, 1.0, 1.0, 1.0]}, {"alignment with minilm-copy": True},
                         copies={"alignment with minilm-copy": "a copy"})
    assert only.status == "none" and "copies" in only.reason


def test_a_stored_copy_is_flagged_by_the_study_and_kept_out_of_the_verdict(tmp_path):
    rng = np.random.default_rng(1)
    n = 40
    z = rng.normal(size=(n, 4))
    minilm = np.stack([z @ rng.normal(size=(4, 6)) + rng.normal(size=(n, 6)) for _ in range(4)])
    mpnet = np.stack([z @ rng.normal(size=(4, 6)) + rng.normal(size=(n, 6)) for _ in range(4)])
    runs = {("minilm", 1): minilm, ("minilm-copy", 1): minilm.copy(), ("mpnet", 1): mpnet}
    store = tmp_path / "c.duckdb"
    write_text_store(store, runs, analyze=dict(k=5, n_boot=5, n_null=0, maps=0, jobs=1))
    with duckdb.connect(str(store), read_only=True) as con:
        (v,) = [v for v in verdicts(con, "sentences") if v["model"] == "minilm"]
    assert set(v["verdict"].copies) == {"alignment with minilm-copy"}
    assert "alignment with minilm-copy" not in v["verdict"].picks
    assert v["verdict"].lead != "alignment with minilm-copy"
    assert "not voting (an identical copy of this model" in v["sentence"]


def test_equal_cells_go_to_the_deepest_layer_on_the_heatmap_as_in_the_verdict():
    grid = np.zeros((12, 3))
    grid[1, 2] = grid[11, 2] = 0.8  # layers 1 and 11 tie for the best cell
    grid[5, 0] = 0.3
    assert best_cell(grid)[:2] == (11, 2)
    v = layer_verdict({"alignment with t": grid.max(axis=1)}, {"alignment with t": True})
    assert v.picks["alignment with t"] == 11
    low = best_cell(-grid, higher_is_better=False)
    assert low[:2] == (11, 2)
