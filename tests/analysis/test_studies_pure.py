"""The analysis studies' pure functions against planted answers and scipy."""

import numpy as np
import pytest
from scipy import stats

from analysis.methods.downstream import correlate, depth_curve
from analysis.methods.layer_selection import describe_pick, recommend_layers
from analysis.metrics import mutual_knn
from analysis.methods.model_map import classical_mds, model_map
from analysis.methods.scaling import (
    TooFewPoints, bootstrap_params, compare_forms, extrapolation_rmse, fit_scaling_law, leave_one_out_rmse,
)
from analysis.methods.temporal import arrow_of_time, chiral_accuracy, first_neighbour_types, reorder_alignment
from precompute.synthetic.scenes import time_scenes

PAPER = {  # DESIGN §5: Gemma-2-9b-it on VATEX
    "VideoMAEv2-H": dict(s_inf=0.41, c_f=0.15, c_c=0.13, alpha=0.75, beta=1.30),
    "DINOv2-G": dict(s_inf=0.37, c_f=0.05, c_c=0.13, alpha=1.76, beta=1.40),
}
NF, NC = (a.ravel().astype(float) for a in np.meshgrid([1, 2, 4, 8, 16, 32, 48], [1, 2, 4, 8, 10]))


def law(p, nf, nc):
    return p["s_inf"] - (p["c_f"] * nf ** -p["alpha"] + p["c_c"] * nc ** -p["beta"])


@pytest.mark.parametrize("model", sorted(PAPER))
def test_scaling_law_recovers_planted_paper_parameters(model):
    p = PAPER[model]
    rng = np.random.default_rng(1)
    y = law(p, NF, NC) + rng.normal(0, 0.002, len(NF))
    fit = fit_scaling_law(NF, NC, y)
    assert fit.r2 > 0.98
    assert fit.s_inf == pytest.approx(p["s_inf"], abs=0.01)
    assert fit.c_f == pytest.approx(p["c_f"], abs=0.02)
    assert fit.c_c == pytest.approx(p["c_c"], abs=0.02)
    assert fit.alpha == pytest.approx(p["alpha"], rel=0.25)
    assert fit.beta == pytest.approx(p["beta"], rel=0.25)
    np.testing.assert_allclose(fit.predict(NF, NC), law(fit.params, NF, NC))
    # held-out errors are of the order of the noise, and the paper's form wins on held-out error
    assert leave_one_out_rmse(NF, NC, y) < 0.006
    assert extrapolation_rmse(NF, NC, y)["rmse"] < 0.01
    forms = compare_forms(NF, NC, y)
    assert forms[0]["form"] == "saturating" and len(forms) == 3


def test_scaling_bootstrap_intervals_cover_the_truth():
    p = PAPER["VideoMAEv2-H"]
    rng = np.random.default_rng(0)
    samples = law(p, NF, NC)[None] + rng.normal(0, 0.003, (40, len(NF)))
    ci = bootstrap_params(samples, NF, NC)
    for name in ("s_inf", "c_f", "c_c"):
        lo, hi = ci[name]
        assert lo <= p[name] <= hi, name


def test_scaling_law_with_too_few_points_says_so():
    with pytest.raises(TooFewPoints, match="need at least 6"):
        fit_scaling_law([1, 2, 4], [1, 1, 1], [0.1, 0.2, 0.3])
    with pytest.raises(TooFewPoints):  # repeated points do not count twice
        fit_scaling_law([1] * 10, [1] * 10, np.linspace(0, 1, 10))
    with pytest.raises(ValueError, match="NaN"):
        fit_scaling_law(NF, NC, np.full(len(NF), np.nan))


def test_model_map_clusters_planted_families():
    rng = np.random.default_rng(0)
    base_a, base_b = rng.normal(size=(150, 20)), rng.normal(size=(150, 20))
    spaces = {f"a{i}": base_a + 0.3 * rng.normal(size=base_a.shape) for i in range(3)}
    spaces.update({f"b{i}": base_b + 0.3 * rng.normal(size=base_b.shape) for i in range(3)})
    names = ["a0", "b0", "a1", "b1", "a2", "b2"]  # interleaved on purpose
    S = np.array([[mutual_knn(spaces[x], spaces[y]) for y in names] for x in names])
    mm = model_map(S, names)
    fam = {n: n[0] for n in names}
    labels = dict(zip(names, mm.clusters))
    assert len({labels[n] for n in names if fam[n] == "a"}) == 1
    assert len({labels[n] for n in names if fam[n] == "b"}) == 1
    assert labels["a0"] != labels["b0"]
    ordered = [fam[names[i]] for i in mm.order]
    assert ordered in (["a"] * 3 + ["b"] * 3, ["b"] * 3 + ["a"] * 3)  # families contiguous
    # the map puts family members nearer each other than to the other family
    c = dict(zip(names, mm.coords))
    within = np.linalg.norm(c["a0"] - c["a1"])
    across = np.linalg.norm(c["a0"] - c["b0"])
    assert within < across


