"""What analyze stores on degenerate input: flagged, never a best cell, never silently dropped;
LID on duplicated items; scaling fits inside the metric's range; the clamp setting; bad runs named."""

import json

import duckdb
import numpy as np
import pytest
import skdim

from analysis.storage import results as R
from analysis.grid import layer_grid
from analysis.metrics.preprocess import clamp
from analysis.registry import BOUNDS
from analysis.storage.store import StoreError, load_embeddings
from analysis.studies import analyze_store
from analysis.metrics.base import one_blas_thread
from precompute.cli import main
from precompute.synthetic.store import write_run

N, D = 40, 12


def quiet(_msg):
    pass


def _stack(seed, layers=4, latent=None, n=N):
    rng = np.random.default_rng(seed)
    z = latent if latent is not None else rng.normal(size=(n, 6))
    # float32, as the store keeps it, so reference values see the stored numbers
    return np.stack([z @ rng.normal(size=(6, D)) + 0.5 * rng.normal(size=(len(z), D))
                     for _ in range(layers)]).astype(np.float32)


@pytest.fixture
def latent():
    return np.random.default_rng(0).normal(size=(N, 6))


def _grids(path, **where):
    con = duckdb.connect(str(path), read_only=True)
    out = R.read_grids(con, **where)
    con.close()
    return out


def test_a_collapsed_layer_is_flagged_and_never_the_best_cell(tmp_path, latent):
    path = tmp_path / "s.duckdb"
    V = _stack(1, latent=latent)
    V[2] = V[2][0]  # every item at one point: neighbours and kernels undefined on this layer
    T = _stack(2, latent=latent)
    write_run(path, "v", V, model="vid", modality="video", n_frames=1)
    write_run(path, "t", T, model="txt", modality="text", n_captions=1)
    analyze_store(path, metrics=("mutual_knn", "cka"), n_boot=0, log=quiet)
    for metric in ("mutual_knn", "cka"):
        (g,) = _grids(path, run_a="v", metric=metric)
        assert set(g["flags"]["degenerate_a"]) == {"2"} and "collapsed" in g["flags"]["degenerate_a"]["2"]
        want = layer_grid(V, T, metric=metric, k=10)
        want[2] = np.nan
        a, b = np.unravel_index(np.nanargmax(want), want.shape)  # brute force over healthy cells
        assert (g["best_a"], g["best_b"]) == (a, b) and g["best_value"] == want[a, b]


def test_an_all_collapsed_run_has_no_best_cell_and_says_why(tmp_path, latent):
    path = tmp_path / "s.duckdb"
    V = np.repeat(_stack(1, latent=latent)[:, :1], N, axis=1)  # every layer collapsed (a black first frame)
    write_run(path, "v", V, model="vid", modality="video", n_frames=1)
    write_run(path, "t", _stack(2, latent=latent), model="txt", modality="text", n_captions=1)
    out = analyze_store(path, metrics=("mutual_knn",), n_boot=20, log=quiet)
    (g,) = _grids(path, run_a="v")
    assert g["best_a"] is None and g["best_value"] is None and g["ci_low"] is None
    assert "no best cell" in g["flags"]["best"] and len(g["flags"]["degenerate_a"]) == 4
    con = duckdb.connect(str(path), read_only=True)
    choice = R.read_studies(con, study="layer_choice", subject="vid")
    con.close()
    # rankme / uniformity values exist on collapsed layers, but none is a measurement: no recommendation,
    # and the reason is stored so every page and the report can say it
    (c,) = choice
    assert c["payload"]["picks"] == {} and c["payload"]["curves"] == {}
    # every layer, layer 0 included, is one point: the reason says the model saw one input (N items, n_f = 1)
    assert f"maps all {N} items to one point" in c["payload"]["reason"]
    assert "1 frame per video" in c["payload"]["reason"] and "rankme" in c["payload"]["undefined_curves"]
    assert any("no layer of vid can be recommended" in n for n in out["notes"])


