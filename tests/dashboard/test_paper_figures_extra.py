"""Issue #31's remaining figures on the Paper figures page and in the report: DR Fig. 8 (the long
original caption's baseline beside the caption sweep), each its own section (its link), from a small
synthetic store analysed in seconds (no demo)."""

from pathlib import Path

import duckdb
import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from analysis.report import build_report, render_html, render_markdown
from analysis.storage import results as R
from analysis.studies import analyze_store
from precompute.synthetic.store import write_run

APP = str(Path(__file__).resolve().parents[2] / "app.py")
N = 24


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """vid (video, n_f 1 and 2) against txt (text, n_c 1 and 2, and a long_caption run): one latent
    with noise that shrinks with n_c, the long caption noisier than either."""
    path = tmp_path_factory.mktemp("extra") / "s.duckdb"
    rng = np.random.default_rng(0)
    z = rng.normal(size=(N, 4))
    W = [rng.normal(size=(4, 8)) for _ in range(3)]

    def stack(noise):
        return np.stack([z @ w + noise * rng.normal(size=(N, 8)) for w in W])

    write_run(path, "v1", stack(0.5), model="vid", modality="video", n_frames=1)
    write_run(path, "v2", stack(0.3), model="vid", modality="video", n_frames=2)
    write_run(path, "t1", stack(1.0), model="txt", modality="text", n_captions=1)
    write_run(path, "t2", stack(0.4), model="txt", modality="text", n_captions=2)
    write_run(path, "tl", stack(2.0), model="txt", modality="text", n_captions=1, variant="long_caption")
    analyze_store(path, k=3, n_boot=20, metrics=("mutual_knn",), maps=0, n_null=0, log=lambda m: None)
    return path


def _baseline(path, n_f):
    con = duckdb.connect(str(path), read_only=True)
    try:
        (p,) = [r["payload"] for r in R.read_studies(con, study="caption_baseline") if r["payload"]["n_frames"] == n_f]
        return p
    finally:
        con.close()


