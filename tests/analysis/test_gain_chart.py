"""The Overview's gain chart: controls (random-init weights) apart from trained models, after them, grey and
faded, so a control's large gain (the largest on the demo) is not read as a trained model's result; and no
chart (one sentence instead) when every pick is its model's last layer: nothing but zeros, no interval."""

import dataclasses

import pandas as pd

from analysis.methods.layer_selection import no_verdict
from analysis.views.overview_chart import gain_chart, gain_table


def verdict(label, status, layer, last, gain):
    v = dataclasses.replace(no_verdict("", last), status=status, layer=layer, lead="rankme",
                            vs_last={"gain": gain, "gain_low": gain - 0.1, "gain_high": gain + 0.1})
    return {"model": label, "base": label, "label": label, "verdict": v}


def test_controls_come_after_the_trained_models_and_are_drawn_grey():
    t = gain_table({"d": [verdict("ctl (random init)", "control", 1, 4, 0.9), verdict("a", "recommend", 2, 4, 0.3),
                          verdict("b", "tie", 3, 4, 0.01)]})
    spec = gain_chart(t).to_dict()
    rows = next(l["encoding"]["y"]["sort"] for l in spec["layer"] if "y" in l.get("encoding", {}))
    assert rows == ["a", "b", "ctl (random init)"]
    data = pd.DataFrame(next(v for v in spec["datasets"].values() if v and "control" in v[0]))
    points = next(l for l in spec["layer"] if l["mark"]["type"] == "point")
    stroke = points["encoding"]["stroke"]
    assert stroke["condition"]["test"] == "datum.control" and stroke["condition"]["value"] == "#999999"
    assert data.set_index("model")["control"].to_dict() == {"a": False, "b": False, "ctl (random init)": True}


def test_every_pick_at_the_last_layer_is_one_sentence_not_a_chart_of_zeros():
    from analysis.views.overview_chart import gain_note

    t = gain_table({"d": [verdict("a", "recommend", 4, 4, 0.0), verdict("b", "tie", 6, 6, 0.0)]})
    assert gain_chart(t) is None
    assert gain_note(t) == "Every model's pick is its last layer: no gain over it to draw."
