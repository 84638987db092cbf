"""The answer first: per-model verdicts on the Overview (recommendation, tie, none) with links to
their evidence; the untrained-models banner; metric help from the registry; "(random init)" and
the dataset on chart titles; baselines and stored intervals drawn. Stores are built here, and the
layer-choice rows are written by hand so each verdict follows from the definitions."""

import json

import duckdb
import numpy as np
import pytest

from analysis import results as R
from analysis.registry import REGISTRY
from precompute.synthetic_store import write_run
from tests.helpers import app, charts

NAN = float("nan")


def _choice(run_id, curves, hib, **extra):
    return {"curves": curves, "higher_is_better": hib, "picks": {}, "agreement": None,
            "n_layers": len(next(iter(curves.values()))), "setting": {"run_id": run_id}, **extra}


@pytest.fixture
def verdict_store(tmp_path):
    """Three models whose layer-choice curves have known answers:
    ``clear`` (layers 0-3 numbered, 4 = its default output): both metrics pick layer 2; rankme gains
    (8-4)/4 = 100% over the last layer, uniformity (lower is better) -(-3-(-2))/2 = 50% (the
    headline: the smaller); over the default output uniformity changes -(-3-(-6))/6 = -50%.
    ``tied``: rankme picks layer 2 at 10.02 against 10.0 at the last layer, 0.2% apart: a tie.
    ``blank``: no usable curve (every layer degenerate)."""
    path = tmp_path / "v.duckdb"
    rng = np.random.default_rng(0)
    write_run(path, "rc", rng.normal(size=(5, 12, 4)), model="clear", modality="video", n_frames=2)
    write_run(path, "rt", rng.normal(size=(4, 12, 4)), model="tied", modality="video", n_frames=2)
    write_run(path, "rb", rng.normal(size=(3, 12, 4)), model="blank", modality="text", n_captions=1)
    payloads = {
        "clear": _choice("rc", {"rankme": [1, 2, 8, 4, 16], "uniformity": [0, -1, -3, -2, -6]},
                         {"rankme": True, "uniformity": False}, layer_names={"4": "default"}, last_layer=3),
        "tied": _choice("rt", {"rankme": [1, 5, 10.02, 10.0]}, {"rankme": True}),
        "blank": {"curves": {}, "picks": {}, "agreement": None, "n_layers": 3, "last_layer": 2,
                  "setting": {"run_id": "rb"}, "undefined_curves": ["rankme"],
                  "reason": "every curve is undefined (rankme): its layers are degenerate"},
    }
    con = duckdb.connect(str(path))
    for model, p in payloads.items():
        R.put_study(con, result_id=f"lc-{model}", study="layer_choice", dataset="synthetic", subject=model,
                    params={"k": 3}, payload=p, input_key="hand")
    con.close()
    return path


def _lines(at):
    return {m.value.split("\\:")[0].split(" ", 1)[1]: m.value for m in at.markdown if "\\:" in m.value}


def test_overview_answers_first_with_a_recommendation_a_tie_and_a_reason(verdict_store, monkeypatch):
    at = app(verdict_store, monkeypatch)
    assert next(s.value for s in at.subheader) == "Which layer to use"
    lines = _lines(at)
    clear = lines["clear (random init)"]
    assert "use layer 2 of 3 — 2 of 2 metrics agree" in clear
    assert "+50% over the last layer" in clear and "-50% over the default output" in clear
    tied = lines["tied (random init)"]
    assert "tie between layer 2" in tied and "within 0.5%" in tied and "no reason to move off the last layer" in tied
    assert "use layer" not in tied
    blank = lines["blank (random init)"]
    assert "no layer can be recommended" in blank and "degenerate" in blank


def test_each_verdict_links_to_the_curves_that_show_it(verdict_store, monkeypatch):
    at = app(verdict_store, monkeypatch)
    links = [(e.proto.page, e.proto.query_string) for e in at.get("page_link")]
    assert ("curves", "dataset=synthetic&metric=uniformity&models=clear") in links
    assert ("curves", "dataset=synthetic&metric=rankme&models=tied") in links
    assert not any(page == "heatmap" for page, _ in links)  # no alignment grid stored: no heatmap link


def test_a_store_of_random_weight_models_says_so_on_every_page(verdict_store, monkeypatch):
    for page in ("overview", "curves", "model_map"):
        at = app(verdict_store, monkeypatch, page)
        assert any("All models in this store have random, untrained weights" in w.value for w in at.warning), page


def test_the_report_opens_with_the_same_verdicts(verdict_store, tmp_path):
    from precompute.cli import main

    out = tmp_path / "r.html"
    assert main(["report", "--store", str(verdict_store), "--out", str(out)]) == 0
    (ds,) = json.loads(out.with_suffix(".json").read_text())["datasets"]
    by = {v["model"]: v for v in ds["verdicts"]}
    assert (by["clear"]["status"], by["clear"]["layer"], by["clear"]["n_agree"]) == ("recommend", 2, 2)
    assert by["clear"]["gain_vs_last"] == pytest.approx(0.5) and by["clear"]["gain_vs_default"] == pytest.approx(-0.5)
    assert by["tied"]["status"] == "tie" and by["blank"]["status"] == "none"
    md = out.with_suffix(".md").read_text()
    assert md.index("## Which layer to use") < md.index("## synthetic")
    page = out.read_text()
    assert page.index("Which layer to use") < page.index("Dataset synthetic")


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


def test_tables_have_no_none_cells(small_demo, monkeypatch):
    at = app(small_demo, monkeypatch)
    for df in at.dataframe:
        assert not df.value.astype(str).isin(["None", "nan", "NaN", "<NA>"]).any().any()


# ---------------------------------------------------------------- the pure helpers behind them


def test_metric_help_and_chance_come_from_the_registry():
    from analysis.views import baselines, chance_level, metric_help

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

    from analysis.views import choose, display_table

    df = pd.DataFrame({"n_frames": [4.0, None], "score": [0.12345, float("nan")], "name": ["a", None]})
    out = display_table(df)
    assert out.to_dict(orient="list") == {"n_frames": ["4", ""], "score": ["0.123", ""], "name": ["a", ""]}
    msg = choose("banana", [np.int64(1), np.int64(2)], "frames n_f").message
    assert "showing 1 instead" in msg and "np.int64" not in msg
