"""A section's sentences are each printed once, where they belong: directly under the one chart that
reads a sentence, after the charts naming them when several (not all) read it, and with the section's
own notes when every chart with notes reads it or none does."""

import pytest

from analysis.views.section import Section, place_notes


def test_each_sentence_is_placed_once_by_the_charts_that_read_it():
    placed = place_notes([["own a", "shared ab", "everyone"], ["own b", "shared ab", "everyone"], [],
                          ["everyone", "own d"]], ["own a", "shared ab", "everyone", "own b", "own d", "untied"])
    assert placed.under == (("own a",), ("own b",), (), ("own d",))
    assert placed.shared == (((0, 1), ("shared ab",)),)
    assert placed.wide == ("everyone", "untied")  # every chart with notes reads it; or none does


def test_a_section_without_chart_notes_has_only_section_wide_sentences():
    placed = Section([1], charts=(("a", None), ("b", None)), notes=("x", "y", "x")).placed_notes()
    assert placed.under == ((), ()) and placed.shared == () and placed.wide == ("x", "y")


def test_a_chart_s_notes_must_be_among_the_section_s_notes_one_list_per_chart():
    with pytest.raises(ValueError, match="2 charts"):
        Section([1], charts=(("a", None), ("b", None)), notes=("x",), chart_notes=(("x",),))
    with pytest.raises(ValueError, match="not among"):
        Section([1], charts=(("a", None),), notes=(), chart_notes=(("x",),))


def test_a_one_chart_sections_notes_read_its_own_then_the_section_wide_and_two_charts_are_refused():
    one = place_notes([["mine", "also mine"]], ["mine", "also mine", "wide"])
    assert one.one_chart() == ("mine", "also mine", "wide")
    with pytest.raises(ValueError, match="2 charts, not one"):
        place_notes([["a"], ["b"]], ["a", "b"]).one_chart()
