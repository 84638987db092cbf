"""What the store records about a model, without torch: the store writer, synthetic stores and the
analysis tests import this, and only model runs need torch (:mod:`precompute.models`)."""

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
