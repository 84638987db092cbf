"""The Test of Time bars carry their chance level, mutual k-NN's k/(N−1) at each k (a bar is read
against it), and say they have no interval (one best-of-grid value on all items)."""

import pandas as pd
import pytest

from analysis.views.temporal import tot_chart, tot_uncertainty_text


def tot():
    return pd.DataFrame({"pair": ["v × t"] * 3, "k": [1, 2, 3], "alignment": [0.2, 0.3, 0.35], "note": ""})


def test_each_k_has_its_chance_tick_at_k_over_n_minus_one():
    spec = tot_chart(tot(), n_items=101).to_dict()
    chance = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "tick")
    rows = spec["datasets"][chance["data"]["name"]]
    assert [(r["k"], r["chance"]) for r in rows] == [(1, pytest.approx(1 / 100)), (2, pytest.approx(2 / 100)),
                                                     (3, pytest.approx(3 / 100))]


def test_the_bars_say_they_have_no_interval():
    text = tot_uncertainty_text(101)
    assert "no interval" in text.lower() and "k/(N−1)" in text and "N = 101" in text


def test_the_arrow_of_time_says_what_its_values_mean_and_that_they_have_no_interval():
    from analysis.views.temporal import arrow_uncertainty_text

    text = arrow_uncertainty_text(12)
    assert "no interval" in text.lower() and "12 videos" in text and "0:" in text and "1:" in text
