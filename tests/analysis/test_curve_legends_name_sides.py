"""The Layer curves and their overlay colour each model side apart (a dual encoder's caption side is
``"<model> [text]"``, :mod:`analysis.sides`): their colour legend is titled "side" when a side is
drawn apart from its model, and "model" when every line is a one-sided model."""

import pandas as pd
import pytest

from analysis.views.curve_overlay import overlay_chart
from analysis.views.curves import curves_chart


def _lines(keys):
    """Three layers of a made-up curve per side key, with the overlay's grouping columns."""
    return pd.concat([pd.DataFrame({"run": f"{k} · n_c 1", "run_id": k, "model": k, "model_label": k,
                                    "budget": "n_c 1", "budget_size": 1.0, "control": False, "metric": "rankme",
                                    "layer": [0, 1, 2], "depth": [0.0, 0.5, 1.0], "layer_name": ["0", "1", "2"],
                                    "value": [1.0 + i, 2.0 + i, 3.0 + i], "low": float("nan"),
                                    "high": float("nan")}) for i, k in enumerate(keys)], ignore_index=True)


def _colour_titles(spec) -> set:
    return {layer["encoding"]["color"].get("title") for layer in spec["layer"]
            if isinstance(layer.get("encoding", {}).get("color"), dict) and "legend" in layer["encoding"]["color"]}


@pytest.mark.parametrize("keys, title", [(["clip", "clip [text]", "bert"], "side"), (["bert", "vit"], "model"),
                                         (["clip [text]"], "side")])
def test_the_curves_legend_says_side_when_a_side_is_drawn_apart(keys, title):
    spec = curves_chart(_lines(keys), "rankme", labels={}).to_dict()
    assert _colour_titles(spec) == {title}
    line = next(layer for layer in spec["layer"] if layer["mark"] == "line" or layer["mark"].get("type") == "line")
    assert next(t["title"] for t in line["encoding"]["tooltip"] if t["field"] == "model") == title


@pytest.mark.parametrize("keys, title", [(["clip", "clip [text]"], "side"), (["bert", "vit"], "model")])
def test_the_overlay_legend_says_side_when_a_side_is_drawn_apart(keys, title):
    assert _colour_titles(overlay_chart(_lines(keys), "rankme").to_dict()) == {title}
