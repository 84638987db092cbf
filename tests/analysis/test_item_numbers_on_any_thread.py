"""The numbers the dashboard computes itself (the Embedding map's per-item table and its alignment on a
selection, the Neighbours page's list) are the same bit for bit on a thread other than the main one,
with the BLAS pool at two threads, as on the main thread with the pool held at one (as ``analyze``
holds it).

Streamlit runs each page on a script thread of its own, where threadpoolctl passes on no thread limit
while another thread holds one. Most of these numbers do not depend on the pool (exact neighbour
lists, products that round alike on any pool); an item's rank in retrieval does, at exact ties: a
caption's duplicate ties with it only as far as the product rounds the two alike, and OpenBLAS
rounds a 300 x 13 x 300 product differently on one and two threads (here items 296-299 ranked one
place lower on two). So the table ranks on one BLAS thread, and that hold must take on the script
thread. The layer searches run in row blocks, as for large layers, where the search asks for one
BLAS thread itself. Expected values: the same calls on the main thread, on one BLAS thread."""

import threading

import duckdb
import numpy as np
from threadpoolctl import threadpool_limits

from analysis.methods import item_scores
from analysis.metrics import neighbors, neighbors_blocks
from analysis.views import item_table, neighbours
from precompute.synthetic.store import write_run

N, D = 300, 13
SELECTION = tuple(i for i in range(N) if i % 10)  # large enough for BLAS to use its threads
QUERIES = (7, 120, 187)


def two_sided_store(path):
    rng = np.random.default_rng(7)
    V = rng.normal(size=(3, N, D)).astype(np.float32)
    T = (V + 0.7 * rng.normal(size=V.shape)).astype(np.float32)
    for a, b in ((171, 298), (296, 227), (158, 297), (251, 299)):
        T[:, b] = T[:, a]  # two items with the same caption
    write_run(path, "m-v", V, model="m", modality="video", n_frames=4, config={"side": "video"})
    write_run(path, "m-t", T, model="m", modality="text", n_captions=1, config={"side": "text"})
    return V


def dashboard_numbers(path, V):
    con = duckdb.connect(str(path), read_only=True)
    try:
        table = item_table.item_table(con, "synthetic", "m-v", 2, "m-t", 1, k=10).table
        subset = item_table.subset_alignment(con, "m-v", 2, "m-t", 1, SELECTION, k=10)
        near = [neighbours.neighbours(con, "m-v", 2, i, k=5) for i in QUERIES]
    finally:
        con.close()
    probe = item_scores.knn_probe_correct(V[2], np.arange(N) % 3, k=10)
    by_item = table.sort_values("idx")
    return {"pair_rank": by_item["pair_rank"].to_numpy(), "agreement": by_item["agreement"].to_numpy(),
            "order": table["idx"].to_numpy(), "subset": np.array([subset.value, subset.chance]),
            "near_idx": np.concatenate([q["idx"].to_numpy() for q in near]),
            "near_cosine": np.concatenate([q["cosine"].to_numpy() for q in near]), "probe": probe}


def test_the_dashboards_own_numbers_do_not_depend_on_the_thread_or_the_blas_pool(tmp_path, monkeypatch):
    if neighbors_blocks.available():  # the blocked search, as for large layers (it needs numba)
        monkeypatch.setattr(neighbors, "DEVICE", "symmetric")
    monkeypatch.setattr(neighbors_blocks, "MIN_BLOCK_ROWS", 64)
    monkeypatch.setattr(neighbors_blocks, "BLOCK_ENTRIES", 64 * N)  # several blocks: the search limits BLAS
    path = tmp_path / "s.duckdb"
    V = two_sided_store(path)
    with threadpool_limits(1, user_api="blas"):
        want = dashboard_numbers(path, V)

    got, failed = {}, []

    def script_thread():
        try:
            got.update(dashboard_numbers(path, V))
        except Exception as exc:  # reported by the assert below
            failed.append(exc)

    # the main thread holds the pool at two threads while the script thread computes, as another
    # page's hold would: threadpoolctl then passes on no limit the script thread sets through it
    with threadpool_limits(2, user_api="blas"):
        worker = threading.Thread(target=script_thread, name="ScriptRunner.scriptThread")
        worker.start()
        worker.join(timeout=120)
    assert not failed, failed
    assert set(got) == set(want)
    for key, value in want.items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)
