"""``--weights FILE``: a state dict mapped onto a timm architecture pair by pair, checked by shape,
refused in one line naming the file and the first key that does not fit (issue #41 item 5).
Fast: the mapping is tested on plain torch modules; the loaders are refused before any model is built."""

import pytest
import torch
from torch import nn

from precompute.adapters.hooked import file_sha256, map_state_dict, read_state_dict
from precompute.adapters.dispatch import probe_model
from precompute.adapters.hf import ModelError


class Ours(nn.Module):
    """timm-style names"""

    def __init__(self, width=4):
        super().__init__()
        self.conv_stem = nn.Conv2d(3, width, 3)
        self.bn1 = nn.BatchNorm2d(width)
        self.classifier = nn.Linear(width, 5)


def theirs(model: nn.Module, *, rename=lambda k: "_" + k.replace(".", "._")) -> dict:
    """``model``'s tensors under another codebase's names, same order, distinct values."""
    return {rename(k): torch.full_like(v, float(i)) for i, (k, v) in enumerate(model.state_dict().items())}


def test_tensors_are_mapped_by_order_onto_the_models_names():
    model = Ours()
    sd = theirs(model)
    mapped = map_state_dict(sd, model, "w.pth", "timm:x")
    assert list(mapped) == list(model.state_dict())
    for (_, want), got in zip(sd.items(), mapped.values()):
        assert torch.equal(want, got)
    model.load_state_dict(mapped)  # every key and shape fits
    assert torch.equal(model.bn1.running_var, torch.full((4,), 5.0))  # bn1: weight, bias, mean, var (5th)


def test_a_shape_mismatch_names_the_file_and_the_first_differing_pair():
    sd = theirs(Ours(width=4))
    with pytest.raises(ModelError) as e:
        map_state_dict(sd, Ours(width=6), "/x/w.pth", "timm:x")
    msg = str(e.value)
    assert "\n" not in msg and "/x/w.pth" in msg
    # tensor 0 is the first pair whose shapes differ: the file's name and shape, then the model's
    assert "tensor 0 '_conv_stem._weight' (4, 3, 3, 3)" in msg and "'conv_stem.weight' (6, 3, 3, 3)" in msg


def test_a_later_mismatch_is_named_not_the_first_key():
    model = Ours()
    sd = theirs(model)
    sd["_classifier._weight"] = torch.zeros(7, 4)  # only the head differs
    with pytest.raises(ModelError, match=r"tensor 7 '_classifier._weight' \(7, 4\) .* 'classifier.weight' \(5, 4\)"):
        map_state_dict(sd, model, "w.pth", "timm:x")


@pytest.mark.parametrize("extra, named", [(True, "the file's 'spare' has no counterpart"),
                                          (False, "timm:x's 'classifier.bias' has none in the file")])
def test_a_count_mismatch_names_the_first_key_without_a_partner(extra, named):
    model = Ours()
    sd = theirs(model)
    if extra:
        sd["spare"] = torch.zeros(1)
    else:
        sd.pop("_classifier._bias")
    n = len(model.state_dict()) + (1 if extra else -1)
    with pytest.raises(ModelError, match=f"w.pth: {n} tensors, timm:x has {len(model.state_dict())}; {named}"):
        map_state_dict(sd, model, "w.pth", "timm:x")


def test_state_dicts_are_read_from_pth_wrapped_pth_and_safetensors(tmp_path):
    from safetensors.torch import save_file

    sd = theirs(Ours())
    torch.save(sd, tmp_path / "a.pth")
    torch.save({"state_dict": sd, "epoch": 3}, tmp_path / "b.pt")
    save_file(sd, str(tmp_path / "c.safetensors"))
    for name in ("a.pth", "b.pt", "c.safetensors"):
        got = read_state_dict(tmp_path / name)
        assert list(got) == list(sd) or sorted(got) == sorted(sd)  # safetensors keeps no order promise
        assert all(torch.equal(got[k], sd[k]) for k in sd)


