"""The per-model verdict (use layer N, the last layer, the default output, a tie, untested, no
alignment beyond chance, a control, or none) on curves and item resamples whose answers follow from
the definitions in :func:`analysis.methods.layer_selection.layer_verdict`. Paired intervals are checked
against a brute-force bootstrap computed here on explicit resample indices (issue #29, item 3)."""

import math

import numpy as np
import pytest

from analysis.methods.layer_selection import (
    PRACTICAL_MARGIN,
    layer_verdict,
    layers_to_resample,
    paired_gain,
    verdict_sentence,
)

NAN = float("nan")
UP = {"a": True, "b": True, "c": False}


def _const(values, n_boot=40, spread=0.0, seed=0):
    """Resamples ``{layer: (B,)}`` around given per-layer values: each layer's value plus one shared
    per-resample shift (so paired differences are exact) and ``spread`` of independent noise."""
    rng = np.random.default_rng(seed)
    shared = rng.normal(scale=0.01, size=n_boot)
    return {i: v + shared + rng.normal(scale=spread, size=n_boot) for i, v in enumerate(values) if np.isfinite(v)}


# ---------------------------------------------------------------- brute-force references


def _linear_cka(X, Y):
    """Linear CKA with the biased HSIC, from its formula: ‖YᵀX‖²_F / (‖XᵀX‖_F ‖YᵀY‖_F) on centred rows
    (Kornblith et al. 2019, eq. 5)."""
    X, Y = X - X.mean(0), Y - Y.mean(0)
    return np.linalg.norm(Y.T @ X) ** 2 / (np.linalg.norm(X.T @ X) * np.linalg.norm(Y.T @ Y))


def _shifted_percentiles(d, estimate):
    """The 2.5/97.5 percentiles of the per-resample differences, moved so their median sits on the estimate."""
    d = np.asarray(d)
    return np.percentile(d, 2.5) + estimate - np.median(d), np.percentile(d, 97.5) + estimate - np.median(d)


