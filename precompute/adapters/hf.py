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

from .model_info import ModelInfo
from ..inputs.video import clip_indices

#: Video families transformers exposes with hidden_states: model_type -> pooling
VIDEO_TYPES = {"videomae": "mean", "timesformer": "cls", "vivit": "cls", "vjepa2": "mean", "xclip": "cls"}
#: Video models whose vision tower encodes each frame of a clip as an image (with cross-frame
#: exchange inside): hidden states are per frame, pooled per frame and averaged over the clip
FRAME_TOWER_TYPES = {"xclip"}
#: Joint vision–text models: the vision tower or the text tower is taken from the full model
DUAL_TOWER_TYPES = {"clip", "siglip", "xclip"}
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

#: The "explicit one-word limitation" prompts, exactly as the nuanced-retrieval paper writes them
#: (``<video>: Summarize the video in one word: ``), trailing space included.
#: ``{media}`` becomes the frames' image tokens, ``{text}`` the caption.
MLLM_VIDEO_PROMPT = "{media}: Summarize the video in one word: "
MLLM_TEXT_PROMPT = "{text}: Summarize above sentence in one word: "
#: --prompt: ``eol`` (the prompts above, the default) or ``plain`` (the input alone, no instruction: the
#: last token is the input's own last token), TARA's EOL-against-plain comparison of one MLLM
PLAIN_PROMPTS = {"video": "{media}", "text": "{text}"}
PROMPTS = ("eol", "plain")
#: --prompt-template: ``auto`` wraps the prompt in the processor's/tokenizer's chat template when it
#: has one (as a user turn, with the assistant's generation prompt after it); ``none`` uses it bare
PROMPT_TEMPLATES = ("auto", "none")

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: Seed of every ``--random-init`` build (part of the revision, so the control is reproducible)
RANDOM_SEED = 0


class ModelError(ValueError):
    """A model that cannot be used, with the reason and what would work."""


#: the hub's reachability, probed once per process: None (reachable) or why it is not
_HUB_OFFLINE: list = []


def hub_offline(timeout: float = 3.0) -> str | None:
    """Why a hub id can only come from the local cache now, or None when the hub may be used.

    Offline when ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set, also when it was set after
    huggingface_hub read it at import, or when the endpoint (``HF_ENDPOINT``, default huggingface.co)
    does not take a TCP connection within ``timeout`` seconds. In either case huggingface_hub is put in
    offline mode for the rest of the process, so a model missing from the cache fails at once with
    the clear error instead of after a minute of retries."""
    import os
    import socket
    from urllib.parse import urlparse

    import huggingface_hub.constants as hub

    if not _HUB_OFFLINE:
        flag = (os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or "").strip().lower()
        if hub.HF_HUB_OFFLINE or flag in ("1", "on", "yes", "true"):
            why = "HF_HUB_OFFLINE is set"
        else:
            url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
            try:
                socket.create_connection((url.hostname, url.port or (80 if url.scheme == "http" else 443)),
                                         timeout=timeout).close()
                why = None
            except OSError as exc:
                why = f"the hub ({url.hostname}) cannot be reached ({exc.strerror or exc})"
        _HUB_OFFLINE.append(why)
    why = _HUB_OFFLINE[0]
    if why:
        hub.HF_HUB_OFFLINE = True
    return why


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise ModelError(f"unknown device {device!r}; use auto, cpu, cuda or cuda:N")
    if device.startswith("cuda"):
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0:
            raise ModelError(f"--device {device} was asked for but torch sees no CUDA device; use --device cpu or auto")
        if device != "cuda":
            index = device.split(":", 1)[1]
            if not index.isdigit() or int(index) >= n:
                raise ModelError(f"--device {device}: torch sees {n} CUDA device(s), cuda:0..cuda:{n - 1}")
    return torch.device(device)


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack")


def check_local_weights(path: Path) -> None:
    """A local model folder must hold weights, and every ``.safetensors`` file must be whole.

    A safetensors file is an 8-byte little-endian header length, a JSON header giving each
    tensor's ``data_offsets``, then the data: the file is whole when its size is ``8 + header +
    max(end offset)``. Reads the headers only. Raises :class:`ModelError` naming the file.
    """
    files = [f for f in path.iterdir() if f.is_file() and f.name.endswith(WEIGHT_SUFFIXES)]
    if not files:
        raise ModelError(f"model folder {path} holds no weight files (*.safetensors or *.bin); "
                         "was the download or save_pretrained complete?")
    for f in files:
        if f.suffix != ".safetensors":
            continue
        size = f.stat().st_size
        try:
            with f.open("rb") as fh:
                n = int.from_bytes(fh.read(8), "little")
                if size < 8 + n:
                    raise ValueError("header cut short")
                header = json.loads(fh.read(n))
            end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise ModelError(f"weight file {f} is damaged ({exc}); download or save the model again") from None
        if size < 8 + n + end:
            raise ModelError(f"weight file {f} is truncated: {size} bytes, its header needs {8 + n + end}; "
                             "download or save the model again")