def test_a_file_that_is_not_a_state_dict_is_refused_naming_it(tmp_path):
    (tmp_path / "junk.pth").write_bytes(b"not a checkpoint")
    torch.save([1, 2, 3], tmp_path / "list.pth")
    with pytest.raises(ModelError, match=r"junk.pth: cannot read it as a state dict"):
        read_state_dict(tmp_path / "junk.pth")
    with pytest.raises(ModelError, match=r"list.pth: not a state dict"):
        read_state_dict(tmp_path / "list.pth")


def test_weights_are_refused_for_loaders_other_than_timm(tmp_path):
    w = tmp_path / "w.pth"
    torch.save({"a": torch.zeros(1)}, w)
    with pytest.raises(ModelError, match="--weights applies to timm models .* transformers model"):
        probe_model(str(tmp_path), weights=str(w))  # a folder: refused before its config is read
    with pytest.raises(ModelError, match=r"--weights applies to timm models .* \(open_clip:ARCH/FILE\)"):
        probe_model("open_clip:ViT-B-32/openai", weights=str(w))
    with pytest.raises(ModelError, match="contradict"):
        probe_model("timm:resnet18", weights=str(w), random_init=True)
    with pytest.raises(ModelError, match="--weights .*nope.pth: no such file"):
        probe_model("timm:resnet18", weights=str(tmp_path / "nope.pth"))


def test_the_files_content_hash_is_the_revision_before_the_load(tmp_path):
    import hashlib

    a, b = tmp_path / "a.pth", tmp_path / "b.pth"
    torch.save({"w": torch.zeros(3)}, a)
    torch.save({"w": torch.ones(3)}, b)
    pa, pb = probe_model("timm:resnet18", weights=str(a)), probe_model("timm:resnet18", weights=str(b))
    assert pa.file_revision == "file-" + hashlib.sha256(a.read_bytes()).hexdigest()[:16]
    assert pa.file_revision != pb.file_revision
    assert file_sha256(a) == hashlib.sha256(a.read_bytes()).hexdigest()
    from precompute.batch.known_runs import known_identity

    assert known_identity(pa).info.revision == pa.file_revision  # a finished run of b is not a's


def test_layerscope_models_says_how_a_cnn_is_pooled_and_takes_weights(capsys):
    from precompute.cli import main

    assert main(["models"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "[--weights FILE]" in out and "a CNN has no class token" in out and "global average over H x W" in out


def test_a_sweep_models_weights_are_relative_to_the_sweep_file_and_must_exist(tmp_path, monkeypatch):
    from precompute.sweep import SweepError, load_sweep
    from tests.precompute.helpers import make_dataset, write_sweep

    manifest = make_dataset(tmp_path / "data", n=2, captions=1)
    torch.save({"w": torch.zeros(1)}, tmp_path / "w.pth")
    path = write_sweep(tmp_path / "sweep.toml", manifest=manifest,
                       models=[{"source": "timm:efficientnet_lite0", "weights": "w.pth"}])
    monkeypatch.chdir("/")
    assert load_sweep(path).models[0].options["weights"] == str(tmp_path / "w.pth")
    path = write_sweep(tmp_path / "sweep.toml", manifest=manifest,
                       models=[{"source": "timm:efficientnet_lite0", "weights": "gone.pth"}])
    with pytest.raises(SweepError, match=r"sweep.toml:\d+: models\[0\].weights: weights file .*gone.pth does not exist"):
        load_sweep(path)


def test_a_file_with_the_models_own_names_maps_by_name_whatever_its_order():
    model = Ours()
    sd = theirs(model, rename=lambda k: k)
    shuffled = dict(reversed(list(sd.items())))
    mapped = map_state_dict(shuffled, model, "w.safetensors", "timm:x")
    assert list(mapped) == list(model.state_dict()) and all(torch.equal(mapped[k], sd[k]) for k in sd)


def test_a_safetensors_file_with_other_names_is_refused_as_it_keeps_no_order():
    model = Ours()
    with pytest.raises(ModelError, match=r"w.safetensors: its names are not timm:x's \(first: '_conv_stem._weight'\)"
                                         r".*save the state dict with torch.save"):
        map_state_dict(theirs(model), model, "w.safetensors", "timm:x")
