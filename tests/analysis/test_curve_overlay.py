"""Overlaid layer curves (issue #33): differences to a baseline run by the interpolation formula, bands
where intervals exist, the baseline dashed. Expected values are written out here from the formula."""

import numpy as np
import pandas as pd
import pytest

from analysis.views.curve_overlay import default_runs, difference_to_baseline, overlay_chart, overlay_text, run_label


def curve(run, values, low=None, high=None, names=None):
    n = len(values)
    last = n - 1 - len(names or {})
    return pd.DataFrame({"run": run, "run_id": run, "model": run.split(" ")[0], "metric": "rankme",
                         "layer": range(n), "depth": [l / last if l <= last else np.nan for l in range(n)],
                         "layer_name": [str((names or {}).get(l, l)) for l in range(n)], "value": values,
                         "low": low if low is not None else np.nan, "high": high if high is not None else np.nan})


def test_run_labels_name_the_budget():
    assert run_label("vid", 4, None, {"vid": "vid (random init)"}) == "vid (random init) · n_f 4"
    assert run_label("txt", None, 2) == "txt · n_c 2"
    assert run_label("m", np.nan, None) == "m"


def test_difference_at_the_same_depths_is_the_plain_difference():
    data = pd.concat([curve("a", [1.0, 2.0, 4.0, np.nan]), curve("b", [0.5, 3.0, 3.0, 1.0],
                                                                 low=[0.0, 2.5, np.nan, np.nan],
                                                                 high=[1.0, 3.5, np.nan, np.nan])])
    out = difference_to_baseline(data, "a")
    b = out[out["run"] == "b"]
    np.testing.assert_allclose(b["value"], [0.5 - 1.0, 3.0 - 2.0, 3.0 - 4.0, np.nan])  # no baseline at depth 1
    np.testing.assert_allclose(b["low"][:2], [0.0 - 1.0, 2.5 - 2.0])
    np.testing.assert_allclose(out[out["run"] == "a"]["value"][:3], 0.0)


def test_difference_between_depth_grids_interpolates_the_baseline():
    data = pd.concat([curve("a", [0.0, 1.0, 4.0]), curve("b", [1.0, 1.0, 1.0, 1.0, 1.0])])  # depths 0..1 by 1/2, 1/4
    b = difference_to_baseline(data, "a").query("run == 'b'")
    # baseline at depth 1/4: halfway between 0.0 and 1.0; at 3/4: halfway between 1.0 and 4.0
    np.testing.assert_allclose(b["value"], [1.0 - 0.0, 1.0 - 0.5, 1.0 - 1.0, 1.0 - 2.5, 1.0 - 4.0])


def test_named_layers_are_left_out_and_a_missing_baseline_is_an_error():
    data = pd.concat([curve("a", [1.0, 2.0, 9.0], names={2: "joint"}), curve("b", [1.0, 1.0, 5.0], names={2: "joint"})])
    out = difference_to_baseline(data, "a")
    assert "joint" not in set(out["layer_name"]) and len(out) == 4
    with pytest.raises(ValueError, match="baseline run 'zzz'"):
        difference_to_baseline(data, "zzz")
    flat = pd.concat([curve("a", [np.nan, np.nan]), curve("b", [1.0, 2.0])])
    assert difference_to_baseline(flat, "a")["value"].isna().all()  # an undefined baseline gives no difference


def marks(chart):
    return chart.to_dict()["layer"]


def test_bands_where_a_run_has_intervals_at_several_layers_bars_where_at_one():
    data = pd.concat([curve("a", [1.0, 2.0, 3.0], low=[0.5, 1.5, 2.5], high=[1.5, 2.5, 3.5]),
                      curve("b", [1.0, 1.0, 1.0], low=[np.nan, 0.8, np.nan], high=[np.nan, 1.2, np.nan]),
                      curve("c", [2.0, 2.0, 2.0])])
    kinds = [m["mark"]["type"] for m in marks(overlay_chart(data, "rankme"))]
    assert kinds == ["area", "line", "rule"]
    text = overlay_text(data, None, False)
    assert "shaded bands (1 run(s)" in text and "error bars (1 run(s)" in text
    assert "point estimates only" in overlay_text(curve("c", [1.0, 2.0]), None, False)


