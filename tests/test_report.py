"""Layer-selection reports: sections, numbers equal to the result tables, offline rendering, escaping."""

import json
import os
import time

import duckdb
import pytest

from analysis.storage import results as R
from precompute.cli import main
from tests.helpers import chromium_driver, make_report


def test_demo_report_sections_and_numbers(demo_like, tmp_path):
    out, data, page = make_report(demo_like, tmp_path)
    assert out.with_suffix(".md").read_text().startswith("# LayerScope layer-selection report")
    by_ds = {d["dataset"]: d for d in data["datasets"]}
    for ds in ("test_of_time", "moving_shapes"):
        sections = set(by_ds[ds]["sections"])
        assert {"summary", "heatmaps", "layer_curves", "scaling", "model_map", "temporal"} <= sections
        assert "downstream" in by_ds[ds]["omitted"]  # the demo imports no downstream results
    assert "Omitted: no downstream results" in page
    con = duckdb.connect(str(demo_like), read_only=True)
    for entry in by_ds["moving_shapes"]["sections"]["summary"]["models"]:
        for ref, a in entry["alignment"].items():
            (g,) = R.read_grids(con, result_id=a["result_id"])
            assert a["value"] == g["best_value"] and a["ci"] == [g["ci_low"], g["ci_high"]]
            layer = g["best_a"] if g["model_a"] == entry["model"] else g["best_b"]
            assert a["layer"] == layer
        choice = R.read_studies(con, study="layer_choice", dataset="moving_shapes", subject=entry["model"])[0]
        for metric, p in entry["recommended"].items():
            assert p["layer"] == choice["payload"]["picks"][metric]["layer"]
            assert p["value"] == choice["payload"]["picks"][metric]["value"]
    (mm,) = R.read_studies(con, study="model_map", dataset="moving_shapes")
    assert by_ds["moving_shapes"]["sections"]["model_map"]["similarity"] == mm["payload"]["similarity"]
    con.close()
    assert "random init" in page and "layerscope report --store" in data["command"]


def test_report_rejects_unknown_models(demo_like, tmp_path, capsys):
    assert main(["report", "--store", str(demo_like), "--out", str(tmp_path / "r.html"), "--models", "nope"]) == 2
    assert "unknown model(s) ['nope']" in capsys.readouterr().err


@pytest.fixture(scope="module")
def hostile_store(tmp_path_factory):
    """Model, dataset and caption strings that try to break out of the HTML."""
    from precompute.synthetic import tiny_models
    from precompute.synthetic.video_files import index_frames, write_video

    root = tmp_path_factory.mktemp("hostile")
    for i in range(12):
        write_video(root / f"v{i}.mkv", index_frames(6) + i)
    caption = '</script><img src=x onerror="window.__pwned=2"> a red circle'
    (root / "m.jsonl").write_text("".join(json.dumps({"id": f"<i>{i}</i>", "video": f"v{i}.mkv",
                                                      "captions": [caption + f" {i}"]}) + "\n" for i in range(12)))
    tiny_models.build_vit(root / "vit")
    tiny_models.build_bert(root / "bert")
    store = root / "s.duckdb"
    assert main(["precompute", "--store", str(store), "--manifest", str(root / "m.jsonl"), "--dataset",
                 "<b>ds</b>", "--model", str(root / "vit"), "--name", "<script>window.__pwned=1</script>",
                 "--model", str(root / "bert"), "--name", "bert", "--frames", "1,2", "--captions", "1", "--quiet"]) == 0
    assert main(["analyze", "--store", str(store), "--k", "3", "--bootstrap", "5"]) == 0
    return store


@pytest.mark.slow  # hostile_store builds a tiny ViT and BERT and precomputes
def test_injection_strings_stay_text(hostile_store, tmp_path):
    _, data, page = make_report(hostile_store, tmp_path)
    assert "<script>window.__pwned" not in page and "<img src=x" not in page and "<b>ds</b>" not in page
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in page
    assert "&lt;/script&gt;&lt;img src=x onerror=&quot;window.__pwned=2&quot;&gt;" in page
    assert data["datasets"][0]["dataset"] == "<b>ds</b>"  # JSON keeps the raw strings


