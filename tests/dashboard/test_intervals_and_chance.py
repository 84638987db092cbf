"""Issue #33, item 2 and 3: intervals and chance drawn where the Temporal page makes claims (chiral
choice and time reversal with Wilson intervals, a joint layer apart from the depth axis, a comment
below chance), the same-space caption counting the values that have intervals, and undefined values
said once per reason with a count."""

import json

import pandas as pd
import pytest
from scipy.stats import binomtest

from analysis.methods.intervals import wilson_interval
from analysis.views.nuance import (below_chance_text, choice_charts, interval_coverage_text, nuance_view,
                                   undefined_text)
from tests.helpers import app, charts


def chiral_payload():
    """An MLLM pair at three layers and a dual encoder's joint layer at accuracy 1/17 (below chance)."""
    return {"chiral": [
        {"video": "mllm", "text": "mllm", "space": "layers", "layers_a": [0, 1, 2], "per_layer": [0.5, 0.75, 0.9],
         "ties": [0, 0, 0], "n_items": 20},
        {"video": "clip", "text": "clip", "space": "joint", "layers_a": [12], "per_layer": [1 / 17], "ties": [0],
         "n_items": 17}]}


def test_wilson_interval_matches_scipy():
    for k, n in ((0, 12), (1, 17), (3, 10), (12, 12), (50, 100)):
        got = wilson_interval(k / n, n)
        want = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
        assert got == pytest.approx((want.low, want.high), abs=1e-12)
    assert wilson_interval(None, 10) is None and wilson_interval(0.5, 0) is None
    with pytest.raises(ValueError, match="p_hat"):
        wilson_interval(1.5, 10)


def test_a_joint_layer_has_no_depth_and_an_interval():
    df = nuance_view(chiral_payload())["chiral"]
    joint = df[df["layer"] == "joint"].iloc[0]
    assert pd.isna(joint["depth"])  # never "relative depth 0.000000"
    want = binomtest(1, 17).proportion_ci(method="wilson")
    assert (joint["ci_low"], joint["ci_high"]) == pytest.approx((want.low, want.high))
    assert list(df[df["pair"].str.startswith("mllm")]["depth"]) == [0.0, 0.5, 1.0]


def test_choice_charts_draw_depth_and_joint_apart_with_error_bars_and_chance():
    import vl_convert as vlc

    df = nuance_view(chiral_payload())["chiral"]
    deep, joint = choice_charts(df)
    for chart in (deep, joint):
        spec = chart.to_dict()
        marks = [(m["mark"]["type"] if isinstance(m["mark"], dict) else m["mark"]) for m in spec["layer"]]
        assert "errorbar" in marks and "rule" in marks
        rule = next(m for m in spec["layer"] if (m["mark"]["type"] if isinstance(m["mark"], dict) else m["mark"]) == "rule")
        assert spec["datasets"][rule["data"]["name"]][0]["chance"] == 0.5
        assert "<svg" in vlc.vegalite_to_svg(chart.to_json())
    d = deep.to_dict()
    assert d["layer"][1]["encoding"]["x"]["field"] == "depth"
    assert d["layer"][1]["encoding"]["x"]["scale"]["domain"] == [0, 1]
    rows = [r for v in d["datasets"].values() for r in v if "depth" in r]
    assert rows and all(0 <= r["depth"] <= 1 for r in rows)
    j = joint.to_dict()
    assert j["layer"][1]["encoding"]["x"]["field"] == "pair"


def test_below_chance_is_commented_with_its_number():
    df = nuance_view(chiral_payload())["chiral"]
    text = below_chance_text(df, "chiral")
    assert text.startswith("1 chiral value(s) lie below chance")
    assert "clip × clip (joint) layer joint: 0.059" in text
    # an interval that reaches 0.5 is not below chance: 0.4 on 20 items
    assert below_chance_text(nuance_view({"chiral": [
        {"video": "m", "text": "m", "space": "layers", "layers_a": [0], "per_layer": [0.4], "ties": [0],
         "n_items": 20}]})["chiral"], "chiral") == ""


