"""One image per item (``video`` naming a .png or .jpg) is a one-frame video (issue #31): the manifest
accepts it, and a vision model embeds it at any n_f (the one frame repeated), so every n_f gives the
same embedding as n_f = 1 for an image model."""

import json

import numpy as np
import pytest
from PIL import Image

from analysis.storage.store import load_embeddings
from precompute.cli import main
from precompute.inputs.manifest import load_manifest


def image_manifest(root, suffix: str, n: int = 5):
    rng = np.random.default_rng(0)
    rows = []
    for i in range(n):
        Image.fromarray(rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8)).save(root / f"im{i}{suffix}")
        rows.append({"id": f"i{i}", "video": f"im{i}{suffix}", "captions": [f"image {i}"]})
    (root / "m.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return root / "m.jsonl"


@pytest.mark.parametrize("suffix", [".png", ".jpg", ".jpeg"])
def test_the_manifest_counts_one_frame_per_image(tmp_path, suffix):
    m = load_manifest(image_manifest(tmp_path, suffix))
    assert [it.n_video_frames for it in m.items] == [1] * 5 and not m.text_only


def test_an_image_per_item_is_a_one_frame_video(tmp_path):
    from precompute.synthetic import tiny_models

    image_manifest(tmp_path, ".png")
    tiny_models.build_vit(tmp_path / "vit", seed=1)
    store = tmp_path / "s.duckdb"
    assert main(["precompute", "--store", str(store), "--manifest", str(tmp_path / "m.jsonl"), "--dataset", "d",
                 "--model", str(tmp_path / "vit"), "--name", "vit", "--frames", "1,2", "--quiet"]) == 0
    one = load_embeddings(store, model="vit", dataset="d", n_frames=1)
    two = load_embeddings(store, model="vit", dataset="d", n_frames=2)
    assert one.shape[1] == 5 and np.isfinite(one).all()
    # an image model averages its per-frame embeddings; two copies of one frame average to that frame's
    np.testing.assert_allclose(two, one, rtol=1e-5, atol=1e-6)
