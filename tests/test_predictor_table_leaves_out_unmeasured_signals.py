"""A signal no model gives a ρ for (coverage 0) is no row of the predictor table, on the page, in its
ρ charts or in the report: one sentence names it with the reason the stored row gives (a value at
fewer than 3 layers, or a side constant over a model's layers)."""

import json
import shutil

import duckdb
import pytest

from analysis.methods.predictors import MIN_LAYERS
from analysis.report.md_escape import md_block
from analysis.storage import results as R
from analysis.studies import analyze_store
from analysis.views import predictors as P
from analysis.views.text import md_escape
from tests.helpers import app, make_report
from tests.stores import SHARE

L = len(SHARE["va"])  # layers with results of every planted model (0 .. L-1)
#: va's joint-space value exists at one layer only (as a dual encoder's joint metrics do)
ONE_LAYER = "modality_gap with txt (joint)"
#: vb's value is the same at every layer: Spearman's ρ is undefined however many layers
CONSTANT = "mmd with txt (layers)"


@pytest.fixture(scope="module")
def unmeasured_store(predictor_stores, tmp_path_factory):
    store = tmp_path_factory.mktemp("unmeasured") / "s.duckdb"
    shutil.copy(predictor_stores["full"], store)
    con = duckdb.connect(str(store))
    for model, space, layers, values in (("va", "joint", [L - 1], [0.3]), ("vb", "layers", list(range(L)), [0.5] * L)):
        name = ONE_LAYER if model == "va" else CONSTANT
        R.put_study(con, result_id=f"ss-{model}", study="same_space", dataset="synthetic", subject=f"{model}|txt",
                    params={}, payload={"run_a": f"{model}-1", "run_b": "txt-1", "n_frames": 1, "n_captions": 1,
                                        "space": space, "layers_a": layers,
                                        "metrics": {name.split(" with ")[0]: {"values": values,
                                                                              "higher_is_better": False}}},
                    input_key="x")
    con.close()
    analyze_store(store, log=lambda m: None)  # same-space rows are inputs: the predictor table is recomputed
    return store


def _stored_rows(store):
    con = duckdb.connect(str(store), read_only=True)
    payload = R.read_studies(con, current=True, study="predictors", dataset="synthetic")[0]["payload"]
    con.close()
    return {(t["task"], s["signal"]): s for t in payload["tasks"] for s in t["signals"]}


def test_the_planted_store_has_both_unmeasured_signals(unmeasured_store):
    rows = _stored_rows(unmeasured_store)
    one = rows[("probe", ONE_LAYER)]
    assert one["n_models_covered"] == 0 and one["n_points"] == 1 and one["excluded"]["missing"] == L - 1
    const = rows[("probe", CONSTANT)]
    assert const["n_models_covered"] == 0 and const["n_points"] == L and const["n_models"] == 1
    # each model without a ρ is stored with its reason: va has one layer, vb's signal one value at every layer
    assert one["rho_undefined"] == {"va": "too_few_layers"} and const["rho_undefined"] == {"vb": "constant_signal"}
    assert "models_too_few_layers" not in one and "models_too_few_layers" not in const


def test_section_rows_charts_and_sentence_leave_them_out(unmeasured_store):
    con = duckdb.connect(str(unmeasured_store), read_only=True)
    sec = P.section(con, "synthetic")
    data = P.predictors_tables(con, "synthetic")
    con.close()
    signals = {r["signal"] for r in sec.data["table"]}
    assert ONE_LAYER not in signals and CONSTANT not in signals
    assert all(r["coverage"] != "0 models" for r in sec.data["table"])
    # every measured signal keeps its row, ranked 1..n in each task
    rows = _stored_rows(unmeasured_store)
    for task in ("probe · top1 [linear]", "made-up task (fabricated) · err [demo]"):
        ranks = [r["rank"] for r in sec.data["table"] if r["task"] == task]
        assert sorted(ranks) == list(range(1, len(ranks) + 1))
    assert len(sec.data["table"]) == sum(1 for s in rows.values() if s["n_models_covered"])
    assert not set(data["rhos"]["signal"]) & {ONE_LAYER, CONSTANT}
    assert not set(data["picks"]["signal"]) & {ONE_LAYER, CONSTANT}
    assert {p["signal"] for p in sec.data["picks"]}.isdisjoint({ONE_LAYER, CONSTANT})
    for _, chart in sec.charts:
        spec = json.dumps(chart.to_dict())
        assert ONE_LAYER not in spec and CONSTANT not in spec
    # both tasks leave out the same two for the same reasons: one sentence for the table
    (sentence,) = sec.data["not_measured"]
    assert sentence.startswith("Not measured on any model, so not in the table:")
    assert f"modality_gap with txt (joint) (a value at only 1 of va's {L} layers with results; a ρ needs at " \
           f"least {MIN_LAYERS})" in sentence
    assert f"mmd with txt (layers) (on vb's {L} usable layers the signal is constant, so ρ is undefined)" in sentence
    assert {(r["task"], r["signal"]) for r in sec.data["unmeasured"]} == {
        (t, s) for t in ("probe · top1 [linear]", "made-up task (fabricated) · err [demo]") for s in (ONE_LAYER, CONSTANT)}


