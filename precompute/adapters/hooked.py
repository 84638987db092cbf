"""Hook-path adapters: any PyTorch encoder's layers through forward hooks.

Loaders (``--model`` forms):

- ``timm:NAME`` (optionally ``timm:NAME?depth=2&img_size=32``: keyword arguments for
  ``timm.create_model``): weights through timm, preprocessing from the model's own data config
  (``timm.data.resolve_data_config`` + ``create_transform``). Image models; frames averaged.
- ``open_clip:ARCH/PRETRAINED``, ``open_clip:hf-hub:ORG/REPO`` or ``open_clip:local-dir:PATH``:
  ``open_clip.create_model_and_transforms`` with the model's own preprocessing and tokenizer;
  the vision tower by default, the text tower with ``--modality text``.
- Hugging Face remote code (``--trust-remote-code``, a ``config.json`` with ``auto_map``, e.g.
  VideoMAEv2) and any transformers model given ``--blocks``: see ``HFHookVisionAdapter``.

Every adapter here stores layers ``0..L`` (layer 0: the first block's input; layer i: block i's
output, pooled as the family says), then the named layers of :data:`EXTRA_LAYERS`: ``default``
(the model's own output before any projection: final norm / pooler) and, for dual encoders,
``joint`` (the projected embedding of the shared image–text space, what ``encode_image`` /
``encode_text`` return). A run holds one width: a named layer narrower than the blocks is
zero-padded to their width (an isometry: cosines, distances, Gram matrices and singular values
are unchanged), a wider one widens the run and pads the blocks instead; the true widths are in
``layer_dims``.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

import numpy as np
import torch

from .hooks import BlockCapture, default_output, find_blocks, pool
from .hf import (PIXEL_KEYS, Adapter, ModelError, ModelInfo, Prepared, TextAdapter, VisionAdapter,
                     resolve_device, DTYPES)

#: The named layers stored after the numbered ones, in this order when present
EXTRA_LAYERS = ("default", "joint")
#: Seed of every ``--random-init`` build (recorded in the revision)
RANDOM_SEED = 0


def weights_digest(model: torch.nn.Module) -> str:
    """A cheap fingerprint of a module's weights: every tensor's name, shape, dtype and first 4096
    values (distinguishes checkpoints without reading GBs)."""
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(f"{name}{tuple(t.shape)}{t.dtype}".encode())
        flat = t.detach().reshape(-1)[:4096].float().cpu().numpy()
        h.update(flat.tobytes())
    return h.hexdigest()[:16]


def file_sha256(path) -> str:
    """The SHA-256 of a file's bytes (hex), read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


#: keys under which a checkpoint may wrap its state dict (one level)
WRAPPER_KEYS = ("state_dict", "model", "model_state_dict")


def read_state_dict(path: Path) -> dict:
    """``{name: tensor}`` from a ``.safetensors`` file, or a ``.pth`` / ``.pt`` / ``.bin`` file holding a
    state dict (plain, or under one of :data:`WRAPPER_KEYS`), loaded with ``weights_only=True`` (no
    pickled code runs). A file that is none of these is a :class:`ModelError` naming it."""
    if not path.is_file():
        raise ModelError(f"--weights {path}: no such file")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            sd = load_file(str(path), device="cpu")
        else:
            sd = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ModelError(short(f"--weights {path}: cannot read it as a state dict "
                               f"(.safetensors, or a .pth/.pt saved by torch.save): {type(exc).__name__}: {exc}")) from None
    for key in WRAPPER_KEYS:
        if isinstance(sd, dict) and isinstance(sd.get(key), dict):
            sd = sd[key]
            break
    if not isinstance(sd, dict) or not sd or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise ModelError(f"--weights {path}: not a state dict (a mapping of names to tensors)")
    return dict(sd)


def map_state_dict(weights: dict, model: torch.nn.Module, path: Path, spec: str) -> dict:
    """``weights`` renamed to ``model``'s keys, pair by pair in order (a checkpoint of the same
    architecture from another codebase names its tensors differently, e.g. ``_blocks.0._bn1`` for
    timm's ``blocks.0.0.bn1``, but holds them in the same order). Every pair must have one shape;
    the first pair that does not, or a count that differs, is a :class:`ModelError` naming both keys.
    A file with the model's own names maps by name. A ``.safetensors`` file keeps no order (its
    tensors come back sorted), so one with other names is refused: pairs of equal shapes (a norm's
    weight and bias) could be swapped unseen."""
    own = model.state_dict()
    if set(weights) == set(own):
        weights = {k: weights[k] for k in own}
    elif Path(path).suffix == ".safetensors":
        first = next(k for k in weights if k not in own) if set(weights) - set(own) else next(k for k in own if k not in weights)
        raise ModelError(f"--weights {path}: its names are not {spec}'s (first: {first!r}), and a .safetensors file "
                         "keeps no tensor order to map them by; save the state dict with torch.save (.pth) instead")
    theirs, ours = list(weights.items()), list(own.items())
    for i, ((k, v), (mk, mv)) in enumerate(zip(theirs, ours)):
        if tuple(v.shape) != tuple(mv.shape):
            raise ModelError(f"--weights {path}: tensor {i} {k!r} {tuple(v.shape)} does not fit {spec}'s "
                             f"{mk!r} {tuple(mv.shape)}; the file holds another architecture's weights")
    if len(theirs) != len(ours):
        extra = (f"the file's {theirs[len(ours)][0]!r} has no counterpart" if len(theirs) > len(ours)
                 else f"{spec}'s {ours[len(theirs)][0]!r} has none in the file")
        raise ModelError(f"--weights {path}: {len(theirs)} tensors, {spec} has {len(ours)}; {extra}")
    return {mk: v for (_, v), (mk, _) in zip(theirs, ours)}


