"""Small randomly initialised models built from transformers configs and saved like hub models.

Used by the tests and by the offline demo: nothing is downloaded. Every model written here carries
``layerscope_random_init: true`` in its config, so the store, dashboard and reports label it
"random init". Tokenizers are trained in-process with the ``tokenizers`` library.
"""

from __future__ import annotations

from pathlib import Path

import torch

DEFAULT_CORPUS = [
    "a red circle appears before a blue circle",
    "a blue circle appears after a red circle",
    "a green square moves left quickly over a striped background",
    "a yellow triangle moves right slowly on a dotted background",
    "the shape changes colour and then a second shape enters",
    "summarize the video in one word:",
    "summarize above sentence in one word:",
]


def _mark(config):
    config.layerscope_random_init = True
    return config


def _word_tokenizer(corpus, *, kind: str):
    """A fast tokenizer trained on ``corpus``: kind ``bert`` (CLS/SEP), ``llama`` (BOS) or ``t5`` (EOS)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = {"bert": ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                "llama": ["<unk>", "<s>", "</s>", "<image>", "<video>"],
                "t5": ["<pad>", "</s>", "<unk>"]}[kind]
    unk = "[UNK]" if kind == "bert" else "<unk>"
    tok = Tokenizer(models.WordLevel(unk_token=unk))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(special_tokens=specials, min_frequency=1)
    words = set(w for line in corpus for w in line.lower().replace(".", " . ").split())
    tok.train_from_iterator(list(corpus) + sorted(words), trainer)
    if kind == "bert":
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
            special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
        return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                       cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
    if kind == "llama":
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
        return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                       additional_special_tokens=["<image>", "<video>"])
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", tok.token_to_id("</s>"))])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="</s>")


def _save(model, out, *processors):
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a bar per tiny file is noise
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for p in processors:
        p.save_pretrained(out)
    return out


def _seeded(seed):
    torch.manual_seed(seed)


def build_videomae(out, *, size=32, frames=4, hidden=32, layers=3, seed=0):
    from transformers import VideoMAEConfig, VideoMAEModel
    from transformers.models.videomae.image_processing_pil_videomae import VideoMAEImageProcessorPil

    _seeded(seed)
    cfg = _mark(VideoMAEConfig(image_size=size, patch_size=8, num_frames=frames, tubelet_size=2, hidden_size=hidden,
                               num_hidden_layers=layers, num_attention_heads=4, intermediate_size=2 * hidden))
    proc = VideoMAEImageProcessorPil(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
    return _save(VideoMAEModel(cfg), out, proc)


def build_timesformer(out, *, size=32, frames=4, hidden=32, layers=2, seed=0):
    from transformers import TimesformerConfig, TimesformerModel
    from transformers.models.videomae.image_processing_pil_videomae import VideoMAEImageProcessorPil

    _seeded(seed)
    cfg = _mark(TimesformerConfig(image_size=size, patch_size=8, num_frames=frames, hidden_size=hidden,
                                  num_hidden_layers=layers, num_attention_heads=4, intermediate_size=2 * hidden))
    # TimeSformer's own video processor needs torchvision; VideoMAE's PIL processor does the same job
    proc = VideoMAEImageProcessorPil(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
    return _save(TimesformerModel(cfg), out, proc)


def build_vivit(out, *, size=32, frames=4, hidden=32, layers=2, seed=0):
    from transformers import VivitConfig, VivitModel
    from transformers.models.vivit.image_processing_vivit import VivitImageProcessor

    _seeded(seed)
    cfg = _mark(VivitConfig(image_size=size, num_frames=frames, tubelet_size=[2, 8, 8], hidden_size=hidden,
                            num_hidden_layers=layers, num_attention_heads=4, intermediate_size=2 * hidden))
    proc = VivitImageProcessor(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
    return _save(VivitModel(cfg, add_pooling_layer=False), out, proc)


def build_vjepa2(out, *, size=32, frames=4, hidden=32, layers=2, seed=0):
    from transformers import VJEPA2Config, VJEPA2Model
    from transformers.models.videomae.image_processing_pil_videomae import VideoMAEImageProcessorPil

    _seeded(seed)
    cfg = _mark(VJEPA2Config(crop_size=size, patch_size=8, frames_per_clip=frames, tubelet_size=2, hidden_size=hidden,
                             num_hidden_layers=layers, num_attention_heads=4, mlp_ratio=2, pred_hidden_size=hidden,
                             pred_num_attention_heads=4, pred_num_hidden_layers=1, num_pooler_layers=1))
    # V-JEPA 2's own video processor needs torchvision; VideoMAE's PIL processor resizes and normalises alike
    proc = VideoMAEImageProcessorPil(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
    return _save(VJEPA2Model(cfg), out, proc)


def build_xclip(out, *, size=32, frames=4, hidden=32, layers=2, seed=0):
    """X-CLIP: its vision tower encodes frames with cross-frame message tokens (``num_frames`` per clip)."""
    from transformers import XCLIPConfig, XCLIPModel
    from transformers.models.videomae.image_processing_pil_videomae import VideoMAEImageProcessorPil

    _seeded(seed)
    vision = dict(image_size=size, patch_size=8, num_frames=frames, hidden_size=hidden, intermediate_size=2 * hidden,
                  num_hidden_layers=layers, num_attention_heads=4, mit_hidden_size=hidden,
                  mit_intermediate_size=2 * hidden, mit_num_attention_heads=4)
    text = dict(vocab_size=64, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=1,
                num_attention_heads=4, max_position_embeddings=32)
    cfg = _mark(XCLIPConfig(text_config=text, vision_config=vision, projection_dim=hidden,
                            prompt_num_attention_heads=4))
    # X-CLIP's processor is VideoMAE's image processor with a CLIP tokenizer; the vision side needs the former only
    proc = VideoMAEImageProcessorPil(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
    return _save(XCLIPModel(cfg), out, proc)


def build_vit(out, *, size=32, hidden=32, layers=3, seed=0):
    from transformers import ViTConfig, ViTModel
    from transformers.models.vit.image_processing_pil_vit import ViTImageProcessorPil

    _seeded(seed)
    cfg = _mark(ViTConfig(image_size=size, patch_size=8, hidden_size=hidden, num_hidden_layers=layers,
                          num_attention_heads=4, intermediate_size=2 * hidden))
    proc = ViTImageProcessorPil(size={"height": size, "width": size})
    return _save(ViTModel(cfg, add_pooling_layer=False), out, proc)


def build_dinov2(out, *, size=32, hidden=32, layers=3, seed=0):
    from transformers import Dinov2Config, Dinov2Model
    from transformers.models.vit.image_processing_pil_vit import ViTImageProcessorPil

    _seeded(seed)
    cfg = _mark(Dinov2Config(image_size=size, patch_size=8, hidden_size=hidden, num_hidden_layers=layers,
                             num_attention_heads=4, mlp_ratio=2))
    proc = ViTImageProcessorPil(size={"height": size, "width": size})
    return _save(Dinov2Model(cfg), out, proc)


def build_bert(out, *, corpus=DEFAULT_CORPUS, hidden=32, layers=3, seed=0, max_positions=256):
    from transformers import BertConfig, BertModel

    _seeded(seed)
    tok = _word_tokenizer(corpus, kind="bert")
    cfg = _mark(BertConfig(vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
                           intermediate_size=2 * hidden, max_position_embeddings=max_positions,
                           pad_token_id=tok.pad_token_id))
    return _save(BertModel(cfg, add_pooling_layer=False), out, tok)


def build_t5(out, *, corpus=DEFAULT_CORPUS, hidden=32, layers=2, seed=0):
    from transformers import T5Config, T5Model

    _seeded(seed)
    tok = _word_tokenizer(corpus, kind="t5")
    cfg = _mark(T5Config(vocab_size=len(tok), d_model=hidden, d_kv=8, d_ff=2 * hidden, num_layers=layers,
                         num_decoder_layers=1, num_heads=4, pad_token_id=tok.pad_token_id,
                         eos_token_id=tok.eos_token_id, decoder_start_token_id=tok.pad_token_id))
    return _save(T5Model(cfg), out, tok)


def build_llama(out, *, corpus=DEFAULT_CORPUS, hidden=32, layers=3, seed=0):
    from transformers import LlamaConfig, LlamaModel

    _seeded(seed)
    tok = _word_tokenizer(corpus, kind="llama")
    cfg = _mark(LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                            num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                            max_position_embeddings=512, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id))
    return _save(LlamaModel(cfg), out, tok)


def build_llava(out, *, corpus=DEFAULT_CORPUS, size=32, hidden=32, layers=2, seed=0, chat_template=None):
    """A tiny LLaVA: CLIP vision tower, Llama language model, and a processor with an ``<image>`` token
    (and ``chat_template``, a Jinja string, when given)."""
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    _seeded(seed)
    tok = _word_tokenizer(corpus, kind="llama")
    vision = CLIPVisionConfig(image_size=size, patch_size=8, hidden_size=hidden, intermediate_size=2 * hidden,
                              num_hidden_layers=2, num_attention_heads=4, projection_dim=hidden)
    text = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                       bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    cfg = _mark(LlavaConfig(vision_config=vision, text_config=text, image_token_index=tok.convert_tokens_to_ids("<image>"),
                            vision_feature_select_strategy="default", vision_feature_layer=-1))
    proc = LlavaProcessor(image_processor=CLIPImageProcessorPil(size={"shortest_edge": size},
                                                                crop_size={"height": size, "width": size}),
                          tokenizer=tok, patch_size=8, vision_feature_select_strategy="default", image_token="<image>",
                          num_additional_image_tokens=1, chat_template=chat_template)
    return _save(LlavaForConditionalGeneration(cfg), out, proc)


BUILDERS = {
    "videomae": build_videomae, "timesformer": build_timesformer, "vivit": build_vivit, "vjepa2": build_vjepa2,
    "xclip": build_xclip, "vit": build_vit, "dinov2": build_dinov2,
    "bert": build_bert, "t5": build_t5, "llama": build_llama, "llava": build_llava,
}


# ---- models outside transformers' own classes ----------------------------------------------------

#: A VideoMAEv2-like remote-code model: its own config and modeling files named in ``auto_map``,
#: a ``model.blocks`` list inside a PreTrainedModel wrapper, clips as ``(B, C, T, H, W)`` through a
#: Conv3d patch embedding, mean pooling with ``fc_norm``, and a forward that returns one tensor
#: (no hidden states), as OpenGVLab/VideoMAEv2-Base's remote code does.
REMOTE_CONFIG_PY = '''
from transformers import PretrainedConfig


class TinyVideoMAEv2Config(PretrainedConfig):
    model_type = "TinyVideoMAEv2"

    def __init__(self, model_config=None, **kwargs):
        self.model_config = model_config or {}
        super().__init__(**kwargs)
'''

REMOTE_MODELING_PY = '''
import torch
from torch import nn
from transformers import PreTrainedModel

from .configuration_tinyvideomaev2 import TinyVideoMAEv2Config


class PatchEmbed(nn.Module):
    def __init__(self, patch_size, tubelet_size, embed_dim):
        super().__init__()
        k = (tubelet_size, patch_size, patch_size)
        self.proj = nn.Conv3d(3, embed_dim, kernel_size=k, stride=k)

    def forward(self, x):  # (B, C, T, H, W)
        return self.proj(x).flatten(2).transpose(1, 2)


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.heads = heads

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        att = ((q @ k.transpose(-2, -1)) * (C // self.heads) ** -0.5).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, N, C))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(self, img_size=32, patch_size=8, tubelet_size=2, num_frames=4, embed_dim=32, depth=3,
                 num_heads=4, **_):
        super().__init__()
        self.patch_embed = PatchEmbed(patch_size, tubelet_size, embed_dim)
        n = (num_frames // tubelet_size) * (img_size // patch_size) ** 2
        self.pos_embed = nn.Parameter(torch.randn(1, n, embed_dim) * 0.02)
        self.blocks = nn.ModuleList(Block(embed_dim, num_heads) for _ in range(depth))
        self.fc_norm = nn.LayerNorm(embed_dim)
        self.head = nn.Identity()

    def forward_features(self, x):
        x = self.patch_embed(x) + self.pos_embed
        for blk in self.blocks:
            x = blk(x)
        return self.fc_norm(x.mean(1))

    def forward(self, x):
        return self.head(self.forward_features(x))


class TinyVideoMAEv2(PreTrainedModel):
    config_class = TinyVideoMAEv2Config
    base_model_prefix = "model"
    main_input_name = "pixel_values"

    def __init__(self, config):
        super().__init__(config)
        self.model = VisionTransformer(**config.model_config)
        self.post_init()

    def _init_weights(self, module):
        pass  # the modules' own initialisation (seeded by the builder)

    def extract_features(self, pixel_values):
        return self.model.forward_features(pixel_values)

    def forward(self, pixel_values):
        return self.model(pixel_values)
'''


def build_remote_videomae_v2(out, *, size=32, frames=4, hidden=32, layers=3, seed=0):
    """A remote-code video model folder (``config.json`` with ``auto_map``, its two code files,
    weights, VideoMAE's PIL processor), loadable only with ``trust_remote_code=True``."""
    import json

    from transformers import AutoConfig, AutoModel
    from transformers.models.videomae.image_processing_pil_videomae import VideoMAEImageProcessorPil

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "configuration_tinyvideomaev2.py").write_text(REMOTE_CONFIG_PY)
    (out / "modeling_tinyvideomaev2.py").write_text(REMOTE_MODELING_PY)
    (out / "config.json").write_text(json.dumps({
        "model_type": "TinyVideoMAEv2", "layerscope_random_init": True,
        "auto_map": {"AutoConfig": "configuration_tinyvideomaev2.TinyVideoMAEv2Config",
                     "AutoModel": "modeling_tinyvideomaev2.TinyVideoMAEv2"},
        "model_config": {"img_size": size, "patch_size": 8, "tubelet_size": 2, "num_frames": frames,
                         "embed_dim": hidden, "depth": layers, "num_heads": 4},
    }))
    config = AutoConfig.from_pretrained(out, trust_remote_code=True)
    _seeded(seed)
    model = AutoModel.from_config(config, trust_remote_code=True)
    proc = VideoMAEImageProcessorPil(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
    return _save(model, out, proc)


def build_clip(out, *, size=32, hidden=32, projection=16, layers=2, seed=0, corpus=DEFAULT_CORPUS):
    """A tiny CLIP dual encoder whose projection (``projection`` wide) is narrower than its towers,
    with a word-level tokenizer trained in-process (``[SEP]`` as CLIP's end-of-text token)."""
    from transformers import CLIPConfig, CLIPModel
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    _seeded(seed)
    tok = _word_tokenizer(corpus, kind="bert")
    text = dict(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                num_attention_heads=4, max_position_embeddings=32, eos_token_id=tok.sep_token_id,
                pad_token_id=tok.pad_token_id, bos_token_id=tok.cls_token_id)
    vision = dict(image_size=size, patch_size=8, hidden_size=hidden, intermediate_size=2 * hidden,
                  num_hidden_layers=layers, num_attention_heads=4)
    cfg = _mark(CLIPConfig(text_config=text, vision_config=vision, projection_dim=projection))
    proc = CLIPImageProcessorPil(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
    return _save(CLIPModel(cfg), out, proc, tok)
