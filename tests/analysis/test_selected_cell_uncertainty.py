"""The heatmap's large number for the selected cell says what is known of its uncertainty: the best
cell's stored 95% interval when the best cell is selected, and that no interval was computed for any
other cell (only the best cell is resampled), never a bare four-decimal value."""

import numpy as np

from analysis.views.heatmap import selected_cell_text


def grid(**extra):
    return {"grid": np.array([[0.1, 0.2], [0.3, 0.4]]), "best_a": 1, "best_b": 1, "best_value": 0.4,
            "ci_low": 0.35, "ci_high": 0.45, "n_boot": 200, "flags": {}, **extra}


def test_the_best_cell_shows_its_interval():
    assert selected_cell_text(grid(), 1, 1) == "95% CI 0.350–0.450 (200 resamples): the best cell's interval"


def test_another_cell_says_it_has_no_interval():
    text = selected_cell_text(grid(), 0, 1)
    assert text.startswith("no interval for this cell") and "0.350–0.450" in text  # the best cell's, for scale


def test_a_best_cell_without_resamples_says_why():
    text = selected_cell_text(grid(ci_low=None, ci_high=None, n_boot=0, flags={"interval": "bootstrap off"}), 1, 1)
    assert text == "no interval: bootstrap off"