def parse_kwargs(text: str, spec: str) -> dict:
    """``a=1&b=x`` -> ``{"a": 1, "b": "x"}`` (values as Python literals when they parse)."""
    out = {}
    for part in filter(None, text.split("&")):
        if "=" not in part:
            raise ModelError(f"--model {spec}: keyword {part!r} needs the form NAME=VALUE")
        k, v = part.split("=", 1)
        try:
            out[k] = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            out[k] = v
    return out


#: longest error line a library's own message may make (open_clip lists every architecture it has)
MESSAGE_CHARS = 200


def short(message: str, limit: int = MESSAGE_CHARS) -> str:
    """``message`` on one line, cut to ``limit`` characters (with an ellipsis)."""
    text = " ".join(str(message).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def offline_weights(random_init: bool) -> str | None:
    """Why pretrained weights can only come from the local cache (``HF_HUB_OFFLINE`` set, or the hub
    unreachable: :func:`~precompute.adapters.hf.hub_offline`, which then puts huggingface_hub in offline
    mode), else None. timm and open_clip download through huggingface_hub, whose retries would
    otherwise take a minute or more before the same failure."""
    from .hf import hub_offline

    return None if random_init else hub_offline()


def hub_weights_cached(repo_id: str, filename: str = "") -> bool:
    """Whether the hub cache holds ``repo_id``'s weights: ``filename``, else any of the names timm
    and open_clip load (``model.safetensors``, ``pytorch_model.bin``, ``open_clip_model.safetensors``,
    ``open_clip_pytorch_model.bin``). A check of the cache's index only: nothing is read or fetched."""
    from huggingface_hub import try_to_load_from_cache

    repo_id, _, revision = repo_id.partition("@")
    names = [filename] if filename else ["model.safetensors", "pytorch_model.bin", "open_clip_model.safetensors",
                                         "open_clip_pytorch_model.bin"]
    return any(isinstance(try_to_load_from_cache(repo_id, n, revision=revision or None), str) for n in names)


def missing_offline(spec: str, why: str, exc: Exception | None = None) -> ModelError | None:
    """The one-line error for weights absent from the cache while offline (``why``); with ``exc``, None
    when that failure is another one."""
    from urllib.error import URLError

    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    if exc is not None and not isinstance(exc, (LocalEntryNotFoundError, OfflineModeIsEnabled, URLError,
                                                 ConnectionError)):
        return None
    return ModelError(f"--model {spec}: its pretrained weights are not in the local cache, and {why}; download them "
                      "once where the hub is reachable (or copy the cache), or pass --random-init")


def _close(word: str, choices) -> str:
    import difflib

    near = difflib.get_close_matches(word, list(choices), n=3, cutoff=0.6)
    return f" (closest: {', '.join(near)})" if near else ""


def check_open_clip_name(open_clip, arch: str, pretrained, spec: str, random_init: bool) -> None:
    """A one-line :class:`ModelError` for an architecture open_clip does not have, or weights it does
    not list for it, saying how to list the valid ones (open_clip's own message lists them all)."""
    if arch not in open_clip.list_models():
        raise ModelError(f"--model {spec}: open_clip has no architecture {arch!r}{_close(arch, open_clip.list_models())}; "
                         "list them: python -c \"import open_clip; print(open_clip.list_models())\"")
    if pretrained and not random_init:
        tags = open_clip.list_pretrained_tags_by_model(arch)
        if tags and pretrained not in tags and not Path(pretrained).exists():
            raise ModelError(short(f"--model {spec}: open_clip has no weights {pretrained!r} for {arch} "
                                   f"(it has: {', '.join(tags)})"))


def _option_default(name: str, key: str):
    """The default of keyword ``key`` in the timm model class built by ``name``'s entry point: the
    first ``nn.Module`` class of the entry point's module whose ``__init__`` takes ``key`` (timm
    passes keywords through to it). ``inspect.Parameter.empty`` when none is found."""
    import inspect
    import sys

    from timm.models import model_entrypoint

    module = sys.modules.get(model_entrypoint(name).__module__)
    best, most = inspect.Parameter.empty, -1
    for obj in vars(module).values() if module else ():
        if inspect.isclass(obj) and issubclass(obj, torch.nn.Module) and obj.__module__ == module.__name__:
            try:
                params = inspect.signature(obj.__init__).parameters
            except (TypeError, ValueError):
                continue
            # the model class itself takes the most keywords (its blocks take a few of the same names)
            if key in params and params[key].default is not inspect.Parameter.empty and len(params) > most:
                best, most = params[key].default, len(params)
    return best


#: how an option's expected type is named in messages
TYPE_WORDS = {bool: "true or false (True, False)", int: "an integer", float: "a number", tuple: "a tuple, e.g. (1, 2)",
              list: "a list, e.g. [1, 2]"}


def timm_option_error(name: str, kwargs: dict, spec: str) -> str | None:
    """One line naming the ``?key=value`` option that cannot be right: a value left as text (it did
    not parse as a number, tuple or bool) where the model's default is a number, tuple or bool. None
    when no option explains the failure."""
    import inspect

    for key, value in kwargs.items():
        if not isinstance(value, str):
            continue
        try:
            default = _option_default(name, key)
        except Exception:  # an unknown entry point: timm's own message says so
            return None
        if default is inspect.Parameter.empty or isinstance(default, str) or default is None:
            continue
        want = TYPE_WORDS.get(type(default), f"a {type(default).__name__}")
        return (f"--model {spec}: option {key}={value!r} is not {want}; {name} takes {key} as {want} "
                f"(default {key}={default!r})")
    return None


class HookRun:
    """``run`` through :class:`~precompute.adapters.hooks.BlockCapture` plus the named layers.

    Subclasses set ``self.blocks`` (the block list), ``self.pooling``, ``self.prefix`` (class +
    register tokens left out of mean pooling), ``self.seq_first`` and implement
    ``_hook_forward(inputs) -> {name: (U, d') tensor}`` for the named layers it can give.
    """

    prefix = 0
    seq_first = False
    #: how the ``default`` layer was made (runs record it as ``default_pooling``)
    default_pooling = "the model's own output (a tensor as returned, else pooler_output, else last_hidden_state pooled)"
    extra_names: tuple = ()
    widths: list | None = None
    #: layout of a block output that is a feature map (4-D): ``NCHW`` (torch convolutions) or ``NHWC``
    feature_fmt = "NCHW"
    #: True when the blocks return feature maps (a CNN's stages), pooled by global average
    feature_maps = False

    def _mask(self, inputs, prepared):
        return inputs.get("attention_mask") if prepared.masked else None

    def _layers(self, inputs, mask) -> list:
        """Pooled ``(U, d_l)`` float32 tensors: the block layers, then the named ones."""
        def reduce(h):
            return pool(h.float(), self.pooling, prefix=self.prefix, mask=mask, fmt=self.feature_fmt)

        with torch.inference_mode():
            with BlockCapture(self.blocks, seq_first=self.seq_first, reduce=reduce) as cap:
                extras = self._hook_forward(inputs)
            layers = list(cap.result())
            for name in EXTRA_LAYERS:
                if extras.get(name) is not None:
                    layers.append(extras[name].float())
        return layers

    def _probe(self):
        inputs, _ = self._probe_inputs()
        inputs = self._adapt_inputs(inputs)
        ndims = set()

        def reduce(h):
            ndims.add(h.ndim)
            return h[:, 0] if h.ndim == 3 else pool(h, "mean", fmt=self.feature_fmt)

        with torch.inference_mode(), BlockCapture(self.blocks, seq_first=self.seq_first, reduce=reduce) as cap:
            extras = self._hook_forward(inputs)
        states = cap.result()
        widths = [int(s.shape[-1]) for s in states]
        # a CNN's stages widen as they go: each pooled map is zero-padded to the widest (layer_dims)
        self.feature_maps = 4 in ndims
        if len(set(widths)) != 1 and not self.feature_maps:
            raise ModelError(f"{self.spec!r}: the blocks of {self.blocks_path} change width ({sorted(set(widths))}): "
                             "a hierarchical model; name one stage's blocks with --blocks")
        self.extra_names = tuple(n for n in EXTRA_LAYERS if extras.get(n) is not None)
        self.widths = widths + [int(extras[n].shape[-1]) for n in self.extra_names]
        n_blocks = len(states)
        self.layer_names = {str(n_blocks + j): n for j, n in enumerate(self.extra_names)}
        dim = max(self.widths)
        self.layer_dims = {str(i): w for i, w in enumerate(self.widths) if w != dim}
        return n_blocks + len(self.extra_names), dim

    def run(self, prepared: Prepared) -> np.ndarray:
        """``(L, B, d)`` float32: every block layer and the named layers, zero-padded to ``d``."""
        inputs = {k: (v.to(self.device, self.dtype) if k in PIXEL_KEYS else v.to(self.device))
                  for k, v in prepared.inputs.items()}
        inputs = self._adapt_inputs(inputs)
        layers = self._layers(inputs, self._mask(inputs, prepared))
        got = [int(t.shape[-1]) for t in layers]
        if got != self.widths:
            raise ModelError(f"model {self.spec!r} gave layers of widths {got}, its probe {self.widths}; "
                             "LayerScope cannot store it consistently")
        units = layers[0].shape[0]
        out = np.zeros((len(layers), units, self.dim), dtype=np.float32)
        for i, t in enumerate(layers):
            out[i, :, :t.shape[-1]] = t.cpu().numpy()
        if prepared.owner is None:
            return out
        owner = prepared.owner
        return np.stack([out[:, owner == b].mean(axis=1) for b in range(prepared.n_items)], axis=1).astype(np.float32)

    def _adapt_inputs(self, inputs):
        return inputs

    def run_config(self) -> dict:
        # "extraction" is the identity's extraction version: the path has a key of its own
        cfg = {"extraction_path": "hooks", "blocks": self.blocks_path}
        if self.layer_names:
            cfg["layer_names"] = dict(self.layer_names)
        if self.layer_dims:
            cfg["layer_dims"] = dict(self.layer_dims)
        if "default" in self.extra_names:
            cfg["default_pooling"] = self.default_pooling
        if getattr(self, "st_head", None) is not None:
            cfg["sentence_transformers"] = self.st_head.record()
        return cfg


class ImageFrames:
    """``prepare_videos`` for image towers with a per-image transform (timm, open_clip): every
    sampled frame (or the first, ``image_mode="first"``) through ``self.transform`` (PIL in,
    ``(3, H, W)`` tensor out); :meth:`HookRun.run` averages an item's frames per layer."""

    def prepare_videos(self, videos, *, image_mode: str = "frames") -> Prepared:
        from PIL import Image

        if self.modality != "image":
            raise ModelError(f"{self.spec!r} is a {self.modality} model: it does not embed videos")
        units, owner = [], []
        for b, frames in enumerate(videos):
            for f in (frames[:1] if image_mode == "first" else frames):
                units.append(self.transform(Image.fromarray(np.ascontiguousarray(f))))
                owner.append(b)
        return Prepared({"pixel_values": torch.stack(units)}, len(videos), np.asarray(owner))


class _Standalone(HookRun, Adapter):
    """Common set-up of adapters that do not start from a transformers config."""

    loader = "?"
    extraction = "hooks"

    def __init__(self, spec: str, *, device="cpu", dtype="float32", modality=None, blocks=None,
                 random_init=False, trust_remote_code=False, prompt_template="auto", weights=None, **_):
        self.spec = spec
        self.device = resolve_device(device) if isinstance(device, str) else device
        if dtype not in DTYPES:
            raise ModelError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
        self.dtype_name, self.dtype = dtype, DTYPES[dtype]
        self.trust = trust_remote_code
        self.prompt_template = prompt_template
        self.blocks_arg = blocks
        self.random_init = bool(random_init)
        self.is_local = False
        self.source = spec
        self.native_frames = None
        self.layer_names, self.layer_dims = {}, {}
        self.modality = self._modality(modality)
        self.weights = self._weights_file(weights)

    def _finish(self, model, tower):
        self.model = model.to(self.device, self.dtype).eval()
        self.blocks_path, self.blocks = find_blocks(tower, self.blocks_arg)
        self.n_layers, self.dim = self._probe()
        if self.weights:  # the file's content hash: another file is another revision, so other runs
            self.revision = self.file_revision
        else:
            self.revision = ("random-init-seed%d-" % RANDOM_SEED if self.random_init else "weights-") + weights_digest(model)
        return self

    def _weights_file(self, weights):
        """``--weights FILE`` as an absolute path (None without it); its content hash is ``file_revision``,
        known before the load, so a finished run of other weights is never taken for this one's."""
        if not weights:
            return None
        raise ModelError(f"--weights applies to timm models (--model timm:ARCH); {self.spec} names its weights "
                         "in the spec (open_clip:ARCH/FILE)")

    def info(self) -> ModelInfo:
        return ModelInfo(
            source=self.source, model_type=self.model_type, modality=self.modality, pooling=self.pooling,
            n_layers=self.n_layers, dim=self.dim, params=int(sum(p.numel() for p in self.model.parameters())),
            native_frames=self.native_frames, revision=self.revision, random_init=self.random_init,
            config={"loader": self.loader, **self.model_config, "layerscope": self.run_config()},
        )


def _timm_hub_repo(name: str) -> str | None:
    """The hub repository timm loads ``name``'s pretrained weights from, or None (no such name, or
    weights from a URL or file)."""
    from timm.models import get_pretrained_cfg

    try:
        return getattr(get_pretrained_cfg(name), "hf_hub_id", None) or None
    except Exception:  # an unknown name: create_model says so
        return None


class TimmAdapter(ImageFrames, _Standalone):
    """``timm:NAME[?kw=v&...]``: an image backbone from timm, layers through hooks on ``blocks``.

    Layers: ``cls`` (token 0, where timm puts the class token before any register tokens) when
    the model has a class token (``cls_token``), whatever its head does: DR's rule, "the class
    token where the model has one" (so DINOv3 and Perception Encoder, which have one but an ``avg`` /
    attention-pool head, are read at their class token). Without one: ``mean`` over the patch tokens
    (register tokens, ``num_prefix_tokens``, left out, as timm's ``avg`` pool does). The head's
    own pooling is ``default``: ``forward_head(forward_features(x), pre_logits=True)``, the pooled,
    normed feature the model returns with ``num_classes=0``.
    """

    loader = "timm"
    #: the convolutions run on channels-last tensors (set by :meth:`load`)
    channels_last = False

    def _modality(self, modality):
        if modality not in (None, "image"):
            raise ModelError(f"{self.spec}: timm models are image models (frames averaged per clip); "
                             f"--modality {modality} does not apply")
        return "image"

    def load(self):
        try:
            import timm
            from timm.data import create_transform, resolve_data_config
        except ImportError:
            raise ModelError("timm models need timm: pip install 'layerscope[models]' (or pip install timm)") from None
        name, _, query = self.spec[len("timm:"):].partition("?")
        kwargs = parse_kwargs(query, self.spec)
        torch.manual_seed(RANDOM_SEED)
        offline = offline_weights(self.random_init or bool(self.weights))  # --weights: nothing from the hub
        if offline and (repo := _timm_hub_repo(name)) and not hub_weights_cached(repo):
            raise missing_offline(self.spec, offline)  # before building the model: that alone takes seconds
        try:
            # with --weights the classifier is kept when the file has one (its logits stay computable)
            head = {} if self.weights else {"num_classes": 0}
            model = timm.create_model(name, pretrained=not (self.random_init or self.weights), **head, **kwargs)
        except Exception as exc:
            bad = timm_option_error(name, kwargs, self.spec) if isinstance(exc, (TypeError, ValueError)) else None
            if bad:
                raise ModelError(bad) from None
            if offline and (missing := missing_offline(self.spec, offline, exc)):
                raise missing from None
            hint = "" if self.random_init else " (pretrained weights come from the hub; --random-init builds it offline)"
            raise ModelError(short(f"timm cannot create {name!r}: {type(exc).__name__}: {exc}") + hint) from None
        self.model_type = f"timm:{name}"
        if self.weights:
            self._load_weights(model)
        size = kwargs.get("img_size")  # a size given to create_model wins over the pretrained config's
        args = {"input_size": (3, *(size if isinstance(size, (tuple, list)) else (size, size)))} if size else {}
        cfg = resolve_data_config(args, model=model)
        self.transform = create_transform(**cfg, is_training=False)
        gp = getattr(model, "global_pool", "token")
        self.pooling = "cls" if getattr(model, "cls_token", None) is not None else "mean"
        self.default_pooling = f"timm forward_head(pre_logits=True), global_pool={str(gp)!r}"
        self.prefix = int(getattr(model, "num_prefix_tokens", 0) or 0)
        self.feature_fmt = str(getattr(model, "output_fmt", "NCHW"))  # timm's NHWC stages say so
        self.input_size = tuple(cfg["input_size"])
        self.model_config = {"name": name, "kwargs": kwargs, "data_config": {k: list(v) if isinstance(v, tuple) else v
                                                                              for k, v in cfg.items()},
                             "global_pool": str(gp), "num_prefix_tokens": self.prefix,
                             **({"weights": self.weights_record()} if self.weights else {}),
                             "pretrained_cfg": {k: v for k, v in (getattr(model, "pretrained_cfg", {}) or {}).items()
                                                if isinstance(v, (str, int, float, bool, type(None)))}}
        self._finish(model, model)
        # a CNN's convolutions on the CPU run on channels-last tensors (NHWC in memory, the same NCHW
        # shape and values up to the last bits): oneDNN's kernels then skip the layout reorder around
        # every convolution, which costs more than the convolution itself on small feature maps
        self.channels_last = (self.feature_maps and torch.device(self.device).type == "cpu"
                              and self.feature_fmt == "NCHW")
        if self.channels_last:
            self.model.to(memory_format=torch.channels_last)
        return self

    def _weights_file(self, weights):
        if not weights:
            return None
        if self.random_init:
            raise ModelError(f"--weights {weights} and --random-init contradict each other: drop one")
        path = Path(weights).expanduser().resolve()
        if not path.is_file():
            raise ModelError(f"--weights {weights}: no such file")
        self.file_revision = "file-" + file_sha256(path)[:16]
        return path

    def weights_record(self) -> dict:
        """What the run records of ``--weights``: the file's path and its content hash."""
        return {"path": str(self.weights), "sha256_16": self.file_revision[len("file-"):]}

    def _load_weights(self, model):
        """``--weights``: the file's tensors mapped onto ``model`` in order (:func:`map_state_dict`); a
        file without the classifier maps onto the model without one."""
        weights = read_state_dict(self.weights)
        if len(weights) != len(model.state_dict()) and getattr(model, "num_classes", 0):
            head = model.pretrained_cfg.get("classifier") or "?"
            headless = [k for k in model.state_dict() if k.split(".")[0] != head]
            if len(weights) == len(headless):
                model.reset_classifier(0)
        model.load_state_dict(map_state_dict(weights, model, self.weights, self.spec))

    def _probe_inputs(self):
        return {"pixel_values": torch.zeros((1, *self.input_size), dtype=self.dtype, device=self.device)}, None

    def _hook_forward(self, inputs):
        x = inputs["pixel_values"]
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        feats = self.model.forward_features(x)
        return {"default": self.model.forward_head(feats, pre_logits=True)}

    def run_config(self) -> dict:
        cfg = HookRun.run_config(self)
        if self.feature_maps:
            cfg["feature_maps"] = f"global average over each {self.feature_fmt} map's H x W positions"
        if self.weights:
            cfg["weights"] = self.weights_record()
        return cfg


def _without(owner, attr, call):
    """``call()`` with ``owner.attr`` (a projection) set to None for its duration; returns
    ``(output, projection)`` (projection None when the owner has none)."""
    proj = getattr(owner, attr, None)
    if proj is None:
        return call(), None
    setattr(owner, attr, None)
    try:
        return call(), proj
    finally:
        setattr(owner, attr, proj)


def _project(x, proj):
    return proj(x) if isinstance(proj, torch.nn.Module) else x @ proj


class OpenClipAdapter(ImageFrames, _Standalone):
    """``open_clip:ARCH/PRETRAINED`` (or ``open_clip:hf-hub:...`` / ``open_clip:local-dir:PATH``).

    Vision tower (default) or text tower (``--modality text``), layers through hooks on its
    ``transformer.resblocks``. Vision layers: ``cls`` when the tower has a class embedding (whatever
    its ``pool_type``: the class token where there is one, DR's rule), else ``mean``; text
    layers: mean over real tokens (ids other than the pad id). ``default``: the tower's pooled
    output *before* its projection (final norm, then the tower's pooling); ``joint``: that output
    through the projection, i.e. exactly ``encode_image`` / ``encode_text`` (unnormalised).
    """

    loader = "open_clip"

    def _modality(self, modality):
        if modality not in (None, "image", "text"):
            raise ModelError(f"{self.spec}: an open_clip model has an image tower and a text tower; "
                             f"--modality {modality} does not apply (use image or text)")
        return modality or "image"

    def _parse(self):
        rest = self.spec[len("open_clip:"):]
        if rest.startswith(("hf-hub:", "local-dir:")):
            return rest, None
        arch, _, pretrained = rest.partition("/")
        return arch, pretrained or None

    def load(self):
        try:
            import open_clip
        except ImportError:
            raise ModelError("open_clip models need open_clip: pip install 'layerscope[models]' "
                             "(or pip install open-clip-torch)") from None
        arch, pretrained = self._parse()
        if pretrained is None and not self.random_init and not arch.startswith(("hf-hub:", "local-dir:")):
            raise ModelError(f"--model {self.spec}: name the weights as open_clip:{arch}/PRETRAINED "
                             f"(see open_clip.list_pretrained()) or pass --random-init")
        if arch.startswith("local-dir:") and not self.random_init and not any(
                f.suffix in (".safetensors", ".bin", ".pt", ".pth") for f in Path(arch[len("local-dir:"):]).glob("*")):
            raise ModelError(f"--model {self.spec}: the folder holds no open_clip weights "
                             "(*.safetensors, *.bin, *.pt); pass --random-init for random weights")
        if not arch.startswith(("hf-hub:", "local-dir:")):
            check_open_clip_name(open_clip, arch, pretrained, self.spec, self.random_init)
        torch.manual_seed(RANDOM_SEED)
        offline = offline_weights(self.random_init or arch.startswith("local-dir:"))
        hub = (arch[len("hf-hub:"):] + "/" if arch.startswith("hf-hub:")
               else (open_clip.get_pretrained_cfg(arch, pretrained) or {}).get("hf_hub", "") if pretrained else "")
        if offline and hub and not hub_weights_cached(*hub.rsplit("/", 1)):  # "org/model/[file]"
            raise missing_offline(self.spec, offline)  # before building the model: that alone takes seconds
        try:
            model, _, preprocess = open_clip.create_model_and_transforms(
                arch, pretrained=pretrained, load_weights=not self.random_init)
            self.tokenizer = open_clip.get_tokenizer(arch) if self.modality == "text" else None
        except Exception as exc:
            if offline and (missing := missing_offline(self.spec, offline, exc)):
                raise missing from None
            raise ModelError(short(f"open_clip cannot create {arch!r}"
                                   f"{'' if pretrained is None else ' with weights ' + repr(pretrained)}: "
                                   f"{type(exc).__name__}: {exc}")) from None
        self.model_type = f"open_clip:{arch}"
        self.transform = preprocess
        self.model_config = {"arch": arch, "pretrained": pretrained}
        if self.modality == "image":
            tower = model.visual
            self.prefix = 1 if getattr(tower, "class_embedding", None) is not None else 0
            self.pooling = "cls" if self.prefix else "mean"
            self.default_pooling = f"open_clip visual pooled output before proj, pool_type={getattr(tower, 'pool_type', 'tok')!r}"
            size = getattr(tower, "image_size", 224)
            self.input_size = (3, *(size if isinstance(size, (tuple, list)) else (size, size)))
        else:
            tower = getattr(model, "text", model)  # CustomTextCLIP keeps its text tower apart
            self.pooling = "mean"
            self.default_pooling = "open_clip text pooled output before its projection"
            self.pad_id = int(getattr(tower, "pad_id", 0) or 0)
            self.max_length = int(getattr(model, "context_length", 77))
        self.tower = tower
        inner = getattr(tower, "transformer", None)
        self.seq_first = inner is not None and not getattr(inner, "batch_first", True)
        return self._finish(model, tower)

    def _probe_inputs(self):
        if self.modality == "image":
            return {"pixel_values": torch.zeros((1, *self.input_size), dtype=self.dtype, device=self.device)}, None
        return {k: v.to(self.device) for k, v in self.prepare_texts(["probe"]).inputs.items()}, None

    def _mask(self, inputs, prepared):
        return inputs["text"] != self.pad_id if "text" in inputs else None

    def _hook_forward(self, inputs):
        if self.modality == "image":
            visual = self.model.visual
            pre, proj = _without(visual, "proj", lambda: visual(inputs["pixel_values"]))
        else:
            owner = self.tower if self.tower is not self.model else self.model
            attr = "text_projection" if hasattr(owner, "text_projection") else "proj"
            pre, proj = _without(owner, attr, lambda: self.model.encode_text(inputs["text"]))
        if proj is None:  # no separate projection: the output is the joint space itself
            return {"joint": pre}
        return {"default": pre, "joint": _project(pre, proj)}

    def prepare_texts(self, texts):
        if self.modality != "text":
            raise ModelError(f"{self.spec!r} is used as an image model: pass --modality text for its text tower")
        return Prepared({"text": self.tokenizer(texts)}, len(texts), masked=True)

    def text_overflow(self, texts):
        enc = getattr(self.tokenizer, "encode", None)
        if enc is None:
            return [None] * len(texts)
        out = []
        for t in texts:
            n = len(enc(t)) + 2  # start and end of text
            out.append((n, self.max_length) if n > self.max_length else None)
        return out


def _cfg_value(config, *names):
    """A value from a transformers config or its ``model_config`` dict (remote-code models such as
    VideoMAEv2 keep their architecture there)."""
    for source in (config, getattr(config, "model_config", None), getattr(config, "vision_config", None)):
        if source is None:
            continue
        for n in names:
            v = source.get(n) if isinstance(source, dict) else getattr(source, n, None)
            if v:
                return v
    return None


def _has_cls(model) -> bool:
    return any(name.split(".")[-1] in ("cls_token", "class_embedding") for name, _ in model.named_parameters())


class HFHookVisionAdapter(HookRun, VisionAdapter):
    """Hugging Face vision/video models through hooks: remote code (``auto_map``; VideoMAEv2 first)
    and any transformers model given ``--blocks``. The processor is the model's own (AutoImageProcessor).

    Clips follow the same protocol as :class:`VisionAdapter` (native length, nearest-neighbour
    repetition, sub-clips averaged). Video models whose patch embedding wants ``(B, C, T, H, W)``
    (VideoMAEv2) are found by the probe forward and get the processor's ``(B, T, C, H, W)``
    permuted. Pooling: ``cls`` when the model has a class token, else ``mean``. ``default``: the
    model's own output (a tensor as returned, or ``pooler_output``, or ``last_hidden_state`` pooled).
    """

    channels_first = False

    def load(self):
        VisionAdapter.load(self)  # processor, model (remote code or --random-init), native frames
        return self

    def _finish_load(self, model):
        if self.frame_tower:
            raise ModelError(f"{self.spec}: --blocks does not apply to X-CLIP's frame tower (frames of a clip "
                             "exchange messages inside it); drop --blocks (default and joint are stored without it)")
        self.model = model.to(self.device).eval()
        self.blocks_path, self.blocks = find_blocks(self.model, self.blocks_arg)
        if self.pooling is None:
            self.pooling = "cls" if _has_cls(self.model) else "mean"
        self.prefix = 1 if self.pooling == "cls" else 0
        self.n_layers, self.dim = self._probe()
        return self

    def _probe_inputs(self):
        size = int(_cfg_value(self.config, "image_size", "img_size", "crop_size") or 224)
        if self.modality == "video":
            shape = (1, self.native_frames, 3, size, size)
        else:
            shape = (1, 3, size, size)
        return {self.pixel_key: torch.zeros(shape, dtype=self.dtype, device=self.device)}, None

    def _probe(self):
        try:
            return HookRun._probe(self)
        except ModelError:
            raise
        except Exception as first:
            if self.modality != "video":
                raise ModelError(f"a probe forward of {self.spec!r} failed: {type(first).__name__}: {first}") from None
            self.channels_first = True  # e.g. VideoMAEv2: Conv3d patch embedding on (B, C, T, H, W)
            try:
                return HookRun._probe(self)
            except Exception as exc:
                raise ModelError(f"a probe forward of {self.spec!r} failed with clips as (B, T, C, H, W) "
                                 f"({first}) and as (B, C, T, H, W) ({exc})") from None

    def _adapt_inputs(self, inputs):
        px = inputs.get(self.pixel_key)
        if self.channels_first and px is not None and px.ndim == 5:
            inputs = {**inputs, self.pixel_key: px.permute(0, 2, 1, 3, 4)}
        return inputs

    def _hook_forward(self, inputs):
        out = self.model(**inputs)
        return {"default": default_output(out, self.pooling, self.prefix, model=self.model)}

    def run_config(self):
        cfg = HookRun.run_config(self)
        if self.channels_first:
            cfg["clip_layout"] = "BCTHW"
        return cfg


class HFHookTextAdapter(HookRun, TextAdapter):
    """Hugging Face text models through hooks (remote code, or ``--blocks``): masked token mean;
    ``default``: the model's own output (``pooler_output`` or ``last_hidden_state`` masked mean)."""

    def _finish_load(self, model):
        self.model = model.to(self.device).eval()
        self.blocks_path, self.blocks = find_blocks(self.model, self.blocks_arg)
        self.n_layers, self.dim = self._probe()
        return self

    def _probe_inputs(self):
        prepared = self.prepare_texts(["probe"])
        return {k: v.to(self.device) for k, v in prepared.inputs.items()}, None

    def _hook_forward(self, inputs):
        out = self.model(**inputs)
        return {"default": self.default_of(out, inputs.get("attention_mask"))}


def loader_of(spec: str) -> str:
    """``timm`` | ``open_clip`` | ``hf`` from a ``--model`` value."""
    if spec.startswith("timm:"):
        return "timm"
    if spec.startswith("open_clip:"):
        return "open_clip"
    return "hf"


STANDALONE = {"timm": TimmAdapter, "open_clip": OpenClipAdapter}


def catalog() -> list[dict]:
    """What each loader takes and how it pools (``layerscope models``): one dict per row with
    ``loader``, ``form`` (the ``--model`` value and flags), ``families``, ``pooling``, ``layers``."""
    from .hf import DUAL_TOWER_TYPES, IMAGE_TYPES, MLLM_TYPES, VIDEO_TYPES

    def pools(table):
        return ", ".join(f"{k}: {v}" for k, v in sorted(table.items()))

    hs = ("0 = embedding output, i = hidden_states[i]; then default (and joint for "
          + "/".join(sorted(DUAL_TOWER_TYPES)) + ") unless --no-named-layers")
    hooks = "0 = first block's input, i = block i's output; then default (and joint for dual encoders)"
    return [
        {"loader": "transformers video", "form": "--model HUB_ID|FOLDER", "families": ", ".join(sorted(VIDEO_TYPES)),
         "pooling": pools(VIDEO_TYPES) + " (xclip: each frame's CLS, averaged over the clip); sub-clips averaged",
         "layers": hs},
        {"loader": "transformers image", "form": "--model HUB_ID|FOLDER", "families": ", ".join(sorted(IMAGE_TYPES)),
         "pooling": pools(IMAGE_TYPES) + "; frames averaged (--image-mode first: first frame)", "layers": hs},
        {"loader": "transformers text", "form": "--model HUB_ID|FOLDER [--modality text for "
         + "/".join(sorted(DUAL_TOWER_TYPES)) + "]", "families": "any text encoder, T5/BART encoders, decoder-only LLMs",
         "pooling": "mean over real tokens; default of a sentence-transformers folder: its own Pooling "
                    "(+ Normalize), as encode()", "layers": hs},
        {"loader": "transformers MLLM", "form": "--model HUB_ID|FOLDER", "families": ", ".join(sorted(MLLM_TYPES)),
         "pooling": "last real token under the one-word prompts", "layers": hs},
        {"loader": "remote code", "form": "--model HUB_ID|FOLDER --trust-remote-code [--modality video|image|text]",
         "families": "configs with auto_map (VideoMAEv2, ...); video guessed from num_frames/tubelet_size",
         "pooling": "cls when the model has a class token, else mean (text: masked mean); clips as (B,T,C,H,W) "
                    "or (B,C,T,H,W), found by a probe forward", "layers": hooks},
        {"loader": "hooks on a transformers model", "form": "--model HUB_ID|FOLDER --blocks PATH",
         "families": "any transformers encoder (checked equal to hidden_states on ViT)",
         "pooling": "as its family above", "layers": hooks},
        {"loader": "timm", "form": "--model timm:NAME[?kw=value&...] [--weights FILE]",
         "families": "timm ViT-style backbones with a `blocks` list: ViT, DeiT, DINOv2/v3, EVA/EVA02, SigLIP 2, "
                     "AIMv2, Perception Encoder (timm names); CNNs whose `blocks` are stages of feature maps "
                     "(e.g. EfficientNet); --weights: a state dict file mapped onto the architecture in order",
         "pooling": "cls when the model has a class token (whatever its head pools), else mean over patch tokens "
                    "(register tokens left out); a CNN has no class token: each stage's feature map by global "
                    "average over H x W, zero-padded to the widest stage; default: the model's own head "
                    "(forward_head, pre_logits); frames averaged", "layers": hooks},
        {"loader": "open_clip", "form": "--model open_clip:ARCH/PRETRAINED | open_clip:hf-hub:ORG/REPO | "
                                        "open_clip:local-dir:PATH [--modality text]",
         "families": "CLIP, SigLIP, EVA-CLIP, Perception Encoder (open_clip), ... both towers",
         "pooling": "image: cls when the tower has a class embedding, else mean; text: mean over real tokens; "
                    "default: the tower's own pooled output", "layers": hooks
         + " (joint = encode_image / encode_text)"},
        {"loader": "any of the above", "form": "... --random-init",
         "families": "the same architecture with seeded random weights (the standard control; random_init in the "
                     "models table, '-random-init' in the default name)", "pooling": "-", "layers": "-"},
    ]
