"""The same_space study and the nuanced-retrieval probes on a store with planted answers: an MLLM
(both sides at every layer) and a dual encoder (a zero-padded joint layer on each tower)."""

import numpy as np
import pytest

from analysis.storage import results as R
from analysis.metrics import (
    alignment,
    frechet,
    mean_ap,
    median_rank,
    mmd,
    modality_gap,
    recall_at_k,
)
from analysis.storage.store import connect
from analysis.studies import analyze_store
from analysis.methods.temporal import chiral_gallery_map
from tests.stores import NUANCE_ITEMS as N
from tests.stores import NUANCE_NEGATED as NEGATED
from tests.stores import write_nuance_store

@pytest.fixture(scope="module")
def planted_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("ss") / "s.duckdb"
    P = write_nuance_store(path)
    con = connect(path, read_only=True)
    try:
        rows = {r["subject"]: r["payload"] for r in R.read_studies(con, study="same_space", dataset="nuance")}
        (temporal,) = R.read_studies(con, study="temporal", dataset="nuance")
    finally:
        con.close()
    return P, rows, temporal["payload"]


def test_mllm_sides_are_compared_at_every_layer_and_joint_layers_cut_to_their_width(planted_store):
    P, rows, _ = planted_store
    assert set(rows) == {"mllm|mllm", "clip|clip"}
    m, c = rows["mllm|mllm"], rows["clip|clip"]
    assert (m["space"], m["layers_a"], m["layers_b"], m["run_a"], m["run_b"]) == ("layers", [0, 1, 2], [0, 1, 2], "mv", "mt")
    assert (c["space"], c["layers_a"], c["layers_b"], c["n_frames"], c["n_captions"]) == ("joint", [3], [2], 4, 1)
    X, Y = P["clip_v"][3, :, :6].astype(float), P["clip_t"][2, :, :6].astype(float)
    expect = {"recall@1_v2t": recall_at_k(X, Y, k=1), "recall@5_t2v": recall_at_k(Y, X, k=5),
              "map_v2t": mean_ap(X, Y), "map_t2v": mean_ap(Y, X), "median_rank_v2t": median_rank(X, Y),
              "modality_gap": modality_gap(X, Y), "alignment": alignment(X, Y), "mmd": mmd(X, Y),
              "frechet": frechet(X, Y)}
    for name, value in expect.items():
        assert c["metrics"][name]["values"][0] == pytest.approx(value, rel=1e-6), name
    assert c["metrics"]["median_rank_v2t"]["higher_is_better"] is False
    assert c["metrics"]["map_v2t"]["higher_is_better"] is True


def test_collapsed_layer_is_null_with_a_reason_and_the_aligned_layer_retrieves(planted_store):
    _, rows, _ = planted_store
    m = rows["mllm|mllm"]["metrics"]
    flags = rows["mllm|mllm"]["flags"]
    assert m["recall@1_v2t"]["values"][0] is None and "collapsed" in flags["reasons"]["recall@1_v2t"]["0"]
    assert m["modality_gap"]["values"][0] is not None  # defined on a collapsed side: kept, with a note
    assert m["recall@1_v2t"]["values"][2] == 1.0 and m["map_t2v"]["values"][2] == 1.0
    assert m["recall@1_v2t"]["values"][1] < 0.3  # unrelated sides
    ci = m["modality_gap"]["ci"]
    assert ci[0] is None or len(ci[0]) == 2
    lo, hi = ci[2]
    assert lo <= m["modality_gap"]["values"][2] <= hi
    assert m["mmd"]["ci"] is None and m["recall@1_v2t"]["ci"][2] == [1.0, 1.0]


def test_nuanced_probes_find_the_planted_answers(planted_store):
    P, _, t = planted_store
    (chiral,) = [e for e in t["chiral"] if e["video"] == "mllm"]
    assert chiral["model"] == "mllm" and chiral["n_items"] == N - len(NEGATED)
    assert chiral["per_layer"][2] == 1.0 and chiral["per_layer"][0] is None and chiral["reasons"]["0"]
    (rev,) = [e for e in t["time_reversal"] if e["video"] == "mllm"]
    assert rev["per_layer"][2] == 1.0
    assert rev["per_layer"][1] is None and "cannot choose" in rev["reasons"]["1"] and rev["ties"][1] == N
    (neg,) = t["negation"]
    assert neg["n_queries"] == len(NEGATED) and neg["recall"]["negated@1"][2] == 1.0
    assert neg["recall"]["standard@1"][2] == 1.0
    galleries = {e["video"]: e for e in t["chiral_gallery"]}
    V, T = P["V"][2].astype(float), P["T"][2].astype(float)
    group = [f"g{i // 4}" for i in range(N)]
    action = ["up" if i % 4 < 2 else "down" for i in range(N)]
    for s in ("chiral", "static", "all"):
        assert galleries["mllm"]["map"][s][2] == pytest.approx(chiral_gallery_map(T, V, group=group, action=action,
                                                                                  setting=s)[0], rel=1e-9)
    assert galleries["mllm"]["map"]["chiral"][0] is None  # the collapsed video layer
    assert galleries["clip"]["layers_a"] == [3]
    reorder = [e for e in t["reorder"] if e["text"] == "mllm"]
    assert reorder and all(e["n_items"] == N - len(NEGATED) for e in reorder)  # negated captions are not reorderings


def test_a_dual_encoder_without_joint_layers_is_noted_not_compared(tmp_path):
    from precompute.synthetic.store import write_run

    rng = np.random.default_rng(0)
    path = tmp_path / "d.duckdb"
    write_run(path, "v", rng.normal(size=(2, 12, 4)), model="clip", modality="video", n_frames=1)
    write_run(path, "t", rng.normal(size=(2, 12, 4)), model="clip", modality="text", n_captions=1)
    notes = []
    analyze_store(path, k=3, metrics=("mutual_knn",), n_boot=0, log=notes.append)
    con = connect(path, read_only=True)
    assert R.read_studies(con, study="same_space") == []
    con.close()
    assert any("no shared space" in n and "--named-layers" in n for n in notes)
