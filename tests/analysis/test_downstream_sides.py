"""Downstream correlation and layer predictors on class-token models and a dual encoder (issue #29
items 1 and 2): a CLS-pooled model's layer 0 is one constant vector, so its grid row is NaN; the
correlation must read the best cell as the grid study defines it (finite), and a dual encoder named
as a reference is its text side (``tinyclip [text]``), never its image tower.

Tiny random models built in-process (ViT and DINOv2 with class-token pooling, a CLIP dual encoder,
BERT), one image frame and one caption per item; expected values by brute force (mutual k-NN from
cosine similarities, scipy's Pearson)."""

import numpy as np
import pytest
from scipy import stats

from analysis.storage import results as R
from analysis.sides import pair_kind, resolve_reference, side_label, split_side
from analysis.storage.store import connect, load_embeddings
from analysis.studies import analyze_store

from tests.helpers import quiet
from tests.stores import SIDES_K as K
from tests.stores import SIDES_VISION as VISION


def brute_mutual_knn(X, Y, k):
    """``1/(kN) Σ_i |NN_k^X(i) ∩ NN_k^Y(i)|`` with cosine neighbours, the item itself excluded."""
    def knn(Z):
        Z = Z / np.linalg.norm(Z, axis=1, keepdims=True)
        S = Z @ Z.T
        np.fill_diagonal(S, -np.inf)
        return [set(np.argsort(-row, kind="stable")[:k]) for row in S]
    a, b = knn(np.asarray(X, float)), knn(np.asarray(Y, float))
    return sum(len(x & y) for x, y in zip(a, b)) / (k * len(a))


def constant_layers(stack) -> set[int]:
    """Layers where every item has the same vector (a class token before any attention)."""
    return {i for i, layer in enumerate(np.asarray(stack, float)) if np.ptp(layer, axis=0).max() == 0}


@pytest.fixture
def store(sides_store):
    return sides_store


def study(store, name, subject="all"):
    con = connect(store, read_only=True)
    try:
        return R.read_studies(con, study=name, dataset="d", subject=subject)[0]["payload"]
    finally:
        con.close()


def test_sides_are_named_and_a_bare_reference_is_the_text_side():
    chosen = {"clip": {"model": "clip", "modality": "image"}, "clip [text]": {"model": "clip", "modality": "text"},
              "bert": {"model": "bert", "modality": "text"}, "vit": {"model": "vit", "modality": "image"}}
    assert resolve_reference("clip", chosen) == "clip [text]"
    assert resolve_reference("clip [text]", chosen) == "clip [text]"
    assert resolve_reference("clip [image]", chosen) == "clip"
    assert resolve_reference("vit", chosen) == "vit"  # a one-sided vision model named alone: asked for
    with pytest.raises(ValueError, match=r"'vit \[text\]'.*no text side.*vit"):
        resolve_reference("vit [text]", chosen)
    with pytest.raises(ValueError, match="no done run of model 'nope'"):
        resolve_reference("nope", chosen)
    assert [side_label(r, chosen) for r in chosen.values()] == ["clip [image]", "clip [text]", "bert", "vit"]
    assert split_side("a [b] [text]") == ("a [b]", "text")
    assert pair_kind(chosen["clip [text]"], chosen["vit"]) == "vision_text"
    assert pair_kind(chosen["clip"], chosen["vit"]) == "vision_vision"


