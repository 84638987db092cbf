"""Every dashboard page driven headlessly with AppTest on stores built by the tests: the demo-shaped
store (tests/stores.py: write_demo_like_store) for what the demo holds, the small dashboard store for
page mechanics."""

import duckdb
import pytest

from analysis.views.choices import choose, layers_from_params, selection_to_layers
from tests.helpers import app, charts

PAGES = ["overview", "heatmap", "curves", "scaling", "model_map", "downstream", "temporal", "neighbours", "predictors",
         "embedding_map", "paper_figures"]


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_on_the_demo_store(demo_like, monkeypatch, page):
    params = {"dataset": "test_of_time"} if page == "temporal" else {}
    at = app(demo_like, monkeypatch, page, params)
    # temporal on Test of Time: alignment at k, neighbour types, reorder negatives, arrow of time
    expected_charts = {"heatmap": 1, "curves": 1, "scaling": 1, "model_map": 2, "temporal": 4}
    assert len(charts(at)) >= expected_charts.get(page, 0)
    if page == "overview":
        from tests.stores import DEMO_LIKE_MODELS

        n_models = len(DEMO_LIKE_MODELS)  # the demo's models: three random-init, a dual encoder, MiniLM
        assert len(at.dataframe) == 3 and at.metric[1].value == str(n_models)
        assert any("random init" in str(df.value.to_dict()) for df in at.dataframe)
    if page == "downstream":
        # the demo imports nothing: it measures probes per layer, shown first, and the predictor table reads them
        infos = [i.value for i in at.info]
        assert any("No imported whole-model downstream results" in i for i in infos)
        assert any("Layer predictors page" in i for i in infos)
        assert "Measured on this dataset: labelled probes per layer" in [s.value for s in at.subheader]


def test_heatmap_state_lives_in_the_url_and_selections_change_the_view(dashboard_store, monkeypatch):
    params = {"dataset": "moving_shapes", "a": "vit-tiny", "b": "llama-tiny", "metric": "cknna", "nf": "2",
              "nc": "4", "la": "1", "lb": "3"}
    at = app(dashboard_store, monkeypatch, "heatmap", params)
    values = {s.label: s.value for s in at.selectbox}
    assert values["Model A (rows)"] == "vit-tiny" and values["Metric"] == "cknna"
    assert (values["Selected layer of A"], values["Selected layer of B"]) == (1, 3)
    assert at.metric[0].label == "cknna at layers (1, 3)"
    first = at.metric[0].value
    at.selectbox(key="sel_lb").set_value(0).run()
    assert at.metric[0].label == "cknna at layers (1, 0)" and at.query_params["lb"] == "0"
    at.selectbox(key="pick_metric").set_value("mutual_knn").run()
    assert at.query_params["metric"] == "mutual_knn" and at.metric[0].value != first


@pytest.mark.parametrize("bad", [{"a": "no-such-model"}, {"metric": "'; DROP TABLE runs; --"},
                                 {"dataset": "x' OR 1=1 --"}, {"la": "99", "lb": "-1"}, {"nf": "banana"}])
def test_bad_query_parameters_get_a_friendly_message(dashboard_store, monkeypatch, bad):
    at = app(dashboard_store, monkeypatch, "heatmap", bad)
    assert len(charts(at)) == 1  # the page still works
    if "la" not in bad:
        assert any("unknown" in w.value and "showing" in w.value for w in at.warning)
    con = duckdb.connect(str(dashboard_store), read_only=True)
    assert con.execute("SELECT count(*) FROM runs").fetchall()[0][0] > 0
    con.close()


@pytest.mark.parametrize("page", PAGES)
def test_empty_store_shows_how_to_start(empty_store, monkeypatch, page):
    at = app(empty_store, monkeypatch, page)
    assert "layerscope demo" in at.info[0].value


def test_missing_store_shows_how_to_start(tmp_path, monkeypatch):
    at = app(tmp_path / "nothing.duckdb", monkeypatch)
    assert "No LayerScope store" in at.info[0].value


def test_store_of_an_older_schema_says_how_to_upgrade(one_model_store, tmp_path, monkeypatch):
    import shutil

    import duckdb

    old = tmp_path / "old.duckdb"
    shutil.copy(one_model_store, old)
    con = duckdb.connect(str(old))
    con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    con.close()
    at = app(old, monkeypatch)
    assert "schema version 2" in at.error[0].value and "layerscope migrate --store" in at.error[0].value


@pytest.mark.parametrize("page", PAGES)
def test_one_model_store_explains_what_is_missing(one_model_store, monkeypatch, page):
    at = app(one_model_store, monkeypatch, page)
    if page == "overview":
        text = " ".join(m.value for m in at.markdown)
        assert "no vision×text pair" in text
    elif page in ("heatmap", "scaling", "model_map", "temporal", "paper_figures"):
        assert "layerscope analyze" in at.info[0].value
    elif page == "curves":
        assert len(charts(at)) == 1  # single-space profiles exist for one model


def test_selection_logic():
    assert selection_to_layers({"selection": {"cell": [{"layer_a": 2, "layer_b": 5}]}}, 4, 6, (0, 0)) == (2, 5)
    assert selection_to_layers({"selection": {"cell": []}}, 4, 6, (1, 1)) == (1, 1)
    assert selection_to_layers({"layer_a": 9, "layer_b": 1}, 4, 6, (1, 1)) == (1, 1)  # out of range
    assert selection_to_layers([{"layer_a": "3", "layer_b": "0"}], 4, 6, (1, 1)) == (3, 0)
    assert selection_to_layers(None, 4, 6, None) is None
    assert layers_from_params("2", "x", 4, 4, (0, 3)) == (0, 3)
    assert layers_from_params("2", "1", 4, 4, (0, 3)) == (2, 1)
    c = choose("cka", ["mutual_knn", "cka"], "metric")
    assert c.value == "cka" and c.message is None
    c = choose("'; DROP TABLE x", ["mutual_knn", "cka"], "metric", "cka")
    assert c.value == "cka" and "unknown metric" in c.message
    assert choose(4, [1, 2, 4], "n_f").value == 4 and choose("4", [1, 2, 4], "n_f").value == 4


@pytest.mark.slow  # several seconds: whole analyses or hundreds of trials
def test_overview_offers_the_report_for_download(dashboard_store, monkeypatch):
    at = app(dashboard_store, monkeypatch)
    at.toggle(key="prepare_report").set_value(True).run()
    assert not at.exception
    labels = [b.label for b in at.get("download_button")]
    assert {"Report (HTML)", "Numbers (JSON)", "Summary (Markdown)"} <= set(labels)


def test_the_dashboard_starts_without_the_developer_toolbar(tmp_path):
    from precompute.dashboard import command

    cmd = command(tmp_path / "s.duckdb")
    assert cmd[cmd.index("--client.toolbarMode") + 1] == "viewer"  # no Deploy button for users
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"


def test_heatmap_explains_its_metric_from_the_registry(dashboard_store, monkeypatch):
    from analysis.registry import REGISTRY

    at = app(dashboard_store, monkeypatch, "heatmap", {"dataset": "moving_shapes", "metric": "mutual_knn"})
    captions = " ".join(c.value for c in at.caption)
    assert REGISTRY["mutual_knn"].summary in captions and "Chance" in captions and "k/(N−1)" in captions
    assert "layerscope metrics" not in " ".join(str(s.help) for s in at.selectbox)