def _planted(seed, planted_layer=2, n=60, n_layers=4, signal=1.0):
    """A vision model of ``n_layers`` layers and a one-layer text model: the text model and layer
    ``planted_layer`` share a 3-d latent (``signal`` = 0: no layer shares anything); every other
    layer is independent noise."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, 3))
    text = z @ rng.normal(size=(3, 8)) + 0.3 * rng.normal(size=(n, 8))
    layers = [rng.normal(size=(n, 8)) for _ in range(n_layers)]
    layers[planted_layer] = signal * z @ rng.normal(size=(3, 8)) + rng.normal(size=(n, 8))
    return layers, text


def _cka_curve_and_resamples(layers, text, IX):
    curve = np.array([_linear_cka(X, text) for X in layers])
    res = {i: np.array([_linear_cka(X[ix], text[ix]) for ix in IX]) for i, X in enumerate(layers)}
    return curve, res


def test_a_planted_shared_latent_is_found_and_its_paired_gain_matches_a_brute_force_bootstrap():
    layers, text = _planted(0)
    IX = np.random.default_rng(1).integers(0, 60, size=(200, 60))  # explicit resample indices, shared by all layers
    curve, res = _cka_curve_and_resamples(layers, text, IX)
    v = layer_verdict({"cka": curve}, {"cka": True}, resamples={"cka": res}, alignment=["cka"])
    assert v.status == "recommend" and v.layer == 2 and v.lead == "cka"
    # brute force: the difference on each resample, pick minus last layer
    diffs = [_linear_cka(layers[2][ix], text[ix]) - _linear_cka(layers[3][ix], text[ix]) for ix in IX]
    lo, hi = _shifted_percentiles(diffs, curve[2] - curve[3])
    assert lo > 0
    assert v.vs_last["low"] == pytest.approx(lo) and v.vs_last["high"] == pytest.approx(hi)
    assert v.vs_last["gain_low"] == pytest.approx(lo / curve[3])
    assert v.gain_vs_last == pytest.approx((curve[2] - curve[3]) / curve[3])
    assert v.interval == pytest.approx(list(_shifted_percentiles(res[2], curve[2])))
    s = verdict_sentence("vit", v)
    assert s.startswith("vit: use layer 2 of 0–3 — 1 of 1 metric agree; cka ")
    assert "95% CI" in s and "over the last layer (95% CI +" in s and "practical margin 2%" in s


@pytest.mark.parametrize("seed", range(5))
def test_with_no_shared_structure_no_layer_is_recommended(seed):
    layers, text = _planted(seed, signal=0.0)
    IX = np.random.default_rng(100 + seed).integers(0, 60, size=(200, 60))
    curve, res = _cka_curve_and_resamples(layers, text, IX)
    v = layer_verdict({"cka": curve}, {"cka": True}, resamples={"cka": res})
    assert v.status in ("tie", "last"), verdict_sentence("m", v)
    assert "use layer" not in verdict_sentence("m", v)


def test_paired_gain_is_the_interval_of_the_per_resample_differences_signed_by_direction():
    rng = np.random.default_rng(3)
    a, b = rng.normal(1.0, 0.1, 50), rng.normal(1.2, 0.1, 50)
    up = paired_gain(a, b, 1.0, 1.2, higher=True)
    down = paired_gain(a, b, 1.0, 1.2, higher=False)  # lower is better: the pick (1.0) is better by 0.2
    assert up["diff"] == pytest.approx(-0.2) and down["diff"] == pytest.approx(0.2)
    lo, hi = _shifted_percentiles(b - a, 0.2)
    assert (down["low"], down["high"]) == (pytest.approx(lo), pytest.approx(hi))
    assert down["gain"] == pytest.approx(0.2 / 1.2) and down["gain_high"] == pytest.approx(hi / 1.2)
    # a resample scored at one layer only is not a pair: skipped
    a[:3] = NAN
    assert paired_gain(a, b, 1.0, 1.2, higher=True)["n_valid"] == 47
    assert paired_gain([1.0, NAN], [1.0, 2.0], 1.0, 1.0, higher=True)["low"] is None
    with pytest.raises(ValueError, match="two \\(B,\\) arrays"):
        paired_gain(np.zeros(3), np.zeros(4), 0, 0, higher=True)


def test_a_real_gain_under_the_practical_margin_is_a_tie_said_as_such():
    # +1% over the last layer with a tight interval: real, but under the 2% margin
    curve = [0, .5, 1.01, 1.0]
    v = layer_verdict({"a": curve}, UP, resamples={"a": _const(curve)})
    assert v.status == "tie" and v.vs_last["low"] > 0
    assert v.vs_last["gain"] == pytest.approx(0.01) and 0.01 < PRACTICAL_MARGIN
    s = verdict_sentence("m", v)
    assert "tie between layer 2" in s and "under the 2% practical margin" in s and "+1.0% over the last layer" in s
    assert "use layer" not in s and "no reason to move off the last layer" in s
    # the same pick, 5% up: recommended
    curve = [0, .5, 1.05, 1.0]
    assert layer_verdict({"a": curve}, UP, resamples={"a": _const(curve)}, alignment=["a"]).status == "recommend"


def test_a_gain_whose_interval_includes_zero_is_a_tie():
    curve = [0, .5, 1.10, 1.0]
    v = layer_verdict({"a": curve}, UP, resamples={"a": _const(curve, spread=0.2)})
    assert v.status == "tie" and v.vs_last["low"] <= 0 <= v.vs_last["high"]
    assert "includes zero" in v.reason


def test_a_pick_below_the_default_output_is_never_recommended_over_it():
    # layers 0..3 numbered, 4 = the model's default output, 11% above the pick
    curve = [0, .2, .5, .3, .5 / 0.89]
    v = layer_verdict({"a": curve}, UP, last_layer=3, default_layer=4, resamples={"a": _const(curve)})
    assert v.status == "default" and v.layer == 2
    assert v.gain_vs_default == pytest.approx(-0.11)
    s = verdict_sentence("m", v)
    assert s.startswith("m: keep the model's default output") and "use layer" not in s
    assert "-11% over the default output (95% CI" in s and "+67% over the last layer" in s
    # without resamples: a point difference decides nothing, and nothing is recommended
    assert layer_verdict({"a": curve}, UP, last_layer=3, default_layer=4, alignment=["a"]).status == "untested"


def test_a_pick_above_the_last_layer_but_tied_with_default_is_a_tie_with_default():
    curve = [0, .2, .5, .3, .495]
    v = layer_verdict({"a": curve}, UP, last_layer=3, default_layer=4, resamples={"a": _const(curve)})
    assert v.status == "tie" and v.tie_with == "the default output"
    assert "no reason to move off the default output" in verdict_sentence("m", v)


def test_the_last_layer_below_default_is_not_recommended_either():
    curve = [0, .2, .5, .6, .8]
    v = layer_verdict({"a": curve}, UP, last_layer=3, default_layer=4, resamples={"a": _const(curve)})
    assert v.layer == 3 and v.status == "default" and "the last layer scores below" in v.reason


def test_without_resamples_a_lead_is_untested_never_recommended():
    v = layer_verdict({"a": [0, .2, .5, .3], "b": [0, .1, .6, .2], "c": [9, 5, 1, 4]}, UP)
    assert v.status == "untested" and v.layer == 2 and (v.n_agree, v.n_metrics) == (3, 3)
    # the headline is the smallest gain: a (.5-.3)/.3, b (.6-.2)/.2, c -(1-4)/4 (lower is better)
    assert v.gains_vs_last == pytest.approx({"a": 2 / 3, "b": 2.0, "c": 0.75})
    assert v.lead == "a"
    s = verdict_sentence("vit", v)
    assert "use layer" not in s and "not recommended" in s and "--bootstrap" in s
    assert "+67% over the last layer (no paired interval)" in s and "(no interval: no item resamples stored)" in s


def test_the_lead_is_a_metric_with_resamples_then_the_smallest_gain():
    curves = {"a": [0, .2, .5, .3], "b": [0, .1, .6, .2]}
    v = layer_verdict(curves, UP, resamples={"b": _const(curves["b"])}, alignment=["a", "b"])
    assert v.lead == "b" and v.status == "recommend" and v.n_boot == 40


def test_controls_never_vote():
    # the control's alignment picks layer 1 by far; the trained signal picks layer 2
    curves = {"alignment with rnd": [0, .9, .1, .1], "alignment with vit": [0, .1, .5, .3], "rankme": [1, 5, 9, 4]}
    hib = {m: True for m in curves}
    res = {m: _const(c) for m, c in curves.items()}
    v = layer_verdict(curves, hib, resamples=res, controls=["alignment with rnd"])
    assert v.layer == 2 and (v.n_agree, v.n_metrics) == (2, 2) and "alignment with rnd" not in v.picks
    assert v.controls == ["alignment with rnd"]
    assert "not voting (random-init controls): alignment with rnd" in verdict_sentence("m", v)
    # with three controls voting, they would outvote the two trained signals
    ctrl = ["alignment with rnd", "alignment with rnd2", "alignment with rnd3"]
    for m in ctrl[1:]:
        curves[m], hib[m], res[m] = curves[ctrl[0]], True, res[ctrl[0]]
    assert layer_verdict(curves, hib, resamples=res).layer == 1
    v = layer_verdict(curves, hib, resamples=res, controls=ctrl)
    assert v.layer == 2 and v.n_metrics == 2 and v.controls == ctrl


def test_a_model_whose_only_signals_come_from_controls_gets_no_alignment_vote():
    v = layer_verdict({"alignment with rnd": [0, .9, .1, .1]}, UP | {"alignment with rnd": True},
                      controls=["alignment with rnd"])
    assert v.status == "none" and v.layer is None and "controls never vote" in v.reason


def test_a_control_model_is_reported_as_a_control_never_recommended():
    curve = [0, .5, 2.0, 1.0]
    v = layer_verdict({"a": curve}, UP, resamples={"a": _const(curve)}, control_model=True)
    assert v.status == "control" and v.layer == 2 and v.vs_last["low"] > 0
    s = verdict_sentence("rnd (random init)", v)
    assert "a control (random-init weights), never a recommendation" in s and "use layer" not in s
    assert "+100% over the last layer (95% CI" in s


def test_a_best_cell_no_better_than_shuffled_pairings_says_no_alignment_beyond_chance():
    curve = [0, .2, .5, .3]
    null = {"p": 0.31, "q95": 0.52, "n_perm": 1000}
    v = layer_verdict({"alignment with bert": curve}, {"alignment with bert": True},
                      resamples={"alignment with bert": _const(curve)}, nulls={"alignment with bert": null})
    assert v.status == "chance" and v.layer is None and v.chance == {"alignment with bert": null}
    s = verdict_sentence("vit", v)
    assert s.startswith("vit: no alignment beyond chance: alignment with bert best 0.5, shuffled-pairing null p=0.31")
    assert "null 95th percentile 0.52, 1000 shuffles" in s and "no layer is recommended" in s


def test_a_significant_null_lets_the_curve_vote_and_a_chance_curve_beside_others_is_listed():
    curves = {"alignment with bert": [0, .2, .5, .3], "alignment with t5": [0, .9, .1, .1]}
    hib = {m: True for m in curves}
    res = {m: _const(c) for m, c in curves.items()}
    sig = {"p": 0.001, "q95": 0.12, "n_perm": 1000}
    v = layer_verdict(curves, hib, resamples=res, nulls={"alignment with bert": sig,
                                                         "alignment with t5": {**sig, "p": 0.5}})
    assert v.picks == {"alignment with bert": 2} and v.status == "recommend"
    assert "not voting (no alignment beyond chance): alignment with t5 (p=0.5)" in verdict_sentence("m", v)
    # no null stored: the curves vote as before
    assert layer_verdict(curves, hib, resamples=res).n_metrics == 2


def test_equal_values_go_to_the_deepest_layer_so_the_last_layer_wins():
    curve = [0, .5, .5, .5]
    v = layer_verdict({"a": curve}, UP, resamples={"a": _const(curve)})
    assert v.status == "last" and v.layer == 3 and v.gain_vs_last == 0.0
    s = verdict_sentence("m", v)
    assert s.startswith("m: use the last layer (3) — 1 of 1 metric agree, no earlier layer scores higher; a 0.5 (95% CI")


def test_split_votes_go_to_the_deeper_layer_and_say_how_many_agree():
    v = layer_verdict({"a": [0, .9, .5, .3], "b": [0, .1, .6, .2]}, UP)
    assert v.picks == {"a": 1, "b": 2}
    assert v.layer == 2 and (v.n_agree, v.n_metrics) == (1, 2) and v.agreeing == ["b"]


def test_degenerate_layers_are_never_recommended():
    assert layer_verdict({"a": [0, 5, .5, .3]}, UP, degenerate={1}).layer == 2


def test_all_nan_or_all_degenerate_gives_no_verdict_and_says_why():
    v = layer_verdict({"a": [NAN] * 4, "b": [NAN] * 4}, UP)
    assert v.status == "none" and v.layer is None and v.undefined == ["a", "b"]
    assert "undefined at every layer" in verdict_sentence("m", v)
    v = layer_verdict({"a": [0, .2, .5, .3]}, UP, degenerate={1, 2, 3})
    assert v.status == "none" and "degenerate" in v.reason


def test_an_undefined_last_layer_gives_no_gain_and_says_why():
    curve = [0, .2, .5, NAN]
    v = layer_verdict({"a": curve}, UP, resamples={"a": _const(curve)}, alignment=["a"])
    assert v.status == "recommend" and v.layer == 2 and v.vs_last is None
    assert "the last layer is degenerate or undefined" in verdict_sentence("m", v)


def test_a_zero_last_layer_has_no_relative_gain_and_is_untested():
    curve = [0, .2, .5, 0.0]
    v = layer_verdict({"a": curve}, UP, resamples={"a": _const(curve)})
    assert v.gain_vs_last is None and v.status == "untested" and "scores 0" in v.reason
    assert math.isfinite(v.value)


def test_bad_input_names_the_curve():
    with pytest.raises(ValueError, match="'b' has 3 layers"):
        layer_verdict({"a": np.zeros(4), "b": np.zeros(3)}, {"a": True, "b": True})
    with pytest.raises(ValueError, match="'z' has no direction"):
        layer_verdict({"z": np.zeros(4)}, UP)
    with pytest.raises(ValueError, match="last_layer 7"):
        layer_verdict({"a": np.zeros(4)}, UP, last_layer=7)


def test_layers_to_resample_are_each_curves_pick_the_last_layer_and_default():
    got = layers_to_resample({"a": [0, .2, .5, .3, .9], "c": [9, 1, 5, 4, 0]}, UP, last_layer=3, default_layer=4)
    assert got == {"a": [2, 3, 4], "c": [1, 3, 4]}
    assert layers_to_resample({"a": [0, .2, .5, .1]}, UP, degenerate={2}) == {"a": [1, 3]}


def test_recommend_layers_never_picks_a_named_layer_and_measures_from_the_last_numbered_one():
    from analysis.methods.layer_selection import named_layers, recommend_layers

    rec = recommend_layers({"a": ([0, .2, .5, .3, .9], True)}, last_layer=3)
    p = rec["picks"]["a"]
    assert (p["layer"], p["final_value"], p["from_final"]) == (2, .3, 1)
    assert p["relative_depth"] == pytest.approx(2 / 3) and rec["last_layer"] == 3
    # a control's pick is kept for display, never counted in the agreement
    rec = recommend_layers({"a": ([0, .2, .5, .3], True), "ctl": ([0, .9, .1, .1], True),
                            "ctl2": ([0, .9, .1, .1], True)}, controls=["ctl", "ctl2"])
    assert rec["picks"]["ctl"]["layer"] == 1 and rec["controls"] == ["ctl", "ctl2"]
    assert rec["agreement"]["modal_layer"] == 2 and rec["agreement"]["n_metrics"] == 1
    assert recommend_layers({"ctl": ([0, .9, .1], True)}, controls=["ctl"])["agreement"] is None
    assert named_layers('{"layer_names": {"13": "default", "14": "joint"}}') == {13: "default", 14: "joint"}
    assert named_layers({}) == {} and named_layers(None) == {} and named_layers("not json") == {}


@pytest.mark.parametrize("null, named", [
    ({"p": 0.005, "q95": 0.16, "n_perm": 200, "grouped": True, "kind": "between"},
     "beyond chance: p = 0.005 under 200 between-group shuffles (whole sources as blocks)"),
    ({"p": 0.001, "q95": 0.12, "n_perm": 1000}, "beyond chance: p = 0.001 under 1000 shuffled pairings"),
])
def test_the_line_says_its_deciding_alignment_is_beyond_chance_under_the_null_it_was_tested_with(null, named):
    """Issue #42: a voting alignment curve's line says which null cleared it (between-group shuffles by
    default with groups), so a reader never takes another null's p for the verdict's."""
    curve = [0, .2, .5, .3]
    v = layer_verdict({"alignment with bert": curve, "b": [0, .1, .2, .9]}, {"alignment with bert": True, "b": True},
                      resamples={"alignment with bert": _const(curve)}, nulls={"alignment with bert": null})
    assert v.lead == "alignment with bert" and v.null == null
    s = verdict_sentence("vit", v)
    value = s.index("alignment with bert 0.5 (95% CI")
    assert s.index(named) > value and s.count("beyond chance") == 1
    # a lead without a stored null claims nothing about chance
    bare = verdict_sentence("vit", layer_verdict({"alignment with bert": curve}, {"alignment with bert": True},
                                                 resamples={"alignment with bert": _const(curve)}))
    assert "chance" not in bare
