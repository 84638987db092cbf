"""Issue #33 item 9: model-map labels never overlap (greedy placement, analysis/views/label_layout.py)."""

import itertools

import numpy as np
import pytest

from analysis.views.label_layout import Box, label_positions, place_labels


def no_overlaps(boxes):
    placed = [b for b in boxes if b is not None]
    return all(not a.overlaps(b) for a, b in itertools.combinations(placed, 2))


def test_box_overlap_is_shared_area_only():
    a = Box(0, 0, 10, 10)
    assert a.overlaps(Box(5, 5, 15, 15)) and not a.overlaps(Box(10, 0, 20, 10))  # touching edges only


@pytest.mark.parametrize("seed", range(5))
def test_crowded_points_get_labels_that_never_overlap(seed):
    rng = np.random.default_rng(seed)
    pts = rng.uniform(60, 320, size=(25, 2))
    texts = [f"model-{i} (random init)"[: rng.integers(5, 24)] for i in range(25)]
    boxes = place_labels(pts, texts, width=380, height=380)
    assert no_overlaps(boxes)
    markers = [Box(x - 8, y - 8, x + 8, y + 8) for x, y in pts]
    for b in boxes:
        if b is not None:
            assert b.inside(380, 380) and not any(b.overlaps(m) for m in markers)


def test_identical_points_do_not_stack_their_labels():
    # duplicated items: every point at one place (a degenerate map); each label still gets its own spot
    boxes = place_labels(np.full((4, 2), 190.0), ["aaaa", "bbbb", "cccc", "dddd"], width=380, height=380)
    assert all(b is not None for b in boxes) and no_overlaps(boxes)
    centres = {((b.x0 + b.x1) / 2, (b.y0 + b.y1) / 2) for b in boxes}
    assert len(centres) == 4


def test_spread_points_keep_their_label_right_above():
    boxes = place_labels(np.array([[50.0, 100.0], [300.0, 300.0]]), ["a", "b"], width=380, height=380)
    for (x, y), b in zip([(50, 100), (300, 300)], boxes):
        assert (b.x0 + b.x1) / 2 == x and b.y1 == pytest.approx(y - 10)  # first choice: above, the first gap


def test_data_units_round_trip_and_mismatch_is_refused():
    (pos,) = label_positions([0.0], [0.0], ["m"], domain_x=[-1, 1], domain_y=[-1, 1], side=200)
    assert pos[0] == pytest.approx(0.0) and pos[1] > 0  # above the point: y grows upward in data units
    with pytest.raises(ValueError, match="2 labels for 1 points"):
        place_labels(np.zeros((1, 2)), ["a", "b"], width=10, height=10)


def test_the_model_map_draws_its_labels_where_the_layout_put_them(tmp_path):
    """The model map's spec (vl-convert renders it) has one text mark per placed label, at the layout's
    positions: the layout recomputed here from the chart's points and domain."""
    import json

    import pandas as pd
    import vl_convert as vlc

    from analysis.views.studies import model_map_charts

    names = [f"model-{i}" for i in range(6)]
    coords = pd.DataFrame({"model": names, "x": [0, 0.01, 0.02, 1, 1, 0.5], "y": [0, 0.01, 0, 1, 1.01, 0.5],
                           "modality": ["video"] * 3 + ["text"] * 3, "cluster": [0, 0, 0, 1, 1, 1]})
    cells = pd.DataFrame([{"model_a": a, "model_b": b, "similarity": 0.5, "pair_kind": "x"}
                          for a in names for b in names])
    _, mapped = model_map_charts({"cells": cells, "order": names, "coords": coords}, labels={})
    spec = mapped.to_dict()
    text_layer = next(la for la in spec["layer"] if (la["mark"]["type"] if isinstance(la["mark"], dict) else la["mark"])
                      == "text")
    rows = spec["datasets"][text_layer["data"]["name"]]
    half = max(np.ptp(coords["x"]), np.ptp(coords["y"])) / 2 * 1.25
    cx, cy = coords["x"].mean(), coords["y"].mean()
    want = label_positions(coords["x"], coords["y"], names, domain_x=[cx - half, cx + half],
                           domain_y=[cy - half, cy + half], side=spec["width"])  # the map's own side
    got = {r["model"]: (r["lx"], r["ly"]) for r in rows}
    assert got == {n: pytest.approx(w) for n, w in zip(names, want) if w is not None}
    assert len(got) >= 5  # six names of 7 characters fit on the map
    assert "<svg" in vlc.vegalite_to_svg(json.dumps(spec))