def test_repeated_reasons_are_said_once_with_a_count():
    df = pd.DataFrame({"alignment": [None] * 25 + [0.3, 0.4], "note": ["every k-NN is decided by ties"] * 24
                       + ["collapsed layer", "", ""]})
    line = undefined_text(df, "alignment", "alignment")
    assert line == ("25 of 27 alignment value(s) undefined (not drawn): 24 × every k-NN is decided by ties; "
                    "collapsed layer")
    assert undefined_text(df.dropna(), "alignment", "alignment") == ""


def test_same_space_caption_counts_the_intervals_it_draws():
    sel = pd.DataFrame({"value": [0.1, 0.2, 0.3, None], "ci_low": [0.05, None, None, None],
                        "ci_high": [0.15, None, None, None]})
    assert interval_coverage_text(sel) == ("Error bars: 95% bootstrap intervals over items on 1 of 3 value(s); "
                                           "2 have none (not resampled) and are point estimates.")
    assert interval_coverage_text(sel.assign(ci_low=None, ci_high=None)).startswith("No interval: none of the 3")
    assert "Bands" not in interval_coverage_text(sel)


def test_temporal_page_draws_chiral_intervals_and_chance(nuance_store, monkeypatch):
    at = app(nuance_store, monkeypatch, "temporal", {"dataset": "nuance"})
    specs = [json.loads(c.proto.spec) for c in charts(at)]
    chiral = [s for s in specs if any((m.get("encoding") or {}).get("y", {}).get("title")
                                               == "accuracy (0.5 = chance)" for m in s.get("layer", []))]
    assert len(chiral) == 2  # chiral choice and time reversal, each on depth with error bars
    for s in chiral:
        marks = [(m["mark"]["type"] if isinstance(m["mark"], dict) else m["mark"]) for m in s["layer"]]
        assert marks == ["errorbar", "line", "rule"]
    captions = " ".join(c.value for c in at.caption)
    assert "Bands: bootstrap" not in captions
    assert "Error bars" in captions and "95% Wilson intervals" in captions


def test_fit_line_only_with_enough_models_and_an_interval_that_excludes_zero():
    from analysis.views.downstream import MIN_LINE_N, fit_line_verdict

    assert MIN_LINE_N == 5
    assert fit_line_verdict({"n": 6, "r_ci": [0.2, 0.9]}) == (True, "")
    assert fit_line_verdict({"n": 6, "r_ci": [-0.9, -0.1]}) == (True, "")
    ok, note = fit_line_verdict({"n": 5, "r_ci": [-1.0, 1.0]})
    assert not ok and note == "No fitted line: R's 95% interval [-1.00, 1.00] includes 0; points only."
    ok, note = fit_line_verdict({"n": 4, "r_ci": [0.5, 0.9]})
    assert not ok and "4 model(s), fewer than 5" in note
    assert not fit_line_verdict({"n": 8, "r_ci": None})[0]


@pytest.fixture(scope="module")
def downstream_store(tmp_path_factory):
    """The dashboard's synthetic store with whole-model results for its three models (n = 3 < 5)."""
    from analysis.storage.downstream_import import import_downstream
    from analysis.studies import analyze_store
    from tests.stores import write_dashboard_store, write_downstream_csv

    root = tmp_path_factory.mktemp("down33")
    path = root / "d.duckdb"
    write_dashboard_store(path)
    rows = [(m, "probe", "top1", v, "true", "", "paper") for m, v in
            (("vit-tiny", 0.3), ("llama-tiny", 0.5), ("all-MiniLM-L6-v2", 0.4))]
    import_downstream(path, write_downstream_csv(root / "r.csv", rows))
    analyze_store(path, k=5, n_boot=5, log=lambda m: None)
    return path


def test_downstream_scatter_of_three_models_draws_points_only(downstream_store, monkeypatch):
    at = app(downstream_store, monkeypatch, "downstream", {"dataset": "moving_shapes"})
    scatter = [json.loads(c.proto.spec) for c in charts(at)][0]
    marks = [(m["mark"]["type"] if isinstance(m["mark"], dict) else m["mark"]) for m in scatter.get("layer", [scatter])]
    assert "line" not in marks and "circle" in marks
    assert any("No fitted line\\: 3 model(s), fewer than 5" in c.value for c in at.caption)  # escaped Markdown


