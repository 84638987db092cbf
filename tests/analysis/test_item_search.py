"""Searching a dataset's items: every caption (not the shortened one a map shows) and every metadata
field, as a literal substring or a regular expression; a bad or runaway expression gives one line, never
an exception. Expected matches come from loops over the records written here (``str.lower`` / the
standard library's ``re``), not from the function under test."""

import re
import time

import pandas as pd
import pytest

from analysis.views import item_search


def records(n=12):
    """Items with two captions (the second long) and metadata: a nested dict, a list, a number, Markdown."""
    rows = []
    for i in range(n):
        rows.append({"idx": i, "item_id": f"clip{i:02d}",
                     "captions": [f"A {('Red', 'green', 'blue')[i % 3]} ball number {i}",
                                  "far away " * 30 + f"a wooden cube at angle {7 * i}"],
                     "metadata": {"scene_shape": ("cube", "disc")[i % 2], "tags": f"t{i % 4}, toy",
                                  "speed": 0.5 * i, "note": "[x](javascript:alert(1))" if i == 0 else "plain"}})
    return pd.DataFrame(rows)


def brute(recs, match):
    """idx of the items with a field for which ``match(text)`` holds: id, every caption, every metadata value."""
    out = []
    for r in recs.itertuples():
        texts = [r.item_id, *r.captions, *(str(v) for v in r.metadata.values())]
        if any(match(t) for t in texts):
            out.append(r.idx)
    return out


@pytest.mark.parametrize("query", ["angle 49", "ANGLE 4", "t3", "disc", "clip1", "ball", "javascript", "(", ".*",
                                   "nothing here", "3.5"])
def test_a_literal_search_covers_every_caption_and_metadata_value(query):
    recs = records()
    got = item_search.search_items(recs, query)
    assert got.message is None
    assert list(got.found["idx"]) == brute(recs, lambda t: query.lower() in t.lower())


@pytest.mark.parametrize("pattern", [r"angle (14|21)$", r"^A (red|blue) ball", r"t[0-2],", r"number \d{2}",
                                     r"cube.*angle 7\b"])
def test_a_regular_expression_matches_as_pythons_re_does(pattern):
    recs = records()
    got = item_search.search_items(recs, pattern, regex=True)
    assert got.message is None
    want = brute(recs, lambda t: re.search(pattern, t, re.IGNORECASE) is not None)
    assert 0 < len(want) < len(recs)
    assert list(got.found["idx"]) == want


def test_each_match_names_where_it_matched_and_shows_that_caption():
    recs = records()
    found = item_search.search_items(recs, "angle 49").found
    assert list(found["item_id"]) == ["clip07"]
    assert found["matched"].iloc[0] == "caption 2"
    assert found["caption"].iloc[0] == recs.loc[7, "captions"][1]  # the whole caption, not shortened
    by_field = item_search.search_items(recs, "disc").found
    assert set(by_field["matched"]) == {"scene_shape"}
    assert list(by_field["caption"]) == [recs.loc[i, "captions"][0] for i in by_field["idx"]]


@pytest.mark.parametrize("bad", ["(", "[a-", "*x", "a{2,1}"])
def test_a_bad_regular_expression_gives_one_line_and_no_matches(bad):
    got = item_search.search_items(records(), bad, regex=True)
    assert got.found.empty
    assert got.message.startswith("not a regular expression") and "\n" not in got.message
    assert repr(bad) in got.message


def test_a_runaway_regular_expression_stops_with_a_message():
    recs = pd.DataFrame([{"idx": i, "item_id": f"i{i}", "captions": ["a" * 40 + "b"], "metadata": {}}
                         for i in range(50)])
    start = time.monotonic()
    got = item_search.search_items(recs, r"(a|aa)+$", regex=True)
    assert time.monotonic() - start < 5
    assert got.found.empty and "took too long" in got.message


def test_only_restricts_the_search_to_items_on_the_map():
    recs = records()
    got = item_search.search_items(recs, "ball", only=[3, 5, 99])
    assert list(got.found["idx"]) == [3, 5]


def test_an_empty_query_finds_nothing_and_says_nothing():
    got = item_search.search_items(records(), "  ", regex=True)
    assert got.found.empty and got.message is None
    assert list(got.found.columns) == ["idx", "item_id", "caption", "matched"]


def test_filter_fields_are_the_metadata_fields_with_a_few_values():
    recs = records()
    fields = item_search.filter_fields(recs, max_levels=4)
    # speed has 12 values, note 2, scene_shape 2, tags 4
    assert fields == {"note": ["[x](javascript:alert(1))", "plain"], "scene_shape": ["cube", "disc"],
                      "tags": ["t0, toy", "t1, toy", "t2, toy", "t3, toy"]}


def test_a_filter_keeps_the_items_whose_field_has_a_chosen_value():
    recs = records()
    got = item_search.filter_items(recs, "tags", ["t1, toy", "t3, toy"])
    assert got == {i for i in range(12) if i % 4 in (1, 3)}
    assert item_search.filter_items(recs, "tags", []) is None
    assert item_search.filter_items(recs, None, ["x"]) is None
    assert item_search.filter_items(recs, "tags", ["nope"]) == set()
