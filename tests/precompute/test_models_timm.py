"""Issue #15: timm backbones with random weights through the hook path, against timm's own
``forward_intermediates`` (every block's tokens, prefix tokens apart) and the model's own output."""

import numpy as np
import pytest
import torch

# timm is imported by the tests (load_adapter), not at collection: the fast tier never needs it. Required,
# not skipped: in the `models` and `dev` extras, and a missing timm fails every test here.

from precompute.adapters.dispatch import load_adapter  # noqa: E402

pytestmark = pytest.mark.slow  # builds timm backbones with random weights

FRAMES = [np.random.default_rng(i).integers(0, 256, size=(3, 40, 48, 3), dtype=np.uint8) for i in range(2)]


def reference(model, x, *, pooling, prefix):
    """(L+1, U, d) from timm's forward_intermediates (layer 0 by hand: patch embed, positions,
    norm_pre, the input of block 0) and (U, d') from the model's forward (num_classes=0)."""
    with torch.no_grad():
        x0 = model._pos_embed(model.patch_embed(x))
        if isinstance(x0, tuple):  # EVA: (tokens, rotary embedding); its _pos_embed applies patch_drop
            x0 = x0[0]
        else:
            x0 = model.patch_drop(x0)
        x0 = model.norm_pre(x0)
        inter = model.forward_intermediates(x, indices=len(model.blocks), return_prefix_tokens=True, norm=False,
                                            output_fmt="NLC", intermediates_only=True)
        default = model(x)
    layers = [x0[:, 0] if pooling == "cls" else x0[:, prefix:].mean(1)]
    for item in inter:  # (spatial, prefix) pairs; a bare tensor when the model has no prefix tokens
        spatial, pre = item if isinstance(item, tuple) else (item, None)
        layers.append(pre[:, 0] if pooling == "cls" else spatial.mean(1))
    return torch.stack(layers).numpy(), default.numpy()


@pytest.mark.parametrize("spec, pooling, prefix", [
    ("timm:vit_tiny_patch16_224?img_size=32&depth=2", "cls", 1),               # ViT with CLS
    ("timm:vit_tiny_patch16_224?img_size=32&depth=2&reg_tokens=4", "cls", 5),  # CLS + 4 registers
    ("timm:vit_tiny_patch16_224?img_size=32&depth=2&reg_tokens=4&class_token=False&global_pool='avg'",
     "mean", 4),                                                                # registers, no CLS, mean pool
    # a class token is pooled whatever the head does (issue #29 item 8); the head's pooling is default
    ("timm:eva02_tiny_patch14_224?img_size=28&depth=2", "cls", 1),              # EVA-style (RoPE blocks, avg head)
    ("timm:eva02_tiny_patch14_224?img_size=28&depth=2&global_pool='token'", "cls", 1),
    # the families, at their timm names, small: Perception Encoder (CLS, attention-pool head), AIMv2,
    # DINOv3 (CLS + 4 registers, avg head), DINOv2 with registers, SigLIP (no CLS, attention-pool head)
    ("timm:vit_pe_core_small_patch16_384?img_size=32&depth=2", "cls", 1),
    ("timm:aimv2_large_patch14_224?img_size=28&depth=2", "mean", 0),
    ("timm:vit_small_patch16_dinov3?img_size=32&depth=2", "cls", 5),
    ("timm:vit_small_patch14_reg4_dinov2?img_size=28&depth=2", "cls", 5),
    ("timm:vit_base_patch16_siglip_224?img_size=32&depth=2", "mean", 0),
])
def test_timm_layers_match_forward_intermediates(spec, pooling, prefix):
    a = load_adapter(spec, random_init=True)
    info = a.info()
    assert (a.pooling, a.prefix, info.random_init, info.modality) == (pooling, prefix, True, "image")
    depth = len(a.model.blocks)
    assert info.n_layers == depth + 2 and a.layer_names == {str(depth + 1): "default"}
    out = a.embed_videos(FRAMES)  # (L, items, d): each item's 3 frames averaged
    assert out.shape == (depth + 2, 2, a.dim)
    prepared = a.prepare_videos(FRAMES)
    px = prepared.inputs["pixel_values"]
    assert px.shape[-2:] == tuple(a.input_size[1:])  # the model's own data config sized the frames
    layers, default = reference(a.model, px, pooling=pooling, prefix=prefix)
    expect = np.concatenate([layers, default[None]])
    owner = prepared.owner
    expect = np.stack([expect[:, owner == b].mean(axis=1) for b in range(2)], axis=1)
    np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-5)


