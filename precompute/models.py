"""Model adapters: load a Hugging Face model by hub id or local path and pool every layer.

Each adapter turns one batch of inputs into ``(L, B, d)`` float32 numpy arrays, where layer 0 is
the embedding output (``hidden_states[0]``) so layer indices match ``hidden_states``.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .video import clip_indices

#: Video families transformers exposes with hidden_states: model_type -> pooling
VIDEO_TYPES = {"videomae": "mean", "timesformer": "cls", "vivit": "cls", "vjepa2": "mean"}
#: Image families: model_type -> pooling (vision towers of joint models are taken from the full model)
IMAGE_TYPES = {
    "vit": "cls", "dinov2": "cls", "dinov2_with_registers": "cls", "deit": "cls", "beit": "cls",
    "clip_vision_model": "cls", "clip": "cls", "siglip_vision_model": "mean", "siglip": "mean",
    "vit_mae": "cls", "ijepa": "mean", "dinov3_vit": "cls",
}
#: Multimodal LLMs (last-token embedding under a one-word prompt)
MLLM_TYPES = {"llava", "llava_next", "llava_next_video", "llava_onevision", "qwen2_vl", "qwen2_5_vl"}
#: Encoder–decoder text models: use the encoder only
ENCODER_DECODER_TEXT = {"t5", "mt5", "umt5", "bart", "mbart"}

MLLM_VIDEO_PROMPT = "{media} Summarize the video in one word:"
MLLM_TEXT_PROMPT = "{text} Summarize above sentence in one word:"

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ModelError(ValueError):
    """A model that cannot be used, with the reason and what would work."""


@dataclass
class ModelInfo:
    source: str
    model_type: str
    modality: str  # video | image | text | mllm
    pooling: str  # cls | mean | last_token
    n_layers: int  # including layer 0
    dim: int
    params: int
    native_frames: int | None
    revision: str
    random_init: bool
    config: dict


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelError("--device cuda was asked for but torch sees no CUDA device; use --device cpu or auto")
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise ModelError(f"unknown device {device!r}; use auto, cpu or cuda")
    return torch.device(device)


def local_revision(path: Path) -> str:
    """Content hash of a local model folder: config and weight files (name, size, bytes)."""
    h = hashlib.sha256()
    for f in sorted(path.iterdir()):
        if f.is_file() and (f.suffix in (".json", ".safetensors", ".bin", ".model", ".txt")):
            h.update(f.name.encode())
            h.update(str(f.stat().st_size).encode())
            with f.open("rb") as fh:
                # whole small files; head and tail of big weight shards (a full read of many GB
                # would cost minutes for a change that size and ends already reveal)
                if f.stat().st_size <= 64 << 20:
                    h.update(fh.read())
                else:
                    h.update(fh.read(16 << 20))
                    fh.seek(-(16 << 20), os.SEEK_END)
                    h.update(fh.read())
    return "local-" + h.hexdigest()[:16]


def default_name(spec: str) -> str:
    """Store name: the hub id as given, or the local folder's base name."""
    p = Path(spec)
    return p.resolve().name if p.exists() else spec


