"""Selections arriving as URL text: kept when valid, replaced by the default with a message otherwise."""

import pytest

from analysis.views.url_state import choose_flag, choose_int, choose_many, largest, layers_for_models, preferred

MODELS = ["a-model", "b-model", "c-model"]


def test_choose_many_keeps_known_values_in_the_links_order_once_each():
    c = choose_many(["c-model", "a-model", "c-model"], MODELS, "models", ["a-model"])
    assert c.value == ["c-model", "a-model"] and c.message is None


def test_choose_many_absent_parameter_gives_the_default_and_empty_means_none():
    assert choose_many(None, MODELS, "models", ["b-model", "zzz"]).value == ["b-model"]  # default filtered too
    assert choose_many([""], MODELS, "models", ["b-model"]).value == []
    assert choose_many([], MODELS, "models", ["b-model"]).value == []


def test_choose_many_drops_unknown_values_with_a_message_naming_them():
    c = choose_many(["a-model", "evil'; DROP"], MODELS, "models", ["b-model"])
    assert c.value == ["a-model"]
    assert "unknown models" in c.message and "evil" in c.message and "a-model, b-model, c-model" in c.message
    c = choose_many(["nope"], MODELS, "models", ["b-model"])  # nothing known: the default, not an empty view
    assert c.value == ["b-model"] and "showing b-model" in c.message


def test_choose_many_compares_as_text():
    assert choose_many(["2", "4"], [1, 2, 4], "n_f", [1]).value == [2, 4]


@pytest.mark.parametrize("text,value,message", [
    ("3", 3, False), (" 7 ", 7, False), ("1", 1, False), ("10", 10, False),
    ("0", 5, True), ("11", 5, True), ("-2", 5, True), ("2.5", 5, True), ("banana", 5, True), (None, 5, False),
    ("", 5, False)])
def test_choose_int_accepts_whole_numbers_in_range_only(text, value, message):
    c = choose_int(text, 1, 10, "k", 5)
    assert c.value == value and (c.message is not None) == message
    if message:
        assert "from 1 to 10" in c.message and "showing 5" in c.message


def test_choose_int_clips_a_default_outside_the_range():
    assert choose_int(None, 0, 4, "layer", 9).value == 4
    assert choose_int("x", 0, 4, "layer", -3).value == 0


@pytest.mark.parametrize("text,value,message", [
    ("1", True, False), ("on", True, False), ("TRUE", True, False), ("0", False, False), ("no", False, False),
    (None, True, False), ("maybe", True, True)])
def test_choose_flag(text, value, message):
    c = choose_flag(text, "values", True)
    assert c.value is value and (c.message is not None) == message


def test_layers_for_models_pairs_aligned_lists_and_ignores_extras():
    assert layers_for_models(["a", "b"], ["3", "5", "9"]) == {"a": "3", "b": "5"}
    assert layers_for_models(["a", "b"], ["3"]) == {"a": "3"}
    assert layers_for_models(None, ["3"]) == {} and layers_for_models(["a"], None) == {}


def test_largest_and_preferred():
    assert largest([1, 4, 2]) == 4 and largest([]) is None and largest([None, 2]) == 2
    metrics = ["alignment with x", "lid", "rankme"]
    assert preferred(sorted(metrics), ["alignment with", "rankme"]) == "alignment with x"
    assert preferred(["lid", "rankme"], ["alignment with", "rankme"]) == "rankme"
    assert preferred(["lid", "uniformity"], ["alignment with"]) == "lid"
    assert preferred([], ["x"]) is None