def hub_commit(repo_id: str, hub: dict) -> str | None:
    """The commit a hub model's files come from: the ``snapshots/<commit>/`` folder its config.json
    resolves to in the hub cache (``hub``: ``revision``, ``cache_dir``), or None. transformers 5 no
    longer sets ``config._commit_hash``, which is what older versions recorded."""
    import re

    from transformers.utils import cached_file

    try:
        path = cached_file(repo_id, "config.json", **hub)
    except Exception:  # offline without a cached copy: the config load has already said so
        return None
    found = re.search(r"[/\\]snapshots[/\\]([0-9a-f]{40})[/\\]", str(path or ""))
    return found.group(1) if found else None


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
    """Store name without ``--name``: :func:`precompute.adapters.naming.default_name`."""
    from .naming import default_name as name

    return name(spec)


def store_name(spec: str, name: str | None = None, random_init: bool = False) -> str:
    """The model's name in the store: ``name`` when given, else :func:`default_name` with
    ``-random-init`` appended for a ``--random-init`` build (never confused with the trained weights)."""
    return name or default_name(spec) + ("-random-init" if random_init else "")


def classify(config, modality_override: str | None) -> tuple[str, str]:
    mt = config.model_type
    if modality_override:
        if modality_override == "text" and mt in DUAL_TOWER_TYPES:
            return "text", "mean"
        if modality_override == "image" and mt in IMAGE_TYPES:
            return "image", IMAGE_TYPES[mt]
        if modality_override == "text" and mt not in VIDEO_TYPES and mt not in IMAGE_TYPES:
            return "text", "mean"
        if modality_override == "video" and mt in VIDEO_TYPES:
            return "video", VIDEO_TYPES[mt]
        if modality_override == "mllm" and mt in MLLM_TYPES:
            return "mllm", "last_token"
        raise ModelError(f"model type {mt!r} cannot be used as modality {modality_override!r}"
                         + (" (a video model takes clips, not single images; use --modality video)"
                            if modality_override == "image" and mt in VIDEO_TYPES else ""))
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
        f"a tokenizer) and MLLMs ({', '.join(sorted(MLLM_TYPES))}) from their hidden_states; any other "
        "PyTorch encoder through hooks on its blocks: remote code with --trust-remote-code "
        "(+ --modality video|image|text), a transformers model with --blocks PATH, timm models as "
        "--model timm:NAME, open_clip models as --model open_clip:ARCH/PRETRAINED (`layerscope models` lists them)."
    )


def _names_remote_code(folder: Path) -> bool:
    try:
        return bool(json.loads((folder / "config.json").read_text()).get("auto_map"))
    except (OSError, ValueError, AttributeError):
        return False


def _known_type(mt: str) -> bool:
    return mt in VIDEO_TYPES or mt in IMAGE_TYPES or mt in MLLM_TYPES or mt in ENCODER_DECODER_TEXT


def is_remote_type(config) -> bool:
    """A config whose classes come from the model's own code (``auto_map``) and whose type
    transformers does not know: extracted through hooks (VideoMAEv2, InternVideo, ...)."""
    if not getattr(config, "auto_map", None) or _known_type(config.model_type):
        return False
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return config.model_type not in CONFIG_MAPPING_NAMES


def _looks_like_video(config) -> bool:
    inner = getattr(config, "model_config", None) or {}
    keys = ("num_frames", "tubelet_size", "frames_per_clip")
    return any(getattr(config, k, None) for k in keys) or (isinstance(inner, dict) and any(inner.get(k) for k in keys))


def classify_hooked(config, modality: str | None, spec: str) -> tuple[str, str | None]:
    """Modality and pooling of a model on the hook path (pooling None: decided at load, ``cls``
    when the model has a class token, else ``mean``)."""
    mt = config.model_type
    if _known_type(mt) or not is_remote_type(config):
        try:
            got, pooling = classify(config, modality)
        except ModelError:
            got, pooling = None, None
        if got == "mllm":
            raise ModelError(f"{spec}: --blocks does not apply to MLLMs (their layers come from the language model's hidden_states)")
        if got:
            return got, pooling
    if modality is None:
        if _looks_like_video(config):
            return "video", None
        raise ModelError(f"{spec}: model type {mt!r} runs through hooks on its blocks, but LayerScope cannot tell "
                         "what it embeds; pass --modality video, image or text")
    if modality not in ("video", "image", "text"):
        raise ModelError(f"{spec}: --modality {modality} is not available on the hook path (video, image or text)")
    return modality, ("mean" if modality == "text" else None)


