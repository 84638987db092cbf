"""A timm CNN (EfficientNet-Lite0, whose ``blocks`` are stages of feature maps) through the hook
path: each stage's map pooled by global average over H x W (a CNN has no class token), layers of
different widths zero-padded to the widest, and ``--weights`` through the CLI (issue #41 item 5)."""

import json

import duckdb
import numpy as np
import pytest
import torch

from analysis.storage.store import load_embeddings
from precompute.cli import main
from precompute.adapters.dispatch import load_adapter
from tests.precompute.helpers import make_dataset

pytestmark = pytest.mark.slow  # builds timm EfficientNet-Lite0 (random weights)

SPEC = "timm:efficientnet_lite0"  # a CNN takes no img_size: 224 from its data config
FRAMES = [np.random.default_rng(i).integers(0, 256, size=(2, 40, 48, 3), dtype=np.uint8) for i in range(3)]


def hand_layers(model, x):
    """(L, U, d_l) by hand from the model's own submodules: the stem's output, each stage in turn,
    averaged over its H x W positions; then the head's pre-logits feature."""
    with torch.no_grad():
        h = model.bn1(model.conv_stem(x))
        layers = [h.mean(dim=(2, 3))]
        for stage in model.blocks:
            h = stage(h)
            layers.append(h.mean(dim=(2, 3)))
        h = model.bn2(model.conv_head(h))
        layers.append(h.mean(dim=(2, 3)))  # global average pool, then pre_logits
    return [t.numpy() for t in layers]


def test_every_stage_is_its_feature_map_averaged_over_positions():
    a = load_adapter(SPEC, random_init=True)
    widths = [32, 16, 24, 40, 80, 112, 192, 320, 1280]  # stem, 7 stages, conv_head (timm's efficientnet_lite0)
    assert (a.n_layers, a.dim, a.pooling) == (9, 1280, "mean")
    assert a.layer_names == {"8": "default"}
    assert a.layer_dims == {str(i): w for i, w in enumerate(widths) if w != 1280}
    out = a.embed_videos(FRAMES)
    prepared = a.prepare_videos(FRAMES)
    expect = hand_layers(a.model, prepared.inputs["pixel_values"])
    owner = prepared.owner
    for i, (layer, w) in enumerate(zip(expect, widths)):
        want = np.stack([layer[owner == b].mean(axis=0) for b in range(len(FRAMES))])
        np.testing.assert_allclose(out[i, :, :w], want, rtol=1e-5, atol=1e-5)
        assert not out[i, :, w:].any()  # zero-padded past its true width
    assert "feature_maps" in a.run_config()


def test_the_head_is_the_models_own_pre_logits_output():
    a = load_adapter(SPEC, random_init=True)
    px = a.prepare_videos(FRAMES[:1]).inputs["pixel_values"]
    with torch.no_grad():
        want = a.model.forward_head(a.model.forward_features(px), pre_logits=True).mean(0).numpy()
    np.testing.assert_allclose(a.embed_videos(FRAMES[:1])[-1, 0], want, rtol=1e-5, atol=1e-5)


