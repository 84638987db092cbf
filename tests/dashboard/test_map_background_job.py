"""A map of any layer computed from the Embedding map page as a background job (analysis.jobs kind
``map``): the page starts a subprocess that does what ``layerscope map`` does, and the new map is
pickable once it is done. Checked on the tools store (tests/stores.py ``write_map_tools_store``)
against the store itself: the map's run and layer and its points, one per item the run holds."""

import json

import duckdb
import pytest

from analysis import jobs
from analysis.storage import results as R
from tests.dashboard.test_background_jobs import wait_done
from tests.helpers import app
from tests.stores import TOOLS_N, write_map_tools_store


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "s.duckdb"
    write_map_tools_store(path)
    return path


def stored_maps(store):
    con = duckdb.connect(str(store), read_only=True)
    try:
        return {r["subject"]: r["payload"] for r in R.read_studies(con, current=True, study="embedding_map",
                                                                   dataset="tools")}
    finally:
        con.close()


def test_a_map_job_stores_the_map_of_the_asked_layer(store):
    assert "vid · video L2 · pca" not in stored_maps(store)
    first = jobs.start(store, "map", request={"dataset": "tools", "model": "vid", "layer": 2, "method": "pca"})
    assert first["kind"] == "map" and first["state"] == "running"
    done = wait_done(store)
    assert done["state"] == "done", done
    assert done["message"] == "map vid · video L2 · pca computed"
    p = stored_maps(store)["vid · video L2 · pca"]
    assert p["run_ids"] == ["vid-f2"] and list(p["layers"]) == [2]  # the model's largest budget
    assert sorted(p["items"]) == list(range(TOOLS_N)) and len(p["x"]) == TOOLS_N


@pytest.mark.parametrize("request_,fragment", [({"dataset": "tools", "model": "vid"}, "missing layer"),
                                               ({"dataset": "tools", "model": "vid", "layer": 1, "colour": "x"},
                                                "unknown colour")])
def test_a_map_job_without_its_request_is_refused_in_one_line(store, request_, fragment):
    with pytest.raises(ValueError, match=fragment):
        jobs.start(store, "map", request=request_)
    assert jobs.latest(store) is None


def test_a_layer_that_cannot_be_mapped_ends_with_its_reason(store):
    jobs.start(store, "map", request={"dataset": "tools", "model": "vid", "layer": 9})
    done = wait_done(store)
    assert done["state"] == "error" and "layer" in done["message"] and "\n" not in done["message"]


def test_the_page_starts_the_job_and_then_offers_the_new_map(store, monkeypatch):
    at = app(store, monkeypatch, "embedding_map", {"dataset": "tools", "method": "pca"})
    at.selectbox(key="other_model").set_value("vid").run()
    at.number_input(key="other_layer").set_value(2).run()
    at.radio(key="other_method").set_value("pca").run()
    at.button(key="job_map").click().run()
    assert not at.exception, [e.value for e in at.exception]
    (job_dir,) = [d for d in jobs.jobs_dir(store).iterdir() if d.is_dir()]
    spec = json.loads((job_dir / "spec.json").read_text())
    assert spec["request"] == {"dataset": "tools", "model": "vid", "layer": 2, "side": "auto", "method": "pca"}
    assert wait_done(store)["state"] == "done"
    again = app(store, monkeypatch, "embedding_map", {"dataset": "tools", "method": "pca"})
    assert any(o.startswith("vid · video L2 · pca ") for o in again.selectbox(key="pick_map").options)
    assert any("Background map done" in s.value for s in again.success)