class Adapter:
    """Loads the model and its processor; subclasses pool one batch."""

    #: the vision tower takes a clip's frames as a batch of images (X-CLIP); see FRAME_TOWER_TYPES
    frame_tower = False
    #: a sentence-transformers folder's own head (precompute.adapters.sentence_head), which makes ``default``
    st_head = None
    #: how the ``default`` layer was made (runs record it as ``default_pooling``)
    default_pooling = ("the model's own output: pooler_output (not a dense BERT/ViT pooler), "
                       "else last_hidden_state pooled as the layers are")

    def __init__(self, spec: str, *, device="cpu", dtype="float32", trust_remote_code=False,
                 modality: str | None = None, prompt_template: str = "auto", blocks: str | None = None,
                 random_init: bool = False, named_layers: bool = False, hub: dict | None = None,
                 prompt: str = "eol"):
        from transformers import AutoConfig

        self.spec = spec
        self.device = resolve_device(device) if isinstance(device, str) else device
        if dtype not in DTYPES:
            raise ModelError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
        self.dtype_name = dtype
        self.dtype = DTYPES[dtype]
        if prompt_template not in PROMPT_TEMPLATES:
            raise ModelError(f"--prompt-template must be one of {', '.join(PROMPT_TEMPLATES)}, got {prompt_template!r}")
        self.prompt_template = prompt_template
        if prompt not in PROMPTS:
            raise ModelError(f"--prompt must be one of {', '.join(PROMPTS)}, got {prompt!r}")
        self.prompt_style = prompt
        self.trust = trust_remote_code
        self.blocks_arg = blocks
        self.random_init = bool(random_init)
        #: hidden_states path: also store the named layers (default, joint); the hook path always does
        self.named_layers = bool(named_layers)
        local = Path(spec)
        self.is_local = local.exists()
        self.source = str(local.resolve()) if self.is_local else spec
        #: from_pretrained's hub keywords (``revision``, ``cache_dir``) for every file of the model
        self.hub = dict(hub or {})
        if self.is_local and self.hub.get("revision"):
            # a folder has one version; its revision is its content hash (models.local_revision)
            raise ModelError(f"--revision {self.hub['revision']}: {spec} is a local folder, which holds one version "
                             "(stored as its content hash); --revision applies to hub ids")
        offline = None if self.is_local else hub_offline()
        try:
            self.config = AutoConfig.from_pretrained(self.source, trust_remote_code=trust_remote_code, **self.hub)
        except Exception as exc:
            hint = "" if self.is_local else (
                f" (no such local folder, and {offline}: as a hub id it needs a cached copy)" if offline else
                " (no such local folder; as a hub id it needs the hub or a cached copy — "
                "set HF_HUB_OFFLINE=1 to use the cache only)"
            )
            if spec.startswith("timm/") or (self.is_local and (local / "open_clip_config.json").exists()):
                way = (f"timm:{spec[len('timm/'):]}" if spec.startswith("timm/")
                       else f"open_clip:local-dir:{local}")
                raise ModelError(f"{spec!r} is not a transformers model; load it as --model {way}") from None
            if self.is_local and not trust_remote_code and _names_remote_code(local):
                raise ModelError(f"{spec!r} is a remote-code model (its config.json names its own code in auto_map): "
                                 "pass --trust-remote-code to run that code") from None
            first = (str(exc).strip().splitlines() or [""])[0]
            raise ModelError(f"cannot load a model config from {spec!r}{hint}: {first}") from None
        #: "hidden_states" (transformers' own outputs) or "hooks" (precompute.adapters.hooks on the block list)
        self.extraction = "hidden_states"
        if is_remote_type(self.config) or blocks:
            self.extraction = "hooks"
            self.modality, self.pooling = classify_hooked(self.config, modality, spec)
        else:
            self.modality, self.pooling = classify(self.config, modality)
        if self.is_local and local.is_dir() and not random_init:
            check_local_weights(local)  # before any run exists, not at load time mid-job

    # ---- loading -----------------------------------------------------------------
    def _load_kwargs(self):
        # transformers prefers model.safetensors over pickled .bin weights when both exist
        return {"trust_remote_code": self.trust, "dtype": self.dtype, **getattr(self, "hub", {})}

    def _pretrained(self, cls):
        """``cls.from_pretrained(source)``, or with ``--random-init`` ``cls.from_config`` under the
        fixed seed (the standard random-weights control; labelled random_init everywhere)."""
        if not self.random_init:
            return cls.from_pretrained(self.source, **self._load_kwargs())
        torch.manual_seed(RANDOM_SEED)
        if hasattr(cls, "from_config"):
            return cls.from_config(self.config, trust_remote_code=self.trust, dtype=self.dtype)
        return cls._from_config(self.config, dtype=self.dtype)

    def run_config(self) -> dict:
        """Extra fields of each run's config JSON: ``layer_names`` (index -> ``default`` / ``joint``)
        and ``layer_dims`` (index -> true width of a layer narrower than the run's, zero-padded);
        hook adapters add their block list."""
        cfg = {}
        if getattr(self, "layer_names", None):
            cfg["layer_names"] = dict(self.layer_names)
        if getattr(self, "layer_dims", None):
            cfg["layer_dims"] = dict(self.layer_dims)
        if "default" in getattr(self, "extra_names", ()):
            cfg["default_pooling"] = self.default_pooling
        if self.st_head is not None:
            cfg["sentence_transformers"] = self.st_head.record()
        return cfg

    def planned_sentence_head(self):
        """The :class:`~precompute.adapters.sentence_head.SentenceHead` of a local sentence-transformers text
        folder, read from its JSON alone (``sweep plan`` matches runs on it), else None; raises
        :class:`~precompute.adapters.sentence_head.HeadError` for a head LayerScope cannot reproduce."""
        from .sentence_head import read_head

        if self.modality != "text" or not (self.is_local and Path(self.source).is_dir()):
            return None
        return read_head(Path(self.source))

    def default_of(self, out, mask):
        """``(B, d)`` ``default`` layer from a forward's output: a sentence-transformers head on the
        last hidden state (what ``encode()`` returns), else :func:`~precompute.adapters.hooks.default_output`."""
        from .hooks import default_output

        if self.st_head is not None:
            tokens = out[0] if isinstance(out, (tuple, list)) else getattr(out, "last_hidden_state", None)
            return None if tokens is None else self.st_head(tokens, mask)
        return default_output(out, self.pooling, mask=mask, model=self.model)

    def load(self):
        raise NotImplementedError

    def config_revision(self) -> str:
        """The weights' revision, known without loading them: the folder's fingerprint, the hub
        commit, or for ``--random-init`` the seed and the config's hash (the config is the identity)."""
        if self.random_init:
            return f"random-init-seed{RANDOM_SEED}-" + hashlib.sha256(
                self.config.to_json_string(use_diff=False).encode()).hexdigest()[:16]
        return local_revision(Path(self.source)) if self.is_local else (
            getattr(self.config, "_commit_hash", None) or hub_commit(self.source, getattr(self, "hub", {})) or "unknown")

    def planned_layers(self):
        """``(n_layers, dim, layer_names)`` a load will give, from the config alone (what ``sweep plan``
        matches stored runs on and sizes them by), or None when only a load can tell (the hook path,
        a width per stage). Mirrors :meth:`_plan_named_layers`: ``default`` unless an MLLM, ``joint``
        for dual encoders (CLIP/X-CLIP ``projection_dim`` wide, SigLIP the hidden width)."""
        if self.extraction != "hidden_states":
            return None
        dims = (MllmAdapter._dims_from_config(self) if self.modality == "mllm" else
                Adapter._dims_from_config(self))
        if dims is None:
            return None
        n_hidden, hidden = dims
        widths = {}
        if self.named_layers and self.modality != "mllm":
            widths["default"] = hidden
            if self.config.model_type in DUAL_TOWER_TYPES:
                proj = getattr(self.config, "projection_dim", None) if self.config.model_type != "siglip" else None
                widths["joint"] = int(proj or hidden)
        names = {str(n_hidden + j): n for j, n in enumerate(widths)}
        return n_hidden + len(widths), max([hidden, *widths.values()]), names

    def info(self) -> ModelInfo:
        revision = self.config_revision()
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
            random_init=self.random_init or bool(getattr(self.config, "layerscope_random_init", False)),
            config={**cfg, "layerscope": self.run_config()} if self.run_config() else cfg,
        )

    #: dual encoders: the module mapping the tower's pooled output into the shared space (set at load)
    joint_head = None

    def _finish_load(self, model):
        model = model.to(self.device).eval()
        self.model = model
        if self.joint_head is not None:
            self.joint_head = self.joint_head.to(self.device).eval()
        # layers and width from the config when it states them (a probe forward of a large video
        # model costs as much as a batch); the first real batch is checked against them
        self.n_hidden, self.hidden_dim = self._dims_from_config() or self._probe()
        self._plan_named_layers()
        return self

    def _plan_named_layers(self):
        """The named layers stored after the ``n_hidden`` hidden states: ``default``,
        the model's own output (not for MLLMs: their layers are the language model's), and
        ``joint`` for dual encoders; sets ``n_layers``, ``dim`` (the widest layer),
        ``layer_names`` and ``layer_dims``."""
        widths = {}
        if self.named_layers and self.modality != "mllm":
            widths["default"] = self.hidden_dim
        if self.named_layers and self.joint_head is not None:
            widths["joint"] = self._joint_width()
        self.extra_names = tuple(widths)
        all_w = [self.hidden_dim] * self.n_hidden + [widths[n] for n in self.extra_names]
        self.n_layers, self.dim = len(all_w), max(all_w)
        self.layer_names = {str(self.n_hidden + j): n for j, n in enumerate(self.extra_names)}
        self.layer_dims = {str(i): w for i, w in enumerate(all_w) if w != self.dim}

    def _joint_width(self) -> int:
        head = self.joint_head
        proj = getattr(head, "projection", head)
        return int(proj.out_features) if isinstance(proj, torch.nn.Linear) else self.hidden_dim

    def _dims_from_config(self):
        cfg = self.config
        sub = {"image": "vision_config", "video": "vision_config", "text": "text_config"}.get(self.modality)
        if sub and getattr(cfg, sub, None) is not None and cfg.model_type in DUAL_TOWER_TYPES:
            cfg = getattr(cfg, sub)
        layers = getattr(cfg, "num_hidden_layers", None) or getattr(cfg, "num_layers", None)
        width = getattr(cfg, "hidden_size", None) or getattr(cfg, "d_model", None)
        if isinstance(width, list):  # hierarchical models state a width per stage: probe instead
            return None
        return (int(layers) + 1, int(width)) if layers and width else None

    # ---- forward -----------------------------------------------------------------
    def _hidden_states(self, **inputs):
        return self._forward(**inputs)[0]

    def _forward(self, **inputs):
        """``(hidden_states, output)`` of one forward."""
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
        return hs, out

    def _pool_tokens(self, hs, mask=None) -> np.ndarray:
        """``(L, B, d)`` float32 from a tuple of ``(B, T, d)`` hidden states."""
        if (len(hs), hs[-1].shape[-1]) != (self.n_hidden, self.hidden_dim):
            raise ModelError(
                f"model {self.spec!r} returned {len(hs)} hidden states of width {hs[-1].shape[-1]}, but its config "
                f"implies {self.n_hidden} of width {self.hidden_dim}; LayerScope cannot pool it consistently"
            )
        # layer by layer: stacking every hidden state first would hold a second copy of all of them
        # (L x B x T x d floats: GBs for a video model's token grid)
        out = np.empty((len(hs), hs[0].shape[0], self.hidden_dim), dtype=np.float32)
        if mask is not None:
            m = mask.to(hs[0].device)
            weights = m.float()[:, :, None]  # real tokens only, no padding
            # the last real token whatever side the tokenizer pads: the largest position with mask 1
            # (mask.sum() - 1 is that position only under right padding)
            positions = torch.arange(1, m.shape[1] + 1, device=m.device)
            last = (m.long() * positions).argmax(dim=1)
        for i, h in enumerate(hs):
            h = h.float()
            if self.pooling == "cls":
                pooled = h[:, 0]
            elif self.pooling == "mean" and mask is None:
                pooled = h.mean(dim=1)
            elif self.pooling == "mean":
                pooled = (h * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1)
            elif mask is not None:  # last_token: the last real token of each row
                pooled = h[torch.arange(h.shape[0], device=h.device), last]
            else:
                pooled = h[:, -1]
            out[i] = pooled.cpu().numpy()
        return out

    # ---- inputs prepared off the model's thread ----------------------------------
    def prepare_videos(self, videos: list[np.ndarray], *, image_mode: str = "frames") -> "Prepared":
        raise ModelError(f"{self.spec!r} is a {self.modality} model: it does not embed videos")

    def prepare_texts(self, texts: list[str]) -> "Prepared":
        raise ModelError(f"{self.spec!r} is a {self.modality} model: it does not embed text")

    def text_overflow(self, texts: list[str]) -> list:
        """Per text, ``(tokens, limit)`` when :meth:`prepare_texts` cuts it to the model's limit, else None."""
        return [None] * len(texts)

    def prompt_format(self, side: str) -> str | None:
        """The prompt a model wraps its input in (``{media}`` / ``{text}`` placeholders); None: no prompt."""
        return None

    #: attributes holding weights (left out of :meth:`preprocessor`)
    WEIGHT_ATTRS = ("model", "joint_head", "blocks", "tower", "_clip_joint")

    def preprocessor(self) -> "Adapter":
        """A copy of this loaded adapter that prepares inputs exactly as it does (processor,
        tokenizer, transform, clip protocol: :meth:`prepare_videos`, :meth:`prepare_texts`,
        :meth:`text_overflow`) but holds no weights: small enough to ship to CPU workers (Ray)."""
        import copy

        self._input_keys()  # what prepare_texts reads of the model, cached before the model is left out
        clone = copy.copy(self)
        for attr in self.WEIGHT_ATTRS:
            clone.__dict__.pop(attr, None)
        return clone

    def _input_keys(self):
        """Names the model's ``forward`` accepts (cached: a :meth:`preprocessor` has no model)."""
        if "_forward_params" not in self.__dict__:
            model = self.__dict__.get("model")
            self._forward_params = (frozenset(inspect.signature(model.forward).parameters)
                                    if model is not None else None)
        return self._forward_params

    def run(self, prepared: "Prepared") -> np.ndarray:
        """``(L, B, d)`` float32 from inputs made by :meth:`prepare_videos` / :meth:`prepare_texts`."""
        inputs = {k: (v.to(self.device, self.dtype) if k in PIXEL_KEYS else v.to(self.device))
                  for k, v in prepared.inputs.items()}
        frames_per_unit = None
        if self.frame_tower:  # (U, T, C, H, W) clips -> U*T frames, as the tower expects
            px = inputs[self.pixel_key]
            frames_per_unit = px.shape[1]
            inputs[self.pixel_key] = px.reshape(-1, *px.shape[2:])
        hs, raw = self._forward(**inputs)
        mask = inputs.get("attention_mask") if prepared.masked else None
        hidden = self._pool_tokens(hs, mask)
        named = self._named_layers(raw, mask, frames_per_unit)
        pooled = np.zeros((self.n_layers, hidden.shape[1], self.dim), dtype=np.float32)
        pooled[:self.n_hidden, :, :self.hidden_dim] = hidden
        for j, t in enumerate(named):
            pooled[self.n_hidden + j, :, :t.shape[-1]] = t
        if frames_per_unit is not None:  # each frame's token pooled, then the clip's frames averaged
            pooled = pooled.reshape(pooled.shape[0], -1, frames_per_unit, pooled.shape[-1]).mean(axis=2)
            if "joint" in self.extra_names:  # X-CLIP's joint space is per clip (its mit), put back whole
                pooled[self.n_hidden + self.extra_names.index("joint"), :, :named[-1].shape[-1]] = self._clip_joint
        if prepared.owner is None:
            return pooled
        # several units (clips or frames) per item: average them per layer
        owner = prepared.owner
        return np.stack([pooled[:, owner == b].mean(axis=1) for b in range(prepared.n_items)],
                        axis=1).astype(np.float32)

    def _named_layers(self, out, mask, frames_per_unit) -> list:
        """``(U, d')`` float32 arrays of the named layers, in ``extra_names`` order.

        ``default``: ``pooler_output`` (CLIP's post-layernorm class token, DINOv2's normed class
        token, SigLIP's attention head), else ``last_hidden_state`` (the final norm's tokens)
        pooled the family's way; a dense ``pooler`` (BERT/ViT, often random when missing from a
        checkpoint) is passed over. ``joint``: the projection of the tower's pooled output (CLIP:
        ``visual_projection`` / ``text_projection``, i.e. ``get_image_features`` /
        ``get_text_features``; SigLIP: the pooled output itself; X-CLIP video: projected frames
        through its multi-frame transformer, one vector per clip)."""
        if not self.extra_names:
            return []
        got = []
        default = self.default_of(out, mask)
        if default is None or default.shape[-1] != self.hidden_dim:
            raise ModelError(f"model {self.spec!r} returned no default output of width {self.hidden_dim} "
                             f"({type(out).__name__}); LayerScope cannot store its default layer")
        got.append(default)
        if "joint" in self.extra_names:
            pooled = getattr(out, "pooler_output", None)
            with torch.inference_mode():
                joint = self.joint_head(pooled, frames_per_unit)
            if frames_per_unit is not None:
                self._clip_joint = joint.float().cpu().numpy()
                joint = joint.repeat_interleave(frames_per_unit, dim=0)  # per frame for now, whole per clip later
            got.append(joint)
        return [t.float().cpu().numpy() for t in got]

    def embed_videos(self, videos: list[np.ndarray], *, image_mode: str = "frames") -> np.ndarray:
        """``(L, B, d)`` for ``B`` videos of already-sampled frames ``(n_f, H, W, 3)``."""
        return self.run(self.prepare_videos(videos, image_mode=image_mode))

    def embed_texts(self, texts: list[str]) -> np.ndarray:
        """``(L, B, d)`` for ``B`` strings."""
        return self.run(self.prepare_texts(texts))


