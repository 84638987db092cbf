"""The demo's speed-ups change no number: shared model loads and decode-once give the same store,
bit for bit, as separate precompute calls that each load their models and decode their videos."""

import pytest

import precompute.batch.runner
from precompute.synthetic import tiny_models
from precompute.demo import SharedLoads, torch_threads
from precompute.inputs.manifest import load_manifest
from precompute.batch.runner import run_precompute
from precompute.batch.stages import StageTimer

from .helpers import make_dataset, stored_contents

READ_VIDEO, LOAD_ADAPTER = precompute.batch.runner.read_video, precompute.batch.runner.load_adapter


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
    monkeypatch.setattr(precompute.batch.runner, "read_video", lambda path, wanted=None: (
        decoded.append(path), READ_VIDEO(path, wanted))[1])
    monkeypatch.setattr(precompute.batch.runner, "load_adapter", lambda spec, **kw: (
        loaded.append((spec, kw.get("modality"))), LOAD_ADAPTER(spec, **kw))[1])
    for dataset, manifest in manifests.items():
        for job in _jobs(models):
            extra = {"job_cls": shared.job_cls(dataset)} if shared else {}
            run_precompute(store=store, manifest=manifest, dataset=dataset, frames=(1, 2, 4, 8),
                           captions=(1, 2), variants=["original", "reversed"], batch_size=3, device="cpu",
                           dtype="float32", progress=False, **job, **extra)
    return decoded, loaded


@pytest.mark.slow  # builds a tiny VideoMAE and CLIP and precomputes the demo's jobs twice
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
    now, cpu = [0.0], [0.0]
    timer = StageTimer(clock=lambda: now[0], cpu_clock=lambda: cpu[0])
    with timer.stage("outer"):
        now[0] += 2
        cpu[0] += 1
        with timer.stage("inner"):
            now[0] += 3
            cpu[0] += 6  # two threads busy
        now[0] += 1
    now[0] += 4  # outside any stage
    cpu[0] += 4
    with timer.stage("inner"):
        now[0] += 5
        cpu[0] += 0.5
    assert timer.seconds == {"outer": 3.0, "inner": 8.0}
    assert timer.cpu_seconds == {"outer": 1.0, "inner": 6.5}
    rows = timer.rows()
    assert rows == [("outer", 3.0, 3 / 15), ("inner", 8.0, 8 / 15), ("other", 4.0, 4 / 15)]
    table = timer.table().splitlines()
    assert table[0].split() == ["stage", "seconds", "share"]
    assert table[-1].split() == ["total", "15.0", "100.0%"] and table[1].split() == ["outer", "3.0", "20.0%"]


def test_a_store_with_an_older_demo_dataset_is_refused_before_anything_runs(tmp_path):
    """The Test of Time captions changed (issue #33): a store made by an older demo holds a
    ``test_of_time`` with other captions. The demo stops with an error naming the store and the
    dataset, and leaves the store as it was; the same data passes."""
    import duckdb

    from analysis.storage.store import StoreError
    from precompute.demo import _check_stored_datasets
    from precompute.batch.writer import StoreWriter

    old = load_manifest(make_dataset(tmp_path / "old", n=3, seed=0))
    new = load_manifest(make_dataset(tmp_path / "new", n=3, seed=1))
    store = tmp_path / "demo.duckdb"
    writer = StoreWriter(store)
    writer.put_dataset("test_of_time", old)
    writer.close()
    before = store.read_bytes()
    with pytest.raises(StoreError, match=r"demo\.duckdb holds the demo dataset\(s\) test_of_time"):
        _check_stored_datasets(store, {"test_of_time": new, "moving_shapes": new})
    assert store.read_bytes() == before
    _check_stored_datasets(store, {"test_of_time": old, "moving_shapes": new})  # same data: fine
    _check_stored_datasets(tmp_path / "absent.duckdb", {"test_of_time": new})  # no store yet: fine
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT count(*) FROM items").fetchone()[0] == 3
    con.close()


def test_demo_data_made_by_an_older_generator_is_regenerated(tmp_path):
    """A data folder stamped with another generator version is written again (an old folder's Test
    of Time would keep its 12 repeated captions); the current stamp reuses it."""
    import json

    from precompute.demo import DATA_VERSION, DemoSize, _generate

    size = DemoSize(tot_items=4, shape_items=3, frames=(1,), captions=(1,), tot_frames=(1,), tot_captions=(1,))
    logs = []
    _generate(tmp_path, size, 0, logs.append)
    stamp = json.loads((tmp_path / "stamp.json").read_text())
    assert stamp["version"] == DATA_VERSION
    _generate(tmp_path, size, 0, logs.append)
    (tmp_path / "stamp.json").write_text(json.dumps({**stamp, "version": DATA_VERSION - 1}))
    (tmp_path / "test_of_time.jsonl").write_text("stale\n")
    _generate(tmp_path, size, 0, logs.append)
    assert [m.split(":")[0] + ":" + m.split(":")[1].split()[0] for m in logs] == [
        "datasets:generating", "datasets:reusing", "datasets:generating"]
    rows = [json.loads(line) for line in (tmp_path / "test_of_time.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and len({r["captions"][0] for r in rows}) == 4
