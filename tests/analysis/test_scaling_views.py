"""Issue #29 item 7: the scaling page and report draw DR's saturating law, titled as such, with the
held-out-best form beside it when it differs, each with its own R²; parameters the data do not
determine are blank with the reason (page table, report HTML/Markdown, JSON).

Stored payloads are made by the scaling study's own ``fit_subject`` on the hand-made grids of
``tests.stores.SCALING_GRIDS``; every R²
checked here is recomputed from the points and the law's formula written out in this file."""

import json

import duckdb
import numpy as np
import pytest

from analysis import report
from analysis.views.scaling import SATURATING_TITLE, scaling_fit_lines, scaling_heading, scaling_panels, scaling_view
from analysis.views.text import fmt_number
from analysis.report import html as report_html, markdown as report_md, text as report_text
from analysis.storage import results as R
from tests.stores import SCALING_GRIDS as GRIDS, write_scaling_studies

@pytest.fixture(scope="module")
def con():
    con = duckdb.connect(":memory:")
    write_scaling_studies(con)
    return con


def law(form, p, nf, nc):
    """The forms' formulas, written out here (DESIGN §4 and analysis.methods.scaling.FORMS' formula strings)."""
    nf, nc = np.asarray(nf, float), np.asarray(nc, float)
    if form == "saturating":
        return p["s_inf"] - (p["c_f"] * nf ** -p["alpha"] + p["c_c"] * nc ** -p["beta"])
    if form == "log_linear":
        return p["a"] + p["b"] * np.log(nf) + p["c"] * np.log(nc)
    return p["s_inf"] - p["c"] * (nf * nc) ** -p["gamma"]


def r2_of(form, params, points):
    y = points["score"].to_numpy(float)
    pred = law(form, params, points["n_frames"], points["n_captions"])
    return 1 - ((y - pred) ** 2).sum() / ((y - y.mean()) ** 2).sum()


def test_dr_law_is_drawn_and_the_held_out_best_beside_it_each_with_its_own_r2(con):
    sv = scaling_view(con, "toy", "v|loglinear|mutual_knn")
    assert sv["drawn"] == ["saturating", "log_linear"] and sv["held_out_best"] == "log_linear"
    r2 = {}
    for c in sv["curves"]:
        r2[c["form"]] = r2_of(c["form"], c["params"], sv["points"])
        assert c["r2"] == pytest.approx(r2[c["form"]], rel=1e-9, abs=1e-12)
        assert f"R² {fmt_number(r2[c['form']])}" in c["label"]
        # the curve drawn under this label is this form's formula with these parameters
        for frame in (sv["curve_vs_frames"], sv["curve_vs_captions"]):
            mine = frame[frame["form"] == c["label"]]
            assert len(mine) and np.allclose(mine["score"], law(c["form"], c["params"], mine["n_frames"],
                                                                mine["n_captions"]), rtol=1e-9, atol=1e-12)
    assert abs(r2["saturating"] - r2["log_linear"]) > 1e-5  # two curves, two R²: the mix-up would show
    assert sv["curves"][0]["label"].startswith("DR's saturating law,")
    assert "log-linear form (held-out best)" in sv["curves"][1]["label"]
    heading = scaling_heading(sv)
    assert heading.startswith("DR's saturating law S∞ − (C_f·n_f^−α + C_c·n_c^−β)") and "held-out-best log-linear" in heading
    lines = scaling_fit_lines(sv)
    assert len(lines) == 2 and f"R² = {fmt_number(r2['log_linear'])}" in lines[1]
    by_frames, _, _ = scaling_panels(sv)
    line = [layer for layer in by_frames.to_dict()["layer"] if layer["mark"] in ("line", {"type": "line"})]
    assert line and line[0]["encoding"]["strokeDash"]["field"] == "form"


def test_only_the_law_when_it_is_the_held_out_best(con):
    sv = scaling_view(con, "toy", "v|law|mutual_knn")
    assert sv["drawn"] == ["saturating"] and sv["status"] == "ok" and sv["undetermined"] == {}
    (c,) = sv["curves"]
    assert c["r2"] == pytest.approx(r2_of("saturating", c["params"], sv["points"]), rel=1e-9)
    assert c["label"].startswith("DR's saturating law (held-out best)")
    assert set(sv["curve_vs_frames"]["form"]) == {c["label"]}
    assert scaling_heading(sv) == SATURATING_TITLE
    assert all(row["value"] != "" and row["note"] == "" for row in sv["table"].to_dict(orient="records"))


def _table(sv):
    return {r["parameter"]: r for r in sv["table"].to_dict(orient="records")}


