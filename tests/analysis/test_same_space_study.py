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
from precompute.manifest import Item, Manifest
from precompute.model_info import ModelInfo
from precompute.writer import StoreWriter

N, D = 40, 8
NEGATED = set(range(0, N, 2))  # even items: a negated (true) caption; odd items: a temporal opposite


def _planted():
    rng = np.random.default_rng(7)
    V = rng.normal(size=(3, N, D))
    V[0] = V[0, :1]  # layer 0 of the video side collapsed (one point)
    T = rng.normal(size=(3, N, D))
    T[2] = V[2] + 0.05 * rng.normal(size=(N, D))  # layer 2: captions sit by their videos
    neg = rng.normal(size=(3, N, D))
    neg[2] = np.where(np.isin(np.arange(N), list(NEGATED))[:, None], V[2] + 0.05 * rng.normal(size=(N, D)), -T[2])
    back = V + 3.0 * rng.normal(size=V.shape)
    back[1] = V[1]  # layer 1: reversal changes nothing
    joint_v = rng.normal(size=(N, 6))
    clip_v = np.zeros((4, N, 10))
    clip_v[:3] = rng.normal(size=(3, N, 10))
    clip_v[3, :, :6] = joint_v
    clip_t = np.zeros((3, N, 8))
    clip_t[:2] = rng.normal(size=(2, N, 8))
    clip_t[2, :, :6] = joint_v + 0.3 * rng.normal(size=(N, 6))
    out = {"V": V, "T": T, "neg": neg, "back": back, "clip_v": clip_v, "clip_t": clip_t}
    return {k: v.astype(np.float32) for k, v in out.items()}


def write_planted_store(path):
    """The store described above, analysed (k=3, mutual k-NN grids, 20 resamples); returns the arrays."""
    P = _planted()
    items = [Item(i, f"it{i}", f"/none/v{i}.mp4", [f"caption {i}"], [f"neg {i}"],
                  {"negatives_kind": "negated" if i in NEGATED else "temporal",
                   "chiral_group": f"g{i // 4}", "chiral_action": "up" if i % 4 < 2 else "down"})
             for i in range(N)]
    w = StoreWriter(path)
    try:
        w.put_dataset("nuance", Manifest("nuance.jsonl", items))
        w.put_model("mllm", ModelInfo("/m/mllm", "toy", "mllm", "last_token", 3, D, 1, None, "r1", True, {}))
        w.put_model("clip", ModelInfo("/m/clip", "toy", "video", "cls", 4, 10, 1, None, "r2", True, {}))
        runs = [("mv", "mllm", "video", 4, None, "original", P["V"], {"side": "video"}),
                ("mvr", "mllm", "video", 4, None, "reversed", P["back"], {"side": "video"}),
                ("mt", "mllm", "text", None, 1, "original", P["T"], {"side": "text"}),
                ("mn", "mllm", "text", None, 1, "negative", P["neg"], {"side": "text"}),
                ("cv", "clip", "video", 4, None, "original", P["clip_v"],
                 {"layer_names": {"3": "joint"}, "layer_dims": {"3": 6}}),
                ("ct", "clip", "text", None, 1, "original", P["clip_t"],
                 {"layer_names": {"2": "joint"}, "layer_dims": {"2": 6}})]
        for rid, model, mod, nf, nc, variant, X, cfg in runs:
            w.start_run(rid, model=model, dataset="nuance", modality=mod, n_frames=nf, n_captions=nc,
                        variant=variant, image_mode=None, pooling="mean", dtype="float32", device="cpu",
                        n_items=N, n_layers=X.shape[0], dim=X.shape[2], config=cfg)
            w.write_batch(rid, 0, X, n_done=N, n_items=N)
    finally:
        w.close()
    analyze_store(path, k=3, metrics=("mutual_knn",), n_boot=20, log=lambda m: None)
    return P


@pytest.fixture(scope="module")
def planted_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("ss") / "s.duckdb"
    P = write_planted_store(path)
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
    from precompute.synthetic_store import write_run

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