def test_timm_preprocessing_is_the_models_data_config():
    from PIL import Image
    from timm.data import create_transform, resolve_data_config

    a = load_adapter("timm:vit_tiny_patch16_224?img_size=32&depth=1", random_init=True)
    cfg = resolve_data_config({"input_size": (3, 32, 32)}, model=a.model)
    want = torch.stack([create_transform(**cfg)(Image.fromarray(f)) for f in FRAMES[0][:1]])
    got = a.prepare_videos([FRAMES[0]], image_mode="first").inputs["pixel_values"]
    assert torch.equal(got, want)


def test_timm_refusals_name_the_fix():
    from precompute.adapters.hf import ModelError

    with pytest.raises(ModelError, match="image models"):
        load_adapter("timm:vit_tiny_patch16_224", modality="video", random_init=True)
    with pytest.raises(ModelError, match="timm cannot create 'no_such_model'"):
        load_adapter("timm:no_such_model", random_init=True)
    with pytest.raises(ModelError, match="--blocks nope"):
        load_adapter("timm:vit_tiny_patch16_224?img_size=32&depth=1", random_init=True, blocks="nope")


@pytest.mark.parametrize("spec", ["timm:vit_small_patch16_dinov3?img_size=32&depth=2",
                                  "timm:vit_pe_core_small_patch16_384?img_size=32&depth=2"])
def test_timm_class_token_per_layer_and_default_is_the_heads_pre_logits(spec):
    """Issue #29 item 8: DINOv3 (avg head) and Perception Encoder (attention-pool head) have a class
    token: every layer is that token (timm's forward_intermediates prefix token 0), and ``default``
    is timm's own ``forward_head(forward_features(x), pre_logits=True)``, not the class token."""
    a = load_adapter(spec, random_init=True)
    assert a.pooling == "cls" and a.model.cls_token is not None
    px = a.prepare_videos(FRAMES, image_mode="first").inputs["pixel_values"]
    out = a.embed_videos(FRAMES, image_mode="first")
    with torch.no_grad():
        inter = a.model.forward_intermediates(px, indices=len(a.model.blocks), return_prefix_tokens=True,
                                             norm=False, output_fmt="NLC", intermediates_only=True)
        head = a.model.forward_head(a.model.forward_features(px), pre_logits=True)
    for i, (_, prefix) in enumerate(inter, start=1):
        np.testing.assert_allclose(out[i], prefix[:, 0].numpy(), rtol=1e-5, atol=1e-5)
    (idx,) = [int(i) for i, n in a.layer_names.items() if n == "default"]
    np.testing.assert_allclose(out[idx, :, :head.shape[1]], head.numpy(), rtol=1e-5, atol=1e-5)
    assert not np.allclose(out[idx, :, :head.shape[1]], out[idx - 1], atol=1e-3)  # the head is not the CLS
    cfg = a.info().config["layerscope"]
    assert cfg["default_pooling"].startswith("timm forward_head(pre_logits=True)")


def test_a_text_value_for_a_numeric_option_names_the_option_and_its_type(tmp_path, capsys):
    import inspect

    from precompute.cli import main
    from timm.models.vision_transformer import VisionTransformer
    from tests.precompute.helpers import make_dataset

    default = inspect.signature(VisionTransformer).parameters["depth"].default  # timm's own, independently
    data = make_dataset(tmp_path / "data", n=2, captions=1)
    assert main(["precompute", "--store", str(tmp_path / "s.duckdb"), "--manifest", str(data), "--dataset", "d",
                 "--model", "timm:vit_tiny_patch16_224?depth=abc", "--random-init", "--frames", "2", "--quiet"]) == 2
    lines = [l for l in capsys.readouterr().err.splitlines() if l.strip()]
    assert len(lines) == 1 and len(lines[0]) <= 300, lines
    assert "option depth='abc' is not an integer" in lines[0] and f"default depth={default}" in lines[0]
    assert "TypeError" not in lines[0]