def _classify(config, modality_override: str | None) -> tuple[str, str]:
    mt = config.model_type
    if modality_override:
        if modality_override == "text" and mt in ("clip", "siglip"):
            return "text", "mean"
        if modality_override == "image" and (mt in IMAGE_TYPES or mt in VIDEO_TYPES):
            return "image", IMAGE_TYPES.get(mt, VIDEO_TYPES.get(mt))
        if modality_override == "text" and mt not in VIDEO_TYPES and mt not in IMAGE_TYPES:
            return "text", "mean"
        if modality_override == "video" and mt in VIDEO_TYPES:
            return "video", VIDEO_TYPES[mt]
        if modality_override == "mllm" and mt in MLLM_TYPES:
            return "mllm", "last_token"
        raise ModelError(f"model type {mt!r} cannot be used as modality {modality_override!r}")
    if mt in VIDEO_TYPES:
        return "video", VIDEO_TYPES[mt]
    if mt in IMAGE_TYPES:
        return "image", IMAGE_TYPES[mt]
    if mt in MLLM_TYPES:
        return "mllm", "last_token"
    from transformers.models.auto import modeling_auto as ma

    text_types = set()
    for table in ("MODEL_FOR_MASKED_LM_MAPPING_NAMES", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
                  "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_TEXT_ENCODING_MAPPING_NAMES"):
        text_types |= set(getattr(ma, table, {}))
    if mt in text_types and not getattr(config, "vision_config", None):
        return "text", "mean"
    raise ModelError(
        f"unknown model type {mt!r}. LayerScope extracts video models ({', '.join(sorted(VIDEO_TYPES))}), "
        f"image models ({', '.join(sorted(IMAGE_TYPES))}), text models (any transformers text model with "
        f"a tokenizer) and MLLMs ({', '.join(sorted(MLLM_TYPES))})."
    )


class Adapter:
    """Loads the model and its processor; subclasses pool one batch."""

    def __init__(self, spec: str, *, device="cpu", dtype="float32", trust_remote_code=False,
                 modality: str | None = None):
        from transformers import AutoConfig

        self.spec = spec
        self.device = resolve_device(device) if isinstance(device, str) else device
        if dtype not in DTYPES:
            raise ModelError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
        self.dtype_name = dtype
        self.dtype = DTYPES[dtype]
        self.trust = trust_remote_code
        local = Path(spec)
        self.is_local = local.exists()
        self.source = str(local.resolve()) if self.is_local else spec
        try:
            self.config = AutoConfig.from_pretrained(self.source, trust_remote_code=trust_remote_code)
        except Exception as exc:
            hint = "" if self.is_local else (
                " (no such local folder; as a hub id it needs the hub or a cached copy — "
                "set HF_HUB_OFFLINE=1 to use the cache only)"
            )
            raise ModelError(f"cannot load a model config from {spec!r}{hint}: {exc}") from None
        self.modality, self.pooling = _classify(self.config, modality)

    # ---- loading -----------------------------------------------------------------
    def _load_kwargs(self):
        # transformers prefers model.safetensors over pickled .bin weights when both exist
        return {"trust_remote_code": self.trust, "dtype": self.dtype}

    def load(self):
        raise NotImplementedError

    def info(self) -> ModelInfo:
        revision = local_revision(Path(self.source)) if self.is_local else (
            getattr(self.config, "_commit_hash", None) or "unknown")
        try:
            cfg = self.config.to_dict()
            json.dumps(cfg)
        except TypeError:
            cfg = json.loads(self.config.to_json_string())
        return ModelInfo(
            source=self.source, model_type=self.config.model_type, modality=self.modality,
            pooling=self.pooling, n_layers=self.n_layers, dim=self.dim,
            params=int(sum(p.numel() for p in self.model.parameters())),
            native_frames=getattr(self, "native_frames", None), revision=revision,
            random_init=bool(getattr(self.config, "layerscope_random_init", False)), config=cfg,
        )

    def _finish_load(self, model):
        model = model.to(self.device).eval()
        self.model = model
        # layers and width from the config when it states them (a probe forward of a large video
        # model costs as much as a batch); the first real batch is checked against them
        self.n_layers, self.dim = self._dims_from_config() or self._probe()
        return self

    def _dims_from_config(self):
        cfg = self.config
        sub = {"image": "vision_config", "video": "vision_config", "text": "text_config"}.get(self.modality)
        if sub and getattr(cfg, sub, None) is not None and cfg.model_type in ("clip", "siglip"):
            cfg = getattr(cfg, sub)
        layers = getattr(cfg, "num_hidden_layers", None) or getattr(cfg, "num_layers", None)
        width = getattr(cfg, "hidden_size", None) or getattr(cfg, "d_model", None)
        if isinstance(width, list):  # hierarchical models state a width per stage: probe instead
            return None
        return (int(layers) + 1, int(width)) if layers and width else None

    # ---- forward -----------------------------------------------------------------
    def _hidden_states(self, **inputs):
        with torch.inference_mode():
            out = self.model(**inputs, output_hidden_states=True, return_dict=True)
        hs = getattr(out, "hidden_states", None)
        if hs is None:
            hs = getattr(out, "encoder_hidden_states", None)
        if hs is None:
            raise ModelError(
                f"model {self.spec!r} ({type(self.model).__name__}) returns no hidden_states; "
                "LayerScope needs every layer's output"
            )
        return hs

    def _pool_tokens(self, hs, mask=None) -> np.ndarray:
        """``(L, B, d)`` float32 from a tuple of ``(B, T, d)`` hidden states."""
        if (len(hs), hs[-1].shape[-1]) != (self.n_layers, self.dim):
            raise ModelError(
                f"model {self.spec!r} returned {len(hs)} hidden states of width {hs[-1].shape[-1]}, but its config "
                f"implies {self.n_layers} of width {self.dim}; LayerScope cannot pool it consistently"
            )
        stacked = torch.stack([h.float() for h in hs])  # (L, B, T, d)
        if self.pooling == "cls":
            pooled = stacked[:, :, 0]
        elif self.pooling == "mean" and mask is None:
            pooled = stacked.mean(dim=2)
        elif self.pooling == "mean":
            m = mask.to(stacked.dtype)[None, :, :, None]  # real tokens only, no padding
            pooled = (stacked * m).sum(dim=2) / m.sum(dim=2).clamp(min=1)
        else:  # last_token: the last real token of each row
            last = mask.long().sum(dim=1) - 1 if mask is not None else torch.full(
                (stacked.shape[1],), stacked.shape[2] - 1)
            pooled = stacked[:, torch.arange(stacked.shape[1]), last.to(stacked.device)]
        return pooled.cpu().numpy().astype(np.float32)


