"""The Layer predictors page, driven headlessly on a store whose answer is planted
(tests/stores.py: write_predictor_store): the table, the per-model comparison, the URL state, the
fabricated-numbers warning, and the start-here message when there are no per-layer results."""

from analysis.storage.downstream_import import import_downstream
from tests.helpers import app
from tests.stores import SHARE


def test_page_explains_how_to_import_per_layer_results(predictor_stores, monkeypatch):
    at = app(predictor_stores["bare"], monkeypatch, "predictors")
    assert "No per-layer downstream results" in at.info[0].value
    assert any("layer,setting" in c.value for c in at.code)


def test_page_shows_the_table_the_picks_and_the_fabricated_warning(predictor_stores, monkeypatch):
    at = app(predictor_stores["full"], monkeypatch, "predictors", {"task": "probe · top1 [linear]"})
    # the store may also carry the random-init banner: find the page's own warning
    assert any("FABRICATED" in w.value and "made-up task" in w.value for w in at.warning)
    matrix = at.dataframe[0].value
    assert matrix.columns[0] == "signal"
    assert matrix["signal"].iloc[0] == "alignment with txt (mutual_knn)"  # the planted signal, first
    cell = matrix.set_index("signal").loc["alignment with txt (mutual_knn)", "probe · top1 [linear]"]
    assert cell.startswith(("+0.9", "+1.0"))
    err = matrix.set_index("signal").loc["alignment with txt (mutual_knn)", "made-up task (fabricated) · err [demo]"]
    assert err.startswith("-")  # lower-is-better task: the sign flips
    signals = at.dataframe[1].value
    assert signals["rank"].iloc[0] == 1 and signals["signal"].iloc[0] == "alignment with txt (mutual_knn)"
    best = at.dataframe[2].value.set_index("model")
    for m, share in SHARE.items():
        assert best.loc[m, "truly best layer"] == max(range(len(share)), key=share.__getitem__)
    assert at.query_params["task"] == "probe · top1 [linear]"
    at.selectbox(key="pick_signal").set_value("alignment with txt (mutual_knn)").run()
    picks = at.dataframe[3].value
    assert set(picks["model"]) == set(SHARE) and (picks["shortfall vs best"] >= 0).all()
    at.radio(key="pred_stat").set_value("ρ pooled").run()
    assert not at.exception
    assert len(at.get("vega_lite_chart")) >= 1


def test_page_on_the_demo_store_reads_measured_probes_not_fabricated_numbers(demo_like, monkeypatch):
    at = app(demo_like, monkeypatch, "predictors", {"dataset": "moving_shapes"})
    assert not any("FABRICATED" in w.value for w in at.warning)
    matrix = next(d.value for d in at.dataframe if "signal" in d.value.columns)  # after the verdict checks
    assert all(t.endswith("[measured]") for t in matrix.columns[1:])
    assert len(matrix) >= 4  # rankme, lid, uniformity, alignment with each text model


def test_hostile_model_and_task_names_stay_text(tmp_path, monkeypatch):
    import csv

    from precompute.cli import main
    from tests.stores import write_store
    from tests.hostile import CAPTION, IMAGE, NAMES, SCRIPT, assert_inert, markdown_sources

    store = tmp_path / "h.duckdb"
    write_store(store, n=16, names=NAMES)  # vis is stored as SCRIPT (3 layers), txt as IMAGE
    path = tmp_path / "r.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["model", "task", "metric", "value", "higher_is_better", "layer", "setting"])
        w.writerows([[SCRIPT, CAPTION, IMAGE, v, "true", layer, SCRIPT] for layer, v in enumerate([0.1, 0.5, 0.3])])
    import_downstream(store, path)
    assert main(["analyze", "--store", str(store), "--k", "3", "--bootstrap", "0"]) == 0
    for params in ({}, {"task": IMAGE, "signal": SCRIPT}):
        at = app(store, monkeypatch, "predictors", params)
        assert len(at.dataframe) >= 3  # the table is there
        for md in markdown_sources(at):
            assert_inert(md)
    out = tmp_path / "r.html"
    assert main(["report", "--store", str(store), "--out", str(out)]) == 0
    md = out.with_suffix(".md").read_text()
    assert "### Layer predictors" in md
    assert_inert(md)
