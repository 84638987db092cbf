"""The predictor table: Spearman ρ checked against scipy, bootstrap intervals, layer picks from hand
cases, and a synthetic store where one signal is planted to track per-layer performance."""

import json

import duckdb
import numpy as np
import pytest
from scipy import stats

from analysis.storage import results as R
from analysis.storage.downstream_import import import_downstream
from analysis.methods.predictors import (Series, best_layer, layer_comparison, predictor_correlation, rank_rows,
                                 signal_pick, spearman, spearman_rows)
from analysis.studies import analyze_store
from tests.stores import SHARE
from tests.stores import write_downstream_csv as _csv
from tests.stores import write_predictor_store as _planted_store

# ---------------------------------------------------------------- pure maths


def test_spearman_matches_scipy_with_ties_and_rows():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 4, size=(20, 9)).astype(float)  # many ties
    y = rng.normal(size=(20, 9))
    got = spearman_rows(x, y)
    for i in range(20):
        expected = stats.spearmanr(x[i], y[i])[0]
        if np.ptp(x[i]) == 0:
            assert np.isnan(got[i])
        else:
            assert got[i] == pytest.approx(expected, abs=1e-12)
    assert spearman([1, 2, 3], [3, 3, 3]) != spearman([1, 2, 3], [3, 3, 3])  # constant side: NaN
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)


def test_across_layers_is_the_mean_of_per_model_rho_and_pooled_is_over_every_point():
    a = Series("a", np.arange(5), np.array([1.0, 2, 3, 4, 5]), np.array([1.0, 2, 3, 5, 4]))
    b = Series("b", np.arange(4), np.array([4.0, 3, 2, 1]), np.array([1.0, 2, 3, 4]))
    c = Series("c", np.arange(2), np.array([1.0, 2]), np.array([1.0, 2]))  # 2 layers: no ρ of its own
    out = predictor_correlation([a, b, c], n_boot=0)
    ra, rb = stats.spearmanr(a.x, a.y)[0], stats.spearmanr(b.x, b.y)[0]
    assert out["rho_layers"] == pytest.approx((ra + rb) / 2)
    assert out["per_model_rho"] == {"a": pytest.approx(ra), "b": pytest.approx(rb), "c": None}
    assert out["n_models_layers"] == 2 and out["n_models"] == 3 and out["n_points"] == 11
    pooled = stats.spearmanr(np.concatenate([a.x, b.x, c.x]), np.concatenate([a.y, b.y, c.y]))[0]
    assert out["rho_pooled"] == pytest.approx(pooled)
    assert out["rho_layers_ci"] == [None, None] and out["n_boot_layers"] == 0


def test_each_model_without_a_rho_is_stored_with_its_reason():
    """Short of 3 layers, or a side constant over them: each model says which (both are a missing ρ)."""
    up = np.array([1.0, 2, 3, 4])
    series = [Series("short", np.arange(2), np.array([1.0, 2]), np.array([2.0, 1])),
              Series("flat signal", np.arange(4), np.full(4, 0.5), up),
              Series("flat result", np.arange(4), up, np.full(4, 7.0)),
              Series("flat both", np.arange(3), np.full(3, 0.5), np.full(3, 7.0)),
              Series("fine", np.arange(4), up, up[::-1])]
    out = predictor_correlation(series, n_boot=0)
    assert out["rho_undefined"] == {"short": "too_few_layers", "flat signal": "constant_signal",
                                    "flat result": "constant_result", "flat both": "constant_both"}
    assert {m for m, r in out["per_model_rho"].items() if r is None} == set(out["rho_undefined"])
    assert out["per_model_rho"]["fine"] == pytest.approx(-1.0)


def test_bootstrap_interval_contains_the_estimate_and_is_seeded():
    rng = np.random.default_rng(1)
    series = []
    for m in range(3):
        x = rng.normal(size=12)
        series.append(Series(f"m{m}", np.arange(12), x, x + 0.8 * rng.normal(size=12)))
    a = predictor_correlation(series, n_boot=300, seed=3)
    b = predictor_correlation(series, n_boot=300, seed=3)
    assert a == b
    lo, hi = a["rho_layers_ci"]
    assert lo <= a["rho_layers"] <= hi and -1 <= lo < hi <= 1
    lo, hi = a["rho_pooled_ci"]
    assert lo <= a["rho_pooled"] <= hi
    assert a["n_boot_layers"] > 250  # 12 layers: a constant resample is rare


