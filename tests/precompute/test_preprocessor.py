"""``Adapter.preprocessor()``: what a CPU worker gets — no weights, picklable, the same inputs."""

import pickle

import numpy as np
import pytest
import torch

from precompute.adapters.dispatch import load_adapter

FRAMES = [np.random.default_rng(i).integers(0, 256, size=(3, 40, 48, 3), dtype=np.uint8) for i in range(2)]
TEXTS = ["a red circle", "a blue square moves left quickly"]


@pytest.mark.parametrize("name, spec, kind", [
    ("videomae", None, "video"), ("vit", None, "video"), ("bert", None, "text"), ("t5", None, "text"),
    ("timm", "timm:vit_tiny_patch16_224?img_size=32&depth=2", "video"),
])
def test_preprocessor_has_no_weights_pickles_and_prepares_the_same_inputs(tiny, name, spec, kind):
    adapter = load_adapter(spec or tiny[name], random_init=spec is not None)
    pre = pickle.loads(pickle.dumps(adapter.preprocessor()))
    assert not any(isinstance(v, torch.nn.Module) for v in vars(pre).values())
    assert any(isinstance(v, torch.nn.Module) for v in vars(adapter).values())  # the adapter itself keeps them
    if kind == "video":
        want, got = adapter.prepare_videos(FRAMES), pre.prepare_videos(FRAMES)
    else:
        want, got = adapter.prepare_texts(TEXTS), pre.prepare_texts(TEXTS)
        assert pre.text_overflow(TEXTS) == adapter.text_overflow(TEXTS)
    assert set(got.inputs) == set(want.inputs) and all(torch.equal(got.inputs[k], want.inputs[k]) for k in want.inputs)
    assert got.n_items == want.n_items and got.masked == want.masked
    assert (got.owner is None and want.owner is None) or np.array_equal(got.owner, want.owner)
    # and the model runs on what the weightless copy prepared exactly as on its own inputs
    np.testing.assert_array_equal(adapter.run(got), adapter.run(want))
