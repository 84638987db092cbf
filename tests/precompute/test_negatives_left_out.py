"""Items without a negative caption are left out of the negative run, counted and named, and the
reorder probe reads the run by item (issue #34 item 14)."""

import json

import duckdb
import numpy as np
import pytest

from analysis.storage.schema import embedding_table
from analysis.storage.store import list_runs, load_layer, load_run
from precompute.cli import main
from precompute.inputs.manifest import Item, Manifest
from precompute.adapters.dispatch import load_adapter
from precompute.batch.writer import StoreWriter
from tests.precompute.helpers import make_dataset
from tests.stores import model_info

WITHOUT = (1, 3, 4)  # manifest positions of the items that get no negative


@pytest.fixture
def dataset(tmp_path):
    path = make_dataset(tmp_path / "data", n=7, captions=2)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for i in WITHOUT:
        del rows[i]["negatives"]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path, rows


def test_the_negative_run_holds_only_items_with_a_negative_and_names_the_others(tmp_path, dataset, tiny, capsys):
    path, rows = dataset
    store = tmp_path / "s.duckdb"
    assert main(["precompute", "--store", str(store), "--manifest", str(path), "--dataset", "d", "--model",
                 tiny["bert"], "--captions", "1", "--batch-size", "2", "--quiet"]) == 0
    (neg,) = [r for r in list_runs(store) if r["variant"] == "negative"]
    kept = [i for i in range(len(rows)) if i not in WITHOUT]
    assert (neg["status"], neg["n_items"], neg["n_done"]) == ("done", len(kept), len(kept))
    con = duckdb.connect(str(store), read_only=True)
    try:
        config = json.loads(con.execute("SELECT config FROM runs WHERE run_id = ?", [neg["run_id"]]).fetchone()[0])
        X, idx = load_layer(con, neg["run_id"], 0, with_idx=True)
        stack = load_run(con, neg["run_id"])
    finally:
        con.close()
    left = config["notes"]["no_negative"]
    assert sorted(left) == [f"item{i}" for i in WITHOUT] and all("left out" in v["handled"] for v in left.values())
    assert idx.tolist() == kept
    # each kept row is its own negative caption's embedding, as the adapter gives it alone
    a = load_adapter(tiny["bert"], named_layers=True)
    want = a.embed_texts([rows[i]["negatives"][0] for i in kept])
    np.testing.assert_allclose(stack, want, rtol=1e-5, atol=1e-6)
    assert f"no_negative: {len(WITHOUT)} item(s)" in capsys.readouterr().err


def _writer_with_dataset(path, n):
    man = Manifest("/m.jsonl", [Item(idx=i, item_id=f"i{i}", video=f"/v{i}.mkv", captions=["c"],
                                     negatives=["n"] if i % 2 == 0 else [], metadata={}) for i in range(n)])
    w = StoreWriter(path)
    w.put_dataset("d", man)
    w.put_model("txt", model_info("txt"))
    return w


def start(w, run_id, n_items):
    return w.start_run(run_id, model="txt", dataset="d", modality="text", n_frames=None, n_captions=1,
                       variant="negative", image_mode=None, pooling="mean", dtype="float32", device="cpu",
                       n_items=n_items, n_layers=2, dim=6, config={"batch_size": 2})


