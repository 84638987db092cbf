"""A text-only store of two sentence encoders through the real CLI (issue #31): a manifest without
``video``, ``precompute`` of the packaged all-MiniLM-L6-v2 (also stored under a second name) and a
one-layer tiny BERT, ``analyze`` scores text×text grids, ``report`` shows them. Expected values come
from a brute-force cosine k-NN written here, and from a model against itself."""

import json

import duckdb
import numpy as np
import pytest

from analysis.storage.store import load_embeddings
from precompute.cli import main
from precompute.inputs.manifest import ManifestError, load_manifest

N, K = 12, 4
#: items 3 and 7 share their captions word for word: duplicated captions, so tied neighbours
#: words the tiny BERT's tokenizer knows (precompute.synthetic.tiny_models.DEFAULT_CORPUS), seeded sentences
WORDS = ["red", "blue", "green", "yellow", "circle", "square", "triangle", "moves", "left", "right", "quickly",
         "slowly", "appears", "before", "after", "shape", "background", "striped", "dotted"]
_rng = np.random.default_rng(31)
CAPTIONS = [[" ".join(_rng.choice(WORDS, 6)) for _ in range(2)] for _ in range(N)]
CAPTIONS[7] = list(CAPTIONS[3])


def brute_mutual_knn(X: np.ndarray, Y: np.ndarray, k: int) -> float:
    """``1/(kN) Σ_i |NN_k^X(i) ∩ NN_k^Y(i)|``: rows L2-normalised, cosine neighbours by a stable
    argsort, self excluded (DESIGN §5)."""
    def knn(Z):
        Z = Z / np.linalg.norm(Z, axis=1, keepdims=True)
        S = Z @ Z.T
        np.fill_diagonal(S, -np.inf)
        return [set(row) for row in np.argsort(-S, axis=1, kind="stable")[:, :k]]

    a, b = knn(np.asarray(X, dtype=np.float64)), knn(np.asarray(Y, dtype=np.float64))
    return sum(len(p & q) for p, q in zip(a, b)) / (k * len(a))