def test_lid_uses_distinct_items_and_says_how_many(tmp_path, latent):
    path = tmp_path / "s.duckdb"
    half = _stack(3, n=30)  # 30 distinct items, each twice: more distinct rows than LID's k = 20 needs
    V = np.concatenate([half, half], axis=1)
    write_run(path, "v", V, model="vid", modality="video", n_frames=1)
    analyze_store(path, n_boot=0, k=5, log=quiet)
    con = duckdb.connect(str(path), read_only=True)
    (p,) = R.read_profiles(con, run_id="v", metric="lid")
    con.close()
    for layer in range(4):
        distinct = np.unique(V[layer].astype(np.float64), axis=0)
        want = skdim.id.MLE().fit(distinct, n_neighbors=p["params"]["k"]).dimension_
        assert p["layer_values"][layer] == pytest.approx(want, rel=1e-9) and want > 0
        assert p["flags"][str(layer)].startswith("LID on 30 distinct of 60 items")


def test_demo_scaling_fits_stay_inside_the_metric_range(demo_like):
    con = duckdb.connect(str(demo_like), read_only=True)
    fits = R.read_studies(con, study="scaling")
    con.close()
    assert fits
    for s in fits:
        p = s["payload"]
        metric = s["params"]["metric"]
        lo, hi = BOUNDS[metric]
        lo, hi = -np.inf if lo is None else lo, np.inf if hi is None else hi
        if "fit" in p:
            s_inf = p["fit"]["params"]["s_inf"]
            assert lo - 1e-12 <= s_inf <= hi + 1e-12, (s["subject"], p["fit"])
            if not min(p["scores"]) - 1 <= s_inf <= max(p["scores"]) + 1:  # far beyond the data: never "ok"
                assert p["fit"]["status"] != "ok" and p["fit"]["reason"], (s["subject"], p["fit"])
            assert p["fit"]["status"] in ("ok", "flat", "not_identifiable", "exponent_at_bound", "s_inf_at_bound")
            assert sum(f.get("best", False) for f in p["forms"]) == 1 and p["drawn"] in {f["form"] for f in p["forms"]}
        for name, (low, high) in (p.get("intervals") or {}).items():
            est = p["fit"]["params"][name]
            inside = low - 1e-9 <= est <= high + 1e-9
            assert inside or p["intervals_detail"]["notes"], (s["subject"], name, est, low, high)


def test_the_clamp_setting_changes_the_numbers_and_the_keys(tmp_path, latent):
    path = tmp_path / "s.duckdb"
    V, T = _stack(1, latent=latent), _stack(2, latent=latent)
    V[:, 0, 3] = 500.0  # a massive activation
    write_run(path, "v", V, model="vid", modality="video", n_frames=1)
    write_run(path, "t", T, model="txt", modality="text", n_captions=1)
    analyze_store(path, metrics=("cka",), n_boot=0, log=quiet)
    analyze_store(path, clamp="platonic", log=quiet)
    grids = {json.dumps(g["result_id"]): g for g in _grids(path, metric="cka")}
    assert len(grids) == 2  # one per clamp mode, each kept under its own key
    Vs = load_embeddings(path, model="vid", dataset="synthetic", n_frames=1)
    Ts = load_embeddings(path, model="txt", dataset="synthetic", n_captions=1)
    with one_blas_thread(openmp=True):  # as the engine scores small layers (two OpenBLAS threads may round differently)
        clamped = layer_grid(clamp(Vs, mode="platonic"), clamp(Ts, mode="platonic"), metric="cka")
        plain = layer_grid(Vs, Ts, metric="cka")
    got = sorted((g["grid"] for g in grids.values()), key=lambda G: abs(G - plain).max())
    np.testing.assert_array_equal(got[0], plain)
    np.testing.assert_array_equal(got[1], clamped)
    assert np.abs(clamped - plain).max() > 1e-3


