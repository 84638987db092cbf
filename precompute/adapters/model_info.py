"""What the store records about a model: no torch here, so writing and reading stores never loads it."""

from __future__ import annotations

from dataclasses import dataclass


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