def write_manifest(path, captions, *, video=None) -> None:
    rows = [{"id": f"s{i}", "captions": c, **({"video": video(i)} if video else {})} for i, c in enumerate(captions)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")


@pytest.fixture(scope="module")
def text_only_store(tmp_path_factory):
    from precompute.synthetic import tiny_models
    from precompute.demo import minilm_path

    root = tmp_path_factory.mktemp("text_only")
    write_manifest(root / "m.jsonl", CAPTIONS)
    tiny_models.build_bert(root / "bert1", layers=1, seed=5)  # one transformer layer: hidden states 0 and 1
    store = root / "s.duckdb"
    base = ["precompute", "--store", str(store), "--manifest", str(root / "m.jsonl"), "--dataset", "sent",
            "--captions", "1,2", "--quiet"]
    assert main(base + ["--model", str(minilm_path()), "--name", "minilm"]) == 0
    assert main(base + ["--model", str(minilm_path()), "--name", "minilm-copy"]) == 0  # same weights, second name
    assert main(base + ["--model", str(root / "bert1"), "--name", "bert1"]) == 0
    assert main(["analyze", "--store", str(store), "--k", str(K), "--bootstrap", "10", "--null-perms", "10",
                 "--maps", "0", "--jobs", "1", "--quiet"]) == 0
    assert main(["report", "--store", str(store), "--out", str(root / "report.html")]) == 0
    return store, root


def grids(store, **where):
    con = duckdb.connect(str(store), read_only=True)
    try:
        cond = " AND ".join(f"{k} = ?" for k in where)
        rows = con.execute(f"SELECT pair_kind, model_a, model_b, metric, n_frames, n_captions, n_rows, n_cols, "
                           f"grid_values, flags FROM result_grids WHERE {cond}", list(where.values())).fetchall()
    finally:
        con.close()
    cols = ("pair_kind", "model_a", "model_b", "metric", "n_frames", "n_captions", "n_rows", "n_cols", "grid", "flags")
    out = [dict(zip(cols, r)) for r in rows]
    for g in out:
        g["grid"] = np.array(g["grid"], dtype=float).reshape(g["n_rows"], g["n_cols"])
        g["flags"] = json.loads(g["flags"] or "{}")
    return out


def test_a_manifest_without_video_is_text_only_and_a_partial_one_is_refused(tmp_path):
    write_manifest(tmp_path / "t.jsonl", CAPTIONS[:3])
    m = load_manifest(tmp_path / "t.jsonl")
    assert m.text_only and [it.video for it in m.items] == [None, None, None]
    (tmp_path / "v0.png").write_bytes(b"")  # exists; the mixed manifest is refused before decoding matters
    write_manifest(tmp_path / "mixed.jsonl", CAPTIONS[:3], video=lambda i: "v0.png" if i == 0 else "")
    with pytest.raises(ManifestError) as err:
        load_manifest(tmp_path / "mixed.jsonl", check_videos=False)
    assert [p.split(": ", 1)[0][-1] for p in err.value.problems] == ["2", "3"]  # the lines without one
    assert "field 'video' is missing or empty while 1 other item(s) have one" in str(err.value)


def test_a_vision_model_on_a_text_only_manifest_is_refused_before_the_store_is_written(tmp_path, capsys):
    from precompute.synthetic import tiny_models

    write_manifest(tmp_path / "t.jsonl", CAPTIONS[:4])
    tiny_models.build_vit(tmp_path / "vit", seed=1)
    store = tmp_path / "s.duckdb"
    assert main(["precompute", "--store", str(store), "--manifest", str(tmp_path / "t.jsonl"), "--dataset", "t",
                 "--model", str(tmp_path / "vit"), "--frames", "1", "--quiet"]) != 0
    assert "has no videos (a text-only dataset), so it cannot feed" in capsys.readouterr().err
    assert not store.exists()


def test_text_only_store_gets_text_text_grids_at_each_shared_caption_budget(text_only_store):
    store, _ = text_only_store
    got = grids(store, metric="mutual_knn")
    assert {g["pair_kind"] for g in got} == {"text_text"}
    # two different models at one n_c each: 3 model pairs × n_c ∈ {1, 2}, never a model with itself
    assert sorted((g["model_a"], g["model_b"], g["n_captions"]) for g in got) == sorted(
        (a, b, c) for a, b in (("bert1", "minilm"), ("bert1", "minilm-copy"), ("minilm", "minilm-copy"))
        for c in (1, 2))
    assert all(g["n_frames"] is None for g in got)
    for g in got:  # every stored layer of each run: rows of model A, columns of model B
        shape = tuple(load_embeddings(store, model=m, dataset="sent", n_captions=g["n_captions"]).shape[0]
                      for m in (g["model_a"], g["model_b"]))
        assert g["grid"].shape == shape
    # the one-layer model: its embedding output and its one layer (then any named output, e.g. default)
    assert load_embeddings(store, model="bert1", dataset="sent", n_captions=1).shape[0] <= 3


def test_text_text_mutual_knn_cells_equal_a_brute_force_knn(text_only_store):
    store, _ = text_only_store
    for g in grids(store, metric="mutual_knn"):
        X = load_embeddings(store, model=g["model_a"], dataset="sent", n_captions=g["n_captions"])
        Y = load_embeddings(store, model=g["model_b"], dataset="sent", n_captions=g["n_captions"])
        bad_a = {int(i) for i in g["flags"].get("degenerate_a", {})}
        bad_b = {int(j) for j in g["flags"].get("degenerate_b", {})}
        for i in range(X.shape[0]):
            for j in range(Y.shape[0]):
                if i in bad_a or j in bad_b:  # tie-decided or collapsed: marked, never a number
                    assert np.isnan(g["grid"][i, j])
                else:
                    assert g["grid"][i, j] == pytest.approx(brute_mutual_knn(X[i], Y[j], K), abs=1e-12), (g, i, j)


def test_a_model_against_itself_under_two_names_is_one_on_the_diagonal(text_only_store):
    store, _ = text_only_store
    for g in grids(store, model_a="minilm", model_b="minilm-copy"):
        if g["metric"] not in ("mutual_knn", "cka"):
            continue
        diag = np.diag(g["grid"])
        bad = {int(i) for i in g["flags"].get("degenerate_a", {})}
        for layer, v in enumerate(diag):
            if layer not in bad:
                assert v == pytest.approx(1.0, abs=1e-6), (g["metric"], layer)


def test_layer_choice_judges_a_text_model_against_the_other_text_models(text_only_store):
    store, _ = text_only_store
    con = duckdb.connect(str(store), read_only=True)
    try:
        rows = dict(con.execute("SELECT subject, payload FROM result_studies WHERE study = 'layer_choice'").fetchall())
        mm = json.loads(con.execute("SELECT payload FROM result_studies WHERE study = 'model_map'").fetchone()[0])
    finally:
        con.close()
    curves = json.loads(rows["minilm"])["curves"]
    assert {"alignment with minilm-copy", "alignment with bert1"} <= set(curves)
    # the copy's curve is each layer's row maximum: 1.0 wherever defined (a layer matches itself)
    assert all(v == pytest.approx(1.0) for v in curves["alignment with minilm-copy"] if v is not None)
    i, j = mm["models"].index("minilm"), mm["models"].index("minilm-copy")
    assert mm["similarity"][i][j] == pytest.approx(1.0)


def test_the_report_shows_text_text_heatmaps_instead_of_saying_run_analyze(text_only_store):
    _, root = text_only_store
    data = json.loads((root / "report.json").read_text())
    (sec,) = data["datasets"]
    assert "heatmaps" not in sec["omitted"]
    heat = sec["sections"]["heatmaps"]
    assert {h["pair_kind"] for h in heat} == {"text_text"}
    assert sorted({(h["model_a"], h["model_b"]) for h in heat}) == [
        ("bert1", "minilm"), ("bert1", "minilm-copy"), ("minilm", "minilm-copy")]  # each pair once
    assert all(h["n_captions"] == 2 for h in heat)  # the largest shared setting
    html = (root / "report.html").read_text()
    # the heatmaps' omission line is gone (the Paper figures section may still say it needs vision×text)
    assert "text×text" in html and "no vision×text or text×text grids" not in html
    assert set(sec["omitted"]) <= {"paper_figures", "scaling", "downstream", "probes", "predictors", "temporal",
                                   "model_map"}
    assert "alignment" in json.dumps(sec["sections"]["summary"])
