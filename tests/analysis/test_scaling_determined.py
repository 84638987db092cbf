"""A scaling parameter the data do not determine is blank, with its reason, everywhere (page table,
report rows, stored JSON): α (and d_v = 2/α) when the frame term C_f·n_f^−α vanishes (C_f = 0, or
no larger than the fit's RMSE, so α moves no prediction beyond the residual). Planted grids whose
scores do not depend on n_f at all: the right answer is "α not determined", S∞ and the caption
term determined."""

import numpy as np
import pandas as pd
import pytest

from analysis.methods.scaling import undetermined_params
from analysis.report import scaling_rows
from analysis.studies.scaling import fit_subject
from analysis.views.paper_figures import add_dimension_and_published
from analysis.views.scaling import saturating_param_rows

# what the demo showed: α = 3.938 [3.678, 4.051], d_v = 0.508 beside c_f = 0.000 [0.000, 0.000]
DEMO_LIKE = {"s_inf": 0.41, "c_f": 2e-5, "c_c": 0.12, "alpha": 3.938, "beta": 0.9}
INTERVALS = {"s_inf": (0.40, 0.42), "c_f": (0.0, 0.0), "c_c": (0.11, 0.13), "alpha": (3.678, 4.051),
             "beta": (0.8, 1.0)}


def test_alpha_is_undetermined_when_the_frame_term_vanishes():
    exact_zero = undetermined_params("saturating", {**DEMO_LIKE, "c_f": 0.0}, "ok")
    assert set(exact_zero) == {"alpha"} and "vanishes" in exact_zero["alpha"]
    within_rmse = undetermined_params("saturating", DEMO_LIKE, "ok", rmse=1e-4)
    assert set(within_rmse) == {"alpha"}
    # a frame term well above the residual keeps α
    assert undetermined_params("saturating", {**DEMO_LIKE, "c_f": 0.05}, "ok", rmse=1e-4) == {}


def test_beta_is_undetermined_when_the_caption_term_vanishes():
    assert set(undetermined_params("saturating", {**DEMO_LIKE, "c_f": 0.1, "c_c": 0.0}, "ok")) == {"beta"}


def test_the_table_leaves_alpha_and_d_v_blank_with_the_reason():
    blank = undetermined_params("saturating", DEMO_LIKE, "ok", rmse=1e-4)
    table = add_dimension_and_published(
        pd.DataFrame(saturating_param_rows(DEMO_LIKE, INTERVALS, blank)), DEMO_LIKE, INTERVALS,
        blank, {})
    rows = table.set_index("parameter")
    for name in ("alpha", "d_v = 2/α"):
        assert (rows.loc[name, "value"], rows.loc[name, "low"], rows.loc[name, "high"]) == ("", "", "")
        assert "vanishes" in rows.loc[name, "note"]
    assert rows.loc["s_inf", "value"] != "" and rows.loc["beta", "value"] != ""


@pytest.mark.parametrize("noise", [0.0, 1e-4])
def test_a_grid_without_a_frame_effect_stores_alpha_undetermined(noise):
    rng = np.random.default_rng(0)
    # S = 0.5 − 0.3·n_c^−1: no n_f term at all
    points = [(f, c, 0.5 - 0.3 / c + noise * rng.normal(), 0, 0, "a", "b")
              for f in (1, 2, 4, 8, 16) for c in (1, 2, 5, 10)]
    payload = fit_subject(None, "a", "mutual_knn", {"k": 10}, points, 0, 0)
    why = payload["fit"]["undetermined"]
    assert "alpha" in why
    if payload["fit"]["params"]["c_f"] <= payload["fit"]["rmse"]:
        # the vanished frame term alone is undetermined: S∞ and the caption term stay determined
        assert set(why) == {"alpha"}
        assert payload["fit"]["params"]["s_inf"] == pytest.approx(0.5, abs=1e-3)


def test_page_and_report_leave_alpha_blank_on_a_stored_fit_without_a_frame_term(tmp_path):
    import duckdb

    from analysis.report import build_report, to_json
    from analysis.storage import results as R
    from analysis.views.scaling import scaling_view
    from tests.stores import put_analysis_version, write_paper_store

    path = tmp_path / "s.duckdb"
    write_paper_store(path)
    points = [(f, c, 0.5 - 0.3 / c + 1e-4 * np.sin(7 * f + c), 0, 0, "a", "b")
              for f in (1, 2, 4, 8, 16) for c in (1, 2, 5, 10)]
    subject = "vmae|gemma|mutual_knn"
    with duckdb.connect(str(path)) as con:
        R.put_study(con, result_id=subject, study="scaling", dataset="mine", subject=subject,
                    params={"metric": "mutual_knn", "k": 10, "n_boot": 0},
                    payload=fit_subject(None, "a", "mutual_knn", {"k": 10}, points, 0, 0), input_key="y")
        put_analysis_version(con)
    with duckdb.connect(str(path), read_only=True) as con:
        sv = scaling_view(con, "mine", subject)
        report = build_report(con, store=str(path))
    rows = sv["table"].set_index("parameter")
    assert rows.loc["alpha", "value"] == "" and rows.loc["d_v = 2/α", "value"] == ""
    (d,) = report["datasets"]
    (entry,) = [f for f in d["sections"]["scaling"] if f["subject"] == subject]
    assert entry["fit"]["params"]["alpha"] is None and "alpha" in entry["fit"]["undetermined"]
    (row,) = [r for r in scaling_rows(d["sections"]["scaling"]) if r["pair"].startswith("vmae")]
    assert row["α"] is None and row["d_v = 2/α"] is None and "α:" in row["not determined"]
    assert '"alpha": null' in to_json(report)


def test_a_cknna_fit_with_s_inf_far_beyond_its_scores_stores_s_inf_undetermined():
    # CKNNA has no registry bounds: scores <= 0.2 that keep rising in log n send S∞ to ~200; the
    # stored payload (the JSON), not only the page, must say it is not determined
    points = [(f, c, 0.02 + 0.04 * np.log(f) + 0.03 * np.log(c), 0, 0, "a", "b")
              for f in (1, 2, 4, 8, 16) for c in (1, 2, 5, 10)]
    fit = fit_subject(None, "a", "cknna", {"k": 10}, points, 0, 0)["fit"]
    assert fit["params"]["s_inf"] > 1.0
    assert "s_inf" in fit["undetermined"] and "alpha" in fit["undetermined"]