def _browser(tmp_path):
    return chromium_driver(tmp_path / "profile", window="1300,1000", offline=True)


def _rendered(driver, expected, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        n = len(driver.find_elements("css selector", ".vis svg, .vis canvas"))
        if n >= expected:
            return n
        time.sleep(0.3)
    return len(driver.find_elements("css selector", ".vis svg, .vis canvas"))


@pytest.mark.browser
def test_report_renders_offline_in_chromium(demo_like, tmp_path):
    out, data, page = make_report(demo_like, tmp_path)
    n_charts = page.count("class='vis'")
    assert n_charts >= 10
    driver = _browser(tmp_path)
    try:
        driver.get(out.as_uri())
        assert _rendered(driver, n_charts) == n_charts
        assert not driver.find_elements("xpath", "//*[starts-with(normalize-space(text()), 'chart error')]")
        os.makedirs("test-artifacts", exist_ok=True)
        driver.save_screenshot("test-artifacts/report.png")
    finally:
        driver.quit()


@pytest.mark.browser
def test_hostile_report_is_inert_in_chromium(hostile_store, tmp_path):
    out, _, page = make_report(hostile_store, tmp_path)
    driver = _browser(tmp_path)
    try:
        driver.get(out.as_uri())
        _rendered(driver, page.count("class='vis'"))
        assert driver.execute_script("return window.__pwned === undefined")
        assert not driver.find_elements("css selector", "img[src='x']")
        assert "<script>window.__pwned=1</script>" in driver.find_element("tag name", "body").text
    finally:
        driver.quit()


def test_the_report_opens_with_one_verdict_per_model(demo_like, tmp_path):
    """The first section is the verdicts, the Overview's lines; each verdict's layer is the one most
    stored per-metric picks name (the deeper on equal votes) and its agreement counts them."""
    from collections import Counter

    out, data, page = make_report(demo_like, tmp_path)
    md = out.with_suffix(".md").read_text()
    assert page.index("Which layer to use") < page.index("Dataset moving_shapes")
    assert md.index("## Which layer to use") < md.index("## moving")
    con = duckdb.connect(str(demo_like), read_only=True)
    for d in data["datasets"]:
        # a verdict per model side (a dual encoder's text tower is "<model> [text]"), a summary row per model
        assert ({v["model"].removesuffix(" [text]") for v in d["verdicts"]}
                == {m["model"] for m in d["sections"]["summary"]["models"]})
        for v in d["verdicts"]:
            assert v["sentence"] in page.replace("&#x27;", "'")
            (choice,) = R.read_studies(con, study="layer_choice", dataset=d["dataset"], subject=v["model"])
            # random-init controls and alignment no better than chance never vote (issue #29, item 3)
            voters = {m: p for m, p in choice["payload"]["picks"].items()
                      if m not in v["controls"] and m not in v["chance"]}
            assert ("use layer" in v["sentence"]) == (v["status"] == "recommend")
            if not voters:
                assert v["status"] in ("none", "chance") and v["layer"] is None
                continue
            votes = Counter(p["layer"] for p in voters.values())
            top = max(votes.values())
            assert v["layer"] == max(layer for layer, n in votes.items() if n == top)
            assert (v["n_agree"], v["n_metrics"]) == (top, sum(votes.values()))
            if v["status"] == "last":
                assert v["layer"] == v["last_layer"]
            if v["status"] == "tie":
                assert "no reason to move off the" in v["sentence"]
            if v["status"] not in ("none", "chance"):  # a value, its interval and the paired gains, or why not
                assert f"{v['lead']} " in v["sentence"] and ("95% CI" in v["sentence"] or "no interval" in v["sentence"])
                assert v["layer"] == v["last_layer"] or "over the last layer" in v["sentence"]
            if v["heatmap_query"]:
                q = v["heatmap_query"]
                assert v["model"].removesuffix(" [text]") in (q["a"], q["b"]) and q["dataset"] == d["dataset"]
    con.close()
