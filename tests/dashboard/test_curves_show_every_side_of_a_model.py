"""The Curves page draws every side of a model as its own curve: a dual encoder's vision run and its
caption run on one dataset are two curves, ``clip`` and ``clip [text]`` (the keys and labels the
Overview and the verdicts give a model's sides, :mod:`analysis.sides`), each with its own run's values,
each side at its own largest budget (``n_f`` for the vision side, ``n_c`` for the caption side). The
store is built by hand: two budgets per side, RankMe curves that differ between every run, so a curve
drawn from the other side or another budget is told apart; the expected rows are read back from the
stored profile rows with SQL, not from the view."""

import json

import duckdb
import numpy as np
import pandas as pd
import pytest

from analysis.storage import results as R
from analysis.views import curves as curves_view
from precompute.synthetic.store import write_run
from tests.helpers import app, charts
from tests.stores import put_analysis_version, read_store

N = 12  #: items of the dataset
DATASET = "synthetic"

#: run id -> (model, modality, n_frames, n_captions, RankMe per layer); every curve differs
DUAL_RUNS = {
    "clip-v1": ("clip", "image", 1, None, [1.0, 2.0, 3.0, 2.5]),
    "clip-v4": ("clip", "image", 4, None, [1.5, 4.0, 6.0, 5.0]),
    "clip-t1": ("clip", "text", None, 1, [1.2, 7.0, 8.0, 7.5]),
    "clip-t2": ("clip", "text", None, 2, [1.1, 9.0, 10.0, 9.5]),
    "vit-f1": ("vit", "video", 1, None, [1.0, 3.5, 2.0, 1.5]),
    "vit-f2": ("vit", "video", 2, None, [1.3, 5.5, 4.0, 3.0]),
}
#: a store of caption models only: no side is named, every model keeps its plain name
TEXT_RUNS = {
    "bert-1": ("bert", "text", None, 1, [1.0, 4.0, 5.0, 4.5]),
    "bert-3": ("bert", "text", None, 3, [1.0, 6.0, 7.0, 6.5]),
    "minilm-1": ("minilm", "text", None, 1, [1.0, 2.0, 2.5, 2.2]),
}


def build(path, runs):
    rng = np.random.default_rng(0)
    for run_id, (model, modality, nf, nc, curve) in runs.items():
        write_run(path, run_id, rng.normal(size=(len(curve), N, 6)), model=model, modality=modality,
                  n_frames=nf, n_captions=nc, dataset=DATASET)
    con = duckdb.connect(str(path))
    con.execute("UPDATE models SET random_init = false")  # write_run marks every model random
    for run_id, (model, modality, nf, nc, curve) in runs.items():
        R.put_profile(con, result_id=f"p-{run_id}", dataset=DATASET, model=model, run_id=run_id,
                      modality=modality, n_frames=nf, n_captions=nc, metric="rankme", params={},
                      layer_values=curve, flags={}, input_key="hand")
    put_analysis_version(con)
    con.close()
    return path


@pytest.fixture(scope="module")
def dual_store(tmp_path_factory):
    return build(tmp_path_factory.mktemp("dual") / "d.duckdb", DUAL_RUNS)


@pytest.fixture(scope="module")
def text_store(tmp_path_factory):
    return build(tmp_path_factory.mktemp("text") / "t.duckdb", TEXT_RUNS)


def expected_curves(path) -> dict:
    """``{label: (run_id, values)}`` read from the stored profile rows: per model and modality the run
    with the most frames (vision) or captions (text); a caption run is labelled ``<model> [text]`` when
    its model also has a vision run here."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        rows = con.execute("SELECT model, modality, run_id, coalesce(n_frames, n_captions), layer_values "
                           "FROM result_profiles WHERE dataset = ? AND metric = 'rankme'", [DATASET]).fetchall()
    finally:
        con.close()
    vision = {m for m, mod, *_ in rows if mod != "text"}
    best = {}
    for model, modality, run_id, size, values in rows:
        label = f"{model} [text]" if modality == "text" and model in vision else model
        if label not in best or size > best[label][0]:
            best[label] = (size, run_id, [float(v) for v in values])
    return {label: (run_id, values) for label, (_, run_id, values) in best.items()}


def view_curves(prof) -> dict:
    """``{model: (run_id, values by layer)}`` of the view's RankMe rows."""
    out = {}
    for model, g in prof[prof["metric"] == "rankme"].groupby("model"):
        g = g.sort_values("layer")
        (run_id,) = g["run_id"].unique()
        out[model] = (run_id, [float(v) for v in g["value"]])
    return out


def test_the_store_has_what_the_test_needs(dual_store):
    """Both sides of the dual encoder, each at its own budget, and no side's curve equal to another's."""
    exp = expected_curves(dual_store)
    assert set(exp) == {"clip", "clip [text]", "vit"}
    assert {k: run for k, (run, _) in exp.items()} == {"clip": "clip-v4", "clip [text]": "clip-t2", "vit": "vit-f2"}
    assert len({tuple(v) for _, v in exp.values()}) == 3


def test_the_curves_view_returns_each_side_with_its_own_runs_values(dual_store):
    prof = read_store(dual_store, curves_view.profiles_long, DATASET)
    assert view_curves(prof) == expected_curves(dual_store)


