"""Issue #29 item 7 on the page: DR's saturating law named in the chart title and drawn with the
held-out-best form beside it, one R² line per curve, undetermined parameters blank with the reason.
The store holds only scaling studies (tests.stores.write_scaling_studies): seconds, no demo."""

import json
from pathlib import Path

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from tests.stores import write_scaling_studies

APP = str(Path(__file__).resolve().parents[2] / "app.py")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("scaling") / "scaling.duckdb"
    con = duckdb.connect(str(path))
    write_scaling_studies(con)
    con.close()
    return path


def page(store, monkeypatch, pair):
    monkeypatch.setenv("LAYERSCOPE_STORE", str(store))
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["dataset"] = "toy"
    at.query_params["pair"] = pair
    at.run()
    at.switch_page("pages/scaling.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_page_names_both_curves_with_their_r2_and_blanks_undetermined(store, monkeypatch):
    at = page(store, monkeypatch, "v|runaway|cknna")
    assert "DR's saturating law" in at.get("vega_lite_chart")[0].proto.spec
    text = " ".join(m.value for m in at.markdown)
    assert "DR's saturating law" in text and "R² = " in text
    table = at.dataframe[0].value
    blank = table[table["parameter"].isin(["s_inf", "c_f", "alpha"])]
    assert (blank["value"] == "").all() and blank["note"].str.startswith("not determined").all()
    assert any("left blank" in w.value for w in at.warning)


def test_page_draws_the_held_out_best_form_beside_the_law(store, monkeypatch):
    at = page(store, monkeypatch, "v|loglinear|mutual_knn")
    lines = [m.value for m in at.markdown if "R² = " in m.value]
    assert len(lines) == 2 and "saturating" in lines[0] and "log-linear" in lines[1]
    heading = [m.value for m in at.markdown if "held-out-best log-linear" in m.value]
    assert heading and "saturating law S∞" in heading[0]
    spec = json.loads(at.get("vega_lite_chart")[0].proto.spec)
    dash = next(layer["encoding"]["strokeDash"] for layer in spec["layer"] if "strokeDash" in layer.get("encoding", {}))
    # the legend names both curves, DR's law first, each with its R²
    assert dash["sort"][0].startswith("DR's saturating law, R² ")
    assert dash["sort"][1].startswith("log-linear form (held-out best), R² ")


def test_page_reads_each_subject_once(tmp_path, monkeypatch):
    """The page renders the report's section (panels, notes and the subject's entry), so each subject
    shown, the compared one too, is read from the store once: a second read through the subject's view
    would be the page computing what the section already gave it."""
    import collections
    import functools

    from analysis.views import scaling as scaling_view

    # a store of its own: the module's store may already sit in the view cache, reading nothing
    path = tmp_path / "scaling.duckdb"
    con = duckdb.connect(str(path))
    write_scaling_studies(con)
    con.close()
    reads = collections.Counter()
    read = scaling_view.scaling_view

    @functools.wraps(read)
    def counted(con, dataset, subject):
        reads[subject] += 1
        return read(con, dataset, subject)

    monkeypatch.setattr(scaling_view, "scaling_view", counted)
    monkeypatch.setenv("LAYERSCOPE_STORE", str(path))
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["dataset"] = "toy"
    at.query_params["pair"] = "v|loglinear|mutual_knn"
    at.query_params["compare"] = "v|runaway|cknna"
    at.run()
    at.switch_page("pages/scaling.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert reads == {"v|loglinear|mutual_knn": 1, "v|runaway|cknna": 1}
    # and both subjects are shown in full: each its two panels and, both being fitted, its two tables
    assert len(at.get("vega_lite_chart")) == 4
    assert len(at.dataframe) == 4