PIXEL_KEYS = ("pixel_values", "pixel_values_videos")


class JointHead(torch.nn.Module):
    """A dual encoder's map from a tower's pooled output to the shared space: ``projection``
    (CLIP/X-CLIP ``visual_projection`` / ``text_projection``; identity for SigLIP, whose pooled
    output is already the shared space) and, for X-CLIP's video side, its multi-frame transformer
    ``mit`` over the clip's projected frames (``XCLIPModel.get_video_features``)."""

    def __init__(self, projection=None, mit=None):
        super().__init__()
        self.projection = projection if projection is not None else torch.nn.Identity()
        self.mit = mit

    @classmethod
    def of(cls, full, side: str, video: bool = False):
        proj = getattr(full, "visual_projection" if side == "vision" else "text_projection", None)
        return cls(proj, getattr(full, "mit", None) if video else None)

    def forward(self, pooled, frames_per_unit=None):
        x = self.projection(pooled)
        if self.mit is not None and frames_per_unit is not None:
            x = self.mit(x.reshape(-1, frames_per_unit, x.shape[-1]))[1]  # (clips, p): its pooled output
        return x


@dataclass
class Prepared:
    """A batch's model inputs on the CPU, made by a processor or tokenizer (safe to build in a
    worker thread while the model runs the previous batch).

    ``owner[u]`` is the item of unit ``u`` when an item is several forward units (sub-clips,
    frames) whose pooled embeddings are averaged; ``masked``: pool over ``attention_mask``.
    """

    inputs: dict
    n_items: int
    owner: np.ndarray | None = None
    masked: bool = False


