"""Issue #15: the hook path equals transformers' hidden_states where a model has both; block
lists are found for the common layouts; ``layerscope models`` and the refusals name the way in."""

import json

import duckdb
import numpy as np
import pytest
import torch
from torch import nn

from analysis.storage.store import list_runs, load_embeddings
from precompute.cli import main
from precompute.adapters.hooks import BlockCapture, BlockError, find_blocks
from precompute.adapters.hf import ModelError
from precompute.adapters.dispatch import load_adapter
from tests.precompute.helpers import make_dataset

FRAMES = [np.random.default_rng(i).integers(0, 256, size=(3, 32, 32, 3), dtype=np.uint8) for i in range(2)]


def test_captured_block_states_are_transformers_hidden_states_bitwise(tiny):
    from transformers import AutoImageProcessor, AutoModel

    model = AutoModel.from_pretrained(tiny["vit"]).eval()
    px = AutoImageProcessor.from_pretrained(tiny["vit"])(images=list(FRAMES[0]), return_tensors="pt")["pixel_values"]
    path, blocks = find_blocks(model)
    assert path in ("layers", "encoder.layer")  # transformers 5 ViT keeps its blocks at the top
    with torch.inference_mode(), BlockCapture(blocks) as cap:
        out = model(pixel_values=px, output_hidden_states=True)
    states = cap.result()
    assert len(states) == len(out.hidden_states) == model.config.num_hidden_layers + 1
    for s, h in zip(states, out.hidden_states):
        assert torch.equal(s, h)
    assert not torch.equal(out.hidden_states[-1], out.last_hidden_state)  # the final norm: why `default` exists


@pytest.mark.parametrize("name", ["vit", "dinov2", "videomae", "bert"])
def test_hook_adapter_equals_the_hidden_states_adapter(tiny, name):
    plain = load_adapter(tiny[name])
    hooked = load_adapter(tiny[name], blocks=find_blocks(plain.model)[0])
    assert hooked.extraction == "hooks" and hooked.pooling == plain.pooling
    if plain.modality == "text":
        texts = ["red circle moves left", "blue"]
        a, b = plain.embed_texts(texts), hooked.embed_texts(texts)
        mask = plain.prepare_texts(texts).inputs["attention_mask"]
        with torch.no_grad():
            out = plain.model(**plain.prepare_texts(texts).inputs)
        m = mask[:, :, None].float()  # BERT's dense pooler is passed over: the final tokens' masked mean
        default = (out.last_hidden_state * m).sum(1) / m.sum(1)
    else:
        videos = [np.concatenate([f] * 2)[:plain.native_frames] for f in FRAMES] if plain.modality == "video" \
            else FRAMES
        a, b = plain.embed_videos(videos), hooked.embed_videos(videos)
        prepared = plain.prepare_videos(videos)
        with torch.no_grad():
            out = plain.model(**prepared.inputs)
        if getattr(out, "pooler_output", None) is not None and getattr(plain.model, "pooler", None) is None:
            per_unit = out.pooler_output  # DINOv2: the normed class token
        else:  # no pooler, or ViT's dense+tanh head (random when missing from a checkpoint): the final norm's tokens
            h = out.last_hidden_state
            per_unit = h[:, 0] if plain.pooling == "cls" else h.mean(1)
        owner = prepared.owner
        default = torch.stack([per_unit[torch.as_tensor(owner == i)].mean(0) for i in range(len(videos))])
    L = a.shape[0]
    assert b.shape == (L + 1, a.shape[1], a.shape[2]) and hooked.layer_names == {str(L): "default"}
    np.testing.assert_allclose(b[:L], a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b[L], default.numpy(), rtol=1e-5, atol=1e-6)


