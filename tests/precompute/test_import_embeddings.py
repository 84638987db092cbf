"""``layerscope import-embeddings``: the user's own per-layer vectors become runs (issue #46).

Fast tests: every accepted layout stores the same vectors in manifest order; every bad input is one
line naming the file and array, and nothing is stored. The slow test: real all-MiniLM-L6-v2 vectors
from ``sentence-transformers`` (an independent implementation: its ``encode()`` and its model's
hidden states, mean-pooled here) imported as ``.npy`` files match LayerScope's own precompute of the
same model, layer by layer and in the analysed grids against a third model."""

import json

import duckdb
import numpy as np
import pytest

from analysis.storage.store import list_runs, load_embeddings
from precompute.cli import main

N, L, D = 10, 3, 6


def _manifest(path, n=N):
    path.write_text("".join(json.dumps({"id": f"s{i}", "captions": [f"sentence number {i}"]}) + "\n"
                            for i in range(n)))
    return path


@pytest.fixture
def layers():
    return np.random.default_rng(0).normal(size=(L, N, D)).astype(np.float32)


def _import(tmp_path, files, *extra, name="mine"):
    return main(["import-embeddings", "--store", str(tmp_path / "s.duckdb"), "--manifest",
                 str(_manifest(tmp_path / "m.jsonl")), "--dataset", "d", "--name", name, "--modality", "text",
                 *extra, *map(str, files)])


def _ids_file(path, order):
    path.write_text("".join(f"s{i}\n" for i in order))
    return path


def _layouts(tmp_path, layers, order):
    """The same vectors, rows in ``order``, in every accepted file layout: name -> (files, extra args)."""
    from safetensors.numpy import save_file

    rows = np.ascontiguousarray(layers[:, order])  # safetensors writes a non-contiguous array's raw buffer
    ids = _ids_file(tmp_path / "ids.txt", order)
    per_layer = []
    for l in range(L):
        np.save(tmp_path / f"layer_{l}.npy", rows[l])
        per_layer.append(tmp_path / f"layer_{l}.npy")
    np.save(tmp_path / "stacked.npy", rows)
    np.savez(tmp_path / "layers.npz", **{f"layer_{l}": rows[l] for l in range(L)}, ids=np.array([f"s{i}" for i in order]))
    save_file({f"layer_{l}": rows[l] for l in range(L)}, str(tmp_path / "layers.safetensors"))
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": [f"s{i}" for i in order], **{f"layer_{l}": list(rows[l]) for l in range(L)}}),
                   tmp_path / "layers.parquet")
    return {"npy per layer": (per_layer[::-1], ["--ids", str(ids)]),  # given in any order: numbered by name
            "one (L, N, d) npy": ([tmp_path / "stacked.npy"], ["--ids", str(ids)]),
            "npz with ids": ([tmp_path / "layers.npz"], []),
            "safetensors": ([tmp_path / "layers.safetensors"], ["--ids", str(ids)]),
            "parquet": ([tmp_path / "layers.parquet"], [])}


@pytest.mark.parametrize("layout", ["npy per layer", "one (L, N, d) npy", "npz with ids", "safetensors", "parquet"])
def test_every_layout_stores_the_vectors_in_manifest_order(tmp_path, layers, layout):
    order = np.random.default_rng(1).permutation(N)
    files, extra = _layouts(tmp_path, layers, order)[layout]
    assert _import(tmp_path, files, *extra) == 0
    (run,) = list_runs(tmp_path / "s.duckdb")
    assert (run["model"], run["status"], run["modality"], run["n_captions"]) == ("mine", "done", "text", 1)
    np.testing.assert_array_equal(load_embeddings(tmp_path / "s.duckdb", model="mine", dataset="d"), layers)


def test_manifest_order_and_named_layers(tmp_path, layers):
    np.save(tmp_path / "default.npy", layers[2])
    for l in range(2):
        np.save(tmp_path / f"h{l}.npy", layers[l])
    files = [tmp_path / "default.npy", tmp_path / "h1.npy", tmp_path / "h0.npy"]
    assert _import(tmp_path, files, "--manifest-order") == 0
    con = duckdb.connect(str(tmp_path / "s.duckdb"), read_only=True)
    (config,) = con.execute("SELECT config FROM runs").fetchone()
    con.close()
    config = json.loads(config)
    assert config["layer_names"] == {"2": "default"}  # named layers after the numbered ones
    assert config["content_sha"] and config["source"] == "imported"
    np.testing.assert_array_equal(load_embeddings(tmp_path / "s.duckdb", model="mine", dataset="d"), layers)