def chart_series(spec: dict) -> dict:
    """``{model label: values by layer}`` of a curves chart's line data (Vega-Lite spec, data inlined)."""
    rows = [r for data in spec.get("datasets", {}).values() for r in data if "value" in r and "depth" in r]
    out = {}
    for r in sorted(rows, key=lambda r: r["layer"]):
        out.setdefault(r["model"], {})[r["layer"]] = r["value"]
    return {m: list(v.values()) for m, v in out.items()}


def test_the_report_section_draws_both_sides(dual_store):
    """The report's layer-curves section (every model, as the report asks) holds both sides' rows and
    draws both curves, labelled by side."""
    section = read_store(dual_store, curves_view.section, DATASET)
    exp = expected_curves(dual_store)
    rows = {}
    for r in sorted(section.data, key=lambda r: r["layer"]):
        rows.setdefault(r["model"], []).append(r["value"])
    assert rows == {k: v for k, (_, v) in exp.items()}
    ((title, chart),) = section.charts
    assert title == "rankme per layer"
    assert chart_series(chart.to_dict()) == {k: v for k, (_, v) in exp.items()}


def test_the_curves_page_shows_both_sides_labelled(dual_store, monkeypatch):
    at = app(dual_store, monkeypatch, "curves", {"dataset": DATASET, "metric": "rankme"})
    picker = at.multiselect(key="pick_models")
    assert set(picker.options) == {"clip", "clip [text]", "vit"}
    assert set(picker.value) == {"clip", "clip [text]", "vit"}
    page, *_ = charts(at)
    shown = {r["model"] for d in page.proto.datasets for r in _arrow_rows(d) if "model" in r}
    assert {"clip", "clip [text]", "vit"} <= shown
    # one side alone: the other side's curve leaves the chart
    at = app(dual_store, monkeypatch, "curves", {"dataset": DATASET, "metric": "rankme", "models": ["clip [text]"]})
    page, *_ = charts(at)
    rows = [r for d in page.proto.datasets for r in _arrow_rows(d) if "depth" in r and "value" in r]
    assert {r["model"] for r in rows} == {"clip [text]"}
    assert [r["value"] for r in sorted(rows, key=lambda r: r["layer"])] == expected_curves(dual_store)["clip [text]"][1]
    assert json.loads(page.proto.spec)["title"]["text"] == "rankme per layer"


def test_the_curves_csv_holds_each_sides_rows(dual_store, monkeypatch):
    """The page's "Download data (CSV)" of the chart: every side's rows, by its label and its own run."""
    import io

    import streamlit

    offered, real = {}, streamlit.download_button

    def keep(label, data, *args, **kwargs):  # the bytes the page offers, then the real button
        offered[kwargs.get("file_name")] = data
        return real(label, data, *args, **kwargs)

    monkeypatch.setattr(streamlit, "download_button", keep)
    app(dual_store, monkeypatch, "curves", {"dataset": DATASET, "metric": "rankme"})
    csv = pd.read_csv(io.BytesIO(offered[f"curves_{DATASET}_rankme.csv"]))
    got = {m: (g["run_id"].iloc[0], list(g.sort_values("layer")["value"])) for m, g in csv.groupby("model")}
    assert got == expected_curves(dual_store)


def _arrow_rows(dataset) -> list[dict]:
    import pyarrow as pa

    return pa.ipc.open_stream(dataset.data.data).read_all().to_pandas().to_dict("records")


def test_a_text_only_store_keeps_its_plain_names(text_store, monkeypatch):
    prof = read_store(text_store, curves_view.profiles_long, DATASET)
    exp = expected_curves(text_store)
    assert set(exp) == {"bert", "minilm"} and exp["bert"][0] == "bert-3"
    assert view_curves(prof) == exp
    at = app(text_store, monkeypatch, "curves", {"dataset": DATASET, "metric": "rankme"})
    assert set(at.multiselect(key="pick_models").options) == {"bert", "minilm"}
    page, *_ = charts(at)
    assert {r["model"] for d in page.proto.datasets for r in _arrow_rows(d) if "depth" in r} == {"bert", "minilm"}


def test_a_control_s_caption_side_is_labelled_and_dashed_as_a_control():
    """A random-init dual encoder's caption side reads as the Overview names it and is drawn as a control."""
    labels = curves_view.side_labels({"clip": "clip (random init)", "vit": "vit"}, ["clip", "clip [text]", "vit"])
    assert labels["clip [text]"] == "clip (random init) [text]" and labels["clip"] == "clip (random init)"
    data = pd.DataFrame({"model": ["clip", "clip [text]", "vit"] * 2, "layer": [0] * 3 + [1] * 3,
                         "depth": [0.0] * 3 + [1.0] * 3, "value": [1.0, 2.0, 3.0, 1.5, 2.5, 3.5]})
    spec = curves_view.curves_chart(data, "rankme", labels=labels).to_dict()
    weights = {r["model"]: r["weights"] for d in spec["datasets"].values() for r in d if "weights" in r}
    assert weights == {"clip (random init)": "random init", "clip (random init) [text]": "random init",
                       "vit": "trained"}
