"""Synthetic stores: random embeddings with shared structure written straight through the store
writer, shaped like a real sweep (models × budgets × layers). For tests and benchmarks of analysis,
which need no model weights.

Every run's layer ``l`` of item ``i`` is ``z_i P_m + σ(l, s) ε`` with a latent ``z`` shared by all
models (so models agree, more at some layers and budgets than others), a per-model projection
``P_m`` and noise that shrinks with the budget ``s`` and peaks at the first and last layers.
"""

from __future__ import annotations

import numpy as np

from ..inputs.manifest import Item, Manifest
from ..adapters.model_info import ModelInfo
from ..batch.writer import StoreWriter


def write_run(path, run_id: str, X, *, model: str, modality: str, n_frames=None, n_captions=None,
              dataset: str = "synthetic", variant: str = "original", config: dict | None = None) -> None:
    """Write one done run holding exactly ``X`` ``(L, N, d)`` (the dataset and model created when
    missing), e.g. a collapsed or duplicated layer for a test; ``config``: the run's config (e.g.
    ``{"side": "video"}`` for an MLLM's side, which the same-space study ranks; default none)."""
    X = np.asarray(X, dtype=np.float32)
    L, N, d = X.shape
    w = StoreWriter(path)
    try:
        if not w.con.execute("SELECT 1 FROM datasets WHERE dataset = ?", [dataset]).fetchall():
            items = [Item(i, f"item{i}", f"/nonexistent/v{i}.mp4", [f"caption {i}"]) for i in range(N)]
            w.put_dataset(dataset, Manifest(f"{dataset}.jsonl", items))
        if not w.con.execute("SELECT 1 FROM models WHERE model = ?", [model]).fetchall():
            w.put_model(model, ModelInfo(model, modality, modality, "mean", L, d, 1000, None, "r", True, {}))
        w.start_run(run_id, model=model, dataset=dataset, modality=modality, n_frames=n_frames,
                    n_captions=n_captions, variant=variant, image_mode=None, pooling="mean", dtype="float32",
                    device="cpu", n_items=N, n_layers=L, dim=d, config=config or {})
        w.write_batch(run_id, 0, X, n_done=N, n_items=N)
    finally:
        w.close()


def write_sweep(path, *, video: list[str], text: list[str], frames=(1, 2, 4), captions=(1, 2, 4),
                n_items: int = 64, n_layers: int = 5, dim: int = 16, dataset: str = "synthetic",
                seed: int = 0) -> list[str]:
    """Write one done run per (video model, n_f) and (text model, n_c); returns the run ids.

    Models already in the store are skipped (so a second call can add models to a sweep);
    the dataset is created on the first call. Model ``m``'s numbers depend only on its name and
    ``seed``, not on which other models are written.
    """
    latent = np.random.default_rng(seed).normal(size=(n_items, 8))
    w = StoreWriter(path)
    try:
        if not w.con.execute("SELECT 1 FROM datasets WHERE dataset = ?", [dataset]).fetchall():
            items = [Item(i, f"item{i}", f"/nonexistent/v{i}.mp4", [f"caption {i}"]) for i in range(n_items)]
            w.put_dataset(dataset, Manifest(f"{dataset}.jsonl", items))
        have = {r[0] for r in w.con.execute("SELECT model FROM models").fetchall()}
        out = []
        for modality, names, budgets in (("video", video, frames), ("text", text, captions)):
            for name in names:
                if name in have:
                    continue
                rng = np.random.default_rng([seed, *name.encode()])
                w.put_model(name, ModelInfo(name, modality, modality, "mean", n_layers, dim, 1000, None, "r",
                                            True, {}))
                proj = rng.normal(size=(8, dim))
                for s in budgets:
                    run = f"{name}-{s}"
                    w.start_run(run, model=name, dataset=dataset, modality=modality,
                                n_frames=s if modality == "video" else None,
                                n_captions=None if modality == "video" else s, variant="original",
                                image_mode=None, pooling="mean", dtype="float32", device="cpu",
                                n_items=n_items, n_layers=n_layers, dim=dim, config={})
                    depth = np.abs(np.linspace(-1, 1, n_layers))
                    X = np.stack([latent @ proj + (0.5 + depth[l] + 1.0 / s) * rng.normal(size=(n_items, dim))
                                  for l in range(n_layers)]).astype(np.float32)
                    w.write_batch(run, 0, X, n_done=n_items, n_items=n_items)
                    out.append(run)
        return out
    finally:
        w.close()
