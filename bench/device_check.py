"""Device check: precompute on a GPU in float32 and bfloat16 against CPU float32, per item and layer.

For the session that is lent a GPU: one script, a few minutes. It writes a small moving-shapes
dataset, builds a tiny and a base-size random VideoMAE plus a tiny BERT (nothing downloaded),
precomputes every model with ``--device cpu --dtype float32`` as the reference and with
``--device DEVICE`` in each ``--dtypes``, then prints, per model and dtype, items/s and the cosine
between the device's and the CPU's vector of every (layer, item): the minimum and the median.
items/s include loading the model (small models: mostly that).
Expected: float32 cosines ≈ 1 (≥ 0.9999); bfloat16 lower but high (≳ 0.99 on these random models).

Runs anywhere: ``--device cpu`` checks the script itself (and bfloat16 on CPU).
Usage: python bench/device_check.py [--device cuda] [--dtypes float32,bfloat16] [--videos 16]
       [--base-frames 16] [--no-base]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

# this file is bench/device_check.py: keep its folder off the path so `import precompute` finds the package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np


def write_dataset(root: Path, n: int, size: int = 128) -> Path:
    from precompute.synthetic import render_shapes, shape_scenes
    from precompute.synthetic_video import write_video

    lines = []
    for scene in shape_scenes(n, seed=0):
        write_video(root / f"{scene.item_id}.mp4", render_shapes(scene, size))
        lines.append(json.dumps({"id": scene.item_id, "video": f"{scene.item_id}.mp4",
                                 "captions": scene.captions()[:2]}))
    (root / "m.jsonl").write_text("\n".join(lines) + "\n")
    return root / "m.jsonl"


def build_models(root: Path, base: bool, base_frames: int) -> dict:
    from transformers import VideoMAEConfig, VideoMAEModel
    from transformers.models.videomae.image_processing_pil_videomae import VideoMAEImageProcessorPil

    from precompute import tiny_models

    models = {"tiny-videomae": (str(tiny_models.build_videomae(root / "tiny-videomae")), {"frames": [4]}),
              "tiny-bert": (str(tiny_models.build_bert(root / "tiny-bert")), {"captions": [2]})}
    if base:
        import torch

        torch.manual_seed(0)
        cfg = VideoMAEConfig(image_size=224, patch_size=16, num_frames=base_frames, tubelet_size=2, hidden_size=768,
                             num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
        cfg.layerscope_random_init = True
        VideoMAEModel(cfg).save_pretrained(root / "base-videomae")
        VideoMAEImageProcessorPil(size={"shortest_edge": 224},
                                  crop_size={"height": 224, "width": 224}).save_pretrained(root / "base-videomae")
        models["base-videomae"] = (str(root / "base-videomae"), {"frames": [base_frames]})
    return models


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine of every (layer, item) pair of vectors: ``(L, N)``."""
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    return (a * b).sum(-1) / np.maximum(np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1), 1e-30)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--videos", type=int, default=16)
    ap.add_argument("--base-frames", type=int, default=16)
    ap.add_argument("--no-base", action="store_true", help="skip the base-size model (quick run)")
    args = ap.parse_args(argv)

    import torch

    from analysis.store import load_embeddings
    from precompute.manifest import load_manifest
    from precompute.runner import run_precompute

    print(f"torch {torch.__version__}, CUDA available: {torch.cuda.is_available()}"
          + (f" ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else ""))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        manifest = load_manifest(write_dataset(tmp / "data", args.videos))
        models = build_models(tmp / "models", not args.no_base, args.base_frames)
        for name, (path, setting) in models.items():
            runs = {}
            settings = [("cpu", "float32")] + [(args.device, d) for d in args.dtypes.split(",")]
            for device, dtype in dict.fromkeys(settings):  # --device cpu: the reference is not run twice
                store = tmp / f"{name}-{device}-{dtype}.duckdb"
                t0 = time.perf_counter()
                summary = run_precompute(store=store, manifest=manifest, dataset="check", models=[path],
                                         names=[name], frames=setting.get("frames", [1]),
                                         captions=setting.get("captions", [1]), batch_size=4, device=device,
                                         dtype=dtype, progress=False)
                seconds = time.perf_counter() - t0
                key = {"n_frames": setting["frames"][0]} if "frames" in setting else {"n_captions": setting["captions"][0]}
                runs[(device, dtype)] = load_embeddings(store, model=name, dataset="check", **key)
                line = f"{name:14s} {device:6s} {dtype:8s} {summary.items_embedded / seconds:8.1f} items/s"
                if (device, dtype) != ("cpu", "float32"):
                    c = cosines(runs[(device, dtype)], runs[("cpu", "float32")])
                    line += f"   cosine vs CPU float32: min {c.min():.6f}, median {np.median(c):.6f}"
                print(line, flush=True)


if __name__ == "__main__":
    main()