@pytest.mark.parametrize("bad", ["nan", "inf"])
def test_a_non_finite_run_is_left_out_naming_the_run(tmp_path, latent, bad, capsys):
    """One non-finite value leaves its run out (named, with its count of bad items and how to remove
    it) and the rest is analysed; with nothing else left, analyze stops naming it (issue #34 item 8)."""
    path = tmp_path / "s.duckdb"
    V = _stack(1, latent=latent)
    V[1, 5, 2] = float(bad)
    write_run(path, "broken-run", V, model="vid", modality="video", n_frames=1)
    write_run(path, "t", _stack(2, latent=latent), model="txt", modality="text", n_captions=1)
    notes = []
    analyze_store(path, n_boot=0, log=notes.append)
    (note,) = [n for n in notes if "broken-run" in n]
    assert f"1 of {N} items" in note and "runs rm" in note
    with duckdb.connect(str(path), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM result_profiles WHERE run_id = 'broken-run'").fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM result_profiles WHERE run_id = 't'").fetchone()[0] > 0
    assert main(["analyze", "--store", str(path), "--quiet", "--jobs", "1"]) == 0
    only = tmp_path / "only.duckdb"
    write_run(only, "broken-run", V, model="vid", modality="video", n_frames=1)
    with pytest.raises(StoreError, match="broken-run"):
        analyze_store(only, n_boot=0, log=quiet)
    capsys.readouterr()
    assert main(["analyze", "--store", str(only), "--quiet", "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert "broken-run" in err and "Traceback" not in err


def test_analyze_with_defaults_on_a_tiny_dataset_skips_intervals_with_a_reason(tmp_path):
    path = tmp_path / "s.duckdb"
    z = np.random.default_rng(0).normal(size=(14, 6))
    write_run(path, "v", _stack(1, latent=z), model="vid", modality="video", n_frames=1)
    write_run(path, "t", _stack(2, latent=z), model="txt", modality="text", n_captions=1)
    out = analyze_store(path, log=quiet)  # k=10, 200 resamples: a resample holds ~9 distinct items
    assert out["computed_by_study"]["grids"] == 3  # mutual_knn, cka, cknna
    for g in _grids(path):
        assert g["best_a"] is not None
        if g["metric"] in ("mutual_knn", "cknna"):
            # neighbourhood metrics need k+1 distinct items: most resamples are skipped, and said so
            assert "distinct" in g["flags"]["interval"]
        if g["ci_low"] is not None:
            assert g["ci_low"] <= g["best_value"] <= g["ci_high"]


def test_a_layer_whose_neighbour_lists_are_decided_by_ties_is_flagged_and_never_best(tmp_path, latent):
    """A text layer giving the 40 items 3 distinct embeddings (13-14 copies each, k = 5): every
    item's list is 5 of its copies picked by index, so k-NN scores on it measure the index order.
    Those cells are NaN with the reason, the layer is never a k-NN best cell, and CKA (defined on
    such a layer) keeps its cells."""
    path = tmp_path / "s.duckdb"
    V = _stack(1, latent=latent)
    T = _stack(2, latent=latent)
    T[0] = np.repeat(T[0][:3], [14, 13, 13], axis=0)
    write_run(path, "v", V, model="vid", modality="video", n_frames=1)
    write_run(path, "t", T, model="txt", modality="text", n_captions=1)
    analyze_store(path, metrics=("mutual_knn", "cknna", "cycle_knn", "cka"), n_boot=20, k=5, log=quiet)
    for metric in ("mutual_knn", "cknna", "cycle_knn"):
        (g,) = _grids(path, run_a="v", metric=metric)
        assert np.isnan(np.asarray(g["grid"])[:, 0]).all(), metric
        assert np.isfinite(np.asarray(g["grid"])[:, 1:]).all(), metric
        assert "decided by ties" in g["flags"]["degenerate_b"]["0"] and "40 of 40" in g["flags"]["degenerate_b"]["0"]
        assert g["best_b"] != 0 and g["ci_low"] is not None
    (g,) = _grids(path, run_a="v", metric="cka")
    assert np.isfinite(np.asarray(g["grid"])).all() and "degenerate_b" not in g["flags"]


class _StubEngine:
    """The engine calls ``score_pair`` makes, over fixed grids and real layer statuses."""

    def __init__(self, grid, stacks):
        from analysis.metrics.degenerate import stack_status

        self._grid = np.asarray(grid, dtype=float)
        self._status = {run: stack_status(E) for run, E in stacks.items()}

    def grid(self, *_a, **_k):
        return self._grid

    def degenerate_layers(self, run):
        return {}

    def tie_decided_layers(self, run, metric, **_):
        return {}

    def status(self, run):
        return self._status[run]


def test_a_best_cell_on_a_layer_that_merged_most_items_carries_a_caveat(latent):
    """CKA is defined on a layer that gives 40 items 3 distinct embeddings, and can be its grid's
    highest cell; the cell is kept, with a caveat naming the layer, its 3 points and the 40 the
    run's other layers keep. A best cell elsewhere, or a run whose every layer has few distinct
    rows (a dataset of repeated captions), gets none."""
    from analysis.metrics.degenerate import lost_distinctions, stack_status
    from analysis.studies.grids import score_pair
    from analysis.views.heatmap import best_cell_text

    V = _stack(1, latent=latent)
    T = _stack(2, latent=latent)
    T[0] = np.repeat(T[0][:3], [14, 13, 13], axis=0)
    grid = np.full((4, 4), 0.2)
    grid[1, 0] = 0.9  # the best cell sits on text layer 0
    out = score_pair(_StubEngine(grid, {"v": V, "t": T}), "v", "t", "cka", {}, 0, 0)
    assert (out["best_a"], out["best_b"]) == (1, 0) and out["best_value"] == 0.9
    caveat = out["flags"]["best_caveat"]
    assert "layer 0" in caveat and "only 3 distinct" in caveat and "keeps 40" in caveat
    text = best_cell_text({**out, "n_boot": 0}, "vid", "txt")
    assert "Caveat: layer 0 tells its 40 items apart as only 3 distinct points" in text
    grid[1, 0], grid[2, 3] = 0.2, 0.9  # best cell on healthy layers
    assert "best_caveat" not in score_pair(_StubEngine(grid, {"v": V, "t": T}), "v", "t", "cka", {}, 0, 0)["flags"]
    # every layer with 3 distinct rows: nothing lost relative to the run's other layers
    same = np.stack([np.repeat(layer[:3], [14, 13, 13], axis=0) for layer in T])
    assert all(lost_distinctions(stack_status(same), i) is None for i in range(4))
    # the threshold: half the most distinct rows of any layer (20 of 40 is no caveat, 19 is)
    for kept, flagged in ((20, False), (19, True)):
        U = T.copy()
        U[2] = np.concatenate([T[2][:kept], np.repeat(T[2][:1], N - kept, axis=0)])
        assert (lost_distinctions(stack_status(U), 2) is not None) == flagged


def test_lid_on_a_collapsed_layer_keeps_the_collapse_flag_and_adds_its_reason(tmp_path, latent):
    path = tmp_path / "s.duckdb"
    V = _stack(1, latent=latent)
    V[2] = V[2][0]  # collapsed: one distinct row, LID undefined
    write_run(path, "v", V, model="vid", modality="video", n_frames=1)
    analyze_store(path, n_boot=0, k=5, log=quiet)
    con = duckdb.connect(str(path), read_only=True)
    (p,) = R.read_profiles(con, run_id="v", metric="lid")
    (r,) = R.read_profiles(con, run_id="v", metric="rankme")
    con.close()
    assert np.isnan(p["layer_values"][2])
    flag = p["flags"]["2"]
    assert flag.startswith(r["flags"]["2"]) and "collapsed" in flag  # the layer's own flag, first
    assert "only 1 distinct rows of 40" in flag  # then LID's reason
    assert set(p["flags"]) == {"2"}
