"""The answer first: per-model verdicts on the Overview (recommendation, tie, none) with links to
their evidence; the untrained-models banner; metric help from the registry; "(random init)" and
the dataset on chart titles; baselines and stored intervals drawn. Stores are built here, and the
layer-choice rows are written by hand so each verdict follows from the definitions (the verdicts
study's own function decides them, as ``analyze`` would)."""

import json

import duckdb
import numpy as np
import pytest

from analysis.storage import results as R
from analysis.registry import REGISTRY
from precompute.synthetic.store import write_run
from tests.helpers import app, charts
from tests.stores import write_verdicts

NAN = float("nan")


def _choice(run_id, curves, hib, **extra):
    return {"curves": curves, "higher_is_better": hib, "picks": {}, "agreement": None,
            "n_layers": len(next(iter(curves.values()))), "setting": {"run_id": run_id}, **extra}


def _resamples(curves, n_boot=20):
    """Resample scores around each curve: every layer's value plus one shift per resample shared by
    all layers, so each paired difference equals the full-sample difference on every resample."""
    shift = np.linspace(-0.01, 0.01, n_boot)
    return {m: {str(i): list(x + shift) for i, x in enumerate(c)} for m, c in curves.items()}


@pytest.fixture
def verdict_store(tmp_path):
    """Five models whose layer-choice curves and resamples have known answers (the paired
    differences are exact, so every interval is one point):
    ``sharp``: alignment with mpnet picks layer 2 at 0.8 against 0.4 at the last layer: +100%,
    interval [+100%, +100%]: use layer 2 (alignment with a trained reference decides).
    ``clear`` (layers 0-3 numbered, 4 = its default output): both metrics pick layer 2 and gain
    over the last layer, but the default output is better by both (rankme 16 > 8; uniformity -6 < -3,
    -(-3-(-6))/6 = -50% for the headline): keep the default output.
    ``tied``: rankme picks layer 2 at 10.02 against 10.0 at the last layer, +0.2%: real (its interval
    excludes zero) but under the 2% margin: a tie.
    ``blank``: no usable curve (every layer degenerate).
    ``rnd``: random-init weights: a control's line, never a recommendation."""
    path = tmp_path / "v.duckdb"
    rng = np.random.default_rng(0)
    write_run(path, "rs", rng.normal(size=(4, 12, 4)), model="sharp", modality="video", n_frames=2)
    write_run(path, "rc", rng.normal(size=(5, 12, 4)), model="clear", modality="video", n_frames=2)
    write_run(path, "rt", rng.normal(size=(4, 12, 4)), model="tied", modality="video", n_frames=2)
    write_run(path, "rb", rng.normal(size=(3, 12, 4)), model="blank", modality="text", n_captions=1)
    write_run(path, "rr", rng.normal(size=(4, 12, 4)), model="rnd", modality="video", n_frames=2)
    clear = {"rankme": [1, 2, 8, 4, 16], "uniformity": [0, -1, -3, -2, -6]}
    payloads = {
        "sharp": _choice("rs", {"alignment with mpnet": [.1, .2, .8, .4]}, {"alignment with mpnet": True},
                         resamples=_resamples({"alignment with mpnet": [.1, .2, .8, .4]}), n_boot=20),
        "clear": _choice("rc", clear, {"rankme": True, "uniformity": False}, layer_names={"4": "default"},
                         last_layer=3, resamples=_resamples(clear), n_boot=20),
        "tied": _choice("rt", {"rankme": [1, 5, 10.02, 10.0]}, {"rankme": True},
                        resamples=_resamples({"rankme": [1, 5, 10.02, 10.0]}), n_boot=20),
        "blank": {"curves": {}, "picks": {}, "agreement": None, "n_layers": 3, "last_layer": 2,
                  "setting": {"run_id": "rb"}, "undefined_curves": ["rankme"],
                  "reason": "every curve is undefined (rankme): its layers are degenerate"},
        "rnd": _choice("rr", {"rankme": [1, 2, 8, 4]}, {"rankme": True},
                       resamples=_resamples({"rankme": [1, 2, 8, 4]}), n_boot=20),
    }
    con = duckdb.connect(str(path))
    for model, p in payloads.items():
        R.put_study(con, result_id=f"lc-{model}", study="layer_choice", dataset="synthetic", subject=model,
                    params={"k": 3}, payload=p, input_key="hand")
    con.execute("UPDATE models SET random_init = false WHERE model <> 'rnd'")  # write_run marks every model random
    write_verdicts(con, "synthetic")
    con.close()
    return path