def test_find_blocks_layouts_and_errors():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x)

    class Wrapped(nn.Module):  # VideoMAEv2: PreTrainedModel -> .model -> .blocks
        def __init__(self):
            super().__init__()
            self.model = nn.Module()
            self.model.blocks = nn.ModuleList(Block() for _ in range(3))

    class Clip(nn.Module):  # open_clip towers
        def __init__(self):
            super().__init__()
            self.transformer = nn.Module()
            self.transformer.resblocks = nn.ModuleList(Block() for _ in range(2))

    class Odd(nn.Module):  # no common layout: a named list found by its last name
        def __init__(self):
            super().__init__()
            self.trunk = nn.Module()
            self.trunk.stage = nn.Module()
            self.trunk.stage.layers = nn.ModuleList(Block() for _ in range(4))
            self.head = nn.ModuleList([nn.Linear(4, 4)])

    assert find_blocks(Wrapped())[0] == "model.blocks"
    assert find_blocks(Clip())[0] == "transformer.resblocks"
    assert find_blocks(Odd())[0] == "trunk.stage.layers"
    assert find_blocks(Odd(), "trunk.stage.layers")[0] == "trunk.stage.layers"
    with pytest.raises(BlockError, match="--blocks nope.*trunk.stage.layers"):
        find_blocks(Odd(), "nope")
    with pytest.raises(BlockError, match="--blocks PATH"):
        find_blocks(nn.Linear(2, 2))

    # layer 0 is the first block's input; a block run twice is refused
    m = Clip()
    x = torch.randn(2, 5, 4)
    with BlockCapture(m.transformer.resblocks) as cap:
        h = m.transformer.resblocks[1](m.transformer.resblocks[0](x))
    states = cap.result()
    assert torch.equal(states[0], x) and torch.equal(states[2], h)
    with pytest.raises(BlockError, match="ran twice"):
        with BlockCapture(m.transformer.resblocks):
            blk = m.transformer.resblocks[0]
            blk(blk(x))


def test_blocks_flag_through_the_cli_is_another_run(tmp_path, tiny, capsys):
    data = make_dataset(tmp_path / "d", n=2, frames=4)
    store = tmp_path / "s.duckdb"
    base = ["precompute", "--store", store, "--manifest", data, "--dataset", "toy", "--model", tiny["vit"],
            "--frames", "2", "--quiet"]
    assert main([str(x) for x in base]) == 0
    path = find_blocks(load_adapter(tiny["vit"]).model)[0]
    assert main([str(x) for x in base + ["--name", "vit-hooks", "--blocks", path]]) == 0
    plain = load_embeddings(store, model="vit", dataset="toy", n_frames=2)
    hooked = load_embeddings(store, model="vit-hooks", dataset="toy", n_frames=2)
    # both store the named `default` layer (on by default on the hidden_states path): every layer agrees
    np.testing.assert_allclose(hooked, plain, rtol=1e-5, atol=1e-6)
    con = duckdb.connect(str(store), read_only=True)
    cfg = json.loads(con.execute("SELECT config FROM runs WHERE model = 'vit-hooks'").fetchone()[0])
    plain_cfg = json.loads(con.execute("SELECT config FROM runs WHERE model = 'vit'").fetchone()[0])
    con.close()
    assert cfg["blocks"] == path and cfg["layer_names"] == {str(plain.shape[0] - 1): "default"}
    assert plain_cfg["layer_names"] == cfg["layer_names"] and "blocks" not in plain_cfg
    assert len({r["run_id"] for r in list_runs(store)}) == 2
    capsys.readouterr()
    assert main([str(x) for x in base + ["--name", "vit-bad", "--blocks", "encoder.nope"]]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--blocks encoder.nope" in err and path in err


def test_models_command_lists_loaders_and_refusals_name_the_way_in(capsys, tmp_path):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    for needle in ("timm:NAME", "open_clip:ARCH/PRETRAINED", "--trust-remote-code", "--blocks PATH", "--random-init",
                   "joint", "videomae: mean"):
        assert needle in out
    assert main(["models", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"timm", "open_clip", "remote code"} <= {r["loader"] for r in rows}
    # an unknown transformers type: the message names the loaders and flags that would take a model
    folder = tmp_path / "odd"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "resnet"}))
    (folder / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelError) as exc:
        load_adapter(str(folder))
    for needle in ("--trust-remote-code", "--blocks PATH", "timm:NAME", "open_clip:ARCH/PRETRAINED", "layerscope models"):
        assert needle in str(exc.value)


def test_timm_and_open_clip_checkpoints_given_as_transformers_models_name_their_loader(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError, match="--model timm:vit_base_patch16_224.augreg_in21k"):
        load_adapter("timm/vit_base_patch16_224.augreg_in21k")
    folder = tmp_path / "oc"
    folder.mkdir()
    (folder / "open_clip_config.json").write_text("{}")
    with pytest.raises(ModelError, match=f"--model open_clip:local-dir:{folder}"):
        load_adapter(str(folder))
