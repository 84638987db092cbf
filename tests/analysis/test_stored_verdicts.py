"""The verdict is a stored result: ``analyze`` decides each model's layer once (the verdicts study) and
the Overview and the report read it; nothing is decided at read time. Model sides come from the runs,
never from string surgery on names."""

import shutil

import duckdb
import numpy as np
import pytest

from analysis.views.store_info import model_labels
from analysis.methods import layer_selection
from analysis.methods.layer_selection import layer_verdict, no_verdict, verdict_sentence
from analysis.storage import results as R
from analysis.studies import analyze_store
from analysis.studies import verdicts as verdicts_study
from analysis.views.verdicts import missing_text, verdicts
from tests.helpers import app
from tests.stores import write_text_store


def _expected(con, dataset: str, p: dict, random: set, runs: dict):
    """The verdict the rule gives on a stored layer choice, assembled here from its stored inputs: the
    curves, directions, resamples, named and degenerate layers and copies of the layer choice, and the
    best-cell interval, null and partner of the grid each alignment curve comes from."""
    curves = {m: np.asarray(c, dtype=float) for m, c in p["curves"].items()}
    if not curves:
        return no_verdict(p["reason"], p["last_layer"], p["undefined_curves"])
    grids = {g["result_id"]: g for g in R.read_grids(con, current=True, dataset=dataset)}
    run_id = p["setting"]["run_id"]
    found = {m: (grids[rid], grids[rid]["run_a"] == run_id) for m, rid in p["sources"].items() if m in curves}
    names = {int(i): n for i, n in p["layer_names"].items()}
    defaults = [i for i, n in names.items() if n == "default"]
    partner = {m: g["model_b"] if a else g["model_a"] for m, (g, a) in found.items()}
    return layer_verdict(
        curves, p["higher_is_better"], last_layer=min(names) - 1 if names else None,
        default_layer=defaults[0] if defaults else None, degenerate=[int(i) for i in p["degenerate_layers"]],
        intervals={m: (g["best_a"] if a else g["best_b"], g["ci_low"], g["ci_high"])
                   for m, (g, a) in found.items() if g["ci_low"] is not None},
        resamples=p["resamples"], controls=[m for m in found if partner[m] in random],
        nulls={m: g["flags"]["null"] for m, (g, _) in found.items() if g["flags"].get("null")},
        control_model=runs[run_id]["model"] in random, copies=p["copies"])


def test_every_stored_verdict_is_the_rule_applied_to_the_stored_curves_grids_and_resamples(demo_like):
    con = duckdb.connect(str(demo_like), read_only=True)
    try:
        random = {m for m, ri in con.execute("SELECT model, random_init FROM models").fetchall() if ri}
        runs = {r["run_id"]: r for r in R.rows(con, "SELECT * FROM runs")}
        labels = model_labels(con)
        statuses = set()
        for (ds,) in con.execute("SELECT dataset FROM datasets").fetchall():
            choices = {s["subject"]: s["payload"] for s in R.read_studies(con, current=True, study="layer_choice",
                                                                          dataset=ds)}
            rows = verdicts(con, ds)
            assert [r["model"] for r in rows] == sorted(choices)  # one verdict per model side, by its key
            for r in rows:
                p = choices[r["model"]]
                expected = _expected(con, ds, p, random, runs)
                assert r["verdict"] == expected, r["model"]
                model = runs[p["setting"]["run_id"]]["model"]
                label = labels[model] + ("" if r["model"] == model else " [text]")
                assert r["label"] == label
                assert r["sentence"] == verdict_sentence(label, expected, n_boot=r["n_boot"])
                # the curves link opens the side's own curve: a caption side's key, not its model's vision side
                assert r["curves"]["models"] == model + ("" if r["model"] == model else " [text]")
                statuses.add(expected.status)
    finally:
        con.close()
    # the store is worth comparing on: trained models' answers beside controls, two sides of one model
    assert {"control", "last"} <= statuses and len(statuses) >= 3


def test_the_overview_and_the_report_read_stored_verdicts_without_deciding_one(demo_like, monkeypatch, tmp_path):
    def refuse(*args, **kwargs):
        raise AssertionError("a verdict was decided at read time")

    monkeypatch.setattr(layer_selection, "layer_verdict", refuse)
    monkeypatch.setattr(verdicts_study, "layer_verdict", refuse)
    con = duckdb.connect(str(demo_like), read_only=True)
    try:
        rows = verdicts(con, "moving_shapes")
        from analysis.report import build_report

        report = build_report(con, store=str(demo_like))
    finally:
        con.close()
    assert rows and all(r["sentence"].startswith(r["label"] + ": ") for r in rows)
    assert all(d["verdicts"] for d in report["datasets"])
    store = tmp_path / "s.duckdb"
    shutil.copy(demo_like, store)
    at = app(store, monkeypatch)
    assert not at.exception


