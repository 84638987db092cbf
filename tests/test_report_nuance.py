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


def test_the_reorder_probe_is_reported_with_its_intervals_and_error_bars(report):
    """Issue #33 item 2: the report's reorder table gives each value's 95% interval, says whether the
    drop's interval includes 0, and its chart draws the intervals as error bars with chance."""
    from analysis.report.md_escape import md_inline

    (d,) = report["datasets"]
    entries = [e for e in d["sections"]["temporal"]["reorder"] if "layers" in e]
    assert entries and all(e["intervals"]["n_boot"] == 20 for e in entries)
    html = render_html(report)
    assert "<h4>Reorder negatives</h4>" in html and "drop 95% CI" in html
    for e in entries:
        lo, hi = e["intervals"]["drop"]
        said = "includes 0" if lo <= 0 <= hi else "excludes 0"
        sentence = f"{e['vision']} × {e['text']}: drop {e['drop']:.3f}, 95% interval [{lo:.3f}, {hi:.3f}] {said}"
        assert sentence in html
        assert md_inline(sentence) in render_markdown(report)  # brackets escaped: never a Markdown link
    specs = [s for sect, title, s in d["charts"] if sect == "temporal" and title.startswith("reorder negatives")]
    assert len(specs) == 2
    bars, drop = specs
    marks = [m["mark"]["type"] if isinstance(m["mark"], dict) else m["mark"] for m in bars["layer"]]
    assert marks == ["bar", "errorbar", "rule"]
    rows = [r for v in bars["datasets"].values() for r in v if r.get("ci_low") is not None]
    assert len(rows) == 2 * len(entries)
    assert {m["mark"]["type"] if isinstance(m["mark"], dict) else m["mark"] for m in drop["layer"]} >= {"errorbar",
                                                                                                        "rule"}