class VisionAdapter(Adapter):
    """Video models (clips of the native length) and image models (frame by frame)."""

    def load(self):
        from transformers import AutoImageProcessor, AutoModel

        try:
            self.processor = AutoImageProcessor.from_pretrained(self.source, trust_remote_code=self.trust)
        except Exception as exc:
            try:
                from transformers import AutoVideoProcessor

                self.processor = AutoVideoProcessor.from_pretrained(self.source, trust_remote_code=self.trust)
            except Exception:
                raise ModelError(f"cannot load the image/video processor of {self.spec!r}: {exc}") from None
        mt = self.config.model_type
        if mt in ("clip", "siglip"):
            model = AutoModel.from_pretrained(self.source, **self._load_kwargs()).vision_model
        else:
            model = AutoModel.from_pretrained(self.source, **self._load_kwargs())
        if self.modality == "video":
            self.native_frames = int(getattr(self.config, "num_frames", None)
                                     or getattr(self.config, "frames_per_clip", None) or 16)
        self.pixel_key = "pixel_values_videos" if "pixel_values_videos" in inspect.signature(
            model.forward).parameters else "pixel_values"
        return self._finish_load(model)

    def _probe(self):
        size = self._input_size()
        if self.modality == "video":
            x = torch.zeros((1, self.native_frames, 3, size, size), dtype=self.dtype, device=self.device)
        else:
            x = torch.zeros((1, 3, size, size), dtype=self.dtype, device=self.device)
        hs = self._hidden_states(**{self.pixel_key: x})
        return len(hs), hs[-1].shape[-1]

    def _input_size(self):
        cfg = getattr(self.config, "vision_config", None) or self.config
        return int(getattr(cfg, "image_size", None) or getattr(cfg, "crop_size", None) or 224)

    def _pixels(self, batch_of_frame_lists) -> torch.Tensor:
        if self.modality == "video":
            out = self.processor(batch_of_frame_lists, return_tensors="pt")
        else:
            out = self.processor(images=batch_of_frame_lists, return_tensors="pt")
        key = "pixel_values_videos" if "pixel_values_videos" in out else "pixel_values"
        return out[key].to(self.device, self.dtype)

    def embed_videos(self, videos: list[np.ndarray], *, image_mode: str = "frames") -> np.ndarray:
        """``(L, B, d)`` for ``B`` videos of already-sampled frames ``(n_f, H, W, 3)``.

        Video models: sub-clips of the native length (nearest-neighbour repetition), each encoded,
        averaged per layer. Image models: every frame encoded and averaged (``image_mode="frames"``)
        or the first frame only (``"first"``).
        """
        units, owner = [], []
        for b, frames in enumerate(videos):
            if self.modality == "video":
                for clip in clip_indices(len(frames), self.native_frames):
                    units.append(list(frames[clip]))
                    owner.append(b)
            else:
                chosen = frames[:1] if image_mode == "first" else frames
                for f in chosen:
                    units.append(f)
                    owner.append(b)
        pooled = self.embed_units(units)  # (L, U, d)
        owner = np.asarray(owner)
        out = np.stack([pooled[:, owner == b].mean(axis=1) for b in range(len(videos))], axis=1)
        return out.astype(np.float32)

    def embed_units(self, units) -> np.ndarray:
        """``(L, U, d)``: one forward per clip (video) or frame (image), no averaging."""
        pixels = self._pixels(units)
        hs = self._hidden_states(**{self.pixel_key: pixels})
        return self._pool_tokens(hs)