def test_class_token_models_give_finite_correlations_with_the_text_sides(store):
    """Issue #29 item 1: every "alignment with <text model>" was NaN on class-token models."""
    emb = {m: load_embeddings(store, model=m, dataset="d", n_frames=1) for m in VISION}
    text = {"tinyclip [text]": load_embeddings(store, model="tinyclip", dataset="d", n_captions=1),
            "bert": load_embeddings(store, model="bert", dataset="d", n_captions=1)}
    for m in VISION:  # the premise: layer 0 of every class-token model is one constant vector
        assert 0 in constant_layers(emb[m]), m
    rows = study(store, "downstream")["rows"]
    scores = {r["score"]: r for r in rows if "score" in r}
    # references are the text sides; the dual encoder's image tower is never one by default
    assert {s for s in scores if s.startswith("alignment with")} == {"alignment with tinyclip [text]",
                                                                     "alignment with bert"}
    con = connect(store, read_only=True)
    grids = R.read_grids(con, dataset="d", metric="mutual_knn")
    con.close()
    results = {"vit": 0.31, "dino": 0.52, "tinyclip": 0.47}
    for ref, T in text.items():
        row = scores[f"alignment with {ref}"]
        assert "error" not in row, row.get("error")
        assert row["pair_kind"] == "vision_text" and row["models"] == sorted(VISION) and row["excluded"] == {}
        for m, x in zip(row["models"], row["x"]):
            g = next(g for g in grids if g["model_a"] == m and g["model_b"] == ref.removesuffix(" [text]")
                     and g["pair_kind"] == "vision_text")
            assert np.isnan(g["grid"]).any()  # a plain max over this grid is NaN: the bug
            # brute force over the cells the grid study can score (never a constant layer)
            bad_a, bad_b = constant_layers(emb[m]), constant_layers(T)
            finite = np.argwhere(np.isfinite(g["grid"]))
            assert not any(a in bad_a or b in bad_b for a, b in finite)
            expect = max(brute_mutual_knn(emb[m][a], T[b], K) for a, b in finite)
            assert x == pytest.approx(expect, abs=1e-12), (m, ref)
        assert row["y"] == [results[m] for m in row["models"]]
        assert row["pearson_r"] == pytest.approx(stats.pearsonr(row["x"], row["y"])[0])
        assert row["spearman_rho"] == pytest.approx(stats.spearmanr(row["x"], row["y"])[0])


def test_depth_curves_leave_out_only_the_constant_layers(store):
    rows = study(store, "downstream")["rows"]
    curve = next(r for r in rows if r.get("curve") == "alignment with tinyclip [text]")
    assert "error" not in curve
    # depth 0 is layer 0 of every model: all three constant, all three named
    assert curve["n_models"][0] == 0 and curve["r"][0] is None  # NaN is stored as null
    assert sorted(e["model"] for e in curve["excluded"][0]) == sorted(VISION)
    assert {e["layer"] for e in curve["excluded"][0]} == {0}
    # every later depth keeps every model: a finite r wherever the scores vary
    assert curve["n_models"][-1] == 3 and curve["r"][-1] is not None and curve["excluded"][-1] == []


def test_predictors_and_layer_choice_name_the_text_side(store):
    """Issue #29 item 2: "alignment with tinyclip" was the image tower (vision × vision), and vision
    models' curves against the text tower were dropped from layer choice."""
    pred = study(store, "predictors")
    (task,) = pred["tasks"]
    names = {s["signal"] for s in task["signals"]}
    assert "alignment with tinyclip [text] (mutual_knn)" in names and "alignment with bert (mutual_knn)" in names
    # every partner named by its side (the same-space metrics' partner too: "... with tinyclip [text] (joint)")
    assert not any(" with tinyclip (" in n or "[image]" in n for n in names)
    assert "map_t2v with tinyclip [text] (joint)" in names
    sig = next(s for s in task["signals"] if s["signal"] == "alignment with tinyclip [text] (mutual_knn)")
    assert sig["n_models"] == 3 and sig["excluded"]["degenerate"] >= 3  # layer 0 of each model, counted
    for m in ("vit", "dino"):
        choice = study(store, "layer_choice", subject=m)
        assert "alignment with tinyclip [text]" in choice["curves"] and "alignment with bert" in choice["curves"]
    clip_text = study(store, "layer_choice", subject="tinyclip [text]")
    assert {"alignment with vit", "alignment with dino", "alignment with tinyclip [image]"} <= set(clip_text["curves"])


def test_a_reference_named_with_its_image_side_is_a_vision_pair(store, tmp_path):
    import shutil

    copy = tmp_path / "copy.duckdb"
    shutil.copy(store, copy)
    analyze_store(copy, k=K, n_boot=0, maps=0, references=["tinyclip [image]"], log=quiet)
    con = connect(copy, read_only=True)
    (payload,) = [r["payload"] for r in R.read_studies(con, study="downstream", dataset="d")
                  if r["params"]["references"] == ["tinyclip [image]"]]
    con.close()
    rows = payload["rows"]
    (row,) = [r for r in rows if r.get("score", "").startswith("alignment with")]
    assert row["score"] == "alignment with tinyclip [image]" and row["pair_kind"] == "vision_vision"
    # tinyclip is the reference itself: the correlation has two models, and says so
    assert row["models"] == ["dino", "vit"] and "at least 3 models" in row["error"]