def page(store, monkeypatch, **params):
    monkeypatch.setenv("LAYERSCOPE_STORE", str(store))
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["dataset"] = "synthetic"
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    at.switch_page("pages/paper_figures.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_long_caption_never_joins_the_caption_sweep(store):
    con = duckdb.connect(str(store), read_only=True)
    got = con.execute("SELECT DISTINCT run_b FROM result_grids WHERE pair_kind = 'vision_text'").fetchall()
    con.close()
    assert sorted(r[0] for r in got) == ["t1", "t2"]


def test_fig8_section_draws_the_baseline_at_the_linked_frame_budget(store, monkeypatch):
    at = page(store, monkeypatch, figure="fig8", nf="1")
    p = _baseline(store, 1)
    text = " ".join(m.value for m in at.markdown)
    assert f"Long original caption at n\\_f = 1\\: mutual\\_knn {p['value']:.3f}" in text
    spec = at.get("vega_lite_chart")
    assert len(spec) == 1
    assert at.query_params["nf"] == ["1"] or at.query_params["nf"] == "1"


def test_fig8_without_long_captions_says_how_to_get_them(tmp_path, monkeypatch):
    path = tmp_path / "s.duckdb"
    rng = np.random.default_rng(1)
    write_run(path, "v", rng.normal(size=(2, 12, 4)), model="vid", modality="video", n_frames=1)
    write_run(path, "t", rng.normal(size=(2, 12, 4)), model="txt", modality="text", n_captions=1)
    analyze_store(path, k=3, n_boot=0, metrics=("mutual_knn",), maps=0, n_null=0, log=lambda m: None)
    at = page(path, monkeypatch, figure="fig8")
    assert "Give every manifest item a `long_caption`" in " ".join(i.value for i in at.info)


def test_the_report_has_fig8_for_every_frame_budget(store):
    con = duckdb.connect(str(store), read_only=True)
    try:
        rep = build_report(con, store=str(store))
    finally:
        con.close()
    (d,) = rep["datasets"]
    fig8 = d["sections"]["paper_figures"]["fig8"]
    assert sorted(f["n_frames"] for f in fig8) == [1, 2]
    for f in fig8:
        assert f"{_baseline(store, f['n_frames'])['value']:.3f}" in f["sentence"]
    assert "Fig. 8, vid × txt" in render_html(rep) and "Fig. 8, vid × txt" in render_markdown(rep)


@pytest.fixture(scope="module")
def prompt_store(tmp_path_factory):
    from tests.stores import write_prompt_store

    path = tmp_path_factory.mktemp("prompts") / "s.duckdb"
    P = write_prompt_store(path, dataset="synthetic")
    return path, P


def _gap(V, T):
    u = lambda X: X / np.linalg.norm(X, axis=1, keepdims=True)  # noqa: E731
    return float(np.linalg.norm(u(V.astype(float)).mean(0) - u(T.astype(float)).mean(0)))


def test_prompts_section_puts_the_two_models_side_by_side(prompt_store, monkeypatch):
    path, P = prompt_store
    at = page(path, monkeypatch, figure="prompts")
    assert at.selectbox(key="pick_a").value == "eol" and at.selectbox(key="pick_b").value == "plain"
    ga, gb = _gap(*[X[2] for X in P["eol"]]), _gap(*[X[2] for X in P["plain"]])
    text = " ".join(m.value for m in at.markdown)
    assert f"eol {ga:.3f}, plain {gb:.3f}" in text and "do not overlap" in text
    assert len(at.dataframe) == 1 and len(at.get("vega_lite_chart")) == 1
    # the link picks the models: swapped, B − A changes sign
    at = page(path, monkeypatch, figure="prompts", a="plain", b="eol")
    assert f"(B − A = {ga - gb:+.3f}" in " ".join(m.value for m in at.markdown)


def test_prompts_section_without_two_mllms_says_what_it_needs(store, monkeypatch):
    at = page(store, monkeypatch, figure="prompts")
    assert "two models whose video and text runs share one space" in " ".join(i.value for i in at.info)


def test_the_report_compares_the_two_prompts(prompt_store):
    path, P = prompt_store
    con = duckdb.connect(str(path), read_only=True)
    try:
        rep = build_report(con, store=str(path))
    finally:
        con.close()
    (d,) = rep["datasets"]
    (cmp,) = d["sections"]["paper_figures"]["prompts"]
    ga = _gap(*[X[2] for X in P["eol"]])
    assert (cmp["a"], cmp["b"]) == ("eol", "plain") and f"eol {ga:.3f}" in cmp["sentence"]
    assert "TARA prompt comparison, eol (A) against plain (B)" in render_markdown(rep)
    assert "TARA prompt comparison" in render_html(rep)


def test_the_report_draws_the_gap_by_pca_and_tsne(tmp_path):
    path = tmp_path / "s.duckdb"
    rng = np.random.default_rng(2)
    z = rng.normal(size=(20, 6))
    write_run(path, "m-v", np.stack([z + 2.0, z + 2.0]), model="m", modality="video", n_frames=1)
    write_run(path, "m-t", np.stack([z - 2.0, z - 2.0]), model="m", modality="text", n_captions=1)
    analyze_store(path, k=3, n_boot=0, metrics=("mutual_knn",), n_null=0, log=lambda m: None)
    con = duckdb.connect(str(path), read_only=True)
    try:
        rep = build_report(con, store=str(path))
    finally:
        con.close()
    (d,) = rep["datasets"]
    maps = d["sections"]["paper_figures"]["gap_maps"]
    assert sorted(m["method"] for m in maps) == ["pca", "tsne"] and all(m["n_points"] == 40 for m in maps)


def test_a_collapsed_long_caption_gives_no_baseline_and_says_why(tmp_path):
    """Every item with the same long caption: the run's layers are collapsed, no best cell, the reason shown."""
    from analysis.views import caption_baseline as CB

    path = tmp_path / "s.duckdb"
    rng = np.random.default_rng(3)
    write_run(path, "v", rng.normal(size=(2, 16, 4)), model="vid", modality="video", n_frames=1)
    write_run(path, "t", rng.normal(size=(2, 16, 4)), model="txt", modality="text", n_captions=1)
    write_run(path, "tl", np.ones((2, 16, 4)), model="txt", modality="text", n_captions=1, variant="long_caption")
    analyze_store(path, k=3, n_boot=10, metrics=("mutual_knn",), maps=0, n_null=0, log=lambda m: None)
    con = duckdb.connect(str(path), read_only=True)
    try:
        fv = CB.fig8_view(con, "synthetic", "mutual_knn", "vid", "txt")
    finally:
        con.close()
    b = fv["baselines"].iloc[0]
    assert b["value"] is None or np.isnan(b["value"])
    assert b["layers"].startswith("no best cell") and "non-degenerate" in b["layers"]
    assert fv["reached"][1]["error"].startswith("no baseline value")
    assert CB.fig8_text(fv, 1).startswith("No long-caption baseline at n_f = 1: ")
    CB.fig8_chart(fv, 1).to_dict()  # the sweep alone
