"""Issue #15 on transformers models (named layers, on by default): the model's default output and a
dual encoder's joint embedding after the hidden states, against the library's own feature functions."""

import json

import duckdb
import numpy as np
import pytest
import torch

from analysis.storage.store import load_embeddings
from precompute.cli import main
from precompute.adapters.dispatch import load_adapter
from precompute.synthetic.tiny_models import build_clip
from tests.precompute.helpers import make_dataset

pytestmark = pytest.mark.slow  # builds tiny CLIP-family models

FRAMES = [np.random.default_rng(i).integers(0, 256, size=(4, 40, 40, 3), dtype=np.uint8) for i in range(2)]
TEXTS = ["a red circle appears", "a blue square moves left quickly over a striped background"]


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return str(build_clip(tmp_path_factory.mktemp("clip") / "tinyclip"))


def test_clip_both_towers_default_and_joint_equal_get_features(clip):
    from transformers import CLIPModel

    full = CLIPModel.from_pretrained(clip).eval()
    img = load_adapter(clip, named_layers=True)
    assert (img.n_hidden, img.n_layers, img.dim) == (3, 5, 32)
    assert img.layer_names == {"3": "default", "4": "joint"} and img.layer_dims == {"4": 16}
    plain = load_adapter(clip)
    assert plain.n_layers == 3 and plain.layer_names == {}  # without the flag: hidden states only, as before
    prepared = img.prepare_videos(FRAMES)
    got = img.run(prepared)
    np.testing.assert_allclose(got[:3], plain.run(prepared), rtol=1e-6, atol=1e-7)
    px = prepared.inputs["pixel_values"]
    with torch.no_grad():
        feats = full.get_image_features(pixel_values=px)
        feats = getattr(feats, "pooler_output", feats)  # transformers 5 may wrap it
        pooled = full.vision_model(pixel_values=px).pooler_output  # post_layernorm(CLS)
    owner = prepared.owner
    per_item = lambda t: np.stack([t.numpy()[owner == b].mean(0) for b in range(len(FRAMES))])  # noqa: E731
    np.testing.assert_allclose(got[3], per_item(pooled), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[4, :, :16], per_item(feats), rtol=1e-5, atol=1e-6)
    assert not got[4, :, 16:].any()

    txt = load_adapter(clip, modality="text", named_layers=True)
    assert txt.layer_names == {"3": "default", "4": "joint"} and txt.layer_dims == {"4": 16}
    out = txt.embed_texts(TEXTS)
    enc = txt.tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        tfeats = full.get_text_features(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])
        tfeats = getattr(tfeats, "pooler_output", tfeats)
        tpooled = full.text_model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).pooler_output
    np.testing.assert_allclose(out[3], tpooled.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[4, :, :16], tfeats.numpy(), rtol=1e-5, atol=1e-6)


def test_xclip_joint_is_its_video_features_per_clip(tiny):
    from transformers import XCLIPModel

    a = load_adapter(tiny["xclip"], named_layers=True)
    assert a.layer_names == {"3": "default", "4": "joint"} and a.layer_dims == {}
    prepared = a.prepare_videos(FRAMES)  # 4 frames = one native clip per item
    got = a.run(prepared)
    full = XCLIPModel.from_pretrained(tiny["xclip"]).eval()
    px = prepared.inputs["pixel_values"]
    with torch.no_grad():
        video = full.get_video_features(pixel_values=px)
        video = getattr(video, "pooler_output", video)
        frames = full.vision_model(pixel_values=px.reshape(-1, *px.shape[2:])).pooler_output
    np.testing.assert_allclose(got[4], video.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[3], frames.reshape(2, 4, -1).mean(1).numpy(), rtol=1e-5, atol=1e-6)


def _run_vectors(store, run_id):
    from analysis.storage.store import connect, load_run

    con = connect(store, read_only=True)
    try:
        return load_run(con, run_id)
    finally:
        con.close()


