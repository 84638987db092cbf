"""The Downstream and Layer predictors pages on class-token models and a dual encoder (issue #29
items 1, 2 and 4): finite correlations labelled with the reference's side and pair kind, the depth
curve's left-out models, and the predictor table's coverage column."""

import pytest

from tests.helpers import app


@pytest.fixture
def store(sides_store):
    return sides_store


def test_downstream_page_names_the_text_side_and_the_pair_kind(store, monkeypatch):
    at = app(store, monkeypatch, "downstream")
    table = at.dataframe[0].value
    alignment = table[table["score"].str.startswith("alignment with")]
    assert set(alignment["score"]) == {"alignment with tinyclip [text]", "alignment with bert"}
    assert (alignment["pair kind"] == "vision_text").all() and (alignment["error"] == "").all()
    assert alignment["pearson_r"].notna().all()
    assert len(at.get("vega_lite_chart")) >= 2  # the scatter and the depth curves


def test_predictors_page_shows_coverage(store, monkeypatch):
    at = app(store, monkeypatch, "predictors", {"task": "probe · top1"})
    signals = at.dataframe[1].value
    assert "coverage" in signals.columns and "interval excludes 0" in signals.columns
    defined = signals[signals["ρ across layers"].notna()]
    assert (defined["coverage"] == "3 models").all()
    assert "alignment with tinyclip [text] (mutual_knn)" in set(signals["signal"])