def test_classical_mds_reproduces_euclidean_distances():
    X = np.random.default_rng(0).normal(size=(7, 2))
    D = np.linalg.norm(X[:, None] - X[None], axis=-1)
    Y = classical_mds(D)
    np.testing.assert_allclose(np.linalg.norm(Y[:, None] - Y[None], axis=-1), D, atol=1e-9)


def test_correlation_matches_scipy_and_respects_direction():
    # 12 models: above the exact-permutation range, so the p-values are scipy's
    rng = np.random.default_rng(0)
    x = rng.normal(size=12)
    y = 2 * x + rng.normal(scale=0.5, size=12)
    c = correlate(x, y, n_boot=200)
    pr, sr = stats.pearsonr(x, y), stats.spearmanr(x, y)
    assert (c.pearson_r, c.pearson_p) == (pytest.approx(pr[0]), pytest.approx(pr[1]))
    assert (c.spearman_rho, c.spearman_p) == (pytest.approx(sr[0]), pytest.approx(sr[1]))
    assert c.r_ci[0] <= c.pearson_r <= c.r_ci[1]
    assert c.higher_is_better and c.better
    # an error metric (lower is better) that falls as the score rises: the correlation is reported
    # signed as computed (negative, like the paper's R = -0.832 for pose), and "better" says that a
    # higher score goes with a better result
    err = -y
    lower = correlate(x, err, higher_is_better=False, n_boot=50)
    assert lower.pearson_r == pytest.approx(stats.pearsonr(x, err)[0]) and lower.pearson_r < 0
    assert lower.spearman_rho == pytest.approx(stats.spearmanr(x, err)[0])
    assert not lower.higher_is_better and lower.better
    assert lower.r_ci[0] <= lower.pearson_r <= lower.r_ci[1] < 0
    assert not correlate(x, y, higher_is_better=False, n_boot=10).better
    with pytest.raises(ValueError, match="at least 3"):
        correlate([1, 2], [1, 2])
    with pytest.raises(ValueError, match="constant"):
        correlate([1, 1, 1], [1, 2, 3])


def test_depth_curve_finds_the_predictive_depth():
    rng = np.random.default_rng(0)
    results = {f"m{i}": float(i) for i in range(6)}
    per_layer = {}
    for i, m in enumerate(results):
        L = 5 + i % 3  # different depths
        curve = rng.normal(size=L)
        curve[int(np.floor(0.5 * (L - 1) + 0.5))] = i  # the layer nearest depth 0.5 tracks the task exactly
        per_layer[m] = curve
    out = depth_curve(per_layer, results, points=3)
    assert out["depth"] == [0.0, 0.5, 1.0]
    assert out["r"][1] == pytest.approx(1.0) and out["better"][1]
    # a lower-is-better task keeps its sign: r = -1 at depth 0.5, which is "better"
    neg = depth_curve(per_layer, {m: -v for m, v in results.items()}, higher_is_better=False, points=3)
    assert neg["r"][1] == pytest.approx(-1.0) and neg["better"][1] and not neg["higher_is_better"]


def test_depth_curve_leaves_out_a_model_only_where_its_layer_has_no_value():
    """Issue #29 item 1: layer 0 of a class-token model is one constant vector (NaN score); the
    curve lost every depth touching such a cell. Only that depth loses that model."""
    results = {"a": 1.0, "b": 3.0, "c": 2.0, "d": 5.0}
    per_layer = {"a": np.array([np.nan, 0.1, 0.3]), "b": np.array([0.5, 0.4, 0.2]),
                 "c": np.array([0.2, 0.3, 0.9]), "d": np.array([np.nan, 0.8, 0.6])}
    out = depth_curve(per_layer, results, points=3)
    # depth 0: a and d left out, two models remain: no r, both named with their layer
    assert out["n_models"][0] == 2 and np.isnan(out["r"][0])
    assert out["excluded"][0] == [{"model": "a", "layer": 0}, {"model": "d", "layer": 0}]
    for i, layer in ((1, 1), (2, 2)):  # every model at depths 0.5 and 1, r as scipy computes it
        x = [per_layer[m][layer] for m in "abcd"]
        assert out["n_models"][i] == 4 and out["excluded"][i] == []
        assert out["r"][i] == pytest.approx(stats.pearsonr(x, [results[m] for m in "abcd"])[0])
    # one NaN model among four at a depth: r over the other three
    per_layer["b"] = np.array([0.5, np.nan, 0.2])
    out = depth_curve(per_layer, results, points=3)
    x = [per_layer[m][1] for m in "acd"]
    assert out["r"][1] == pytest.approx(stats.pearsonr(x, [results[m] for m in "acd"])[0])
    assert out["excluded"][1] == [{"model": "b", "layer": 1}]
    with pytest.raises(ValueError, match=r"at least 3 models with results, got 2 \(a, b\)"):
        depth_curve({"a": per_layer["a"], "b": per_layer["b"]}, results)


def bow_vectors(captions):
    vocab = sorted({w for c in captions for w in c.lower().split()})
    return np.array([[c.lower().split().count(w) for w in vocab] for c in captions], float)