def test_the_same_vectors_again_are_found_and_other_vectors_are_refused(tmp_path, layers, capsys):
    np.save(tmp_path / "a.npy", layers)
    assert _import(tmp_path, [tmp_path / "a.npy"], "--manifest-order") == 0
    assert _import(tmp_path, [tmp_path / "a.npy"], "--manifest-order") == 0
    assert "already stored with these vectors" in capsys.readouterr().err
    np.save(tmp_path / "b.npy", layers + 1)
    capsys.readouterr()
    assert _import(tmp_path, [tmp_path / "b.npy"], "--manifest-order") == 2
    assert "other vectors are already imported" in capsys.readouterr().err
    assert len(list_runs(tmp_path / "s.duckdb")) == 1


def _bad_inputs(tmp_path, layers):
    """name -> (files, extra args, what the one-line error must name)."""
    a, b = tmp_path / "a.npy", tmp_path / "b.npy"
    cases = {}
    np.save(a, layers[0])
    np.save(b, layers[1][:, :4])
    cases["shape mismatch across layers"] = ([a, b], ["--manifest-order"], [str(b), "'b'", "(10, 4)", "(10, 6)"])
    nan = layers.copy()
    nan[1, 3, 2] = np.nan
    np.save(tmp_path / "nan.npy", nan)
    cases["NaN"] = ([tmp_path / "nan.npy"], ["--manifest-order"], ["nan.npy", "[1]", "NaN or infinite", "row 3"])
    inf = layers[0].copy()
    inf[0, 0] = np.inf
    np.savez(tmp_path / "inf.npz", layer_0=layers[1], layer_1=inf)
    cases["inf"] = ([tmp_path / "inf.npz"], ["--manifest-order"], ["inf.npz", "'layer_1'", "NaN or infinite"])
    np.save(tmp_path / "half.npy", layers[0].astype(np.float16))
    cases["float16"] = ([tmp_path / "half.npy"], ["--manifest-order"], ["half.npy", "'half'", "float16"])
    np.save(tmp_path / "ints.npy", (layers[0] * 10).astype(np.int64))
    cases["int"] = ([tmp_path / "ints.npy"], ["--manifest-order"], ["ints.npy", "int64"])
    np.save(tmp_path / "short.npy", layers[0][:7])
    cases["wrong N"] = ([tmp_path / "short.npy"], ["--manifest-order"], ["short.npy", "7 rows", "10 items"])
    np.save(tmp_path / "nine.npy", layers[0][:9])
    cases["missing ids"] = ([tmp_path / "nine.npy"], ["--ids", str(_ids_file(tmp_path / "ids9.txt", range(9)))],
                            ["1 manifest item(s) have no row", "'s9'"])
    cases["fewer ids than rows"] = ([a], ["--ids", str(tmp_path / "ids9.txt")], ["9 ids", "10 rows", "a.npy"])
    dup = tmp_path / "dup.txt"
    dup.write_text("".join(f"s{i}\n" for i in [0, 1, 2, 3, 4, 5, 6, 7, 8, 8]))
    cases["duplicate ids"] = ([a], ["--ids", str(dup)], ["given twice", "'s8'"])
    other = tmp_path / "other.txt"
    other.write_text("".join(f"s{i}\n" for i in range(9)) + "x99\n")
    cases["unknown id"] = ([a], ["--ids", str(other)], ["not in the manifest", "'x99'"])
    cases["no ids"] = ([a], [], ["a.npy", "--ids", "--manifest-order"])
    (tmp_path / "damaged.npy").write_bytes(np.lib.format.MAGIC_PREFIX + b"\x01\x00garbage")
    cases["damaged file"] = ([tmp_path / "damaged.npy"], ["--manifest-order"], ["damaged.npy", "cannot read it"])
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}] * N, dtype=object), allow_pickle=True)
    cases["pickled objects"] = ([tmp_path / "objects.npy"], ["--manifest-order"], ["objects.npy", "cannot read it"])
    cases["unknown type"] = ([tmp_path / "ids9.txt"], ["--manifest-order"], ["ids9.txt", "unknown file type"])
    return cases


