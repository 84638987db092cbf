"""Text×text pairs on the Heatmap and Curves pages (issue #31): a text-only store's grids are
picked by their one budget (n_c), and a store holding several pair kinds offers each by name."""

import duckdb
import numpy as np
import pytest

from tests.helpers import app, charts
from tests.stores import write_text_store

N, K = 16, 3


@pytest.fixture(scope="module")
def text_store(tmp_path_factory):
    """Two text models (``alpha`` 3 stored layers, ``beta`` 4) at n_c ∈ {1, 2}, analysed (k = 3)."""
    rng = np.random.default_rng(7)
    z = rng.normal(size=(N, 4))
    runs = {(m, c): np.stack([z @ rng.normal(size=(4, 6)) + rng.normal(size=(N, 6)) for _ in range(L)])
            for m, L in (("alpha", 3), ("beta", 4)) for c in (1, 2)}
    store = tmp_path_factory.mktemp("text_pages") / "t.duckdb"
    write_text_store(store, runs, analyze=dict(k=K, n_boot=5, n_null=0, maps=0, jobs=1))
    return store


def stored_cell(store, n_c, la, lb):
    con = duckdb.connect(str(store), read_only=True)
    try:
        n_cols, values = con.execute("SELECT n_cols, grid_values FROM result_grids WHERE metric = 'mutual_knn' "
                                     "AND pair_kind = 'text_text' AND n_captions = ?", [n_c]).fetchone()
    finally:
        con.close()
    return values[la * n_cols + lb]


def test_heatmap_shows_a_text_only_store_by_caption_budget(text_store, monkeypatch):
    at = app(text_store, monkeypatch, "heatmap", {"nc": "1", "la": "2", "lb": "1"})
    labels = {s.label: s.value for s in at.selectbox}
    assert labels["Pair kind"] == "text_text" and "Frames n_f" not in labels
    assert (labels["Model A (rows)"], labels["Model B (columns)"], labels["Captions n_c"]) == ("alpha", "beta", 1)
    assert len(charts(at)) == 1
    assert at.metric[0].value == f"{stored_cell(text_store, 1, 2, 1):.4f}"
    at.selectbox(key="pick_nc").set_value(2).run()
    assert at.query_params["nc"] == "2" and at.metric[0].value == f"{stored_cell(text_store, 2, 2, 1):.4f}"


def test_curves_page_draws_alignment_with_the_other_text_model(text_store, monkeypatch):
    at = app(text_store, monkeypatch, "curves", {"metric": "alignment with beta"})
    assert at.selectbox(key="pick_metric").value == "alignment with beta"
    assert len(charts(at)) == 1 and not any("No model has this curve" in i.value for i in at.info)


def test_heatmap_offers_every_pair_kind_a_store_holds(dashboard_store, monkeypatch):
    at = app(dashboard_store, monkeypatch, "heatmap", {"dataset": "moving_shapes"})
    kind = at.selectbox(key="pick_kind")
    assert kind.options == ["vision × text", "text × text"] and kind.value == "vision_text"  # the default view
    assert at.selectbox(key="pick_a").value == "vit-tiny"
    kind.set_value("text_text").run()
    assert not at.exception and at.query_params["kind"] == "text_text"
    labels = {s.label: s.value for s in at.selectbox}
    assert (labels["Model A (rows)"], labels["Model B (columns)"]) == ("all-MiniLM-L6-v2", "llama-tiny")
    assert "Frames n_f" not in labels and labels["Captions n_c"] == 4  # the largest shared n_c


@pytest.mark.parametrize("page", ["overview", "model_map", "neighbours", "scaling", "temporal", "downstream",
                                  "predictors", "embedding_map"])
def test_every_other_page_renders_on_a_text_only_store(text_store, monkeypatch, page):
    app(text_store, monkeypatch, page)  # fails on any exception the page raised


def test_neighbours_page_shows_a_text_item_by_its_captions_without_a_frames_error(text_store, monkeypatch):
    at = app(text_store, monkeypatch, "neighbours")
    assert not any("frames unavailable" in c.value for c in at.caption)
    assert any("sentence 0" in m.value for m in at.markdown)


def test_a_verdicts_heatmap_link_opens_its_text_text_grid(text_store, monkeypatch):
    from analysis.views.verdicts import verdicts

    con = duckdb.connect(str(text_store), read_only=True)
    try:
        (v,) = [v for v in verdicts(con, "sentences") if v["model"] == "alpha"]
    finally:
        con.close()
    link = v["heatmap"]
    assert link["kind"] == "text_text" and {link["a"], link["b"]} == {"alpha", "beta"} and "nf" not in link
    at = app(text_store, monkeypatch, "heatmap", link)
    assert not at.warning  # every parameter of the link is one the page offers
    assert at.metric[0].label == f"mutual\\_knn at layers ({link['la']}, {link['lb']})"  # markdown-escaped
    assert at.metric[0].value == f"{stored_cell(text_store, int(link['nc']), int(link['la']), int(link['lb'])):.4f}"


def test_a_text_model_in_a_mixed_store_has_curves_against_vision_and_text_models(dashboard_store):
    from analysis.views.stored_choices import layer_choices

    con = duckdb.connect(str(dashboard_store), read_only=True)
    try:
        curves = layer_choices(con, "moving_shapes")["llama-tiny"]["curves"]
    finally:
        con.close()
    assert {"alignment with vit-tiny", "alignment with all-MiniLM-L6-v2"} <= set(curves)