def test_named_layers_are_on_by_default_and_a_store_made_without_them_is_kept(tmp_path, clip, capsys):
    from transformers import AutoConfig

    data = make_dataset(tmp_path / "d", n=2, frames=4)
    store = tmp_path / "s.duckdb"
    base = ["precompute", "--store", store, "--manifest", data, "--dataset", "toy", "--model", clip,
            "--frames", "1", "--quiet"]
    # a store as made before named layers were stored: hidden states only, no names in the config
    assert main([str(x) for x in base + ["--no-named-layers"]]) == 0
    con = duckdb.connect(str(store), read_only=True)
    (old_id, n_old, old_cfg), = con.execute("SELECT run_id, n_layers, config FROM runs").fetchall()
    con.close()
    before = _run_vectors(store, old_id)
    hidden = AutoConfig.from_pretrained(clip).vision_config.num_hidden_layers + 1
    assert n_old == hidden and "layer_names" not in json.loads(old_cfg) and "layer_dims" not in json.loads(old_cfg)
    capsys.readouterr()
    # the same command today: the run with default and joint is another run; the old one is named and kept
    assert main([str(x) for x in base]) == 0
    err = capsys.readouterr().err
    assert "without the named layers (default/joint): n_f=1; they are kept" in err
    con = duckdb.connect(str(store), read_only=True)
    rows = con.execute("SELECT run_id, n_layers, dim, status, config FROM runs ORDER BY n_layers").fetchall()
    con.close()
    assert [(r[0] == old_id, r[1], r[2], r[3]) for r in rows] == [(True, hidden, 32, "done"), (False, hidden + 2, 32, "done")]
    cfg = json.loads(rows[1][4])
    assert cfg["layer_names"] == {str(hidden): "default", str(hidden + 1): "joint"} and cfg["layer_dims"] == {
        str(hidden + 1): 16}
    stored = load_embeddings(store, model="tinyclip", dataset="toy", n_frames=1)  # the newest run of the setting
    assert stored.shape == (hidden + 2, 2, 32) and not stored[hidden + 1, :, 16:].any()
    # the old run's vectors are untouched and equal the new run's numbered layers
    np.testing.assert_array_equal(_run_vectors(store, old_id), before)
    np.testing.assert_array_equal(before, _run_vectors(store, rows[1][0])[:hidden])
    # and --no-named-layers finds its old run done: nothing computed
    assert main([str(x) for x in base + ["--no-named-layers"]]) == 0
    assert "0 run(s) computed, 1 already done" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["vit", "t5", "videomae"])
def test_random_init_on_the_hidden_states_path_is_seeded_and_labelled(tiny, name):
    a = load_adapter(tiny[name], random_init=True)
    b = load_adapter(tiny[name], random_init=True)
    trained = load_adapter(tiny[name])
    info = a.info()
    assert info.random_init is True and info.revision.startswith("random-init-seed0-")
    assert info.revision == b.info().revision != trained.info().revision
    sa, st = a.model.state_dict(), trained.model.state_dict()
    assert all(torch.equal(v, b.model.state_dict()[k]) for k, v in sa.items())  # the same seed, the same weights
    # the tiny models were saved from seed 0 too, so their weights may coincide: what matters is the
    # build path (from_config, never the folder's weights), seen on a folder whose weights were changed
    assert set(sa) == set(st)


def test_random_init_ignores_the_folders_weights(tmp_path, tiny):
    import shutil

    folder = tmp_path / "vit"
    shutil.copytree(tiny["vit"], folder)
    from transformers import AutoModel

    m = AutoModel.from_pretrained(folder)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(1.0)
    m.save_pretrained(folder)
    shifted = load_adapter(str(folder))
    rand = load_adapter(str(folder), random_init=True)
    fresh = load_adapter(tiny["vit"], random_init=True)
    key = next(k for k in rand.model.state_dict() if k.endswith("weight"))
    assert torch.equal(rand.model.state_dict()[key], fresh.model.state_dict()[key])
    assert not torch.equal(rand.model.state_dict()[key], shifted.model.state_dict()[key])


def test_blocks_refused_on_xclip_frame_tower(tiny):
    from precompute.adapters.hf import ModelError

    with pytest.raises(ModelError, match="--blocks does not apply to X-CLIP"):
        load_adapter(tiny["xclip"], blocks="encoder.layers")
