"""Issue #15: an open_clip dual encoder (tiny config, random weights): every layer against
open_clip's own forward_intermediates, ``default`` the tower's output before its projection,
``joint`` equal to the library's ``encode_image`` / ``encode_text``, both towers through the CLI."""

import json

import duckdb
import numpy as np
import pytest
import torch


from analysis.storage.store import list_runs, load_embeddings  # noqa: E402
from precompute.cli import main  # noqa: E402
from precompute.adapters.dispatch import load_adapter  # noqa: E402
from precompute.adapters.hf import ModelError  # noqa: E402
from tests.precompute.helpers import make_dataset  # noqa: E402

pytestmark = pytest.mark.slow  # builds open_clip models with random weights

CONFIG = {"model_cfg": {"embed_dim": 16,
                        "vision_cfg": {"image_size": 32, "layers": 2, "width": 32, "patch_size": 8, "head_width": 16},
                        "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 24, "heads": 2, "layers": 2}},
          "preprocess_cfg": {}}
FRAMES = [np.random.default_rng(i).integers(0, 256, size=(2, 40, 40, 3), dtype=np.uint8) for i in range(3)]
TEXTS = ["a red circle", "a blue square moves left fast", "green"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("oc")
    (root / "open_clip_config.json").write_text(json.dumps(CONFIG))
    return root


def test_image_tower_layers_default_and_joint(folder):
    a = load_adapter(f"open_clip:local-dir:{folder}", random_init=True)
    assert (a.modality, a.pooling, a.n_layers, a.dim) == ("image", "cls", 2 + 1 + 2, 32)
    assert a.layer_names == {"3": "default", "4": "joint"} and a.layer_dims == {"4": 16}
    prepared = a.prepare_videos(FRAMES, image_mode="first")
    out = a.run(prepared)
    x = prepared.inputs["pixel_values"]
    model = a.model
    with torch.no_grad():
        res = model.visual.forward_intermediates(x, indices=2, output_fmt="NLC", intermediates_only=True,
                                                 output_extra_tokens=True)
        inter = res["image_intermediates_prefix"]
        normed = model.visual.forward_intermediates(x, indices=2, output_fmt="NLC", intermediates_only=True,
                                                    output_extra_tokens=True, normalize_intermediates=True)
        pooled = normed["image_intermediates_prefix"][-1][:, 0]  # ln_post of the last class token
        joint = model.encode_image(x)
        x0 = model.visual._embeds(x)  # patches, class token, positions, ln_pre: block 0's input
    np.testing.assert_allclose(out[0], x0[:, 0].numpy(), rtol=1e-5, atol=1e-6)
    for i, pre in enumerate(inter, start=1):  # layer i = block i's class token
        np.testing.assert_allclose(out[i], pre[:, 0].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[3], pooled.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[4, :, :16], joint.numpy(), rtol=1e-6, atol=1e-7)
    assert not out[4, :, 16:].any()  # the 16-wide joint space zero-padded to the run's 32
    np.testing.assert_allclose(pooled.numpy() @ model.visual.proj.detach().numpy(), joint.numpy(), rtol=1e-5, atol=1e-6)


def test_text_tower_layers_default_and_joint(folder):
    a = load_adapter(f"open_clip:local-dir:{folder}", random_init=True, modality="text")
    assert (a.modality, a.pooling, a.n_layers, a.dim, a.layer_dims) == ("text", "mean", 5, 24, {"4": 16})
    out = a.embed_texts(TEXTS)
    model = a.model
    # imported here, not at collection: the fast tier never needs open_clip (~2 s of imports a worker);
    # required, not skipped (in the `models` and `dev` extras)
    import open_clip

    ids = open_clip.get_tokenizer(f"local-dir:{folder}")(TEXTS)
    real = (ids != 0).float()[:, :, None]
    with torch.no_grad():
        res = model.forward_intermediates(text=ids, text_indices=2, intermediates_only=True)
        joint = model.encode_text(ids)
    for i, h in enumerate(res["text_intermediates"], start=1):
        np.testing.assert_allclose(out[i], ((h * real).sum(1) / real.sum(1)).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[4, :, :16], joint.numpy(), rtol=1e-6, atol=1e-7)
    with torch.no_grad():  # default = ln_final, pooled at the end-of-text token, before text_projection
        h = model.ln_final(res["text_intermediates"][-1])
    np.testing.assert_allclose(out[3], h[torch.arange(3), ids.argmax(dim=-1)].numpy(), rtol=1e-5, atol=1e-6)
    long = " ".join(["red"] * 30)
    assert a.text_overflow([long, "red"]) == [(32, 16), None]


def test_both_towers_through_the_cli_share_the_joint_space(tmp_path, folder):
    data = make_dataset(tmp_path / "d", n=3, frames=4)
    store = tmp_path / "s.duckdb"
    base = ["precompute", "--store", store, "--manifest", data, "--dataset", "toy", "--model",
            f"open_clip:local-dir:{folder}", "--name", "tinyclip", "--random-init", "--frames", "1",
            "--captions", "1", "--quiet"]
    assert main([str(x) for x in base]) == 0
    assert main([str(x) for x in base + ["--modality", "text"]]) == 0
    runs = list_runs(store)
    assert {r["modality"] for r in runs} == {"image", "text"} and all(r["status"] == "done" for r in runs)
    con = duckdb.connect(str(store), read_only=True)
    names = {json.loads(c)["layer_names"]["4"] for (c,) in con.execute("SELECT config FROM runs").fetchall()}
    con.close()
    assert names == {"joint"}
    img = load_embeddings(store, model="tinyclip", dataset="toy", n_frames=1)
    txt = load_embeddings(store, model="tinyclip", dataset="toy", n_captions=1)
    assert img.shape[0] == txt.shape[0] == 5 and img.shape[2] == 32 and txt.shape[2] == 24


def test_open_clip_refusals(folder, tmp_path):
    with pytest.raises(ModelError, match="open_clip:ViT-B-32/PRETRAINED"):
        load_adapter("open_clip:ViT-B-32")
    with pytest.raises(ModelError, match="holds no open_clip weights"):
        load_adapter(f"open_clip:local-dir:{folder}")
    with pytest.raises(ModelError, match="image or text"):
        load_adapter(f"open_clip:local-dir:{folder}", modality="video", random_init=True)


def test_avg_pooled_tower_with_a_class_embedding_pools_the_class_token(tmp_path):
    """Issue #29 item 8: a tower with a class embedding but ``pool_type='avg'`` (as open_clip's PE)
    stores its class token per layer; ``default`` is still the tower's own (avg) pooled output."""
    cfg = json.loads(json.dumps(CONFIG))
    cfg["model_cfg"]["vision_cfg"]["pool_type"] = "avg"
    (tmp_path / "open_clip_config.json").write_text(json.dumps(cfg))
    a = load_adapter(f"open_clip:local-dir:{tmp_path}", random_init=True)
    assert (a.pooling, a.prefix) == ("cls", 1) and a.model.visual.pool_type == "avg"
    prepared = a.prepare_videos(FRAMES, image_mode="first")
    out = a.run(prepared)
    x = prepared.inputs["pixel_values"]
    with torch.no_grad():
        inter = a.model.visual.forward_intermediates(x, indices=2, output_fmt="NLC", intermediates_only=True,
                                                     output_extra_tokens=True)["image_intermediates_prefix"]
        joint = a.model.encode_image(x)
    for i, pre in enumerate(inter, start=1):
        np.testing.assert_allclose(out[i], pre[:, 0].numpy(), rtol=1e-5, atol=1e-6)
    # default @ proj is encode_image: the head's avg pooling, not the class token
    np.testing.assert_allclose(out[3] @ a.model.visual.proj.detach().numpy(), joint.numpy(), rtol=1e-5, atol=1e-6)
    assert "pool_type='avg'" in a.info().config["layerscope"]["default_pooling"]


@pytest.mark.parametrize("spec, needles", [
    ("open_clip:BAD/BAD", ["no architecture 'BAD'", "open_clip.list_models()"]),
    ("open_clip:ViT-B-33/openai", ["no architecture 'ViT-B-33'", "closest: ViT-B-32"]),
    ("open_clip:ViT-B-32/nonesuch", ["no weights 'nonesuch' for ViT-B-32", "openai"]),
])
def test_a_bad_open_clip_name_is_one_short_line(tmp_path, capsys, spec, needles):
    data = make_dataset(tmp_path / "data", n=2, captions=1)
    assert main(["precompute", "--store", str(tmp_path / "s.duckdb"), "--manifest", str(data), "--dataset", "d",
                 "--model", spec, "--frames", "2", "--quiet"]) == 2
    lines = [l for l in capsys.readouterr().err.splitlines() if l.strip()]
    assert len(lines) == 1, lines
    # the message itself (after the command's prefix) is at most 200 characters
    assert len(lines[0].split("error: ", 1)[1]) <= 200, lines[0]
    for n in needles:
        assert n in lines[0], lines[0]