def _lines(at):
    """``{model: verdict line}``: each line opens with its status badge (``:green-badge[...]``), then the model."""
    return {m.value.split("] ", 1)[1].split("\\:")[0]: m.value for m in at.markdown
            if "\\:" in m.value and "-badge[" in m.value}


def test_overview_answers_first_with_value_interval_and_paired_gain_or_says_why_not(verdict_store, monkeypatch):
    at = app(verdict_store, monkeypatch)
    assert next(s.value for s in at.subheader) == "Which layer to use"
    lines = {k: v.replace("\\", "") for k, v in _lines(at).items()}
    sharp = lines["sharp"]
    assert "use layer 2 of 0–3 — 1 of 1 metric agree; alignment with mpnet 0.8 (95% CI" in sharp
    assert "+100% over the last layer (95% CI +100% to +100%)" in sharp and "practical margin 2%" in sharp
    clear = lines["clear"]
    assert "keep the model's default output" in clear and "use layer" not in clear
    assert "-50% over the default output (95% CI -50% to -50%)" in clear and "+50% over the last layer" in clear
    tied = lines["tied"]
    assert "tie between layer 2" in tied and "under the 2% practical margin" in tied and "+0.2% over the last layer" in tied
    assert "no reason to move off the last layer" in tied and "use layer" not in tied
    blank = lines["blank"]
    assert "no layer can be recommended" in blank and "degenerate" in blank
    rnd = lines["rnd (random init)"]
    assert "a control (random-init weights), never a recommendation" in rnd and "use layer" not in rnd
    assert any("practical margin of 2%" in c.value for c in at.caption)


def test_each_verdict_links_to_the_curves_that_show_it(verdict_store, monkeypatch):
    at = app(verdict_store, monkeypatch)
    links = [(e.proto.page, e.proto.query_string) for e in at.get("page_link")]
    assert ("curves", "dataset=synthetic&metric=uniformity&models=clear") in links
    assert ("curves", "dataset=synthetic&metric=rankme&models=tied") in links
    assert not any(page == "heatmap" for page, _ in links)  # no alignment grid stored: no heatmap link


def test_a_store_of_random_weight_models_says_so_on_every_page(verdict_store, monkeypatch):
    con = duckdb.connect(str(verdict_store))
    con.execute("UPDATE models SET random_init = true")
    con.close()
    for page in ("overview", "curves", "model_map"):
        at = app(verdict_store, monkeypatch, page)
        assert any("All models in this store have random, untrained weights" in w.value for w in at.warning), page


def test_the_report_opens_with_the_same_verdicts(verdict_store, tmp_path):
    from precompute.cli import main

    out = tmp_path / "r.html"
    assert main(["report", "--store", str(verdict_store), "--out", str(out)]) == 0
    (ds,) = json.loads(out.with_suffix(".json").read_text())["datasets"]
    by = {v["model"]: v for v in ds["verdicts"]}
    assert (by["sharp"]["status"], by["sharp"]["layer"], by["sharp"]["n_agree"]) == ("recommend", 2, 1)
    assert by["sharp"]["vs_last"]["gain"] == pytest.approx(1.0) and by["sharp"]["vs_last"]["low"] == pytest.approx(0.4)
    assert by["sharp"]["margin"] == 0.02
    assert (by["clear"]["status"], by["clear"]["layer"]) == ("default", 2)
    assert by["clear"]["gain_vs_last"] == pytest.approx(0.5) and by["clear"]["gain_vs_default"] == pytest.approx(-0.5)
    assert by["tied"]["status"] == "tie" and by["blank"]["status"] == "none" and by["rnd"]["status"] == "control"
    md = out.with_suffix(".md").read_text()
    assert md.index("## Which layer to use") < md.index("## synthetic")
    assert "+100% over the last layer (95% CI +100% to +100%)" in md
    page = out.read_text()
    assert page.index("Which layer to use") < page.index("Dataset synthetic")
    assert "practical margin of 2%" in page


