"""What a precompute job is asked to do, with every default in one place.

``layerscope precompute`` builds a :class:`PrecomputeOptions` from its flags, a sweep file from its
``[precompute]`` table (and each ``[[models]]`` override), and Python callers pass one (or keyword
overrides) to :func:`precompute.batch.runner.run_precompute`. The CLI's defaults, the sweep format's and the
runner's are all read from :data:`DEFAULTS`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace


@dataclass(frozen=True)
class PrecomputeOptions:
    #: ``n_f`` values: frames sampled uniformly per video (each a run)
    frames: tuple = (1, 2, 4, 8, 16)
    #: ``n_c`` values: captions joined per item (each a run)
    captions: tuple = (1, 2, 4, 8, 10)
    #: ``original`` and/or ``reversed`` (time-reversed videos: the arrow-of-time probe)
    variants: tuple = ("original",)
    #: items per forward batch and per committed transaction
    batch_size: int = 8
    device: str = "auto"
    dtype: str = "float32"
    #: image models: average the sampled frames (``frames``) or use the first frame only
    image_mode: str = "frames"
    #: ``I/N``: only the I-th of N contiguous item shards
    shard: str | None = None
    allow_fewer_captions: bool = False
    trust_remote_code: bool = False
    #: which ``n_c`` captions: the first (``first``) or a seeded random subset per item (``random``)
    caption_order: str = "first"
    caption_seed: int = 0
    #: MLLMs: the one-word prompt inside the model's chat template (``auto``) or bare (``none``)
    prompt_template: str = "auto"
    #: MLLMs: the EOL prompt ("Summarize ... in one word:", ``eol``) or the input alone (``plain``)
    prompt: str = "eol"
    #: dotted path of the model's block list (hook extraction), or None
    blocks: str | None = None
    #: seeded random weights: the standard control
    random_init: bool = False
    #: also store ``default`` (and ``joint``) after the numbered layers of transformers models
    named_layers: bool = True
    #: hub models: the branch, tag or commit to load (default: the hub's main); refused for a local folder
    revision: str | None = None
    #: hub models: where downloads are cached (default: huggingface_hub's, HF_HOME)
    cache_dir: str | None = None
    #: timm models: a state dict file (.pth/.pt/.safetensors) mapped onto the architecture in order
    weights: str | None = None

    def __post_init__(self):
        # the types the job reads (a sweep's TOML and Python callers may pass lists or other numbers)
        for name in ("frames", "captions", "variants"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        for name, kind in (("batch_size", int), ("caption_seed", int), ("random_init", bool), ("named_layers", bool)):
            object.__setattr__(self, name, kind(getattr(self, name)))

    def kwargs(self) -> dict:
        """The options as keyword arguments (tuples as lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    def with_overrides(self, **overrides) -> "PrecomputeOptions":
        """A copy with ``overrides``; an unknown name is a ValueError naming it and the known ones."""
        unknown = sorted(set(overrides) - NAMES)
        if unknown:
            raise ValueError(f"unknown precompute option(s) {unknown}; known: {', '.join(sorted(NAMES))}")
        return replace(self, **overrides)


NAMES = frozenset(f.name for f in fields(PrecomputeOptions))
DEFAULTS = PrecomputeOptions()
