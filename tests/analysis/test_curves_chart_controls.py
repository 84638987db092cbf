"""The Layer curves draw a control (random-init weights) apart from the trained models: its line
dashed and faded, named in a "weights" legend, so it is not read as a trained model's curve."""

import pandas as pd

from analysis.views.curves import curves_chart


def test_a_controls_curve_is_dashed_and_faded():
    data = pd.DataFrame({"model": ["a"] * 3 + ["ctl"] * 3, "metric": "rankme", "layer": [0, 1, 2] * 2,
                         "depth": [0, 0.5, 1] * 2, "value": [1.0, 2.0, 3.0, 3.0, 4.0, 5.0]})
    spec = curves_chart(data, "rankme", labels={"ctl": "ctl (random init)"}).to_dict()
    line = next(layer for layer in spec["layer"] if layer["mark"] == "line" or
                (isinstance(layer["mark"], dict) and layer["mark"]["type"] == "line"))
    dash = line["encoding"]["strokeDash"]
    assert dash["field"] == "weights" and dash["scale"]["domain"] == ["trained", "random init"]
    assert dash["scale"]["range"][0] == [1, 0] and dash["scale"]["range"][1] != [1, 0]
    rows = pd.DataFrame(spec["datasets"][line["data"]["name"]] if "data" in line else
                        next(iter(spec["datasets"].values())))
    assert rows.groupby("model")["weights"].first().to_dict() == {"a": "trained", "ctl (random init)": "random init"}
