"""The labelled-probe sentences name layer 0 by what the stored run knows of its model: a transformers
run's layer 0 is ``hidden_states[0]``, the embedding output; a CNN's (a timm EfficientNet: the hook path
pools feature maps) is the stem's output; a run whose config says neither is "the first stored layer",
never a guess."""

import duckdb
import numpy as np
import pytest

from analysis.studies import analyze_store
from analysis.views.probes import probe_checks
from precompute.adapters.model_info import ModelInfo
from precompute.batch.writer import StoreWriter
from precompute.inputs.manifest import Item, Manifest
from tests.helpers import make_report
from tests.stores import LABELLED_N, _labelled_layers, labelled_shapes

#: three video models with the same vectors, told apart only by their runs' configs: what a timm CNN's
#: hook run records (its blocks return feature maps), what a transformers run records (the extraction
#: version, no hook path), and nothing (a hand-written store)
CONFIGS = {
    "cnn": ("timm:efficientnet_lite0", {"extraction": 1, "extraction_path": "hooks", "blocks": "blocks",
                                        "feature_maps": "global average over each NCHW map's H x W positions"}),
    "vit": ("vit", {"extraction": 1}),
    "hand": ("toy", {}),
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Layer 0 separates the three shapes (class centres 3 apart in noise of scale 1), the other layers
    barely do; the last layer carries the latent the text model shares, so the label-free pick is
    another layer than 0 and the probe's best layer is 0: every sentence names layer 0."""
    path = tmp_path_factory.mktemp("layer0") / "s.duckdb"
    n = LABELLED_N
    y = np.array([i % 3 for i in range(n)])
    X = _labelled_layers(1, n, strength=(0.0, 0.1, 0.1, 0.1))
    rng = np.random.default_rng(5)
    X[0] = (3.0 * rng.normal(size=(3, X.shape[2]))[y] + rng.normal(size=(n, X.shape[2]))).astype(np.float32)
    text = _labelled_layers(2, n, strength=(0.0, 0.1, 0.1, 0.1))
    items = [Item(i, f"item{i}", f"/nonexistent/v{i}.mp4", [f"a {s}"], metadata={"shape": s})
             for i, s in enumerate(labelled_shapes(n))]
    w = StoreWriter(path)
    try:
        w.put_dataset("toy", Manifest("toy.jsonl", items))
        runs = {f"{m}-4": (m, "video", X, cfg, mt) for m, (mt, cfg) in CONFIGS.items()}
        runs["txt-1"] = ("txt", "text", text, {"extraction": 1}, "bert")
        for run_id, (model, modality, V, cfg, mt) in runs.items():
            L, _, d = V.shape
            w.put_model(model, ModelInfo(model, mt, modality, "mean", L, d, 1000, None, "r", False, {}))
            w.start_run(run_id, model=model, dataset="toy", modality=modality,
                        n_frames=4 if modality == "video" else None, n_captions=1 if modality == "text" else None,
                        variant="original", image_mode=None, pooling="mean", dtype="float32", device="cpu",
                        n_items=n, n_layers=L, dim=d, config=cfg)
            w.write_batch(run_id, 0, V, n_done=n, n_items=n)
    finally:
        w.close()
    analyze_store(path, maps=0, n_null=20, n_boot=50, labels=("shape",), log=lambda m: None)
    return path


def _sentences(store) -> dict:
    con = duckdb.connect(str(store), read_only=True)
    try:
        checks = probe_checks(con, "toy")
    finally:
        con.close()
    return {c["model"]: c["sentence"] for c in checks if c["score"] == "knn_accuracy"}


def test_each_run_names_its_layer_zero(store):
    s = _sentences(store)
    assert set(CONFIGS) <= set(s)
    for model in CONFIGS:  # the probe's best layer is layer 0, the pick another
        assert "the best layer, layer 0 (" in s[model], s[model]
    assert "layer 0 (the stem's output)" in s["cnn"]
    assert "layer 0 (the embedding output)" in s["vit"]
    assert "layer 0 (the first stored layer)" in s["hand"]
    assert "embedding" not in s["cnn"] and "embedding" not in s["hand"]


def test_the_report_says_the_same(store, tmp_path):
    _, data, _ = make_report(store, tmp_path)
    lines = {c["model"]: c["sentence"] for c in data["datasets"][0]["sections"]["probes"]["checks"]
             if c["score"] == "knn_accuracy"}
    assert "layer 0 (the stem's output)" in lines["cnn"] and "layer 0 (the embedding output)" in lines["vit"]
    md = (tmp_path / "report.md").read_text()
    assert "layer 0 (the stem's output)" in md


@pytest.mark.slow  # builds timm EfficientNet-Lite0 and a tiny ViT (random weights) and embeds a few videos
def test_precompute_stores_what_tells_the_runs_apart(tmp_path):
    """What real runs store: a transformers ViT (hidden_states), timm's EfficientNet-Lite0 (a CNN through
    the hook path) and a timm ViT (token blocks through hooks: layer 0 is the first block's input)."""
    from analysis.views.layers import run_layer_zero
    from precompute.cli import main
    from precompute.synthetic.tiny_models import build_vit
    from tests.precompute.helpers import make_dataset

    manifest = make_dataset(tmp_path, n=3, frames=2)
    build_vit(tmp_path / "vit")
    store = tmp_path / "s.duckdb"
    assert main(["precompute", "--manifest", str(manifest), "--dataset", "toy", "--store", str(store),
                 "--model", str(tmp_path / "vit"), "--model", "timm:efficientnet_lite0",
                 "--model", "timm:vit_tiny_patch16_224?depth=1&img_size=32", "--random-init",
                 "--frames", "1", "--captions", "1", "--quiet"]) == 0
    con = duckdb.connect(str(store), read_only=True)
    try:
        types = dict(con.execute("SELECT r.run_id, m.model_type FROM runs r JOIN models m USING (model)").fetchall())
        zero = run_layer_zero(con, "toy")
    finally:
        con.close()
    by_type = {types[r]: z for r, z in zero.items()}
    assert by_type == {"vit": "the embedding output", "timm:efficientnet_lite0": "the stem's output",
                       "timm:vit_tiny_patch16_224": "the first block's input"}