class TextAdapter(Adapter):
    """Text encoders, encoders of encoder–decoder models, and decoder-only LLMs: masked token mean."""

    def load(self):
        from transformers import AutoModel, AutoTokenizer

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.source, trust_remote_code=self.trust)
        except Exception as exc:
            raise ModelError(f"cannot load the tokenizer of {self.spec!r}: {exc}") from None
        if self.tokenizer.pad_token is None:
            # decoder-only tokenizers often have no pad token; padding is masked out anyway
            self.tokenizer.pad_token = self.tokenizer.eos_token or self.tokenizer.unk_token
        mt = self.config.model_type
        if mt in ENCODER_DECODER_TEXT or getattr(self.config, "is_encoder_decoder", False):
            if mt in ("t5", "mt5", "umt5"):
                import transformers

                cls = getattr(transformers, {"t5": "T5EncoderModel", "mt5": "MT5EncoderModel",
                                             "umt5": "UMT5EncoderModel"}[mt])
                model = cls.from_pretrained(self.source, **self._load_kwargs())
            else:
                model = AutoModel.from_pretrained(self.source, **self._load_kwargs()).get_encoder()
        elif mt in ("clip", "siglip"):
            model = AutoModel.from_pretrained(self.source, **self._load_kwargs()).text_model
        else:
            model = AutoModel.from_pretrained(self.source, **self._load_kwargs())
        limit = getattr(self.config, "max_position_embeddings", None) or getattr(
            getattr(self.config, "text_config", None), "max_position_embeddings", None)
        self.max_length = min(int(self.tokenizer.model_max_length or 512), int(limit or 512), 8192)
        return self._finish_load(model)

    def _probe(self):
        hs = self._hidden_states(**self._tokens(["probe"]))
        return len(hs), hs[-1].shape[-1]

    def _tokens(self, texts):
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length,
                             return_tensors="pt")
        keep = {"input_ids", "attention_mask", "token_type_ids"}
        params = inspect.signature(self.model.forward).parameters
        return {k: v.to(self.device) for k, v in enc.items() if k in keep and k in params}

    def embed_texts(self, texts: list[str]) -> np.ndarray:
        """``(L, B, d)``: mean over real tokens (attention mask) of every layer."""
        enc = self._tokens(texts)
        hs = self._hidden_states(**enc)
        return self._pool_tokens(hs, enc["attention_mask"])


