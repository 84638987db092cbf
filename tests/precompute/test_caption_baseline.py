"""DR Fig. 8's long-caption baseline end to end: a manifest's ``long_caption`` field, precompute's
``long_caption`` run of each text model (never in the n_c sweep), and analyze's best alignment of
that run against every vision run, checked against a brute-force mutual k-NN over the layer grid."""

import json

import duckdb
import numpy as np
import pytest

from analysis.storage import results as R
from analysis.storage.store import load_run
from analysis.studies import analyze_store
from analysis.views import caption_baseline as CB
from precompute.synthetic import tiny_models
from precompute.cli import main
from precompute.inputs.manifest import ManifestError, load_manifest
from tests.precompute.helpers import make_dataset
from tests.reference import ref_mutual_knn

N, K = 12, 3


def _with_long_captions(path, which=None):
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for i, r in enumerate(rows):
        if which is None or i in which:
            r["long_caption"] = f"a long original description of clip {i}: " + " ".join(r["captions"])
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("fig8")
    man = _with_long_captions(make_dataset(root / "data", n=N, captions=2))
    vit, bert = tiny_models.build_vit(root / "vit"), tiny_models.build_bert(root / "bert")
    path = root / "s.duckdb"
    assert main(["precompute", "--store", str(path), "--manifest", str(man), "--dataset", "toy", "--model", str(vit),
                 "--model", str(bert), "--frames", "1,2", "--captions", "1,2", "--batch-size", "6", "--quiet"]) == 0
    analyze_store(path, k=K, n_boot=20, metrics=("mutual_knn",), maps=0, n_null=0, log=lambda m: None)
    return path, man


def _runs(con):
    return R.rows(con, "SELECT run_id, model, modality, variant, n_frames, n_captions, n_items FROM runs")


def test_the_long_caption_is_its_own_run_outside_the_sweep(store):
    path, man = store
    con = duckdb.connect(str(path), read_only=True)
    runs = _runs(con)
    longs = [r for r in runs if r["variant"] == "long_caption"]
    assert len(longs) == 1 and longs[0]["modality"] == "text" and longs[0]["n_items"] == N
    # the sweep's runs are still the n_c = 1, 2 originals
    assert sorted(r["n_captions"] for r in runs if r["modality"] == "text" and r["variant"] == "original") == [1, 2]
    # the run embedded the long captions: its vectors differ from every caption run's
    E = load_run(con, longs[0]["run_id"])
    for r in runs:
        if r["modality"] == "text" and r["variant"] == "original":
            assert not np.allclose(E, load_run(con, r["run_id"]))
    con.close()
    assert load_manifest(man).items[0].long_caption.startswith("a long original description of clip 0")


def test_the_baseline_is_the_best_mutual_knn_over_the_layer_grid(store):
    path, _ = store
    con = duckdb.connect(str(path), read_only=True)
    runs = _runs(con)
    (long_run,) = [r for r in runs if r["variant"] == "long_caption"]
    T = load_run(con, long_run["run_id"]).astype(np.float64)
    stored = {r["payload"]["n_frames"]: r["payload"] for r in R.read_studies(con, study="caption_baseline")}
    vision = {r["n_frames"]: r for r in runs if r["modality"] == "video" or r["modality"] == "image"}
    assert set(stored) == set(vision) == {1, 2}
    for n_f, p in stored.items():
        V = load_run(con, vision[n_f]["run_id"]).astype(np.float64)
        grid = np.array([[ref_mutual_knn(V[a], T[b], K) for b in range(len(T))] for a in range(len(V))])
        assert p["value"] == pytest.approx(grid.max(), abs=1e-9)
        assert grid[p["best_a"], p["best_b"]] == pytest.approx(grid.max(), abs=1e-9)
        assert p["ci_low"] <= p["value"] + 1e-9 and p["value"] - 1e-9 <= p["ci_high"]
    con.close()


def test_the_view_puts_the_baseline_beside_the_sweep(store):
    path, _ = store
    con = duckdb.connect(str(path), read_only=True)
    choices = CB.baseline_choices(con, "toy")
    ((vision, text),) = choices["pairs"]
    fv = CB.fig8_view(con, "toy", "mutual_knn", vision, text)
    con.close()
    assert fv["error"] is None
    assert sorted(set(fv["sweep"]["n_captions"])) == [1, 2] and set(fv["baselines"]["n_frames"]) == {1, 2}
    for n_f in (1, 2):
        b = float(fv["baselines"].set_index("n_frames").at[n_f, "value"])
        s = fv["sweep"][fv["sweep"]["n_frames"] == n_f]
        reached = [n for n, v in zip(s["n_captions"], s["value"]) if v >= b]
        assert fv["reached"][n_f]["n_c"] == (min(reached) if reached else None)
        assert fv["reached"][n_f]["margin"] == pytest.approx(s["value"].max() - b)
        assert "Long original caption at n_f" in CB.fig8_text(fv, n_f)
        CB.fig8_chart(fv, n_f).to_dict()  # renders


def test_a_long_caption_on_some_items_only_is_refused(tmp_path):
    man = _with_long_captions(make_dataset(tmp_path, n=3), which={0})
    with pytest.raises(ManifestError, match="'long_caption' is on 1 of 3 items; give it on every item or on none"):
        load_manifest(man)


def test_a_manifest_without_long_captions_keeps_its_hash(tmp_path):
    import hashlib
    from pathlib import Path

    man = make_dataset(tmp_path, n=3)
    m = load_manifest(man)
    # the hash as it was before the field existed: stores made then keep resuming their runs
    h = hashlib.sha256()
    for it in m.items:
        h.update(json.dumps([it.item_id, Path(it.video).name, it.captions, it.negatives]).encode())
    assert m.sha == h.hexdigest()[:16]
    assert load_manifest(_with_long_captions(man)).sha != m.sha  # new long captions: new runs


def test_an_mllm_plans_its_long_caption_run_on_its_text_side_and_reads_the_long_caption(tmp_path):
    from types import SimpleNamespace

    from precompute.batch.options import PrecomputeOptions
    from precompute.batch.runner import Precompute

    man = load_manifest(_with_long_captions(make_dataset(tmp_path, n=3)))
    job = Precompute(None, man, "toy", options=PrecomputeOptions(frames=(1,), captions=(1,)), progress=False)
    try:
        adapter = SimpleNamespace(prompt_format=lambda side: f"<{side}> {{text}}")
        info = SimpleNamespace(source="s", revision="r", modality="mllm", pooling="last_token", config={},
                               native_frames=None)
        plans = job.plan(adapter, "m", info)
        (p,) = [p for p in plans if p.variant == "long_caption"]
        assert p.n_captions == 1 and p.n_frames is None and p.identity["side"] == "text"
        kind, texts, _ = job.batch_inputs(p, man.items, get_video=None)
        assert kind == "text" and texts == [it.metadata["long_caption"] for it in man.items]
        # without long captions there is no such run
        plain = Precompute(None, load_manifest(make_dataset(tmp_path / "plain", n=3)), "toy",
                           options=PrecomputeOptions(frames=(1,), captions=(1,)), progress=False)
        assert not [p for p in plain.plan(adapter, "m", info) if p.variant == "long_caption"]
        plain.pool.shutdown()
    finally:
        job.pool.shutdown()
