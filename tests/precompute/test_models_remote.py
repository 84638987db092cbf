"""Issue #15: a remote-code video model (VideoMAEv2's layout, no hidden states) through the CLI."""

import json

import duckdb
import numpy as np
import pytest
import torch

from analysis.storage.store import list_runs, load_embeddings
from precompute.cli import main
from precompute.inputs.manifest import load_manifest
from precompute.adapters.dispatch import load_adapter
from precompute.synthetic.tiny_models import build_remote_videomae_v2
from precompute.inputs.video import read_frames, sample_indices
from tests.precompute.helpers import make_dataset

pytestmark = pytest.mark.slow  # builds a tiny remote-code model


def cli(*args):
    return main([str(a) for a in args])


@pytest.fixture(scope="module")
def remote(tmp_path_factory):
    # seed 7: the "trained" weights must differ from --random-init's seed-0 build
    return build_remote_videomae_v2(tmp_path_factory.mktemp("remote") / "tinyv2", seed=7)


def hand_forward(model, pixels_btchw):
    """Every layer by hand from the model's own submodules: (B,T,C,H,W) -> (B,C,T,H,W), patch
    embedding + position, each block in turn; mean over tokens; the model's output as `default`."""
    vt = model.model
    x = pixels_btchw.permute(0, 2, 1, 3, 4)
    with torch.no_grad():
        h = vt.patch_embed(x) + vt.pos_embed
        layers = [h.mean(1)]
        for blk in vt.blocks:
            h = blk(h)
            layers.append(h.mean(1))
        layers.append(model(x))
    return torch.stack(layers).numpy()


def test_remote_code_model_refused_without_the_flag_then_stored_through_hooks(tmp_path, remote, capsys):
    data = make_dataset(tmp_path / "d", n=3, frames=10)
    store = tmp_path / "s.duckdb"
    args = ["precompute", "--store", store, "--manifest", data, "--dataset", "toy", "--model", remote,
            "--frames", "4,2", "--captions", "1", "--quiet"]
    assert cli(*args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--trust-remote-code" in err
    assert not store.exists() or not list_runs(store)

    assert cli(*args, "--trust-remote-code") == 0
    runs = {r["n_frames"]: r for r in list_runs(store)}
    assert set(runs) == {2, 4} and all(r["status"] == "done" for r in runs.values())
    assert runs[4]["modality"] == "video" and runs[4]["n_layers"] == 3 + 1 + 1  # blocks + layer 0 + default
    con = duckdb.connect(str(store), read_only=True)
    cfg = json.loads(con.execute("SELECT config FROM runs WHERE n_frames = 4").fetchone()[0])
    model_cfg = json.loads(con.execute("SELECT config FROM models WHERE model = 'tinyv2'").fetchone()[0])
    con.close()
    assert cfg["layer_names"] == {"4": "default"} and cfg["blocks"] == "model.blocks"
    assert cfg["clip_layout"] == "BCTHW" and model_cfg["layerscope"]["layer_names"] == {"4": "default"}

    # stored = a hand forward of the clip the protocol gives (n_f = 4 = native: one clip)
    adapter = load_adapter(str(remote), trust_remote_code=True)
    manifest = load_manifest(data)
    stored = load_embeddings(store, model="tinyv2", dataset="toy", n_frames=4)
    for i, item in enumerate(manifest.items):
        frames = read_frames(item.video)
        frames = frames[sample_indices(len(frames), 4)]
        px = adapter.processor([list(frames)], return_tensors="pt")["pixel_values"]
        np.testing.assert_allclose(stored[:, i], hand_forward(adapter.model, px)[:, 0], rtol=1e-5, atol=1e-6)
    # n_f = 2 below the native 4: frames repeated by nearest neighbour to one clip of 4 (as today)
    stored2 = load_embeddings(store, model="tinyv2", dataset="toy", n_frames=2)
    frames = read_frames(manifest.items[0].video)
    two = frames[sample_indices(len(frames), 2)]
    px = adapter.processor([[two[0], two[0], two[1], two[1]]], return_tensors="pt")["pixel_values"]
    np.testing.assert_allclose(stored2[:, 0], hand_forward(adapter.model, px)[:, 0], rtol=1e-5, atol=1e-6)


def test_random_init_is_labelled_and_differs_from_the_weights(tmp_path, remote):
    data = make_dataset(tmp_path / "d", n=2, frames=6)
    store = tmp_path / "s.duckdb"
    base = ["precompute", "--store", store, "--manifest", data, "--dataset", "toy", "--model", remote,
            "--frames", "4", "--trust-remote-code", "--quiet"]
    assert cli(*base) == 0 and cli(*base, "--random-init") == 0
    con = duckdb.connect(str(store), read_only=True)
    rows = dict(con.execute("SELECT model, revision FROM models").fetchall())
    flags = dict(con.execute("SELECT model, random_init FROM models").fetchall())
    con.close()
    assert set(rows) == {"tinyv2", "tinyv2-random-init"} and flags["tinyv2-random-init"] is True
    assert rows["tinyv2-random-init"].startswith("random-init-seed0-")
    trained = load_embeddings(store, model="tinyv2", dataset="toy", n_frames=4)
    rand = load_embeddings(store, model="tinyv2-random-init", dataset="toy", n_frames=4)
    assert trained.shape == rand.shape and not np.allclose(trained, rand)
    # the control is reproducible: the same seed gives the same weights
    a = load_adapter(str(remote), trust_remote_code=True, random_init=True)
    b = load_adapter(str(remote), trust_remote_code=True, random_init=True)
    for (ka, va), (kb, vb) in zip(a.model.state_dict().items(), b.model.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)


def test_an_unknown_remote_type_without_a_video_hint_asks_for_modality(tmp_path, remote):
    import shutil

    folder = tmp_path / "noframes"
    shutil.copytree(remote, folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model_config"] = {k: v for k, v in cfg["model_config"].items() if k not in ("num_frames", "tubelet_size")}
    (folder / "config.json").write_text(json.dumps(cfg))
    from precompute.adapters.hf import ModelError
    from precompute.adapters.dispatch import probe_model

    with pytest.raises(ModelError, match="--modality video, image or text"):
        probe_model(str(folder), trust_remote_code=True)