class MllmAdapter(Adapter):
    """Multimodal LLMs (LLaVA-style: an image processor, a tokenizer with an image token, a language
    model): the "explicit one-word limitation" prompt, and the hidden state of the last token of
    every language-model layer (nuanced video retrieval paper; DESIGN §4).

    Video: the ``n_f`` sampled frames go in as ``n_f`` images before the prompt
    ``{media} Summarize the video in one word:``. Text: ``{text} Summarize above sentence in one word:``.
    Layer 0 is the language model's embedding output.
    """

    def load(self):
        import transformers
        from transformers import AutoProcessor

        try:
            self.processor = AutoProcessor.from_pretrained(self.source, trust_remote_code=self.trust)
        except Exception as exc:
            raise ModelError(f"cannot load the processor of {self.spec!r}: {exc}") from None
        model = None
        for name in ("AutoModelForImageTextToText", "AutoModelForVision2Seq", "AutoModel"):
            auto = getattr(transformers, name, None)
            if auto is None:
                continue
            try:
                model = auto.from_pretrained(self.source, **self._load_kwargs())
                break
            except (ValueError, KeyError):
                continue
        if model is None:
            raise ModelError(f"no transformers class can load the MLLM {self.spec!r}")
        tok = getattr(self.processor, "tokenizer", None)
        if tok is not None and tok.pad_token is None:
            tok.pad_token = tok.eos_token or tok.unk_token
        self.image_token = getattr(self.processor, "image_token", None) or "<image>"
        return self._finish_load(model)

    def _dims_from_config(self):
        cfg = getattr(self.config, "text_config", None) or self.config
        layers, width = getattr(cfg, "num_hidden_layers", None), getattr(cfg, "hidden_size", None)
        return (int(layers) + 1, int(width)) if layers and width else None

    def _forward_last_token(self, **enc) -> np.ndarray:
        enc = {k: (v.to(self.device, self.dtype) if k == "pixel_values" else v.to(self.device)) for k, v in enc.items()}
        hs = self._hidden_states(**enc)
        return self._pool_tokens(hs, enc["attention_mask"])

    def embed_videos(self, videos: list[np.ndarray], *, image_mode: str = "frames") -> np.ndarray:
        """``(L, B, d)``: one prompt per video with its sampled frames as images."""
        prompts, images = [], []
        for frames in videos:
            chosen = frames[:1] if image_mode == "first" else frames
            prompts.append(MLLM_VIDEO_PROMPT.format(media=self.image_token * len(chosen)))
            images.extend(list(chosen))
        enc = self.processor(images=images, text=prompts, padding=True, return_tensors="pt")
        return self._forward_last_token(**enc)

    def embed_texts(self, texts: list[str]) -> np.ndarray:
        """``(L, B, d)``: the last token of ``<sentence> Summarize above sentence in one word:``."""
        prompts = [MLLM_TEXT_PROMPT.format(text=t) for t in texts]
        enc = self.processor(text=prompts, padding=True, return_tensors="pt")
        return self._forward_last_token(**enc)


def load_adapter(spec: str, *, device="cpu", dtype="float32", trust_remote_code=False,
                 modality: str | None = None) -> Adapter:
    """Load the right adapter for a hub id or local folder (``from_pretrained`` either way)."""
    from transformers.utils import logging as hf_logging

    # our own progress bars and messages say what happens; transformers' load reports would
    # bury them (e.g. an unused pooler head is expected: LayerScope reads hidden states only)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    probe = Adapter(spec, device=device, dtype=dtype, trust_remote_code=trust_remote_code, modality=modality)
    if probe.modality in ("video", "image"):
        cls = VisionAdapter
    elif probe.modality == "text":
        cls = TextAdapter
    else:
        cls = MllmAdapter
    adapter = cls.__new__(cls)
    adapter.__dict__.update(probe.__dict__)
    return adapter.load()