def test_a_store_analysed_before_verdicts_were_stored_says_to_run_analyze(demo_like, monkeypatch, tmp_path):
    store = tmp_path / "old.duckdb"
    shutil.copy(demo_like, store)
    con = duckdb.connect(str(store))
    con.execute("DELETE FROM result_studies WHERE study = ?", [verdicts_study.STUDY])
    assert verdicts(con, "moving_shapes") == []
    con.close()
    at = app(store, monkeypatch)
    assert not at.exception
    said = [c.value.replace("\\", "") for c in at.caption]
    assert missing_text("moving_shapes") in said and "run `layerscope analyze`" in missing_text("moving_shapes")
    from precompute.cli import main

    out = tmp_path / "r.html"
    assert main(["report", "--store", str(store), "--out", str(out)]) == 0
    assert "no layer verdict stored yet: run" in out.read_text() and "layerscope analyze" in out.read_text()
    assert "no layer verdict stored yet: run" in out.with_suffix(".md").read_text()


@pytest.fixture
def hostile_sides(tmp_path):
    """Three one-sided text models whose names look like the markers of a side or a curve:
    ``alpha [text]`` (random-init weights), ``alignment with beta`` and ``gamma``; analysed."""
    rng = np.random.default_rng(7)
    latent = rng.normal(size=(16, 4))
    runs = {(m, 1): np.stack([latent @ rng.normal(size=(4, 6)) + s * rng.normal(size=(16, 6)) for s in (2, .5, .3, 1)])
            for m in ("alpha [text]", "alignment with beta", "gamma")}
    path = tmp_path / "h.duckdb"
    write_text_store(path, runs)
    con = duckdb.connect(str(path))
    con.execute("UPDATE models SET random_init = (model = 'alpha [text]')")
    con.close()
    analyze_store(path, k=3, n_boot=5, n_null=0, maps=0, log=lambda *_: None)
    return path


def test_a_model_named_like_a_side_or_a_curve_keeps_its_own_name_and_weights(hostile_sides):
    con = duckdb.connect(str(hostile_sides), read_only=True)
    try:
        by = {r["model"]: r for r in verdicts(con, "sentences")}
    finally:
        con.close()
    assert sorted(by) == ["alignment with beta", "alpha [text]", "gamma"]
    alpha = by["alpha [text]"]
    # its own weights are random: a control, under its own name (not a text side of a model "alpha")
    assert alpha["verdict"].status == "control" and alpha["label"] == "alpha [text] (random init)"
    assert alpha["curves"]["models"] == "alpha [text]"
    gamma = by["gamma"]
    # alignment with the random-init model is a control; alignment with "alignment with beta" votes
    assert gamma["verdict"].controls == ["alignment with alpha [text]"]
    assert "alignment with alignment with beta" in gamma["verdict"].picks
    assert gamma["label"] == "gamma" and by["alignment with beta"]["label"] == "alignment with beta"


def test_a_curve_names_its_partner_model_even_when_the_name_looks_like_a_side():
    assert verdicts_study.curve_partner("alignment with clip [text]", {"clip", "bert"}) == "clip"
    assert verdicts_study.curve_partner("alignment with clip [image]", {"clip"}) == "clip"
    assert verdicts_study.curve_partner("alignment with x [text]", {"x [text]", "x"}) == "x [text]"
    assert verdicts_study.curve_partner("alignment with alignment with y", {"alignment with y"}) == "alignment with y"
    assert verdicts_study.curve_partner("rankme", {"rankme"}) is None
    assert verdicts_study.curve_partner("alignment with gone", {"clip"}) is None


@pytest.mark.parametrize("choice", [{}, {"curves": {"rankme": [1.0, 2.0, 3.0], "alignment with bert": [0.1, 0.3, 0.2]},
                                         "last_layer": 2}], ids=["no curve", "curves"])
def test_the_stored_curves_link_names_the_sides_own_key(choice):
    """The Curves page draws a caption side under ``"<model> [text]"`` and the model's name alone is its
    vision side: the link each verdict stores names the side it was decided for."""
    models = {"clip": False, "bert": False}
    for key, run in [("clip [text]", {"model": "clip", "modality": "text"}),
                     ("clip", {"model": "clip", "modality": "image"}), ("bert", {"model": "bert", "modality": "text"})]:
        p = verdicts_study.decide("d", key, choice, run, {}, set(), models)
        assert p["curves"]["models"] == key and p["curves"]["dataset"] == "d"


def test_a_verdict_stored_with_the_models_name_in_its_link_still_opens_the_sides_curve(tmp_path):
    """A store analysed by an earlier LayerScope stored ``models=<model>`` for a caption side's curve."""
    from tests.stores import put_analysis_version, write_store

    store = tmp_path / "s.duckdb"
    write_store(store)  # model "vis" (vision); its caption side is keyed "vis [text]"
    p = verdicts_study.decide("toy", "vis [text]", {}, {"model": "vis", "modality": "text"}, {}, set(), {"vis": False})
    p["curves"]["models"] = "vis"  # the earlier format
    con = duckdb.connect(str(store))
    try:
        R.put_study(con, result_id="v-old", study=verdicts_study.STUDY, dataset="toy", subject="vis [text]", params={},
                    payload=p, input_key="hand")
        R.record_current(con, {"result_studies": {"v-old"}}, ["toy"])
        put_analysis_version(con)
        (row,) = verdicts(con, "toy")
    finally:
        con.close()
    assert row["model"] == "vis [text]" and row["curves"] == {"dataset": "toy", "models": "vis [text]"}