def test_no_temporal_chart_puts_a_joint_layer_on_the_depth_axis(nuance_store, monkeypatch):
    import pyarrow as pa

    at = app(nuance_store, monkeypatch, "temporal", {"dataset": "nuance"})
    joint_charts = 0
    for c in charts(at):
        spec = json.loads(c.proto.spec)
        rows = [r for ds in c.proto.datasets
                for r in pa.ipc.open_stream(ds.data.data).read_all().to_pandas().to_dict(orient="records")]
        layers = spec.get("layer", [spec])
        on_depth = any((m.get("encoding") or {}).get("x", {}).get("field") == "depth" for m in layers)
        if on_depth:
            assert all(r["layer"] != "joint" for r in rows if "layer" in r), spec.get("title")
            assert all(0 <= r["depth"] <= 1 for r in rows if r.get("depth") is not None and r["depth"] == r["depth"])
        elif any((m.get("encoding") or {}).get("x", {}).get("title") == "joint layer of each pair" for m in layers):
            joint_charts += 1
            assert rows and all(r["layer"] == "joint" for r in rows)
    assert joint_charts >= 1  # the store's dual encoder (clip × clip, joint) is drawn apart


def _marks(spec):
    return [(m["mark"]["type"] if isinstance(m["mark"], dict) else m["mark"]) for m in spec.get("layer", [spec])]


def _rows(chart):
    import pyarrow as pa

    return {ds.name: pa.ipc.open_stream(ds.data.data).read_all().to_pandas() for ds in chart.proto.datasets}


def test_reorder_bars_carry_their_intervals_and_chance(nuance_store, monkeypatch):
    """Issue #33 item 2: the reorder bars are drawn with their 95% paired bootstrap intervals as error
    bars, chance k/(N−1) as a rule, the drop with its interval against a rule at 0, and a sentence on
    whether the drop's interval includes 0."""
    from analysis.storage import results as R
    from analysis.storage.store import connect

    con = connect(nuance_store, read_only=True)
    try:
        (row,) = R.read_studies(con, study="temporal", dataset="nuance")
    finally:
        con.close()
    stored = {f"{e['vision']} × {e['text']}": e for e in row["payload"]["reorder"] if "layers" in e}
    at = app(nuance_store, monkeypatch, "temporal", {"dataset": "nuance"})
    # bars run along x, one row per pair
    fields = [[(m.get("encoding") or {}).get("x", {}).get("field") for m in json.loads(c.proto.spec).get("layer", [])]
              for c in charts(at)]
    (bars,) = [c for c, f in zip(charts(at), fields) if f[:1] == ["alignment"]]
    (drop,) = [c for c, f in zip(charts(at), fields) if "drop" in f]
    spec = json.loads(bars.proto.spec)
    assert _marks(spec) == ["bar", "errorbar", "rule"]
    err = spec["layer"][1]["encoding"]
    assert (err["x"]["field"], err["x2"]["field"], err["yOffset"]["field"]) == ("ci_low", "ci_high", "captions")
    data = pd.concat(_rows(bars).values(), ignore_index=True)
    drawn = data.dropna(subset=["ci_low"])
    assert len(drawn) == 2 * len(stored)  # every bar of every pair has its interval
    for r in drawn.itertuples():
        iv = stored[r.pair]["intervals"][r.captions]
        assert (r.ci_low, r.ci_high) == pytest.approx(iv) and r.ci_low <= r.alignment <= r.ci_high
    assert sorted(data["chance"].dropna().unique()) == [pytest.approx(5 / 19)]
    dspec = json.loads(drop.proto.spec)
    assert _marks(dspec) == ["errorbar", "point", "rule"]
    assert dspec["layer"][0]["encoding"]["x2"]["field"] == "drop_high"
    assert list(pd.concat(_rows(drop).values())["zero"].dropna()) == [0.0]
    captions = " ".join(c.value for c in at.caption)
    assert "95% paired bootstrap intervals over items" in captions and "conditional on that layer pair" in captions
    for pair, e in stored.items():
        lo, hi = e["intervals"]["drop"]
        said = "includes 0" if lo <= 0 <= hi else "excludes 0"
        assert f"95% interval \\[{lo:.3f}, {hi:.3f}\\] {said}" in captions, pair