def test_picks_gaps_and_ties_by_hand():
    results = {0: 0.2, 1: 0.5, 2: 0.7, 3: 0.6, 4: 0.55}  # layer 4 = "default", layer 3 = last numbered
    cmp = layer_comparison(results, higher_is_better=True, last_layer=3, default_layer=4)
    assert cmp["best_layer"] == 2 and cmp["best_vs_last"] == pytest.approx(0.1)
    assert cmp["best_vs_default"] == pytest.approx(0.15)
    s = Series("m", np.array([0, 1, 3, 4]), np.array([1.0, 9.0, 3.0, 9.0]), np.array([0.2, 0.5, 0.6, 0.55]))
    p = signal_pick(s, results, signal_higher_is_better=True, task_higher_is_better=True, last_layer=3,
                    default_layer=4)
    assert p["pick_layer"] == 4  # tie of the signal at layers 1 and 4: the deeper one
    assert p["shortfall"] == pytest.approx(0.15) and p["vs_last"] == pytest.approx(-0.05)
    assert p["vs_default"] == 0 and p["found_best"] is False
    err = {0: 3.0, 1: 1.0, 2: 2.0}  # an error: lower is better, gaps still positive = better
    cmp = layer_comparison(err, higher_is_better=False, last_layer=2, default_layer=None)
    assert cmp["best_layer"] == 1 and cmp["best_vs_last"] == pytest.approx(1.0) and cmp["best_vs_default"] is None
    assert best_layer([0, 1, 2], [np.nan, 1.0, 1.0], higher_is_better=True) == 2
    with pytest.raises(ValueError):
        best_layer([0, 1], [np.nan, np.nan], higher_is_better=True)


def test_rank_rows_orders_by_strength_whatever_the_sign():
    rows = [{"signal": "a", "rho_layers": 0.3, "rho_pooled": 0.1}, {"signal": "b", "rho_layers": -0.9,
            "rho_pooled": -0.5}, {"signal": "c", "rho_layers": None, "rho_pooled": 0.95},
            {"signal": "d", "rho_layers": 0.3, "rho_pooled": 0.6}]
    assert [r["signal"] for r in rank_rows(rows)] == ["b", "d", "a", "c"]
    assert [r["rank"] for r in rows] == [3, 1, 4, 2]


def test_rank_rows_puts_coverage_before_strength():
    """Issue #29 item 4: a signal covering one model with 95 % CI [-1.0, 0.37] outranked every signal
    covering three models. Coverage first, then an interval that excludes 0, then |ρ|."""
    rows = [{"signal": "one model", "rho_layers": -0.99, "rho_layers_ci": [-1.0, 0.37], "n_models_layers": 1,
             "rho_pooled": -0.99, "rho_pooled_ci": [-1.0, 0.37], "n_models": 1},
            {"signal": "three, spans 0", "rho_layers": 0.8, "rho_layers_ci": [-0.2, 0.95], "n_models_layers": 3,
             "rho_pooled": 0.5, "rho_pooled_ci": [0.1, 0.8], "n_models": 3},
            {"signal": "three, excludes 0", "rho_layers": 0.4, "rho_layers_ci": [0.1, 0.7], "n_models_layers": 3,
             "rho_pooled": 0.3, "rho_pooled_ci": [0.05, 0.5], "n_models": 3},
            {"signal": "two, pooled only", "rho_layers": None, "rho_layers_ci": [None, None], "n_models_layers": 0,
             "rho_pooled": -0.9, "rho_pooled_ci": [-0.99, -0.6], "n_models": 2},
            {"signal": "undefined", "rho_layers": None, "rho_layers_ci": [None, None], "n_models_layers": 0,
             "rho_pooled": None, "rho_pooled_ci": [None, None], "n_models": 4}]
    out = rank_rows(rows)
    assert [r["signal"] for r in out] == ["three, excludes 0", "three, spans 0", "two, pooled only", "one model",
                                          "undefined"]
    got = {r["signal"]: (r["n_models_covered"], r["ci_excludes_zero"], r["one_model"]) for r in out}
    assert got == {"three, excludes 0": (3, True, False), "three, spans 0": (3, False, False),
                   "two, pooled only": (2, True, False), "one model": (1, False, True),
                   "undefined": (0, False, False)}