def test_undetermined_parameters_are_blank_with_the_reason(con):
    sv = scaling_view(con, "toy", "v|runaway|cknna")
    raw = sv["fit"]["params"]
    # the case of the issue: α on its lower bound 0 and an S∞ no score comes near (scores ≤ 0.31)
    assert raw["alpha"] < 1e-2 and raw["s_inf"] > 2 * sv["points"]["score"].max()
    table = _table(sv)
    for name in ("s_inf", "c_f", "alpha"):
        assert table[name]["value"] == table[name]["low"] == table[name]["high"] == ""
        assert table[name]["note"].startswith("not determined: alpha = ")
    for name in ("c_c", "beta"):  # the caption term is a power law: it stays
        assert table[name]["value"] == fmt_number(raw[name]) and table[name]["note"] == ""
    assert "s_inf" in sv["undetermined"]


def test_s_inf_on_the_metrics_bound_is_blank(con):
    sv = scaling_view(con, "toy", "v|loglinear|mutual_knn")
    assert sv["fit"]["params"]["s_inf"] == pytest.approx(1.0)  # mutual k-NN's upper bound
    assert _table(sv)["s_inf"]["value"] == "" and "bound 1" in _table(sv)["s_inf"]["note"]


def test_a_flat_grid_keeps_only_its_level(con):
    sv = scaling_view(con, "toy", "v|flat|mutual_knn")
    assert sv["status"] == "flat"
    table = _table(sv)
    assert table["s_inf"]["value"] == fmt_number(0.2)
    assert all(table[n]["value"] == "" and "no trend" in table[n]["note"] for n in ("c_f", "c_c", "alpha", "beta"))


def test_report_tables_and_json_blank_what_is_not_determined(con):
    fits = [report.scaling_entry(s, scaling_view(con, "toy", s)) for s in GRIDS]
    by = {f["subject"]: f for f in fits}
    runaway = by["v|runaway|cknna"]
    assert runaway["fit"]["params"]["s_inf"] is None and runaway["fit"]["params"]["alpha"] is None
    assert runaway["fit"]["params"]["beta"] is not None and "alpha = " in runaway["fit"]["undetermined"]["s_inf"]
    raw_s_inf = scaling_view(con, "toy", "v|runaway|cknna")["fit"]["params"]["s_inf"]
    text = json.dumps(R.clean_json(fits))
    assert repr(raw_s_inf) not in text and f"{raw_s_inf:.3f}" not in text
    loglin = by["v|loglinear|mutual_knn"]
    sv = scaling_view(con, "toy", "v|loglinear|mutual_knn")
    assert [c["form"] for c in loglin["curves"]] == ["saturating", "log_linear"]
    assert loglin["curves"][1]["r2"] == pytest.approx(r2_of("log_linear", loglin["curves"][1]["params"],
                                                             sv["points"]), rel=1e-9)

    rows = {r["pair"]: r for r in report.scaling_rows(fits)}
    row = rows["v × runaway · cknna"]
    assert row["S∞"] is None and row["α"] is None and row["β"] is not None and "S∞: alpha = " in row["not determined"]
    assert rows["v × loglinear · mutual_knn"]["held-out best (R²)"] == \
        f"log_linear ({report_text.fmt(r2_of('log_linear', loglin['curves'][1]['params'], sv['points']))})"
    assert row["R² (saturating)"] == pytest.approx(r2_of("saturating", sv_params(con, "v|runaway|cknna"),
                                                         scaling_view(con, "toy", "v|runaway|cknna")["points"]))
    html = report_html._scaling_html(fits)
    assert "DR&#x27;s saturating law" in html and f"{raw_s_inf:.3f}" not in html
    md = "\n".join(report_md._scaling_md(fits))
    assert "| pair | S∞ |" in md and f"{raw_s_inf:.3f}" not in md
    md_row = next(line for line in md.splitlines() if "runaway" in line)
    assert md_row.split("|")[2].strip() == "–"  # S∞ blank


def sv_params(con, subject):
    return scaling_view(con, "toy", subject)["fit"]["params"]


def test_undetermined_params_per_status_and_bound():
    from analysis.methods.scaling import undetermined_params

    sat = {"s_inf": 0.3, "c_f": 0.1, "c_c": 0.1, "alpha": 0.7, "beta": 1.2}
    assert undetermined_params("saturating", sat, "ok", bounds=(0.0, 1.0)) == {}
    # the upper exponent bound (5) blanks that term and S∞, the other term stays
    assert set(undetermined_params("saturating", {**sat, "beta": 5.0}, "exponent_at_bound")) == {"beta", "c_c", "s_inf"}
    assert set(undetermined_params("joint_power", {"s_inf": 9.0, "c": 8.7, "gamma": 0.001}, "exponent_at_bound")) \
        == {"s_inf", "c", "gamma"}
    assert set(undetermined_params("saturating", {**sat, "s_inf": 0.0}, "s_inf_at_bound", bounds=(0.0, 1.0))) \
        == {"s_inf"}
    assert set(undetermined_params("log_linear", {"a": 1, "b": 2, "c": 3}, "not_identifiable", "rank")) == {"a", "b", "c"}
    assert set(undetermined_params("log_linear", {"a": 0.2, "b": 0, "c": 0}, "flat")) == {"b", "c"}


