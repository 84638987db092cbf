"""Issue #32: a grid computed from approximate k-NN lists whose measured recall is below
``RECALL_FLOOR`` carries ``flags["knn"]["recall_low"]``, and the best-cell sentence shows it."""

import numpy as np
import pytest

from analysis.metrics.knn import RECALL_FLOOR, KnnState, knn_summary
from analysis.views.heatmap import best_cell_text


def state(recall, method="ann"):
    idx = np.array([[1], [0], [0]])
    return KnnState(idx, None, np.ones(3), method=method, recall=recall, recall_rows=3)


def test_floor_is_the_stated_constant():
    assert RECALL_FLOOR == 0.95


@pytest.mark.parametrize("recalls, low", [
    ([1.0, 0.96], False),
    ([RECALL_FLOOR, 1.0], False),  # at the floor: not below it
    ([0.97, 0.949], True),
    ([None, 0.5], True),  # a collapsed layer has no recall; the other one is low
])
def test_recall_below_the_floor_is_flagged(recalls, low):
    info = knn_summary([state(r) for r in recalls])
    assert info["knn"] == "ann"
    assert ("recall_low" in info) is low
    if low:
        worst = min(r for r in recalls if r is not None)
        assert f"{worst:.3f}" in info["recall_low"] and "1 of 2 layer(s)" in info["recall_low"]


def test_exact_lists_are_never_flagged():
    assert knn_summary([state(None, "exact"), state(None, "exact")]) == {"knn": "exact"}


def test_the_best_cell_sentence_shows_the_flag():
    info = knn_summary([state(0.7), state(0.99)])
    g = {"best_a": 0, "best_b": 1, "best_value": 0.4, "ci_low": None, "flags": {"knn": info}}
    text = best_cell_text(g, "vid", "txt")
    assert "recall 0.700 is below 0.95" in text
    g["flags"]["knn"] = knn_summary([state(0.99), state(0.99)])
    assert "recall" not in best_cell_text(g, "vid", "txt")
