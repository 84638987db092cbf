"""Issue #31 on the page: each of DR's figures renders as its own section (its own link) from a store
of planted best cells (tests.stores.write_paper_store; seconds, no demo), with the hand-worked numbers
on screen and the papers' numbers beside the user's once the names are mapped."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from precompute.cli import main
from tests.stores import write_paper_store

APP = str(Path(__file__).resolve().parents[2] / "app.py")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("paper") / "paper.duckdb"
    write_paper_store(path)
    for args in (["vmae", "VideoMAEv2-H"], ["gemma", "Gemma-2-9b-it"], ["--dataset", "mine", "VATEX"]):
        assert main(["papers", "map", "--store", str(path), *args]) == 0
    return path


def page(store, monkeypatch, **params):
    monkeypatch.setenv("LAYERSCOPE_STORE", str(store))
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["dataset"] = "mine"
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    at.switch_page("pages/paper_figures.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _text(at) -> str:
    return " ".join(m.value for m in at.markdown)


def test_fig7_section_shows_the_fit_and_drs_line_beside(store, monkeypatch):
    at = page(store, monkeypatch, figure="fig7", text="gemma")
    text = _text(at)
    assert "Least squares over 4 model(s)" in text and "DR Fig. 7 (published" in text
    # the paper's line is drawn as its own, named line (in the chart's data)
    assert "DR Fig. 7 (published)" in str(at.get("vega_lite_chart")[0].proto)


def test_fig11_section_prints_cells_with_layers_and_the_agreement(store, monkeypatch):
    at = page(store, monkeypatch, figure="fig11", budget="smallest")
    table = at.dataframe[0].value.set_index("vision")
    assert table.loc["vmae", "gemma"] == "0.25 (L12/L5)"
    assert "Kendall's W = 0.900" in _text(at)
    # four models, two encoders: W = 0.9 is Spearman's ρ = 0.8, one adjacent swap; of the 4! orderings
    # of the second ranking, the identity and the 3 adjacent swaps reach it: p = 4/24
    assert "exact permutation p = 0.167 over all 24 orderings" in _text(at)
    [tau] = at.dataframe[1].value["Kendall τ-b"].tolist()
    assert tau.startswith("0.667 (exact p = ")


def test_fig2_section_shows_the_offset(store, monkeypatch):
    at = page(store, monkeypatch, figure="fig2", text="gemma", task="k400 · top1")
    # two ● points: no line through them, so the section says why there is no offset
    assert "a line needs at least 3" in _text(at)


def test_published_section_lists_the_mapped_names(store, monkeypatch):
    at = page(store, monkeypatch, figure="published")
    table = at.dataframe[0].value
    assert (table.loc[table["model"] == "VideoMAEv2-H", "your model"] == "vmae").all()


def test_scaling_page_shows_table_1_beside_the_fit(store, monkeypatch):
    monkeypatch.setenv("LAYERSCOPE_STORE", str(store))
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["dataset"] = "mine"
    at.query_params["pair"] = "vmae|gemma|mutual_knn"
    at.run()
    at.switch_page("pages/scaling.py")
    at.run()
    assert not at.exception
    table = at.dataframe[0].value.set_index("parameter")
    assert table.loc["alpha", "paper"] == "0.750" and table.loc["d_v = 2/α", "paper"] == "2.667"


def test_a_hostile_section_in_the_link_falls_back(store, monkeypatch):
    at = page(store, monkeypatch, figure="<script>")
    assert any("unknown" in w.value or "figure" in w.value for w in at.warning)