def test_first_neighbour_types_on_hand_made_spaces():
    scenes = time_scenes(12, seed=0)  # one item per (colour pair, phrasing): no identical captions
    event = [s.event for s in scenes]
    phrasing = [s.phrasing for s in scenes]
    bow = [" ".join(sorted(s.caption.lower().split())) for s in scenes]
    rng = np.random.default_rng(0)
    T = bow_vectors([s.caption for s in scenes]) + 1e-3 * rng.normal(size=(12, 1))
    text = first_neighbour_types(T + 1e-6 * rng.normal(size=T.shape), event=event, phrasing=phrasing, bow=bow)
    assert text["bow_swap"] == 1.0  # a bag of words finds the swapped caption first
    # a space that encodes the events (one direction per ordered colour pair) finds the equivalent
    codes = {e: rng.normal(size=8) for e in set(event)}
    V = np.array([codes[e] for e in event]) + 0.01 * rng.normal(size=(12, 8))
    vis = first_neighbour_types(V, event=event, phrasing=phrasing, bow=bow)
    assert vis["logical_equivalent"] == 1.0 and sum(vis.values()) == pytest.approx(1.0)


def test_reorder_arrow_and_chiral_hand_cases():
    rng = np.random.default_rng(0)
    V = rng.normal(size=(60, 10))
    T = V @ rng.normal(size=(10, 12))
    same = reorder_alignment(V, T, T, k=5)  # negatives identical to positives: no drop
    assert same["negative"] == same["positive"] > 0.3 and same["drop"] == 0
    assert reorder_alignment(V, V, V, k=5)["positive"] == 1.0
    noise = reorder_alignment(V, T, rng.normal(size=T.shape), k=5)
    assert noise["negative"] < 0.3 < noise["positive"]
    assert arrow_of_time(V, V) == pytest.approx(0.0, abs=1e-12)
    big = rng.normal(size=(400, 10))
    assert arrow_of_time(big, big[rng.permutation(400)]) == pytest.approx(1.0, abs=0.1)
    assert chiral_accuracy(V, V + 0.01 * rng.normal(size=V.shape), -V) == 1.0
    with pytest.raises(ValueError, match="shared space"):
        chiral_accuracy(V, T, T)


def test_layer_recommendation():
    curves = {
        "rankme": (np.array([1.0, 3.0, 5.0, 4.0]), True),
        "uniformity": (np.array([-9.0, -1.0, -3.0, -2.0]), False),  # layer 0 is never picked
        "alignment with t": (np.array([0.0, 0.2, 0.5, 0.4]), True),
    }
    rec = recommend_layers(curves)
    assert rec["picks"]["rankme"]["layer"] == 2 and rec["picks"]["rankme"]["from_final"] == 1
    assert rec["picks"]["uniformity"]["layer"] == 2
    assert rec["picks"]["alignment with t"]["gain_vs_final"] == pytest.approx(0.25)
    assert rec["agreement"] == {"modal_layer": 2, "share_agreeing": 1.0, "depth_spread": 0.0, "n_metrics": 3}
    text = describe_pick("m", rec["picks"]["alignment with t"], 4, "alignment with t")
    assert text == ("layer 2 of 0–3 of m is best by alignment with t; the last layer is 20% lower; "
                    "0.5 against 0.4, no paired interval (no item resamples stored)")
    with pytest.raises(ValueError, match="layers"):
        recommend_layers({"a": (np.ones(3), True), "b": (np.ones(4), True)})


def test_layer_recommendation_ties_go_to_the_deepest_layer():
    rec = recommend_layers({"flat": (np.array([0.0, 0.5, 0.5, 0.5]), True), "low": (np.array([9.0, 1.0, 1.0, 2.0]), False)})
    assert rec["picks"]["flat"]["layer"] == 3 and rec["picks"]["flat"]["from_final"] == 0
    assert rec["picks"]["low"]["layer"] == 2


def test_a_pick_within_half_a_percent_of_the_last_layer_is_not_sold_as_better():
    pick = {"layer": 2, "final_shortfall": 0.004, "higher_is_better": True}
    text = describe_pick("m", pick, 5, "RankMe")
    assert "0%" not in text and "within 0.5%" in text and "no reason to move off the last layer" in text
    far = {**pick, "final_shortfall": 0.05, "value": 1.05, "final_value": 1.0}
    text = describe_pick("m", far, 5, "RankMe")
    assert "the last layer is 5% lower" in text and text.endswith("no paired interval (no item resamples stored)")
    # with resamples: the paired interval of the gain (one shift per resample shared by both layers,
    # so every paired difference is the full-sample 0.05 and the interval is that one point)
    shift = np.linspace(-0.1, 0.1, 9)
    text = describe_pick("m", far, 5, "RankMe", samples={"2": 1.05 + shift, "4": 1.0 + shift})
    assert text.endswith("1.05 against 1, +5.0% over the last layer (95% CI +5.0% to +5.0%) on 9 paired item resamples")