def test_a_one_model_signal_ranks_below_a_weaker_signal_over_three_models(rng):
    # the rows come from predictor_correlation itself: a perfect ρ in one model against a noisy one in three
    layers = np.arange(8)
    y = {m: rng.normal(size=8) for m in "abc"}
    strong = [Series("a", layers, y["a"].copy(), y["a"])]  # ρ = 1 exactly, but one model
    weak = [Series(m, layers, y[m] + rng.normal(scale=0.8, size=8), y[m]) for m in "abc"]
    rows = [{"signal": "strong", **predictor_correlation(strong, n_boot=50)},
            {"signal": "weak", **predictor_correlation(weak, n_boot=50)}]
    assert rows[0]["rho_layers"] == pytest.approx(1.0) and abs(rows[1]["rho_layers"]) < 1
    out = rank_rows(rows)
    assert [r["signal"] for r in out] == ["weak", "strong"] and out[1]["one_model"]


# ---------------------------------------------------------------- planted store

L = len(SHARE["va"])  # layers of every planted video model


def _payload(store):
    con = duckdb.connect(str(store), read_only=True)
    rows = R.read_studies(con, study="predictors", dataset="synthetic")
    con.close()
    assert len(rows) == 1
    return rows[0]["payload"]


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("planted")
    store = root / "s.duckdb"
    _planted_store(store)
    rows = []
    for m, share in SHARE.items():
        for layer, w in enumerate(share):
            rows.append((m, "probe", "top1", round(0.2 + 0.6 * w, 4), "true", layer, "linear"))
            rows.append((m, "depth", "rmse", round(2.0 - 1.5 * w, 4), "false", layer, ""))
    import_downstream(store, _csv(root / "r.csv", rows))
    analyze_store(store, k=5, metrics=("mutual_knn", "cka"), n_boot=100, log=lambda m: None)
    return store


def _task(payload, task):
    return next(t for t in payload["tasks"] if t["task"] == task)


def test_the_planted_signal_ranks_first_with_the_right_sign(planted):
    p = _payload(planted)
    probe, depth = _task(p, "probe"), _task(p, "depth")
    assert probe["setting"] == "linear" and probe["higher_is_better"] is True
    for task, sign in ((probe, 1), (depth, -1)):
        sigs = task["signals"]
        top = sigs[0]
        assert top["rank"] == 1 and top["signal"].startswith("alignment with txt"), [s["signal"] for s in sigs]
        assert sign * top["rho_layers"] > 0.8 and sign * top["rho_pooled"] > 0.8
        assert top["better"] is True  # a higher alignment goes with a better result in both tasks
        lo, hi = top["rho_layers_ci"]
        assert lo <= top["rho_layers"] <= hi
        assert top["n_models"] == 3 and top["n_points"] == 18
        # the profiles see identically distributed layers: weaker than the planted signal
        for s in sigs:
            if s["kind"] == "profile":
                assert abs(s["rho_layers"]) < abs(top["rho_layers"])
    # the same signal with the direction flipped: exactly opposite ρ (ranks of 2 - 1.5 w reverse those of w)
    a = {s["signal"]: s["rho_layers"] for s in probe["signals"]}
    b = {s["signal"]: s["rho_layers"] for s in depth["signals"]}
    for name, rho in a.items():
        if rho is not None:
            assert b[name] == pytest.approx(-rho)


def test_best_layer_comparison_per_model(planted):
    p = _payload(planted)
    probe, depth = _task(p, "probe"), _task(p, "depth")
    for task in (probe, depth):
        for e in task["models"]:
            share = SHARE[e["model"]]
            assert e["best_layer"] == int(np.argmax(share))  # truly best, for either direction
            assert e["last_layer"] == L - 1 and e["default_layer"] is None and e["best_vs_default"] is None
            scale = 0.6 if task is probe else 1.5  # |d result / d w| of each task
            assert e["best_vs_last"] == pytest.approx(scale * (max(share) - share[-1]), abs=1e-3)
    top = probe["signals"][0]
    for pick in top["picks"]:
        assert pick["shortfall"] >= 0
        assert pick["shortfall"] == pytest.approx(0.6 * (max(SHARE[pick["model"]]) - SHARE[pick["model"]][
            pick["pick_layer"]]), abs=1e-3)