def test_weights_file_through_the_cli_gives_that_models_layers(tmp_path, capsys):
    """A state dict saved under other names (the packaged file's style) loads by order: the stored
    layers equal those of the model built from it directly; another file is another revision."""
    import timm

    torch.manual_seed(5)
    model = timm.create_model("efficientnet_lite0", pretrained=False).eval()
    file_a = tmp_path / "a.pth"
    torch.save({"_" + k.replace(".", "_"): v for k, v in model.state_dict().items()}, file_a)
    manifest = make_dataset(tmp_path, n=3, frames=2, size=32)
    store = tmp_path / "s.duckdb"
    common = ["precompute", "--store", store, "--manifest", manifest, "--dataset", "d", "--frames", "1",
              "--device", "cpu", "--quiet", "--model", SPEC]
    assert main([str(a) for a in common + ["--weights", file_a, "--name", "a"]]) == 0
    got = load_embeddings(store, model="a", dataset="d", n_frames=1)
    direct = load_adapter(SPEC, random_init=True)
    trained = model.state_dict()
    direct.model.load_state_dict({k: trained[k] for k in direct.model.state_dict()})  # the same tensors, by name
    from precompute.inputs.manifest import load_manifest
    from precompute.inputs.video import read_frames, sample_indices

    items = load_manifest(manifest).items
    frames = [read_frames(it.video)[sample_indices(len(read_frames(it.video)), 1)] for it in items]
    np.testing.assert_allclose(got, direct.embed_videos(frames), rtol=1e-4, atol=1e-5)

    con = duckdb.connect(str(store), read_only=True)
    revision, config = con.execute("SELECT revision, config FROM models WHERE model = 'a'").fetchone()
    run = json.loads(con.execute("SELECT config FROM runs").fetchone()[0])
    con.close()
    from precompute.adapters.hooked import file_sha256

    digest = file_sha256(file_a)[:16]
    assert revision == run["revision"] == f"file-{digest}"
    assert run["weights"] == {"path": str(file_a.resolve()), "sha256_16": digest}
    assert json.loads(config)["weights"]["path"] == str(file_a.resolve())

    # the same bytes from another path are the same revision: done, not loaded again
    copy = tmp_path / "copy.pth"
    copy.write_bytes(file_a.read_bytes())
    capsys.readouterr()
    assert main([str(a) for a in common + ["--weights", copy, "--name", "a"]]) == 0
    assert "1 already done" in capsys.readouterr().out

    # other weights under the same name: refused (another revision), not taken for the stored runs
    file_b = tmp_path / "b.pth"
    torch.save({k: v + 1 if v.is_floating_point() else v for k, v in torch.load(file_a).items()}, file_b)
    capsys.readouterr()
    assert main([str(a) for a in common + ["--weights", file_b, "--name", "a"]]) != 0
    assert "already used" in capsys.readouterr().err


def test_a_file_of_another_architecture_is_refused_by_the_cli_in_one_line(tmp_path, capsys):
    import timm

    other = timm.create_model("efficientnet_b0", pretrained=False, num_classes=0)
    bad = tmp_path / "b0.pth"
    torch.save(other.state_dict(), bad)
    manifest = make_dataset(tmp_path, n=2, frames=2, size=32)
    code = main([str(a) for a in ["precompute", "--store", tmp_path / "s.duckdb", "--manifest", manifest,
                                  "--dataset", "d", "--frames", "1", "--device", "cpu", "--quiet",
                                  "--model", SPEC, "--weights", bad]])
    err = capsys.readouterr().err.strip()
    assert code != 0 and len(err.splitlines()) == 1
    assert str(bad.resolve()) in err and "does not fit" in err
    from analysis.storage.store import list_runs

    assert not (tmp_path / "s.duckdb").exists() or list_runs(tmp_path / "s.duckdb") == []  # nothing computed


def test_a_file_without_the_classifier_maps_onto_the_headless_model(tmp_path):
    import timm

    torch.manual_seed(3)
    headless = timm.create_model("efficientnet_lite0", pretrained=False, num_classes=0).eval()
    path = tmp_path / "headless.safetensors"
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in headless.state_dict().items()}, str(path))
    a = load_adapter(SPEC, weights=str(path))
    assert a.model.num_classes == 0 and a.revision.startswith("file-")
    for k, v in headless.state_dict().items():
        assert torch.equal(a.model.state_dict()[k], v), k


def test_a_cnn_on_the_cpu_runs_channels_last_with_the_default_layouts_layers():
    a = load_adapter(SPEC, random_init=True, device="cpu")
    assert a.channels_last
    assert a.model.conv_stem.weight.is_contiguous(memory_format=torch.channels_last)
    out = a.embed_videos(FRAMES)
    # reference: the same weights in the default (contiguous NCHW) layout, fed a contiguous batch
    a.model.to(memory_format=torch.contiguous_format)
    a.channels_last = False
    assert a.model.conv_stem.weight.is_contiguous()
    np.testing.assert_allclose(out, a.embed_videos(FRAMES), rtol=1e-5, atol=1e-5)


def test_a_vision_transformer_keeps_the_default_layout():
    a = load_adapter("timm:vit_tiny_patch16_224?img_size=32", random_init=True, device="cpu")
    assert not a.feature_maps and not a.channels_last
