"""Benchmark: each dashboard page's first and cached render time on a store with 20 models (AppTest).

The store is synthetic (random embeddings with shared structure written straight through the store
writer, then analysed), so the benchmark needs no model weights. Target: under 1 s cached.
Usage: python bench/dashboard.py [--models 20] [--items 128]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PAGES = ["overview", "heatmap", "curves", "scaling", "model_map", "downstream", "temporal", "neighbours"]


def build_store(path: Path, n_models: int, n_items: int) -> None:
    from precompute.inputs.manifest import Item, Manifest
    from precompute.adapters.model_info import ModelInfo
    from precompute.batch.writer import StoreWriter

    rng = np.random.default_rng(0)
    latent = rng.normal(size=(n_items, 8))
    items = [Item(i, f"item{i}", f"/nonexistent/v{i}.mp4", [f"caption {i}"]) for i in range(n_items)]
    w = StoreWriter(path)
    w.put_dataset("bench", Manifest("bench.jsonl", items))
    for m in range(n_models):
        modality = "video" if m < n_models // 2 else "text"
        L, d = 7, 32
        name = f"{modality}-{m:02d}"
        w.put_model(name, ModelInfo(name, modality, modality, "mean", L, d, 1000, None, "r", True, {}))
        proj = rng.normal(size=(8, d))
        for s in (1, 2, 4, 8):
            run = f"r{m}-{s}"
            w.start_run(run, model=name, dataset="bench", modality=modality,
                        n_frames=s if modality == "video" else None, n_captions=None if modality == "video" else s,
                        variant="original", image_mode=None, pooling="mean", dtype="float32", device="cpu",
                        n_items=n_items, n_layers=L, dim=d, config={})
            X = np.stack([latent @ proj + (2.0 - l / 4 + 1.0 / s) * rng.normal(size=(n_items, d))
                          for l in range(L)]).astype(np.float32)
            w.write_batch(run, 0, X, n_done=n_items, n_items=n_items)
    w.close()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=20)
    ap.add_argument("--items", type=int, default=128)
    args = ap.parse_args(argv)
    from streamlit.testing.v1 import AppTest

    from analysis.studies import analyze_store

    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "bench.duckdb"
        t0 = time.perf_counter()
        build_store(store, args.models, args.items)
        analyze_store(store, metrics=("mutual_knn",), n_boot=0, log=lambda m: None)
        print(f"store: {args.models} models, {args.items} items, 4 settings each; built and analysed in "
              f"{time.perf_counter() - t0:.1f} s")
        os.environ["LAYERSCOPE_STORE"] = str(store)
        app = str(Path(__file__).resolve().parents[1] / "app.py")
        at = AppTest.from_file(app, default_timeout=300)
        at.run()
        print(f"{'page':<12} {'first render':>13} {'cached render':>14}")
        worst = 0.0
        # every page at its defaults, then the heatmap's comparison views (two grids read and drawn)
        cases = [(page, page, {}) for page in PAGES] + [
            ("heatmap", "heatmap+side", {"view": "side by side", "vs": "budgets"}),
            ("heatmap", "heatmap+diff", {"view": "difference", "vs": "budgets"})]
        for page, name, params in cases:
            at.query_params.clear()  # as the browser's navigation does: a page starts from its own defaults
            at.query_params.update(params)
            at.switch_page(f"pages/{page}.py")
            t0 = time.perf_counter()
            at.run()
            first = time.perf_counter() - t0
            t0 = time.perf_counter()
            at.run()
            cached = time.perf_counter() - t0
            assert not at.exception, [e.value for e in at.exception]
            worst = max(worst, cached)
            print(f"{name:<12} {first:>12.3f}s {cached:>13.3f}s")
        print(f"slowest cached render {worst:.3f} s (target < 1 s): {'met' if worst < 1 else 'MISSED'}")


if __name__ == "__main__":
    main()
