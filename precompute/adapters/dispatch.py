"""Which adapter takes a ``--model`` value, probing and loading it: the one place that knows both the
transformers adapters (:mod:`precompute.adapters.hf`) and the hook-based and standalone loaders
(:mod:`precompute.adapters.hooked`), so neither of those imports the other's subclasses."""

from __future__ import annotations

from .hooked import STANDALONE, HFHookTextAdapter, HFHookVisionAdapter, loader_of
from .hf import Adapter, MllmAdapter, ModelError, TextAdapter, VisionAdapter


def _adapter_class(spec: str, probe) -> type:
    if probe.extraction == "hooks":
        return HFHookTextAdapter if probe.modality == "text" else HFHookVisionAdapter
    if probe.modality in ("video", "image"):
        return VisionAdapter
    if probe.modality == "text":
        return TextAdapter
    return MllmAdapter


def probe_model(spec: str, *, device="auto", dtype="float32", trust_remote_code=False, modality: str | None = None,
                prompt_template: str = "auto", blocks: str | None = None, random_init: bool = False,
                named_layers: bool = False, hub: dict | None = None,
                prompt: str = "eol", weights: str | None = None) -> Adapter:
    """An adapter that knows its modality but has no weights yet (cheap: a config read, or for
    ``timm:`` / ``open_clip:`` the flag checks). Refusals are :class:`ModelError` naming the
    flag or loader that would take the model. ``weights``: a state dict file for a ``timm:`` model
    (``--weights``)."""
    kind = loader_of(spec)
    if weights and kind == "hf":
        raise ModelError(f"--weights applies to timm models (--model timm:ARCH); {spec} is a transformers model, "
                         "whose weights are its folder or hub id (--model FOLDER)")
    if kind in STANDALONE and hub:
        raise ModelError(f"--model {spec}: --{' and --'.join(k.replace('_', '-') for k in hub)} apply to "
                         f"transformers hub ids; {kind} models name their weights in the spec")
    if kind in STANDALONE:
        return STANDALONE[kind](spec, device=device, dtype=dtype, modality=modality, blocks=blocks,
                                random_init=random_init, trust_remote_code=trust_remote_code, weights=weights)
    return Adapter(spec, device=device, dtype=dtype, trust_remote_code=trust_remote_code, modality=modality,
                   prompt_template=prompt_template, blocks=blocks, random_init=random_init, named_layers=named_layers,
                   hub=hub, prompt=prompt)


def load_adapter(spec: str, *, device="cpu", dtype="float32", trust_remote_code=False,
                 modality: str | None = None, prompt_template: str = "auto", blocks: str | None = None,
                 random_init: bool = False, named_layers: bool = False, hub: dict | None = None,
                 prompt: str = "eol", weights: str | None = None) -> Adapter:
    """Load the right adapter for a ``--model`` value: a hub id or local folder (``from_pretrained``
    either way; hidden_states, or hooks for remote code and ``--blocks``), ``timm:NAME`` or
    ``open_clip:ARCH/PRETRAINED``; ``random_init`` builds it with seeded random weights;
    ``named_layers`` adds ``default`` (and ``joint`` for CLIP/SigLIP/X-CLIP) after the hidden
    states of a transformers model (the hook path always stores them); ``weights``: a state dict
    file mapped onto a ``timm:`` model (``--weights``)."""
    from transformers.utils import logging as hf_logging

    # our own progress bars and messages say what happens; transformers' load reports would
    # bury them (e.g. an unused pooler head is expected: LayerScope reads hidden states only)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    probe = probe_model(spec, device=device, dtype=dtype, trust_remote_code=trust_remote_code, modality=modality,
                        prompt_template=prompt_template, blocks=blocks, random_init=random_init,
                        named_layers=named_layers, hub=hub, prompt=prompt, weights=weights)
    if isinstance(probe, Adapter) and type(probe) is Adapter:
        adapter = _adapter_class(spec, probe).__new__(_adapter_class(spec, probe))
        adapter.__dict__.update(probe.__dict__)
    else:
        adapter = probe
    try:
        return adapter.load()
    except ModelError:
        raise
    except Exception as exc:  # damaged weights, a class that does not fit, out of memory, ...
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise ModelError(f"cannot load the model {spec!r}: {type(exc).__name__}: {first}") from None