def test_report_and_page_show_the_sentence_not_the_rows(unmeasured_store, tmp_path, monkeypatch):
    _, data, page = make_report(unmeasured_store, tmp_path)
    pred = data["datasets"][0]["sections"]["predictors"]
    assert not {r["signal"] for r in pred["table"]} & {ONE_LAYER, CONSTANT}
    (sentence,) = pred["not_measured"]
    md = (tmp_path / "report.md").read_text()
    table = md.split("### Layer predictors")[1]
    assert "0 models" not in table and md_block(ONE_LAYER) not in table.split("\n\n" + md_block(sentence))[0]
    assert md_block(sentence) in table
    assert "Not measured on any model" in page and "0 models" not in page
    at = app(unmeasured_store, monkeypatch, "predictors", {"task": "probe · top1 [linear]"})
    matrix = next(d.value for d in at.dataframe if "signal" in d.value.columns)
    assert ONE_LAYER not in set(matrix["signal"]) and CONSTANT not in set(matrix["signal"])
    for d in at.dataframe:
        if "coverage" in d.value.columns:
            assert "0 models" not in set(d.value["coverage"])
    assert any(c.value == md_escape(sentence) for c in at.caption)


def test_sentences_per_set_of_tasks_when_the_tasks_differ():
    # rows as predictors_tables makes them; the reasons are text, grouped as given
    rows = [{"task": "a", "signal": "map_t2v with clip [text] (joint)", "reason": "why 1"},
            {"task": "a", "signal": "mmd with clip [text] (joint)", "reason": "why 1"},
            {"task": "b", "signal": "map_t2v with clip [text] (joint)", "reason": "why 1"},
            {"task": "b", "signal": "mmd with clip [text] (joint)", "reason": "why 1"},
            {"task": "c", "signal": "rankme", "reason": "why 2"}]
    assert P.unmeasured_sentences(rows, ["a", "b", "c", "d"]) == [
        "Not measured on any model in a and b, so not in their rows: map_t2v, mmd with clip [text] (joint) (why 1).",
        "Not measured on any model in c, so not in its rows: rankme (why 2)."]
    assert P.unmeasured_sentences(rows[:2], ["a"]) == [
        "Not measured on any model, so not in the table: map_t2v, mmd with clip [text] (joint) (why 1)."]
    assert P.unmeasured_sentences([], ["a"]) == []


def test_reasons_follow_the_stored_counts():
    # no usable point at all: the excluded layers by reason
    assert P.unmeasured_reason({"n_points": 0, "n_models": 0, "excluded": {"degenerate": 2, "missing": 4},
                                "per_model_rho": {}}) == \
        "none of the layers with results has a usable value of it (2 degenerate, 4 missing)"
    # two points over two models: below the 3 a ρ needs, 2 + 10 missing layers with results
    assert P.unmeasured_reason({"n_points": 2, "n_models": 2, "excluded": {"missing": 10},
                                "per_model_rho": {"x": None, "y": None}}) == \
        f"a value at only 2 of the 12 layers with results (x, y); a ρ needs at least {MIN_LAYERS}"
    # several models with enough points between them: each named with its own reason
    assert P.unmeasured_reason({"n_points": 8, "n_models": 3, "excluded": {},
                                "per_model_rho": {"x": None, "y": None, "z": None},
                                "rho_undefined": {"x": "too_few_layers", "y": "constant_result",
                                                  "z": "too_few_layers"}}) == \
        (f"ρ is undefined on each of x, z (fewer than {MIN_LAYERS} usable layers) and y (the result constant over "
         "the usable layers)")
    # one model with enough points: which side is constant
    assert P.unmeasured_reason({"n_points": 4, "n_models": 1, "excluded": {}, "per_model_rho": {"x": None},
                                "rho_undefined": {"x": "constant_both"}}) == \
        "on x's 4 usable layers the signal and the result are both constant, so ρ is undefined"
    # a row stored by an earlier LayerScope lists the models without reasons: short or constant, said of all
    old = {"n_points": 5, "n_models": 2, "excluded": {}, "per_model_rho": {"x": None, "y": None},
           "models_too_few_layers": ["x", "y"]}
    assert P.unmeasured_reason(old) == \
        f"ρ is undefined on each of x, y (fewer than {MIN_LAYERS} usable layers, or a side constant over them)"
    assert P.unmeasured_reason({**old, "n_models": 1, "per_model_rho": {"x": None}, "models_too_few_layers": ["x"]}) \
        == "on x's 5 usable layers the signal or the result is constant, so ρ is undefined"