def test_the_caption_names_only_the_interval_kind_drawn():
    """Issue #33: the caption promised shaded bands where every run had one interval (drawn as a bar)."""
    data = pd.concat([curve("b", [1.0, 1.0, 1.0], low=[np.nan, 0.8, np.nan], high=[np.nan, 1.2, np.nan]),
                      curve("c", [2.0, 2.0, 2.0], low=[np.nan, np.nan, 1.5], high=[np.nan, np.nan, 2.5])])
    kinds = [m["mark"]["type"] for m in marks(overlay_chart(data, "rankme"))]
    text = overlay_text(data, None, False)
    assert "area" not in kinds and "band" not in text and "error bars (2 run(s)" in text
    # the baseline's intervals are not drawn, so not counted either
    with_base = pd.concat([data, curve("a", [1.0, 2.0, 3.0], low=[0.5, 1.5, 2.5], high=[1.5, 2.5, 3.5])])
    assert "band" not in overlay_text(with_base, "a", False)


def test_the_baseline_is_dashed_black_and_zero_in_difference_mode():
    data = pd.concat([curve("a", [1.0, 2.0, 3.0]), curve("b", [2.0, 2.0, 2.0])])
    ms = marks(overlay_chart(data, "rankme", baseline="a"))
    assert ms[0]["encoding"]["color"]["scale"]["domain"] == ["b"]  # the baseline has no colour of its own
    assert ms[-1]["mark"]["color"] == "black" and ms[-1]["mark"]["strokeDash"] and ms[-1]["mark"]["type"] == "line"
    chart = overlay_chart(data, "rankme", baseline="a", difference=True)
    ms = marks(chart)
    assert ms[-1]["mark"]["type"] == "rule" and ms[-1]["mark"]["strokeDash"]
    line = chart.to_dict()["datasets"][ms[0]["data"]["name"]]
    assert [r["value"] for r in line] == [1.0, 0.0, -1.0]
    assert ms[0]["encoding"]["y"]["title"] == "rankme minus a"


def runs_of(model, budgets, *, control=False):
    """One curve per budget of ``model`` (n_c), with the grouping columns run_curves gives."""
    return [curve(f"{model} · n_c {b}", [0.1 * b, 0.2 * b, 0.3 * b]).assign(
        run_id=f"{model}-{b}", model=model, model_label=model + (" (random init)" if control else ""),
        budget=f"n_c {b}", budget_size=float(b), control=control) for b in budgets]


def test_the_overlay_colours_by_model_and_dashes_by_budget():
    data = pd.concat(runs_of("a", [1, 2, 4]) + runs_of("b", [1, 4]))
    spec = overlay_chart(data, "rankme").to_dict()
    line = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "line")
    assert line["encoding"]["color"]["field"] == "model_label"
    assert line["encoding"]["color"]["scale"]["domain"] == ["a", "b"]  # two colours for five runs
    assert line["encoding"]["strokeDash"]["field"] == "budget"
    assert line["encoding"]["strokeDash"]["scale"]["domain"] == ["n_c 1", "n_c 2", "n_c 4"]  # smallest first
    assert line["encoding"]["strokeDash"]["scale"]["range"][0] == [1, 0]  # the smallest budget solid
    assert line["encoding"]["detail"]["field"] == "run"  # one line per run, not one per model


def test_the_default_overlay_is_each_trained_models_smallest_and_largest_budget():
    data = pd.concat(runs_of("a", [1, 2, 4]) + runs_of("b", [2]) + runs_of("ctl", [1, 4], control=True))
    assert default_runs(data) == ["a-1", "a-4", "b-2"]  # controls left out, a's middle budget too
    controls = pd.concat(runs_of("ctl", [1, 2, 4], control=True))
    assert default_runs(controls) == ["ctl-1", "ctl-4"]  # only controls: they are what there is