#: three grid points: too few for the saturating law's five parameters, so no law is fitted
FEW_POINTS = [(1, 1, 0.10, 1, 2, "ra", "rb"), (2, 1, 0.20, 1, 2, "ra", "rb"), (1, 2, 0.15, 1, 2, "ra", "rb")]


@pytest.fixture(scope="module")
def with_model():
    """The scaling-only store plus a subject without a law, its vision model ``v`` registered (the
    report's default covers the store's models)."""
    con = duckdb.connect(":memory:")
    write_scaling_studies(con, grids={**GRIDS, "v|few|mutual_knn": FEW_POINTS})
    con.execute("INSERT INTO models (model, modality) VALUES ('v', 'video')")
    return con


def test_the_reports_section_draws_the_mutual_knn_laws_of_its_models(with_model):
    from analysis.views.scaling import section

    sec = section(with_model, "toy")
    # every mutual k-NN fit is stored, the one without a law included; CKNNA is the page's choice only
    assert [f["subject"] for f in sec.data] == ["v|few|mutual_knn", "v|flat|mutual_knn", "v|law|mutual_knn",
                                                "v|loglinear|mutual_knn"]
    assert [c for c, _ in sec.charts] == [f"scaling: v × {b}, against {x}" for b in ("flat", "law", "loglinear")
                                          for x in ("n_f", "n_c")]
    # under each drawn subject's second panel (none under its first): what the panels show of uncertainty,
    # why S∞ is not drawn when the stored fit's status is not ok (naming the pair), and the metric's help
    unfit = {f["subject"].split("|")[1] for f in sec.data[1:] if f["fit"] and f["status"] not in (None, "ok")}
    assert [len(said) for said in sec.chart_notes] == [n for b in ("flat", "law", "loglinear")
                                                       for n in (0, 3 if b in unfit else 2)]
    assert [n for n in sec.notes if n.startswith("S∞ is not drawn")] == [
        f"S∞ is not drawn on the v × {b} panels: the fit cannot determine it here." for b in sorted(unfit)]
    assert sec.notes == tuple(n for said in sec.chart_notes for n in said)


def test_a_named_subject_is_drawn_by_its_points_when_no_law_is_fitted(with_model):
    from analysis.views.scaling import section

    sec = section(with_model, "toy", subjects=("v|few|mutual_knn",))
    assert [c for c, _ in sec.charts] == ["scaling: v × few, against n_f", "scaling: v × few, against n_c"]
    for _, chart in sec.charts:
        spec = chart.to_dict()
        marks = [layer["mark"]["type"] if isinstance(layer["mark"], dict) else layer["mark"] for layer in spec["layer"]]
        assert "line" not in marks  # no law, so no curve
        points = next(iter(spec["datasets"].values()))
        assert sorted((p["n_frames"], p["n_captions"], p["score"]) for p in points) == sorted(p[:3] for p in FEW_POINTS)
    # chance of mutual k-NN at k = 10 and N = 101 items: k/(N − 1) = 0.1
    assert "Chance (unrelated spaces) = 0.100 at N = 101." in sec.notes[0]
    assert sec.notes[1].startswith("mutual_knn: ")


def test_a_named_subject_of_another_metric_is_drawn_and_an_unknown_one_is_refused(with_model):
    from analysis.views.scaling import section

    sec = section(with_model, "toy", subjects=("v|runaway|cknna",))
    assert [f["subject"] for f in sec.data] == ["v|runaway|cknna"] and len(sec.charts) == 2
    with pytest.raises(ValueError, match="v\\|law\\|cknna.*stored: v\\|few\\|mutual_knn"):
        section(with_model, "toy", subjects=("v|law|cknna",))


def test_the_stacked_export_is_the_panels_export(with_model):
    from analysis.views.scaling import scaling_title, stacked_export

    sv = scaling_view(with_model, "toy", "v|law|mutual_knn")
    title = scaling_title(sv, "v|law|mutual_knn", dataset="toy", labels={}, pair="v × law")
    by_frames, by_captions, export = scaling_panels(sv, title=title)
    assert stacked_export(by_frames, by_captions, title).to_dict() == export.to_dict()
    spec = stacked_export(by_frames, by_captions).to_dict()
    assert [panel["width"] for panel in spec["vconcat"]] == [520, 520] and "autosize" not in spec["vconcat"][0]