def test_degenerate_layers_are_excluded_and_counted(tmp_path):
    store = tmp_path / "s.duckdb"
    _planted_store(store, collapse=("vb", 2))
    rows = [(m, "probe", "top1", round(0.2 + 0.6 * w, 4), "true", layer, "")
            for m, share in SHARE.items() for layer, w in enumerate(share)]
    import_downstream(store, _csv(tmp_path / "r.csv", rows))
    analyze_store(store, k=5, metrics=("mutual_knn",), n_boot=0, log=lambda m: None)
    p = _payload(store)
    assert p["models"]["vb"]["degenerate_layers"].keys() == {"2"}
    for s in _task(p, "probe")["signals"]:
        assert s["excluded"].get("degenerate") == 1, s["signal"]
        assert s["n_points"] <= 17
        assert all(not (pk["model"] == "vb" and pk["pick_layer"] == 2) for pk in s["picks"])
    # the truly best layer is still vb's layer 2 (its result is real): the signals cannot pick it
    vb = next(e for e in _task(p, "probe")["models"] if e["model"] == "vb")
    assert vb["best_layer"] == 2


def test_same_space_rows_and_named_default_layers_are_read(tmp_path):
    store = tmp_path / "s.duckdb"
    _planted_store(store)
    con = duckdb.connect(str(store))  # va's runs store a named "default" layer (index 5)
    con.execute("UPDATE runs SET config = ? WHERE model = 'va'", [json.dumps({"layer_names": {"5": "default"}})])
    con.close()
    rows = [(m, "probe", "top1", round(0.2 + 0.6 * w, 4), "true", layer, "")
            for m, share in SHARE.items() for layer, w in enumerate(share) if not (m == "va" and layer == 5)]
    rows.append(("va", "probe", "top1", round(0.2 + 0.6 * SHARE["va"][5], 4), "true", "default", ""))
    import_downstream(store, _csv(tmp_path / "r.csv", rows))
    analyze_store(store, k=5, metrics=("mutual_knn",), n_boot=0, log=lambda m: None)
    # what the same-space study stores: values per layer of model_a; ours track performance negatively
    con = duckdb.connect(str(store))
    for m, share in SHARE.items():
        R.put_study(con, result_id=f"ss-{m}", study="same_space", dataset="synthetic", subject=f"{m}|txt",
                    params={}, payload={"run_a": f"{m}-1", "run_b": "txt-1", "n_frames": 1, "n_captions": 1,
                                        "space": "layers", "layers_a": list(range(L)),
                                        "metrics": {"modality_gap": {"values": [1 - w for w in share],
                                                                     "higher_is_better": False}}},
                    input_key="x")
    con.close()
    analyze_store(store, log=lambda m: None)  # same-space rows are inputs: the table is recomputed
    p = _payload(store)
    assert p["models"]["va"]["default_layer"] == 5 and p["models"]["va"]["last_layer"] == 4
    sig = next(s for s in _task(p, "probe")["signals"] if s["signal"] == "modality_gap with txt (layers)")
    assert sig["kind"] == "same_space" and sig["rank"] == 1
    assert sig["rho_layers"] == pytest.approx(-1.0) and sig["rho_pooled"] == pytest.approx(-1.0)
    assert sig["better"] is False  # a higher gap goes with worse results
    for pick in sig["picks"]:  # lower gap is better: the signal finds every model's best layer
        assert pick["found_best"] and pick["shortfall"] == 0
    va = next(pk for pk in sig["picks"] if pk["model"] == "va")
    assert va["default_layer"] == 5 and va["last_layer"] == 4
    share = SHARE["va"]
    assert va["vs_last"] == pytest.approx(0.6 * (max(share) - share[4]), abs=1e-3)
    assert va["vs_default"] == pytest.approx(0.6 * (max(share) - share[5]), abs=1e-3)
