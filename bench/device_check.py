"""Device check: precompute on a GPU in float32 and bfloat16 against CPU float32, per item and layer.

For the session that is lent a GPU: one script, a few minutes. It writes a small moving-shapes
dataset, builds a tiny and a base-size random VideoMAE plus a tiny BERT (nothing downloaded),
precomputes every model with ``--device cpu --dtype float32`` as the reference and with
``--device DEVICE`` in each ``--dtypes``, then prints, per model and dtype, items/s and the cosine
between the device's and the CPU's vector of every (layer, item): the minimum and the median.
items/s include loading the model (small models: mostly that).
Expected: float32 cosines ≈ 1 (≥ 0.9999); bfloat16 lower but high (≳ 0.99 on these random models).

Grid check (issues #18, #32): the float32 similarities and top-k of the k-NN search on the device,
and faiss's CPU candidate route where faiss is installed (the default on a CPU machine), against
the numpy path (every route feeds the same float64 proof and re-rank), on float32 stacks with planted near-ties (``--grid-n``, default 4096 and
16384 on a GPU, 512 with ``--device cpu``; d=768, 4 layers): neighbour lists must be identical and mutual_knn / cknna grids equal
bit for bit; prints the time of each path. ``--grid-only`` skips the precompute part.

Runs anywhere: ``--device cpu`` checks the script itself (and bfloat16 on CPU; the grid check
then runs the torch code on CPU).
Usage: python bench/device_check.py [--device cuda] [--dtypes float32,bfloat16] [--videos 16]
       [--base-frames 16] [--no-base] [--grid-n 4096,16384] [--grid-only | --no-grid]
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
    from precompute.synthetic.scenes import render_shapes, shape_scenes
    from precompute.synthetic.video_files import write_video

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

    from precompute.synthetic import tiny_models

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


def grid_stack(n: int, d: int, layers: int, seed: int) -> np.ndarray:
    """float32 ``(layers, n, d)``: shared latent plus noise, and in layer 0 a block of rows whose
    cosines to row 0 differ by 1e-9 (below float32 resolution) so the float64 fallback runs."""
    rng = np.random.default_rng(seed)
    latent = rng.normal(size=(n, 32)).astype(np.float32)
    out = np.empty((layers, n, d), dtype=np.float32)
    for l in range(layers):
        out[l] = latent @ rng.normal(size=(32, d)).astype(np.float32) + rng.standard_normal((n, d), dtype=np.float32)
    e = np.zeros(d)
    e[0] = 1.0
    out[0, 0] = e
    for j in range(1, 41):
        v = rng.normal(size=d)
        v[0] = 0.0
        v /= np.linalg.norm(v)
        c = 0.8 + j * 1e-9
        out[0, j] = c * e + np.sqrt(1 - c * c) * v
    return out


def grid_check(device: str, sizes, d: int = 768, layers: int = 4, k: int = 10) -> bool:
    """Device vs numpy k-NN search and grids, and the CPU candidate routes (issue #32): the symmetric
    blocked search where numba runs, faiss's exhaustive search where faiss is installed; prints one
    line per N and route, returns whether all agree with numpy."""
    from analysis.metrics import neighbors, neighbors_blocks
    from analysis.grid import layer_grid
    from analysis.metrics.neighbors_faiss import faiss_module

    routes = (["numpy"] + (["symmetric"] if neighbors_blocks.available() else [])
              + (["faiss"] if faiss_module() is not None else []) + [device])
    ok_all = True
    for n in sizes:
        A = grid_stack(n, d, layers, seed=n)
        times, results = {}, {}
        for dev in dict.fromkeys(routes):
            old = neighbors.DEVICE
            neighbors.DEVICE = dev
            try:
                neighbors.knn_search(A[1][:64], k)  # warm-up: CUDA context, kernels
                t0 = time.perf_counter()
                searches = [neighbors.knn_search(layer, k) for layer in A]
                times[dev] = time.perf_counter() - t0
                grids = {m: layer_grid(A, metric=m, k=k) for m in ("mutual_knn", "cknna")}
            finally:
                neighbors.DEVICE = old
            results[dev] = (searches, grids)
        s_np, g_np = results["numpy"]
        for dev in [r for r in dict.fromkeys(routes) if r != "numpy"]:
            s_dev, g_dev = results[dev]
            same_idx = all(np.array_equal(a.idx, b.idx) for a, b in zip(s_np, s_dev))
            same_grid = all(np.array_equal(g_np[m], g_dev[m], equal_nan=True) for m in g_np)
            reranked = sum(s.reranked for s in s_dev)
            retried = sum(sum(s.resolved[1:]) for s in s_dev)
            ok = same_idx and same_grid
            ok_all &= ok
            print(f"grid N={n:6d} d={d} L={layers}: numpy search {times['numpy']:7.2f} s   {dev} search "
                  f"{times[dev]:7.2f} s   neighbours identical: {same_idx}   grids identical: {same_grid}   "
                  f"float64 re-ranked pairs: {reranked}, rows retried wider: {retried}", flush=True)
    return ok_all


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--videos", type=int, default=16)
    ap.add_argument("--base-frames", type=int, default=16)
    ap.add_argument("--no-base", action="store_true", help="skip the base-size model (quick run)")
    ap.add_argument("--grid-n", default=None,
                    help="N values of the k-NN grid check (default 4096,16384 on a GPU, 512 with --device cpu)")
    ap.add_argument("--grid-only", action="store_true", help="only the k-NN grid check")
    ap.add_argument("--no-grid", action="store_true", help="skip the k-NN grid check")
    args = ap.parse_args(argv)
    if not args.no_grid:
        sizes = args.grid_n or ("512" if args.device == "cpu" else "4096,16384")
        ok = grid_check(args.device, [int(x) for x in sizes.split(",") if x])
        print(f"grid check: device and numpy agree: {ok}", flush=True)
        if args.grid_only:
            return 0 if ok else 1

    import torch

    from analysis.storage.store import load_embeddings
    from precompute.inputs.manifest import load_manifest
    from precompute.batch.runner import run_precompute

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
    sys.exit(main())
