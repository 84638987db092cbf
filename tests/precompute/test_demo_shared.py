"""The demo's speed-ups change no number: shared model loads and decode-once give the same store,
bit for bit, as separate precompute calls that each load their models and decode their videos."""

import pytest

import precompute.runner
from precompute import tiny_models
from precompute.demo import SharedLoads, torch_threads
from precompute.manifest import load_manifest
from precompute.runner import run_precompute
from precompute.stages import StageTimer

from .helpers import make_dataset, stored_contents

READ_VIDEO, LOAD_ADAPTER = precompute.runner.read_video, precompute.runner.load_adapter


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo_shared_models")
    return {"videomae": str(tiny_models.build_videomae(root / "videomae")),
            "clip": str(tiny_models.build_clip(root / "clip"))}


def _jobs(models):
    """The demo's job shapes: a single-tower video model, then a dual encoder's two towers."""
    return [{"models": [models["videomae"]], "names": ["videomae"], "named_layers": False},
            {"models": [models["clip"]], "names": ["clip"], "named_layers": True},
            {"models": [models["clip"]], "names": ["clip"], "named_layers": True, "modality": "text"}]


def _fill(store, manifests, models, shared, monkeypatch):
    """Every job on every dataset into ``store``; returns (videos decoded, models loaded)."""
    decoded, loaded = [], []
    monkeypatch.setattr(precompute.runner, "read_video", lambda path, wanted=None: (
        decoded.append(path), READ_VIDEO(path, wanted))[1])
    monkeypatch.setattr(precompute.runner, "load_adapter", lambda spec, **kw: (
        loaded.append((spec, kw.get("modality"))), LOAD_ADAPTER(spec, **kw))[1])
    for dataset, manifest in manifests.items():
        for job in _jobs(models):
            extra = {"job_cls": shared.job_cls(dataset)} if shared else {}
            run_precompute(store=store, manifest=manifest, dataset=dataset, frames=(1, 2, 4, 8),
                           captions=(1, 2), variants=["original", "reversed"], batch_size=3, device="cpu",
                           dtype="float32", progress=False, **job, **extra)
    return decoded, loaded


def test_shared_loads_and_decode_once_store_the_same_bits(tmp_path, models, monkeypatch):
    manifests = {name: load_manifest(make_dataset(tmp_path / name, n=5, frames=12, seed=i))
                 for i, name in enumerate(("first", "second"))}
    n_videos = sum(len(m.items) for m in manifests.values())
    with torch_threads(1):  # the same thread count both ways: a GEMM's last bits may depend on it
        decoded_apart, loaded_apart = _fill(tmp_path / "apart.duckdb", manifests, models, None, monkeypatch)
        shared = SharedLoads()
        decoded_shared, loaded_shared = _fill(tmp_path / "shared.duckdb", manifests, models, shared, monkeypatch)
    rows, runs = stored_contents(tmp_path / "shared.duckdb")
    assert (rows, runs) == stored_contents(tmp_path / "apart.duckdb")  # floats compared exactly
    # 2 datasets x (videomae: 4 frame budgets x 2 variants; clip image: the same; clip text: 2 caption
    # budgets + the negatives)
    assert len(runs) == 2 * (8 + 8 + 3) and all(status == "done" for _, status, _, _ in runs)
    # apart: both vision jobs decode every video, and every job loads its model on every dataset
    assert len(decoded_apart) == 2 * n_videos and len(loaded_apart) == 2 * 3
    # shared: each video decoded once for all budgets, variants and jobs; each tower loaded once
    assert sorted(decoded_shared) == sorted(set(decoded_apart)) and len(decoded_shared) == n_videos
    assert sorted(loaded_shared, key=str) == sorted({(models["videomae"], None), (models["clip"], None),
                                                    (models["clip"], "text")}, key=str)
    assert shared.timer.seconds["load models"] > 0


def test_stage_timer_counts_nested_stages_once():
    """With a fake clock: an inner stage's seconds leave the outer one, a repeated stage adds up,
    and the stages plus ``other`` make the total."""
    now = [0.0]
    timer = StageTimer(clock=lambda: now[0])
    with timer.stage("outer"):
        now[0] += 2
        with timer.stage("inner"):
            now[0] += 3
        now[0] += 1
    now[0] += 4  # outside any stage
    with timer.stage("inner"):
        now[0] += 5
    assert timer.seconds == {"outer": 3.0, "inner": 8.0}
    rows = timer.rows()
    assert rows == [("outer", 3.0, 3 / 15), ("inner", 8.0, 8 / 15), ("other", 4.0, 4 / 15)]
    table = timer.table().splitlines()
    assert table[0].split() == ["stage", "seconds", "share"]
    assert table[-1].split() == ["total", "15.0", "100.0%"] and table[1].split() == ["outer", "3.0", "20.0%"]
