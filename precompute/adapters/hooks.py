"""Every layer of any PyTorch module through forward hooks on its block list.

The generic extraction path for models that do not hand back ``hidden_states``
(remote-code Hugging Face models such as VideoMAEv2, timm and open_clip backbones), and for any
model when ``--blocks PATH`` names the list. Layer ``0`` is the *input* of the first block and
layer ``i`` (1..L) the output of block ``i``, so on a transformers encoder the captured tensors are
exactly ``hidden_states`` (checked in tests/precompute/test_models_hooks.py).
"""

from __future__ import annotations

import torch
from torch import nn

#: Block-list layouts found automatically, most specific first. A path is dotted attribute names
#: from the module handed to :func:`find_blocks` (the tower, not the whole dual encoder).
BLOCK_PATHS = (
    "blocks",                    # timm ViT / EVA / DeiT, VideoMAEv2 (remote code), V-JEPA, 4DS
    "model.blocks",              # VideoMAEv2's PreTrainedModel wrapper around its VisionTransformer
    "trunk.blocks",              # timm trunks inside open_clip
    "encoder.layer",             # transformers BERT / ViT / DINOv2 / VideoMAE
    "encoder.layers",            # transformers CLIP / SigLIP towers, BART encoders
    "encoder.block",             # T5 encoder
    "transformer.resblocks",     # open_clip / OpenAI CLIP towers
    "transformer.layers",
    "transformer.h",             # GPT-2 style
    "layers",                    # Llama-style decoders
    "model.layers",
    "h",
)
#: Last names that mark a block list when none of the layouts above matches
BLOCK_NAMES = ("blocks", "layer", "layers", "resblocks", "block", "h")


class BlockError(ValueError):
    """No usable block list, with what would name one (``--blocks``)."""


def get_path(module: nn.Module, path: str):
    obj = module
    for part in path.split("."):
        if not hasattr(obj, part):
            return None
        obj = getattr(obj, part)
    return obj


def _is_block_list(obj) -> bool:
    return isinstance(obj, (nn.ModuleList, nn.Sequential)) and len(obj) > 0


def find_blocks(module: nn.Module, path: str | None = None) -> tuple[str, nn.ModuleList]:
    """``(path, blocks)``: the module's list of transformer blocks.

    ``path`` (``--blocks``) names it as dotted attributes; otherwise the layouts of
    :data:`BLOCK_PATHS` are tried in order, then any ``ModuleList`` whose last name is in
    :data:`BLOCK_NAMES` and whose children share one class (the longest such list, then the
    shallowest). Raises :class:`BlockError` naming ``--blocks`` when nothing fits.
    """
    if path:
        obj = get_path(module, path)
        if not _is_block_list(obj):
            lists = _candidate_lists(module)
            raise BlockError(f"--blocks {path}: {type(module).__name__} has no module list there"
                             + (f"; its block-like lists are {', '.join(n for n, _ in lists[:6])}" if lists else ""))
        return path, obj
    for p in BLOCK_PATHS:
        obj = get_path(module, p)
        if _is_block_list(obj):
            return p, obj
    lists = _candidate_lists(module)
    if lists:
        return lists[0]
    raise BlockError(f"cannot find the block list of {type(module).__name__} (tried {', '.join(BLOCK_PATHS)}); "
                     "name it with --blocks PATH (dotted attributes, e.g. --blocks encoder.layers)")


def check_block_path(config, path: str) -> str | None:
    """Why ``--blocks path`` names no block list of a transformers model built from ``config``, or
    None when it does (or when the skeleton cannot be built here: the load checks it then). The
    skeleton is built on the meta device (no memory, no weights) from a copy of the config (building
    rewrites a config); the path may start at the model or at a tower it hands the extraction (a
    dual encoder's vision_model / text_model, an encoder-decoder's encoder)."""
    import copy

    from transformers import AutoModel

    try:
        with torch.device("meta"):
            model = AutoModel.from_config(copy.deepcopy(config))
    except Exception:  # noqa: BLE001 - not buildable from its config alone (remote code, ...)
        return None
    roots = [model] + [getattr(model, a) for a in ("vision_model", "text_model", "encoder") if hasattr(model, a)]
    if any(_is_block_list(get_path(r, path)) for r in roots):
        return None
    lists = _candidate_lists(model)
    return (f"{type(model).__name__} has no module list at {path!r}"
            + (f"; its block-like lists are {', '.join(n for n, _ in lists[:6])}" if lists else ""))


def _candidate_lists(module):
    found = []
    for name, mod in module.named_modules():
        if not name or not _is_block_list(mod) or name.split(".")[-1] not in BLOCK_NAMES:
            continue
        if len({type(m) for m in mod}) != 1:
            continue
        found.append((name, mod))
    found.sort(key=lambda nm: (-len(nm[1]), nm[0].count(".")))
    return found


def _first_tensor(x):
    """The hidden-state tensor of a block's input or output (blocks return tensors, tuples or
    ModelOutputs whose first element is the hidden state)."""
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, dict):
        x = list(x.values())
    if isinstance(x, (tuple, list)) and x and isinstance(x[0], torch.Tensor):
        return x[0]
    raise BlockError(f"a block returned {type(x).__name__}, not a tensor or a tuple starting with one")