@pytest.mark.parametrize("case", ["shape mismatch across layers", "NaN", "inf", "float16", "int", "wrong N",
                                  "missing ids", "fewer ids than rows", "duplicate ids", "unknown id", "no ids",
                                  "damaged file", "pickled objects", "unknown type"])
def test_bad_input_is_one_line_naming_file_and_array_and_nothing_is_stored(tmp_path, layers, capsys, case):
    files, extra, named = _bad_inputs(tmp_path, layers)[case]
    capsys.readouterr()
    assert _import(tmp_path, files, *extra) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("layerscope import-embeddings: error: ")
    for word in named:
        assert word in err, (word, err)
    assert not (tmp_path / "s.duckdb").exists()  # checked before the store is opened


def test_a_store_holding_other_data_keeps_it_when_an_import_is_refused(tmp_path, layers, capsys):
    np.save(tmp_path / "a.npy", layers)
    assert _import(tmp_path, [tmp_path / "a.npy"], "--manifest-order") == 0
    before = load_embeddings(tmp_path / "s.duckdb", model="mine", dataset="d")
    np.save(tmp_path / "nan.npy", np.full((N, D), np.nan, dtype=np.float32))
    assert _import(tmp_path, [tmp_path / "nan.npy"], "--manifest-order", name="other") == 2
    assert [r["model"] for r in list_runs(tmp_path / "s.duckdb")] == ["mine"]
    np.testing.assert_array_equal(load_embeddings(tmp_path / "s.duckdb", model="mine", dataset="d"), before)


# ---------------------------------------------------------------- real MiniLM through sentence-transformers

SENTENCES = ["a red circle moves left", "a blue square appears", "the green triangle moves quickly to the right",
             "a yellow shape on a striped background", "two circles move before the square appears",
             "a dotted triangle slowly fades", "the red square moves right after the circle",
             "a blue circle and a green square", "shapes move across a dotted background",
             "a small yellow triangle appears on the left", "the circle stops before the edge",
             "a striped square rotates slowly", "three shapes appear one after another",
             "a green circle moves up", "the blue triangle disappears quickly", "a red and yellow striped circle",
             "a square follows the triangle", "the background turns dotted", "a circle bounces twice",
             "a yellow square moves down slowly", "the triangle and the circle meet", "a blue shape moves left quickly",
             "a green striped triangle", "the red circle appears after the square"]


@pytest.mark.slow
def test_sentence_transformers_vectors_imported_match_layerscopes_own_precompute(tmp_path):
    import torch
    from sentence_transformers import SentenceTransformer

    from precompute.synthetic import tiny_models
    from precompute.demo import minilm_path

    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps({"id": f"t{i}", "captions": [s]}) + "\n" for i, s in enumerate(SENTENCES)))
    store = tmp_path / "s.duckdb"
    tiny_models.build_bert(tmp_path / "bert1", layers=1, seed=5)
    base = ["precompute", "--store", str(store), "--manifest", str(manifest), "--dataset", "sent", "--captions", "1",
            "--quiet"]
    assert main(base + ["--model", str(minilm_path()), "--name", "minilm"]) == 0
    assert main(base + ["--model", str(tmp_path / "bert1"), "--name", "bert1"]) == 0

    # the independent side: sentence-transformers' encode() (its own pooling and normalisation), and its
    # transformer's hidden states mean-pooled over the attention mask; rows in a shuffled order with ids
    st = SentenceTransformer(str(minilm_path()), device="cpu")
    order = np.random.default_rng(3).permutation(len(SENTENCES))
    texts = [SENTENCES[i] for i in order]
    default = st.encode(texts, batch_size=8, convert_to_numpy=True)
    features = st.tokenize(texts)
    with torch.no_grad():
        out = st[0].auto_model(**features, output_hidden_states=True)
    mask = features["attention_mask"].unsqueeze(-1).float()
    for l, h in enumerate(out.hidden_states):
        np.save(tmp_path / f"layer_{l}.npy", ((h * mask).sum(1) / mask.sum(1)).numpy())
    np.save(tmp_path / "default.npy", default)
    (tmp_path / "ids.txt").write_text("".join(f"t{i}\n" for i in order))
    files = [str(tmp_path / f"layer_{l}.npy") for l in range(len(out.hidden_states))] + [str(tmp_path / "default.npy")]
    assert main(["import-embeddings", "--store", str(store), "--manifest", str(manifest), "--dataset", "sent",
                 "--name", "st-minilm", "--modality", "text", "--ids", str(tmp_path / "ids.txt"), *files]) == 0

    ours = load_embeddings(store, model="minilm", dataset="sent", n_captions=1)
    imported = load_embeddings(store, model="st-minilm", dataset="sent", n_captions=1)
    assert ours.shape == imported.shape == (len(out.hidden_states) + 1, len(SENTENCES), 384)
    np.testing.assert_allclose(imported, ours, rtol=0, atol=2e-5)  # every layer; the last is encode()'s

    assert main(["analyze", "--store", str(store), "--k", "5", "--bootstrap", "5", "--null-perms", "5", "--maps", "0",
                 "--jobs", "1", "--quiet"]) == 0
    con = duckdb.connect(str(store), read_only=True)
    rows = con.execute("SELECT model_a, model_b, metric, n_rows, n_cols, grid_values FROM result_grids "
                       "WHERE model_a = 'bert1' AND model_b IN ('minilm', 'st-minilm')").fetchall()
    con.close()
    grids = {(b, metric): np.array(v, dtype=float).reshape(r, c) for _, b, metric, r, c, v in rows}
    metrics = {metric for _, metric in grids}
    assert metrics and all(("minilm", m) in grids and ("st-minilm", m) in grids for m in metrics)
    for m in metrics:
        np.testing.assert_allclose(grids[("st-minilm", m)], grids[("minilm", m)], rtol=0, atol=1e-4, err_msg=m)