def test_alignment_with_a_control_never_votes_and_a_chance_null_is_read_from_the_grid(tmp_path):
    """Issue #29 item 3: random-init models voted in trained models' picks; a best cell no better
    than shuffled pairings (the grid's ``null``, hand-made here) is no alignment beyond chance."""
    from analysis.views.verdicts import verdicts

    path = tmp_path / "c.duckdb"
    rng = np.random.default_rng(1)
    write_run(path, "rm", rng.normal(size=(4, 12, 4)), model="minilm", modality="text", n_captions=1)
    write_run(path, "rv", rng.normal(size=(4, 12, 4)), model="vit", modality="video", n_frames=2)
    curves = {"alignment with vit": [0, .9, .1, .1], "rankme": [1, 2, 8, 4]}
    con = duckdb.connect(str(path))
    R.put_study(con, result_id="lc-minilm", study="layer_choice", dataset="synthetic", subject="minilm",
                params={"k": 3}, payload=_choice("rm", curves, {m: True for m in curves},
                                                 resamples=_resamples(curves), n_boot=20), input_key="hand")
    con.execute("UPDATE models SET random_init = false WHERE model = 'minilm'")
    write_verdicts(con, "synthetic")
    (v,) = verdicts(con, "synthetic")
    assert v["verdict"].controls == ["alignment with vit"] and v["verdict"].picks == {"rankme": 2}
    # RankMe is left alone: a single-space signal never decides "use layer N"
    assert v["verdict"].status == "unsupported" and "use layer" not in v["sentence"]
    assert "not voting (random-init controls): alignment with vit" in v["sentence"]
    con.close()


def test_grid_null_reads_the_null_beside_the_best_cell_or_none():
    from analysis.views.null import grid_null

    null = {"p": 0.4, "q95": 0.2, "n_perm": 500}
    assert grid_null({"best_a": 1, "flags": {"null": null, "best": ""}}) == null
    assert grid_null({"best_a": 1, "flags": {}}) is None and grid_null({"flags": {"null": None}}) is None
    assert grid_null({"flags": {"null": {"p": None, "n_perm": 0}}}) is None  # switched off: no p


# ------------------------------------ on the demo-shaped dashboard store (the last one: the demo itself)


def _spec(chart):
    return json.loads(chart.proto.spec)


def _select_metric(at, metric):
    box = next(s for s in at.sidebar.selectbox if s.label == "Metric")
    box.set_value(metric).run()
    assert not at.exception
    return at


def test_curves_show_the_metrics_help_from_the_registry(dashboard_store, monkeypatch):
    at = _select_metric(app(dashboard_store, monkeypatch, "curves", {"dataset": "moving_shapes"}), "rankme")
    text = " ".join(c.value for c in at.caption).replace("\\", "")
    spec = REGISTRY["rankme"]
    assert spec.summary in text and "Range [1, ∞)" in text and "higher is better" in text
    assert "see `layerscope metrics`" not in text


def test_alignment_curves_draw_chance_and_the_stored_intervals(dashboard_store, monkeypatch):
    con = duckdb.connect(str(dashboard_store), read_only=True)
    n_items = con.execute("SELECT n_items FROM datasets WHERE dataset = 'test_of_time'").fetchall()[0][0]
    grids = R.read_grids(con, dataset="test_of_time", metric="mutual_knn")
    con.close()
    k = grids[0]["params"]["k"]
    at = app(dashboard_store, monkeypatch, "curves", {"dataset": "test_of_time"})
    metric = next(o for o in next(s for s in at.sidebar.selectbox if s.label == "Metric").options
                  if o.startswith("alignment with"))
    at = _select_metric(at, metric)
    text = " ".join(c.value for c in at.caption).replace("\\", "")
    assert f"k/(N−1) = {k / (n_items - 1):.3f} at N={n_items}, k={k}" in text  # mutual k-NN chance, by formula
    spec = _spec(charts(at)[0])
    marks = [layer["mark"] if isinstance(layer["mark"], str) else layer["mark"]["type"] for layer in spec["layer"]]
    dashed = [layer for layer in spec["layer"] if isinstance(layer["mark"], dict) and layer["mark"].get("strokeDash")]
    assert dashed and "rule" in marks
    boots = {g["n_boot"] for g in grids if g["ci_low"] is not None}
    if boots:  # the demo bootstraps its grids: error bars, and the resample count in the caption
        assert any("y2" in layer.get("encoding", {}) for layer in spec["layer"])
        assert any(f"{b} item resamples" in text for b in boots)


