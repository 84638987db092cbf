"""A sentence-transformers folder's own head, so that ``default`` is what ``encode()`` returns.

A sentence-transformers model is a transformers model plus ``modules.json``: the transformer at
the folder's root, then a ``Pooling`` module (``1_Pooling/config.json``: ``cls``, ``mean``,
``max``, ``mean_sqrt_len_tokens`` or ``lasttoken``) and often ``Normalize``. LayerScope's numbered
layers keep the protocol's pooling (text: mean over real tokens, DR's protocol); the ``default`` layer
is the model's own output, which for such a folder is this head applied to the last hidden state
(otherwise a CLS-pooled model's ``default`` would be the token mean, silently unlike
``encode()``). Pure reading and pooling; loading the model stays in :mod:`precompute.adapters.hf`.

Reference: sentence-transformers' ``Pooling.forward`` / ``Normalize.forward`` (v2–v6 configs:
the legacy ``pooling_mode_*_token`` booleans and the newer ``pooling_mode`` string).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

#: Pooling modes this head reproduces (sentence-transformers' names)
MODES = ("cls", "mean", "max", "mean_sqrt_len_tokens", "lasttoken")
#: Legacy boolean keys of ``1_Pooling/config.json``, in sentence-transformers' order
LEGACY_KEYS = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
               "pooling_mode_mean_tokens": "mean", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
               "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}


class HeadError(ValueError):
    """A sentence-transformers head LayerScope cannot reproduce, naming the module at fault."""


@dataclass(frozen=True)
class SentenceHead:
    """``pooling`` (one of :data:`MODES`) then, when ``normalize``, L2 normalisation."""

    pooling: str
    normalize: bool

    def describe(self) -> str:
        """What runs record as ``default_pooling``, e.g. ``sentence-transformers cls + normalize``."""
        return f"sentence-transformers {self.pooling}" + (" + normalize" if self.normalize else "")

    def record(self) -> dict:
        return {"pooling": self.pooling, "normalize": self.normalize}

    def __call__(self, tokens: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """``(B, d)`` from the last hidden state ``tokens`` ``(B, T, d)`` and ``mask`` ``(B, T)``
        (1 = real token; all real when None), as ``Pooling`` then ``Normalize`` compute it."""
        tokens = tokens.float()
        m = torch.ones(tokens.shape[:2], device=tokens.device) if mask is None else mask.to(tokens.device).float()
        if self.pooling == "cls":  # the first real token, whatever side the tokenizer pads
            out = tokens[torch.arange(tokens.shape[0], device=tokens.device), m.argmax(dim=1)]
        elif self.pooling == "max":
            out = tokens.masked_fill(m[:, :, None] == 0, float("-inf")).max(dim=1).values
        elif self.pooling in ("mean", "mean_sqrt_len_tokens"):
            n = m.sum(dim=1, keepdim=True).clamp(min=1e-9)
            out = (tokens * m[:, :, None]).sum(dim=1) / (n if self.pooling == "mean" else n.sqrt())
        else:  # lasttoken: the last real token
            positions = torch.arange(1, m.shape[1] + 1, device=m.device)
            out = tokens[torch.arange(tokens.shape[0], device=tokens.device), (m * positions).argmax(dim=1)]
        return torch.nn.functional.normalize(out, p=2, dim=1) if self.normalize else out


def _kind(module: dict) -> str:
    """``Transformer`` / ``Pooling`` / ``Normalize`` / ... from a ``modules.json`` entry's ``type``
    (``sentence_transformers.models.Pooling`` and v6's ``...modules.pooling.Pooling`` alike)."""
    return str(module.get("type", "")).rsplit(".", 1)[-1]


def pooling_mode(config: dict, where: str) -> str:
    """The single pooling mode of a ``1_Pooling/config.json`` (new ``pooling_mode`` key, or the
    legacy booleans; none set means ``mean``, as sentence-transformers reads it)."""
    mode = config.get("pooling_mode")
    if mode is None:
        modes = [m for k, m in LEGACY_KEYS.items() if config.get(k)] or ["mean"]
        mode = modes[0] if len(modes) == 1 else modes
    if isinstance(mode, (list, tuple)):
        mode = mode[0] if len(mode) == 1 else list(mode)
    if not isinstance(mode, str) or mode not in MODES:
        raise HeadError(f"{where}: pooling mode {mode!r} is not one LayerScope reproduces ({', '.join(MODES)})")
    return mode


def read_head(folder: Path) -> SentenceHead | None:
    """The head of a sentence-transformers ``folder`` (None when it has no ``modules.json``).

    Raises :class:`HeadError` for a pipeline whose ``encode()`` output this head would not equal:
    a module other than the root transformer, one ``Pooling`` and an optional ``Normalize`` after
    it (``Dense``, ``LayerNorm``, ...), or a pooling mode outside :data:`MODES`.
    """
    folder = Path(folder)
    spec = folder / "modules.json"
    if not spec.is_file():
        return None
    try:
        modules = sorted(json.loads(spec.read_text()), key=lambda m: int(m.get("idx", 0)))
    except (ValueError, TypeError, AttributeError) as exc:
        raise HeadError(f"{spec}: not a sentence-transformers module list ({exc})") from None
    kinds = [_kind(m) for m in modules]
    if kinds[:2] != ["Transformer", "Pooling"] or any(k != "Normalize" for k in kinds[2:]) or len(kinds) > 3:
        raise HeadError(f"{spec}: modules {kinds}; LayerScope's default layer reproduces Transformer, Pooling "
                        "and an optional Normalize only, so its default would differ from encode()")
    pool_cfg = folder / modules[1].get("path", "1_Pooling") / "config.json"
    try:
        config = json.loads(pool_cfg.read_text())
    except (OSError, ValueError) as exc:
        raise HeadError(f"{pool_cfg}: cannot read the Pooling config ({exc})") from None
    return SentenceHead(pooling_mode(config, str(pool_cfg)), normalize=len(kinds) == 3)


def max_seq_length(folder: Path) -> int | None:
    """``max_seq_length`` of ``sentence_bert_config.json`` (sentence-transformers cuts texts there;
    newer folders keep it as the tokenizer's ``model_max_length`` instead), or None."""
    try:
        value = json.loads((Path(folder) / "sentence_bert_config.json").read_text()).get("max_seq_length")
    except (OSError, ValueError, AttributeError):
        return None
    return int(value) if isinstance(value, int) and value > 0 else None
