"""Issue #15's shared space end to end: a tiny CLIP's two towers precomputed with --named-layers,
then analyze compares them at their joint layer only (retrieval, gap, chiral choice)."""

import duckdb
import numpy as np
import pytest

from analysis.storage import results as R
from analysis.metrics import mean_ap, modality_gap, recall_at_k
from analysis.storage.store import connect, load_embeddings, load_run
from analysis.methods.temporal import chiral_accuracy
from precompute.cli import main
from precompute.synthetic.tiny_models import build_clip
from tests.precompute.helpers import make_dataset

pytestmark = pytest.mark.slow  # builds a tiny CLIP and precomputes with it


def test_dual_encoder_towers_meet_at_the_joint_layer(tmp_path):
    clip = str(build_clip(tmp_path / "tinyclip"))
    data = make_dataset(tmp_path / "d", n=8, frames=4, captions=1)
    store = tmp_path / "s.duckdb"
    base = ["precompute", "--store", store, "--manifest", data, "--dataset", "toy", "--model", clip,
            "--named-layers", "--frames", "2", "--captions", "1", "--quiet"]
    assert main([str(x) for x in base]) == 0
    assert main([str(x) for x in base + ["--modality", "text"]]) == 0
    assert main(["analyze", "--store", str(store), "--k", "2", "--bootstrap", "5", "--jobs", "1", "--quiet"]) == 0
    con = duckdb.connect(str(store), read_only=True)
    (row,) = R.read_studies(con, study="same_space", dataset="toy")
    (temporal,) = R.read_studies(con, study="temporal", dataset="toy")
    con.close()
    p = row["payload"]
    assert row["subject"] == "tinyclip|tinyclip" and p["space"] == "joint"
    assert (p["layers_a"], p["layers_b"], p["flags"]["width"]) == ([4], [4], {"joint": 16})
    V = load_embeddings(store, model="tinyclip", dataset="toy", n_frames=2)[4][:, :16].astype(float)
    T = load_embeddings(store, model="tinyclip", dataset="toy", n_captions=1)[4][:, :16].astype(float)
    m = p["metrics"]
    assert m["recall@1_v2t"]["values"] == [pytest.approx(recall_at_k(V, T, k=1))]
    assert m["map_t2v"]["values"] == [pytest.approx(mean_ap(T, V))]
    assert m["modality_gap"]["values"] == [pytest.approx(modality_gap(V, T), rel=1e-6)]
    assert len(m["modality_gap"]["ci"]) == 1
    (chiral,) = temporal["payload"]["chiral"]
    assert (chiral["model"], chiral["space"], chiral["layers_a"]) == ("tinyclip", "joint", [4])
    con = connect(store, read_only=True)
    (neg_run,) = [r[0] for r in con.execute("SELECT run_id FROM runs WHERE variant = 'negative'").fetchall()]
    N = load_run(con, neg_run)[4][:, :16].astype(float)
    con.close()
    assert chiral["per_layer"][0] == pytest.approx(chiral_accuracy(V, T, N)) and np.isfinite(chiral["per_layer"][0])