class VisionAdapter(Adapter):
    """Video models (clips of the native length) and image models (frame by frame)."""

    def load(self):
        from transformers import AutoImageProcessor, AutoModel

        try:
            self.processor = AutoImageProcessor.from_pretrained(self.source, trust_remote_code=self.trust, **getattr(self, "hub", {}))
        except Exception as exc:
            try:
                from transformers import AutoVideoProcessor

                self.processor = AutoVideoProcessor.from_pretrained(self.source, trust_remote_code=self.trust, **getattr(self, "hub", {}))
            except Exception:
                raise ModelError(f"cannot load the image/video processor of {self.spec!r}: {exc}") from None
        mt = self.config.model_type
        if mt in DUAL_TOWER_TYPES:
            full = self._pretrained(AutoModel)
            self.joint_head = JointHead.of(full, "vision", video=mt in FRAME_TOWER_TYPES and self.modality == "video")
            model = full.vision_model
        else:
            model = self._pretrained(AutoModel)
        self.frame_tower = mt in FRAME_TOWER_TYPES and self.modality == "video"
        if self.modality == "video":
            cfg = getattr(self.config, "vision_config", None) if self.frame_tower else self.config
            self.native_frames = int(getattr(cfg, "num_frames", None) or getattr(cfg, "frames_per_clip", None)
                                     or (getattr(self.config, "model_config", None) or {}).get("num_frames") or 16)
        self.pixel_key = "pixel_values_videos" if "pixel_values_videos" in inspect.signature(
            model.forward).parameters else "pixel_values"
        return self._finish_load(model)

    def _probe(self):
        size = self._input_size()
        if self.modality == "video":
            shape = (self.native_frames, 3, size, size) if self.frame_tower else (
                1, self.native_frames, 3, size, size)
        else:
            shape = (1, 3, size, size)
        hs = self._hidden_states(**{self.pixel_key: torch.zeros(shape, dtype=self.dtype, device=self.device)})
        return len(hs), hs[-1].shape[-1]

    def _input_size(self):
        cfg = getattr(self.config, "vision_config", None) or self.config
        return int(getattr(cfg, "image_size", None) or getattr(cfg, "crop_size", None) or 224)

    def _pixels(self, batch, *, videos: bool) -> torch.Tensor:
        """The processor's pixel tensor on the CPU: ``(B, T, C, H, W)`` for videos, ``(B, C, H, W)`` for images."""
        try:
            out = (self.processor(batch, return_tensors="pt") if videos
                   else self.processor(images=batch, return_tensors="pt"))
        except Exception as exc:
            import importlib.util

            hint = "" if importlib.util.find_spec("torchvision") else (
                " transformers' video processors need torchvision (`pip install torchvision`); "
                "its PIL image processors do not")
            raise ModelError(f"the processor of {self.spec!r} ({type(self.processor).__name__}) failed on a batch "
                             f"of frames: {type(exc).__name__}: {exc}.{hint}") from None
        return out["pixel_values_videos" if "pixel_values_videos" in out else "pixel_values"]

    def prepare_videos(self, videos: list[np.ndarray], *, image_mode: str = "frames") -> Prepared:
        """Inputs for ``B`` videos of already-sampled frames ``(n_f, H, W, 3)``.

        Video models: sub-clips of the native length (nearest-neighbour repetition), each encoded,
        averaged per layer by :meth:`run`. Each sampled frame goes through the processor once,
        however many clip positions repeat it (with ``n_f`` below the native length, the same frame
        fills many). Image models: every frame encoded and averaged (``image_mode="frames"``) or the
        first frame only (``"first"``).
        """
        units, owner = [], []
        if self.modality == "video":
            n_f = {len(f) for f in videos}
            clips = clip_indices(len(videos[0]), self.native_frames) if len(n_f) == 1 else None
            if clips is not None:
                pixels = self._pixels([list(f) for f in videos], videos=True)  # (B, n_f, C, H, W)
                if pixels.ndim == 5 and pixels.shape[1] == len(videos[0]):
                    # frame-wise processing (resize, crop, normalise): gather clips from processed frames
                    px = pixels[:, torch.as_tensor(clips.reshape(-1))].reshape(
                        len(videos) * len(clips), self.native_frames, *pixels.shape[2:])
                    owner = np.repeat(np.arange(len(videos)), len(clips))
                    return Prepared({self.pixel_key: px}, len(videos), owner)
            # a processor that changes the frame count itself: give it every clip as it is
            for b, frames in enumerate(videos):
                for clip in clip_indices(len(frames), self.native_frames):
                    units.append(list(frames[clip]))
                    owner.append(b)
            return Prepared({self.pixel_key: self._pixels(units, videos=True)}, len(videos), np.asarray(owner))
        for b, frames in enumerate(videos):
            for f in (frames[:1] if image_mode == "first" else frames):
                units.append(f)
                owner.append(b)
        return Prepared({self.pixel_key: self._pixels(units, videos=False)}, len(videos), np.asarray(owner))