def test_chart_titles_say_dataset_and_random_init(dashboard_store, monkeypatch):
    at = app(dashboard_store, monkeypatch, "curves", {"dataset": "moving_shapes"})
    title = _spec(charts(at)[0])["title"]
    assert "dataset moving_shapes" in title["subtitle"]
    assert any("random init" in line for line in title["subtitle"])
    at = app(dashboard_store, monkeypatch, "model_map", {"dataset": "moving_shapes"})
    for chart in charts(at):
        spec = _spec(chart)
        assert any("random init" in line for line in spec["title"]["subtitle"])
    scatter = _spec(charts(at)[1])
    layer = scatter["layer"][0]
    assert layer["mark"]["type"] == "point" and layer["encoding"]["shape"]["field"] == "modality"
    sx, sy = layer["encoding"]["x"]["scale"]["domain"], layer["encoding"]["y"]["scale"]["domain"]
    assert sx[1] - sx[0] == pytest.approx(sy[1] - sy[0]) and scatter["width"] == scatter["height"]


def test_scaling_panels_have_their_own_colour_scales_and_error_bars(dashboard_store, monkeypatch):
    at = app(dashboard_store, monkeypatch, "scaling", {"dataset": "moving_shapes"})
    by_frames, by_captions = (_spec(c) for c in charts(at)[:2])
    assert by_frames["layer"][0]["encoding"]["color"]["field"] == "n_captions"
    assert by_captions["layer"][0]["encoding"]["color"]["field"] == "n_frames"
    text = " ".join(c.value for c in at.caption).replace("\\", "")
    assert "random init" in text and "dataset moving_shapes" in text
    assert "resamples" in text or "No error bars" in text


def test_tables_have_no_none_cells(demo_like, monkeypatch):
    at = app(demo_like, monkeypatch)
    for df in at.dataframe:
        assert not df.value.astype(str).isin(["None", "nan", "NaN", "<NA>"]).any().any()


# ---------------------------------------------------------------- the pure helpers behind them


def test_metric_help_and_chance_come_from_the_registry():
    from analysis.views.metric_help import baselines, chance_level, metric_help

    assert chance_level("mutual_knn", 101, {"k": 10}) == pytest.approx(10 / 100)  # k/(N-1)
    assert chance_level("recall_at_k", 50, {"k": 5}) == pytest.approx(5 / 50)  # k/N
    assert chance_level("cka", 50, {}) is None and chance_level("mutual_knn", None) is None
    text = metric_help("mutual_knn", 101, {"k": 10})
    assert REGISTRY["mutual_knn"].summary in text and "Range [0, 1]" in text and "higher is better" in text
    assert "k/(N−1) = 0.100 at N=101, k=10" in text
    assert "Range (−∞, 0]" in metric_help("uniformity") and "lower is better" in metric_help("uniformity")
    # the upper bound 1 is drawn next to values near it, left to the caption when far off
    assert (1.0, "upper bound 1") in baselines("mutual_knn", [0.6, 0.95])  # 1 is within a quarter span
    assert not any("bound" in name for _, name in baselines("mutual_knn", [0.1, 0.2]))


def test_tables_for_people_and_plain_numbers_in_url_notes():
    import pandas as pd

    from analysis.views.choices import choose
    from analysis.views.store_info import display_table

    df = pd.DataFrame({"n_frames": [4.0, None], "score": [0.12345, float("nan")], "name": ["a", None]})
    out = display_table(df)
    assert out.to_dict(orient="list") == {"n_frames": ["4", ""], "score": ["0.123", ""], "name": ["a", ""]}
    msg = choose("banana", [np.int64(1), np.int64(2)], "frames n_f").message
    assert "showing 1 instead" in msg and "np.int64" not in msg
