"""The measured probes on the dashboard: Overview's line per model and field, the Downstream page's
checks and curves, the Predictors page reading measured numbers."""

from __future__ import annotations

import pytest

from analysis.studies import analyze_store
from tests.helpers import app, charts
from tests.stores import write_labelled_store


@pytest.fixture(scope="module")
def probed_store(tmp_path_factory):
    store = tmp_path_factory.mktemp("probe-pages") / "p.duckdb"
    write_labelled_store(store)
    analyze_store(store, maps=0, n_null=20, n_boot=50, labels=("scene.shape",), log=lambda m: None)
    return store


def _text(at) -> str:
    return "\n".join(m.value for m in at.markdown)


def test_overview_sets_each_verdict_against_the_probes_best_layer(probed_store, monkeypatch):
    at = app(probed_store, monkeypatch)
    text = _text(at)
    assert "Checked against labels" in text
    # the planted store's video model: its label-free pick is not layer 2, where the classes separate
    line = next(m for m in text.splitlines() if m.split("]", 1)[-1].strip().startswith("vis on scene.shape"))
    assert "pick loses" in line and "the best layer, layer 2, scores 1.000" in line


def test_downstream_page_shows_measured_probes_without_imported_results(probed_store, monkeypatch):
    at = app(probed_store, monkeypatch, page="downstream")
    assert "Measured on this dataset" in " ".join(s.value for s in at.subheader)
    assert len(at.dataframe) >= 1
    assert any("probe" in str(c.spec).lower() or "k-NN accuracy" in str(c.spec) for c in charts(at))
    assert "No imported whole-model downstream results" in " ".join(i.value for i in at.info)


def test_predictors_page_reads_the_measured_tasks(probed_store, monkeypatch):
    at = app(probed_store, monkeypatch, page="predictors")
    assert not any("No per-layer downstream results" in i.value for i in at.info)
    assert "The verdict's layer against the measured best layer" in [s.value for s in at.subheader]
    checks = at.dataframe[0].value
    assert {"label-free pick", "best layer", "pick − best", "outcome"} <= set(checks.columns)
    assert "pick loses" in set(checks["outcome"])
    task = next(s for s in at.selectbox if s.label == "Task")
    assert task.value == "scene.shape · kmeans_ari [measured]"  # tasks in order; every one measured here
    assert all(o.endswith("[measured]") for o in task.options)


def test_report_carries_the_probe_checks_in_html_json_and_markdown(probed_store, tmp_path):
    from tests.helpers import make_report

    out, data, html = make_report(probed_store, tmp_path)
    probes = data["datasets"][0]["sections"]["probes"]
    lines = [c["sentence"] for c in probes["checks"] if c["headline"]]
    vis = next(x for x in lines if x.startswith("vis on scene.shape"))
    assert "the pick loses to the best layer" in vis
    assert probes["per_layer"] and all(r["value"] is None or 0 <= r["value"] <= 1 for r in probes["per_layer"]
                                       if r["score"].endswith("accuracy"))
    import html as h
    assert h.escape(vis, quote=True) in html or h.escape(vis, quote=False) in html
    md = out.with_suffix(".md").read_text()
    assert "### Labelled probes" in md and "pick loses to the best layer" in md
    assert "probes" not in data["datasets"][0]["omitted"]


def test_downstream_page_shows_shared_space_retrieval_as_a_measured_task(demo_like, monkeypatch):
    from analysis.storage import results as R
    from analysis.storage.store import connect
    from analysis.views.probes import retrieval_long

    at = app(demo_like, monkeypatch, page="downstream", params={"dataset": "moving_shapes"})
    assert "Measured on this dataset: video–text retrieval in a shared space" in [s.value for s in at.subheader]
    con = connect(demo_like, read_only=True)
    try:
        rows = retrieval_long(con, "moving_shapes")
        stored = [r["payload"] for r in R.read_studies(con, current=True, study="same_space", dataset="moving_shapes")]
    finally:
        con.close()
    top = max(stored, key=lambda p: (p["n_frames"], p["n_captions"]))  # the largest budgets are drawn
    got = rows[rows["score"] == "recall@1_v2t"]
    assert got["value"].tolist() == top["metrics"]["recall@1_v2t"]["values"]


def test_a_field_no_layer_separates_is_called_at_chance_not_a_verdict_check(tmp_path, monkeypatch):
    from analysis.storage.store import connect
    from analysis.views.probes import probe_checks

    store = tmp_path / "r.duckdb"
    rng = __import__("numpy").random.default_rng(5)
    coin = [str(x) for x in rng.integers(0, 2, 60)]  # labels unrelated to every embedding
    write_labelled_store(store, metadata=[{"coin": c} for c in coin])
    analyze_store(store, maps=0, n_null=100, n_boot=100, labels=("coin",), log=lambda m: None)
    con = connect(store, read_only=True)
    try:
        checks = [c for c in probe_checks(con, "toy") if c["score"] == "knn_accuracy"]
    finally:
        con.close()
    assert checks and all(c["outcome"] == "chance" for c in checks)
    assert all("no layer beats chance" in c["sentence"] for c in checks)


def test_overview_says_one_line_per_model_with_every_loss_named(probed_store):
    from analysis.storage.store import connect
    from analysis.studies import analyze_store as again
    from analysis.views.probes import check_summaries, probe_checks

    again(probed_store, labels=("scene.shape", "colour"), log=lambda m: None)
    con = connect(probed_store, read_only=True)
    try:
        checks = probe_checks(con, "toy")
    finally:
        con.close()
    lines = check_summaries(checks)
    assert sorted(x["model"] for x in lines) == ["txt", "vis"]
    vis = next(x for x in lines if x["model"] == "vis")
    assert vis["n_fields"] == 2 and vis["outcome"] == "loses"
    assert "loses on scene.shape to layer 2" in vis["sentence"]
    # colour is planted in no layer: no shuffle is beaten, so it checks nothing
    assert "cannot be checked on colour" in vis["sentence"]