# ---------------------------------------------------------------- downstream commands treat them as runs

def _import_into(tmp_path, store, name, X):
    np.save(tmp_path / f"{name}.npy", X)
    return main(["import-embeddings", "--store", str(store), "--manifest", str(_manifest(tmp_path / "m.jsonl")),
                 "--dataset", "d", "--name", name, "--modality", "text", "--manifest-order", str(tmp_path / f"{name}.npy")])


def test_imported_runs_merge_rename_and_remove_like_computed_ones(tmp_path, layers, capsys):
    a, b, merged = tmp_path / "a.duckdb", tmp_path / "b.duckdb", tmp_path / "merged.duckdb"
    assert _import_into(tmp_path, a, "mine", layers) == 0
    assert _import_into(tmp_path, b, "yours", layers[::-1].copy()) == 0
    assert main(["merge", "--store", str(merged), str(a), str(b)]) == 0
    assert sorted(r["model"] for r in list_runs(merged)) == ["mine", "yours"]
    np.testing.assert_array_equal(load_embeddings(merged, model="yours", dataset="d"), layers[::-1])
    assert main(["runs", "--store", str(merged)]) == 0
    assert "mine" in capsys.readouterr().out
    assert main(["runs", "rename", "--store", str(merged), "mine", "theirs"]) == 0
    np.testing.assert_array_equal(load_embeddings(merged, model="theirs", dataset="d"), layers)
    assert main(["runs", "rm", "--store", str(merged), "--model", "yours"]) == 0
    assert [r["model"] for r in list_runs(merged)] == ["theirs"]


@pytest.mark.slow
def test_imported_runs_are_analysed_reported_and_shown(tmp_path, layers, monkeypatch):
    from tests.helpers import app

    store = tmp_path / "s.duckdb"
    rng = np.random.default_rng(5)
    assert _import_into(tmp_path, store, "mine", layers) == 0
    assert _import_into(tmp_path, store, "yours", (layers + 0.1 * rng.normal(size=layers.shape)).astype(np.float32)) == 0
    assert main(["analyze", "--store", str(store), "--k", "3", "--bootstrap", "5", "--null-perms", "5", "--maps", "0",
                 "--jobs", "1", "--quiet"]) == 0
    con = duckdb.connect(str(store), read_only=True)
    pairs = con.execute("SELECT DISTINCT model_a, model_b FROM result_grids").fetchall()
    con.close()
    assert pairs == [("mine", "yours")]
    assert main(["report", "--store", str(store), "--out", str(tmp_path / "r.html")]) == 0
    assert "yours" in (tmp_path / "r.html").read_text()
    at = app(store, monkeypatch, page="heatmap", params={"dataset": "d"})
    assert at.get("vega_lite_chart")
