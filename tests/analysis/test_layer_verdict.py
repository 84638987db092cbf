"""The per-model verdict (which layer to use, or a tie, or none) on hand-built curves whose answers
follow from the definitions in :func:`analysis.methods.layer_selection.layer_verdict`."""

import math

import numpy as np
import pytest

from analysis.methods.layer_selection import layer_verdict, verdict_sentence

NAN = float("nan")
UP = {"a": True, "b": True, "c": False}


def test_all_metrics_agree_and_the_headline_is_the_smallest_gain():
    v = layer_verdict({"a": [0, .2, .5, .3], "b": [0, .1, .6, .2], "c": [9, 5, 1, 4]}, UP)
    assert v["status"] == "recommend" and v["layer"] == 2 and v["last_layer"] == 3
    assert (v["n_agree"], v["n_metrics"]) == (3, 3)
    # gains over the last layer: a (.5-.3)/.3, b (.6-.2)/.2, c -(1-4)/4 (lower is better)
    assert v["gains_vs_last"]["a"] == pytest.approx(2 / 3)
    assert v["gains_vs_last"]["b"] == pytest.approx(2.0)
    assert v["gains_vs_last"]["c"] == pytest.approx(0.75)
    assert v["lead"] == "a" and v["gain_vs_last"] == pytest.approx(2 / 3)
    assert v["interval"] is None
    s = verdict_sentence("vit", v)
    assert s.startswith("vit: use layer 2 of 3 — 3 of 3 metrics agree") and "+67% over the last layer" in s


@pytest.mark.parametrize("pick, status", [(1.004, "tie"), (1.006, "recommend")])
def test_under_half_a_percent_is_a_tie(pick, status):
    v = layer_verdict({"a": [0, 1.0, pick, 1.0]}, UP)
    assert v["status"] == status and v["layer"] == 2
    assert v["gain_vs_last"] == pytest.approx(pick - 1.0)
    if status == "tie":
        assert "no reason to move off the last layer" in verdict_sentence("m", v)
        assert "use layer" not in verdict_sentence("m", v)


@pytest.mark.parametrize("lo, status", [(0.44, "tie"), (0.46, "recommend")])
def test_the_last_layer_inside_the_picks_interval_is_a_tie(lo, status):
    v = layer_verdict({"a": [0, .2, .5, .45]}, UP, intervals={"a": (2, lo, 0.56)})
    assert v["status"] == status and v["interval"] == [lo, 0.56]
    if status == "tie":
        assert "95% interval" in v["reason"]
    else:
        assert "95% CI 0.46–0.56, 50 resamples" in verdict_sentence("m", v, n_boot=50)


def test_lower_is_better_interval_overlap_is_judged_on_the_upper_end():
    assert layer_verdict({"c": [9, 5, 1, 1.2]}, UP, intervals={"c": (2, 0.8, 1.3)})["status"] == "tie"
    assert layer_verdict({"c": [9, 5, 1, 1.2]}, UP, intervals={"c": (2, 0.8, 1.1)})["status"] == "recommend"


def test_an_interval_at_another_layer_is_not_used():
    v = layer_verdict({"a": [0, .2, .5, .45]}, UP, intervals={"a": (1, 0.1, 0.9)})
    assert v["status"] == "recommend" and v["interval"] is None


def test_equal_values_go_to_the_deepest_layer_so_the_last_layer_wins():
    v = layer_verdict({"a": [0, .5, .5, .5]}, UP)
    assert v["status"] == "last" and v["layer"] == 3
    assert verdict_sentence("m", v) == "m: use the last layer (3) — 1 of 1 metric agree"


def test_split_votes_go_to_the_deeper_layer_and_say_how_many_agree():
    v = layer_verdict({"a": [0, .9, .5, .3], "b": [0, .1, .6, .2]}, UP)
    assert v["picks"] == {"a": 1, "b": 2}
    assert v["layer"] == 2 and (v["n_agree"], v["n_metrics"]) == (1, 2) and v["agreeing"] == ["b"]


def test_degenerate_layers_are_never_recommended():
    v = layer_verdict({"a": [0, 5, .5, .3]}, UP, degenerate={1})
    assert v["layer"] == 2


def test_all_nan_or_all_degenerate_gives_no_verdict_and_says_why():
    v = layer_verdict({"a": [NAN] * 4, "b": [NAN] * 4}, UP)
    assert v["status"] == "none" and v["layer"] is None and v["undefined"] == ["a", "b"]
    assert "undefined at every layer" in verdict_sentence("m", v)
    v = layer_verdict({"a": [0, .2, .5, .3]}, UP, degenerate={1, 2, 3})
    assert v["status"] == "none" and "degenerate" in v["reason"]


def test_an_undefined_last_layer_gives_no_gain_but_still_a_pick():
    v = layer_verdict({"a": [0, .2, .5, NAN]}, UP)
    assert v["status"] == "recommend" and v["layer"] == 2 and v["gain_vs_last"] is None
    assert "degenerate or undefined" in verdict_sentence("m", v)


def test_named_layers_are_compared_against_never_recommended():
    # layers 0..3 numbered, 4 = the model's default output (better than any numbered layer here)
    v = layer_verdict({"a": [0, .2, .5, .3, .9]}, UP, last_layer=3, default_layer=4)
    assert v["layer"] == 2 and v["last_layer"] == 3
    assert v["gain_vs_default"] == pytest.approx((.5 - .9) / .9)
    assert v["default_value"] == .9
    assert "-44% over the default output" in verdict_sentence("m", v)


def test_a_zero_last_layer_has_no_relative_gain():
    v = layer_verdict({"a": [0, .2, .5, 0.0]}, UP)
    assert v["gain_vs_last"] is None and v["status"] == "recommend"
    assert math.isfinite(v["value"])


def test_bad_input_names_the_curve():
    with pytest.raises(ValueError, match="'b' has 3 layers"):
        layer_verdict({"a": np.zeros(4), "b": np.zeros(3)}, {"a": True, "b": True})
    with pytest.raises(ValueError, match="'z' has no direction"):
        layer_verdict({"z": np.zeros(4)}, UP)
    with pytest.raises(ValueError, match="last_layer 7"):
        layer_verdict({"a": np.zeros(4)}, UP, last_layer=7)


def test_recommend_layers_never_picks_a_named_layer_and_measures_from_the_last_numbered_one():
    from analysis.methods.layer_selection import named_layers, recommend_layers

    rec = recommend_layers({"a": ([0, .2, .5, .3, .9], True)}, last_layer=3)
    p = rec["picks"]["a"]
    assert (p["layer"], p["final_value"], p["from_final"]) == (2, .3, 1)
    assert p["relative_depth"] == pytest.approx(2 / 3) and rec["last_layer"] == 3
    assert named_layers('{"layer_names": {"13": "default", "14": "joint"}}') == {13: "default", 14: "joint"}
    assert named_layers({}) == {} and named_layers(None) == {} and named_layers("not json") == {}
