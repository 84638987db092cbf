"""Named layers' labels on the Layer curves (``default``, ``joint``: levels at the plot's right edge)
alternate above and below their level in the order of their values, so two close levels (a dual
encoder's default output and joint projection) do not print one label over the other."""

import pandas as pd

from analysis.views.curves import curves_chart


def test_two_close_named_levels_label_one_above_and_one_below():
    data = pd.DataFrame({"model": "dual", "metric": "rankme", "layer": [0, 1, 2, 3, 4],
                         "depth": [0, 0.5, 1, None, None], "value": [1.0, 2.0, 3.0, 2.500, 2.501],
                         "layer_name": ["0", "1", "2", "default", "joint"]})
    spec = curves_chart(data, "rankme", labels={}).to_dict()
    texts = [layer for layer in spec["layer"] if isinstance(layer["mark"], dict) and layer["mark"]["type"] == "text"]
    placed = {row["layer_name"]: layer["mark"]["dy"] for layer in texts
              for row in spec["datasets"][layer["data"]["name"]]}
    assert placed["default"] > 0 > placed["joint"]  # the lower value's label below its level, the higher above