def test_a_run_of_scattered_items_reads_back_in_item_order_and_resumes_without_losing_rows(tmp_path):
    store = tmp_path / "s.duckdb"
    w = _writer_with_dataset(store, 9)
    keep = [0, 2, 4, 6, 8]
    X = np.random.default_rng(0).normal(size=(2, 5, 6)).astype(np.float32)
    start(w, "r", 5)
    w.write_batch("r", 0, X[:, :2], n_done=2, n_items=5, idx=keep[:2])
    w.write_batch("r", 4, X[:, 2:4], n_done=4, n_items=5, idx=keep[2:4])
    # a crash between the rows and the count: the count says 2, the rows of items 4 and 6 are stray
    w.con.execute("UPDATE runs SET n_done = 2 WHERE run_id = 'r'")
    assert start(w, "r", 5)["n_done"] == 2
    table = embedding_table(6)
    left = sorted({r[0] for r in w.con.execute(f"SELECT idx FROM {table} WHERE run_id = 'r'").fetchall()})
    assert left == [0, 2]  # the first two items kept, the stray ones gone
    w.write_batch("r", 4, X[:, 2:4], n_done=4, n_items=5, idx=keep[2:4])
    w.write_batch("r", 8, X[:, 4:], n_done=5, n_items=5, idx=keep[4:])
    w.close()
    con = duckdb.connect(str(store), read_only=True)
    try:
        np.testing.assert_array_equal(load_run(con, "r"), X)
        Y, idx = load_layer(con, "r", 1, with_idx=True)
    finally:
        con.close()
    np.testing.assert_array_equal(Y, X[1])
    assert idx.tolist() == keep


def test_the_reorder_probe_reads_a_negative_run_of_some_items_by_item(tmp_path):
    """The study places each stored negative at its item; the probe scores exactly the items with a
    negative, as :func:`reorder_at_best_pair` does on those rows by hand."""
    from analysis.methods.temporal import reorder_at_best_pair
    from analysis.storage.results import read_studies
    from analysis.storage.store import connect
    from analysis.studies import analyze_store
    from precompute.batch.writer import run_id_for
    from tests.stores import MODELS

    n, rng = 24, np.random.default_rng(3)
    has = np.array([i % 3 != 1 for i in range(n)])  # 16 items with a negative, 8 without
    base = rng.normal(size=(n, 5))
    V = np.stack([rng.normal(size=(n, 8)), base @ rng.normal(size=(5, 8)), rng.normal(size=(n, 8))]).astype(np.float32)
    P = np.stack([base @ rng.normal(size=(5, 6)), rng.normal(size=(n, 6))]).astype(np.float32)
    Nn = (P[:, has] + 0.5 * rng.normal(size=(2, has.sum(), 6))).astype(np.float32)  # compact: items with one
    store = tmp_path / "s.duckdb"
    man = Manifest("/m.jsonl", [Item(idx=i, item_id=f"i{i}", video=f"/v{i}.mkv", captions=[f"c {i}"],
                                     negatives=[f"n {i}"] if has[i] else [], metadata={}) for i in range(n)])
    w = StoreWriter(store)
    try:
        w.put_dataset("d", man)
        for model, variant, X, rows in (("vis", "original", V, np.arange(n)), ("txt", "original", P, np.arange(n)),
                                        ("txt", "negative", Nn, np.flatnonzero(has))):
            modality, n_layers, dim = MODELS[model]
            w.put_model(model, model_info(model))
            ident = {"model": model, "variant": variant, "n_frames": 2 if model == "vis" else None,
                     "n_captions": None if model == "vis" else 1}
            rid = run_id_for(ident)
            w.start_run(rid, model=model, dataset="d", modality=modality, n_frames=ident["n_frames"],
                        n_captions=ident["n_captions"], variant=variant, image_mode=None, pooling="mean",
                        dtype="float32", device="cpu", n_items=len(rows), n_layers=n_layers, dim=dim, config=ident)
            w.write_batch(rid, int(rows[0]), X, n_done=len(rows), n_items=len(rows), idx=rows)
    finally:
        w.close()
    analyze_store(store, metrics=("mutual_knn",), n_boot=0, k=3, reorder_k=3, log=lambda *a: None)
    con = connect(store, read_only=True)
    try:
        (study,) = read_studies(con, study="temporal")
    finally:
        con.close()
    (entry,) = study["payload"]["reorder"]
    keep = np.flatnonzero(has)
    want = reorder_at_best_pair(V[:, keep], P[:, keep], Nn, k=3)
    assert entry["n_items"] == len(keep)
    assert entry["layers"] == [want["layer_v"], want["layer_t"]]
    assert (entry["positive"], entry["negative"]) == pytest.approx((want["positive"], want["negative"]))