class TextAdapter(Adapter):
    """Text encoders, encoders of encoder–decoder models, and decoder-only LLMs: masked token mean."""

    def load(self):
        from transformers import AutoModel, AutoTokenizer

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.source, trust_remote_code=self.trust, **getattr(self, "hub", {}))
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
                model = self._pretrained(cls)
            else:
                model = self._pretrained(AutoModel).get_encoder()
        elif mt in DUAL_TOWER_TYPES:
            full = self._pretrained(AutoModel)
            self.joint_head = JointHead.of(full, "text")
            model = full.text_model
        else:
            model = self._pretrained(AutoModel)
        limit = getattr(self.config, "max_position_embeddings", None) or getattr(
            getattr(self.config, "text_config", None), "max_position_embeddings", None)
        self.max_length = min(int(self.tokenizer.model_max_length or 512), int(limit or 512), 8192)
        self._read_sentence_head()
        return self._finish_load(model)

    def _read_sentence_head(self):
        """A local sentence-transformers folder (``modules.json``): ``default`` through its own
        Pooling / Normalize, and texts cut at its ``max_seq_length``, as ``encode()`` does. Hub ids
        are not looked up (their ``modules.json`` is not fetched by transformers)."""
        from .sentence_head import HeadError, max_seq_length

        try:
            self.st_head = self.planned_sentence_head()
        except HeadError as exc:
            if self.extraction == "hidden_states" and not self.named_layers:
                return  # no default layer stored: the head does not matter
            hint = "; --no-named-layers stores its layers without default" if self.extraction == "hidden_states" else ""
            raise ModelError(f"{self.spec!r}: {exc}{hint}") from None
        if self.st_head is not None:
            self.default_pooling = self.st_head.describe()
            cut = max_seq_length(Path(self.source))
            if cut:
                self.max_length = min(self.max_length, cut)

    def _probe(self):
        hs = self._hidden_states(**{k: v.to(self.device) for k, v in self.prepare_texts(["probe"]).inputs.items()})
        return len(hs), hs[-1].shape[-1]

    def prepare_texts(self, texts: list[str]) -> Prepared:
        """Tokens for ``B`` strings; :meth:`run` takes the mean over real tokens (attention mask) of every layer."""
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length,
                             return_tensors="pt")
        params = self._input_keys()
        keep = {"input_ids", "attention_mask", "token_type_ids"}
        return Prepared({k: v for k, v in enc.items() if k in keep and k in params}, len(texts), masked=True)

    def text_overflow(self, texts: list[str]) -> list:
        """Per text, ``(tokens, limit)`` when it has more tokens (special ones included) than
        ``max_length``, so :meth:`prepare_texts` truncates it; else None."""
        ids = self.tokenizer(texts, truncation=False)["input_ids"]
        return [(len(t), self.max_length) if len(t) > self.max_length else None for t in ids]


