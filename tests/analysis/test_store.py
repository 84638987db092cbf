"""Reading runs back from the store: exact arrays, item order, shards, and damaged runs refused."""

import duckdb
import numpy as np
import pytest

from analysis.storage.store import StoreError, connect, load_embeddings, load_layer, load_run
from precompute.adapters.model_info import ModelInfo
from precompute.batch.writer import StoreWriter


def _write(path, X, *, first=0, batch=300, run="r1"):
    L, N, d = X.shape
    w = StoreWriter(path)
    if not w.con.execute("SELECT 1 FROM datasets").fetchall():
        w.con.execute("INSERT INTO datasets VALUES ('d', 'x', 'x', ?, now())", [first + N])
        w.put_model("m", ModelInfo("x", "x", "image", "cls", L, d, 0, None, "r", True, {}))
    w.start_run(run, model="m", dataset="d", modality="image", n_frames=len(run), n_captions=None,
                variant="original", image_mode="frames", pooling="cls", dtype="float32", device="cpu",
                n_items=N, n_layers=L, dim=d, config={})
    for b0 in range(0, N, batch):  # a last batch shorter than the others
        w.write_batch(run, first + b0, X[:, b0:b0 + batch], n_done=min(N, b0 + batch), n_items=N)
    w.close()


@pytest.fixture
def X():
    # 5 layers x 700 items: 3500 rows, more than one Arrow batch, batches not aligned to layers
    return np.random.default_rng(3).normal(size=(5, 700, 24)).astype(np.float32)


def test_a_run_loads_back_bit_for_bit_in_manifest_order(tmp_path, X):
    _write(tmp_path / "s.duckdb", X)
    _write(tmp_path / "s.duckdb", X[:, :10] * 2, run="r22")  # another run of the same width in the same table
    np.testing.assert_array_equal(load_embeddings(tmp_path / "s.duckdb", model="m", dataset="d", n_frames=2), X)
    con = connect(tmp_path / "s.duckdb")
    np.testing.assert_array_equal(load_run(con, "r22"), X[:, :10] * 2)
    layer, idx = load_layer(con, "r1", 3, with_idx=True)
    np.testing.assert_array_equal(layer, X[3])
    np.testing.assert_array_equal(idx, np.arange(700))
    with pytest.raises(StoreError, match="layers 0..4, not 5"):
        load_layer(con, "r1", 5)
    con.close()


def test_a_shard_run_starts_at_its_first_item(tmp_path, X):
    _write(tmp_path / "s.duckdb", X[:, :50], first=650, batch=16)
    con = connect(tmp_path / "s.duckdb")
    np.testing.assert_array_equal(load_run(con, "r1"), X[:, :50])
    np.testing.assert_array_equal(load_layer(con, "r1", 0, with_idx=True)[1], np.arange(650, 700))
    con.close()


@pytest.mark.parametrize("damage", [
    "DELETE FROM embeddings_24 WHERE layer = 2 AND idx = 333",
    "INSERT INTO embeddings_24 SELECT * FROM embeddings_24 WHERE layer = 4 AND idx = 699",
    "UPDATE embeddings_24 SET idx = 900 WHERE layer = 0 AND idx = 5",
    "UPDATE embeddings_24 SET layer = 7 WHERE layer = 1 AND idx = 0",
])
def test_a_damaged_run_is_refused_not_returned(tmp_path, X, damage):
    _write(tmp_path / "s.duckdb", X)
    con = duckdb.connect(str(tmp_path / "s.duckdb"))
    con.execute(damage)
    con.close()
    con = connect(tmp_path / "s.duckdb")
    with pytest.raises(StoreError, match="run r1 is incomplete or inconsistent"):
        load_run(con, "r1")
    assert con.execute("SELECT count(*) FROM runs").fetchall() == [(1,)]  # the connection is still usable
    con.close()


def test_unknown_run_and_missing_table(tmp_path, X):
    _write(tmp_path / "s.duckdb", X)
    con = duckdb.connect(str(tmp_path / "s.duckdb"))
    con.execute("DROP TABLE embeddings_24")
    con.close()
    con = connect(tmp_path / "s.duckdb")
    with pytest.raises(StoreError, match="run nope is not in the store"):
        load_run(con, "nope")
    with pytest.raises(StoreError, match="no embeddings_24 table"):
        load_run(con, "r1")
    con.close()
