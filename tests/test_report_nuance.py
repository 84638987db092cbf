"""The report's temporal section carries the shared-space probes and the same-space summary."""

import pytest

from analysis.report import build_report, render_html, render_markdown
from analysis.storage.store import connect


@pytest.fixture(scope="module")
def report(nuance_store):
    path = nuance_store  # built once per run (tests/conftest.py); read only
    con = connect(path, read_only=True)
    try:
        return build_report(con, store=str(path), command="layerscope report")
    finally:
        con.close()


def test_chiral_time_reversal_galleries_negation_and_same_space_in_the_report(report):
    (d,) = report["datasets"]
    t = d["sections"]["temporal"]
    (chiral,) = [c for c in t["chiral"] if c["video"] == "mllm"]
    assert (chiral["best_layer"], chiral["best"]) == (2, 1.0) and chiral["per_layer"][0] is None
    (rev,) = [c for c in t["time_reversal"] if c["video"] == "mllm"]
    assert rev["best_layer"] == 2 and rev["last"] == 1.0
    assert {g["video"] for g in t["chiral_gallery"]} == {"mllm", "clip"}
    (neg,) = t["negation"]
    assert neg["recall"]["negated@1"]["best"] == 1.0
    same = {s["pair"].split(" (")[0]: s for s in t["same_space"]}
    assert same["mllm × mllm"]["map_t2v"]["best_layer"] == 2 and same["mllm × mllm"]["recall@1_t2v_at_best"] == 1.0
    assert same["clip × clip"]["map_t2v"]["best_layer"] == 3  # the joint layer, the only one compared
    html = render_html(report)
    assert "Nuanced retrieval in a shared space" in html and "chiral choice, video → caption" in html
    assert "Shared video–text space" in html
    assert "chiral choice (video → caption), mllm × mllm (layers): best 1" in render_markdown(report)