class MllmAdapter(Adapter):
    """Multimodal LLMs (LLaVA-style: an image processor, a tokenizer with an image token, a language
    model): the "explicit one-word limitation" prompt, and the hidden state of the last token of
    every language-model layer (the nuanced video retrieval paper's protocol).

    Video: the ``n_f`` sampled frames go in as ``n_f`` images in the prompt
    ``{media}: Summarize the video in one word: ``. Text: ``{text}: Summarize above sentence in one word: ``.
    Both inside the chat template when the processor (or its tokenizer) has one and
    ``prompt_template="auto"``. The last *real* token is pooled whatever side the tokenizer pads.
    Layer 0 is the language model's embedding output.
    """

    def load(self):
        import transformers
        from transformers import AutoProcessor

        try:
            self.processor = AutoProcessor.from_pretrained(self.source, trust_remote_code=self.trust, **getattr(self, "hub", {}))
        except Exception as exc:
            raise ModelError(f"cannot load the processor of {self.spec!r}: {exc}") from None
        model = None
        for name in ("AutoModelForImageTextToText", "AutoModelForVision2Seq", "AutoModel"):
            auto = getattr(transformers, name, None)
            if auto is None:
                continue
            try:
                model = self._pretrained(auto)
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

    def _chat_owner(self):
        """The processor, or else its tokenizer, when it has a chat template; None otherwise."""
        for owner in (self.processor, getattr(self.processor, "tokenizer", None)):
            if owner is not None and getattr(owner, "chat_template", None):
                return owner
        return None

    def prompt_format(self, side: str) -> str:
        """The whole prompt of ``side`` (``video`` | ``text``) with its ``{media}`` / ``{text}``
        placeholder: the paper's one-word prompt, inside the chat template (a user turn, then the
        generation prompt) unless ``prompt_template`` is ``none`` or there is no template."""
        cache = self.__dict__.setdefault("_prompt_formats", {})
        if side in cache:
            return cache[side]
        eol = {"video": MLLM_VIDEO_PROMPT, "text": MLLM_TEXT_PROMPT}
        # a probe made before --prompt existed has no prompt_style: the EOL prompt, as then
        base = (PLAIN_PROMPTS if getattr(self, "prompt_style", "eol") == "plain" else eol)[side]
        owner = self._chat_owner() if self.prompt_template == "auto" else None
        if owner is None:
            cache[side] = base
            return base
        content = [{"type": "text", "text": base}] if owner is self.processor else base
        try:
            out = owner.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                            add_generation_prompt=True)
        except Exception as exc:
            raise ModelError(f"the chat template of {self.spec!r} failed ({type(exc).__name__}: {exc}); "
                             "pass --prompt-template none to use the bare prompt") from None
        cache[side] = out[0] if isinstance(out, list) else out
        return cache[side]

    def _encode(self, prompts: list[str], images=None) -> dict:
        tok = getattr(self.processor, "tokenizer", None)
        bos = getattr(tok, "bos_token", None)
        # a chat template that writes the BOS token itself must not get a second one
        add_special = not (bos and prompts and prompts[0].startswith(bos))
        kwargs = {"images": images} if images is not None else {}
        return dict(self.processor(text=prompts, padding=True, return_tensors="pt", add_special_tokens=add_special,
                                   **kwargs))

    def prepare_videos(self, videos: list[np.ndarray], *, image_mode: str = "frames") -> Prepared:
        """One prompt per video with its sampled frames as images; :meth:`run` takes the last real token."""
        prompts, images = [], []
        fmt = self.prompt_format("video")
        for frames in videos:
            chosen = frames[:1] if image_mode == "first" else frames
            prompts.append(fmt.replace("{media}", self.image_token * len(chosen)))
            images.extend(list(chosen))
        return Prepared(self._encode(prompts, images), len(videos), masked=True)

    def prepare_texts(self, texts: list[str]) -> Prepared:
        """The prompt ``<sentence>: Summarize above sentence in one word: ``; :meth:`run` takes the last real token."""
        fmt = self.prompt_format("text")
        return Prepared(self._encode([fmt.replace("{text}", t) for t in texts]), len(texts), masked=True)