class BlockCapture:
    """Context manager recording layer 0 (first block's input) and every block's output.

    ``states`` after the forward: ``L + 1`` tensors ``(B, T, d)`` (``(T, B, d)`` inputs are
    transposed when ``seq_first``), or ``reduce`` of each when given: pooling inside the hook keeps
    ``L x B x d`` instead of every layer's token grid, and is immune to a later in-place update of
    a block's output. A block that runs twice in one forward (weight sharing) is refused, since
    its layers would be ambiguous.
    """

    def __init__(self, blocks: nn.ModuleList, *, seq_first: bool = False, reduce=None):
        self.blocks = blocks
        self.seq_first = seq_first
        self.reduce = reduce
        self.states: list = []
        self._handles = []

    def _keep(self, t: torch.Tensor) -> torch.Tensor:
        t = t.transpose(0, 1) if self.seq_first else t
        return self.reduce(t) if self.reduce is not None else t

    def __enter__(self):
        self.states = [None] * (len(self.blocks) + 1)

        def pre(mod, args, kwargs):
            x = args[0] if args else next((v for k, v in kwargs.items() if isinstance(v, torch.Tensor)), None)
            if x is None:
                raise BlockError("the first block was called without a tensor input")
            if self.states[0] is None:
                self.states[0] = self._keep(_first_tensor(x))

        self._handles.append(self.blocks[0].register_forward_pre_hook(pre, with_kwargs=True))
        for i, blk in enumerate(self.blocks, start=1):
            def post(mod, args, out, i=i):
                if self.states[i] is not None:
                    raise BlockError(f"block {i - 1} ran twice in one forward; LayerScope cannot tell its layers apart")
                self.states[i] = self._keep(_first_tensor(out))
            self._handles.append(blk.register_forward_hook(post))
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles.clear()
        return False

    def result(self) -> list:
        missing = [i for i, s in enumerate(self.states) if s is None]
        if missing:
            raise BlockError(f"layers {missing} were not reached by the forward (a model that stops early or "
                             "skips blocks); name the blocks it runs with --blocks")
        return self.states


def pool(h: torch.Tensor, pooling: str, *, prefix: int = 0, mask: torch.Tensor | None = None,
         fmt: str = "NCHW") -> torch.Tensor:
    """``(B, d)`` from tokens ``h`` ``(B, T, d)``, or from a CNN's feature map ``h`` ``(B, C, H, W)``
    (``fmt="NHWC"``: ``(B, H, W, C)``).

    ``cls``: token 0. ``mean``: mean over tokens ``prefix..T-1`` (``prefix`` = class and register
    tokens, left out as timm's ``avg`` pool does), over real tokens only when ``mask`` ``(B, T)`` is
    given. ``last_token``: the last real token. A feature map has no class token: it is pooled by
    global average, ``mean`` over its ``H x W`` positions (``d = C``), whatever ``pooling`` says.
    A ``(B, d)`` input is returned as it is.
    """
    if h.ndim == 2:
        return h
    if h.ndim == 4:
        return h.mean(dim=(1, 2) if fmt == "NHWC" else (2, 3))
    if pooling == "cls":
        return h[:, 0]
    if mask is not None:
        m = mask.to(h.device)
        if pooling == "last_token":
            positions = torch.arange(1, m.shape[1] + 1, device=m.device)
            return h[torch.arange(h.shape[0], device=h.device), (m.long() * positions).argmax(dim=1)]
        w = m.to(h.dtype)[:, :, None]
        return (h * w).sum(dim=1) / w.sum(dim=1).clamp(min=1)
    if pooling == "last_token":
        return h[:, -1]
    if pooling == "mean":
        return h[:, prefix:].mean(dim=1)
    raise ValueError(f"unknown pooling {pooling!r}")


def _dense_pooler(model) -> bool:
    """A BERT/ViT-style ``pooler`` (dense + tanh, trained for next-sentence prediction or absent
    from the checkpoint and then randomly initialised by transformers): not the model's embedding."""
    pooler = getattr(model, "pooler", None)
    return isinstance(pooler, torch.nn.Module) and any(True for _ in pooler.parameters())


def default_output(out, pooling, prefix=0, mask=None, model=None):
    """The model's own output as one ``(B, d)`` embedding: a tensor as returned (pooled when it is
    tokens), else ``pooler_output`` (CLIP's post-layernorm class token, DINOv2's normed class
    token, SigLIP's attention head), else ``last_hidden_state`` (after the final norm) pooled the
    family's way. A dense ``pooler`` head (BERT, ViT) is passed over for ``last_hidden_state``."""
    if isinstance(out, (tuple, list)) and not hasattr(out, "last_hidden_state"):
        out = out[0] if out else None
    if isinstance(out, torch.Tensor):
        t = out
    else:
        t = None if model is not None and _dense_pooler(model) else getattr(out, "pooler_output", None)
        if t is None:
            t = getattr(out, "last_hidden_state", None)
            if t is None:
                t = getattr(out, "image_embeds", None)
    if t is None:
        return None
    return pool(t, pooling, prefix=prefix, mask=mask) if t.ndim == 3 else (t if t.ndim == 2 else None)
