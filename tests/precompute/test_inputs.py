"""Inputs that used to be used silently, hang, or end in a traceback: each is now a note, a finished
run, or one clear line that leaves the store as it was."""

import json
import shutil

import av
import duckdb
import numpy as np
import pytest

from analysis.storage.schema import embedding_tables
from analysis.storage.store import list_runs, load_embeddings
from precompute.cli import main
from precompute.synthetic.video_files import index_frames
from tests.precompute.helpers import make_dataset


def cli(*args):
    return main([str(a) for a in args])


def store_state(store):
    """Everything a failed command must leave as it was: runs and their vectors."""
    con = duckdb.connect(str(store), read_only=True)
    try:
        runs = con.execute("SELECT run_id, status, n_done, config FROM runs ORDER BY run_id").fetchall()
        vecs = sum(con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in embedding_tables(con).values())
        return runs, vecs
    finally:
        con.close()


def one_line_error(capsys, *needles):
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    for n in needles:
        assert n in err, err
    return err


def test_same_names_other_videos_are_refused_by_item(tmp_path, tiny, capsys):
    first = make_dataset(tmp_path / "a", n=4, seed=0)
    make_dataset(tmp_path / "b", n=4, seed=1)  # other pixels under the same file names
    second = tmp_path / "b" / "manifest.jsonl"
    second.write_text(first.read_text())  # same ids, names and captions
    store = tmp_path / "s.duckdb"
    args = ("--dataset", "toy", "--model", tiny["vit"], "--frames", "2", "--quiet")
    assert cli("precompute", "--store", store, "--manifest", first, *args) == 0
    before = store_state(store)
    assert cli("precompute", "--store", store, "--manifest", second, *args) == 2
    err = capsys.readouterr().err
    assert "other video content for 4 item(s): 'item0', 'item1', 'item2', 'item3'" in err and "Traceback" not in err
    assert store_state(store) == before
    # the same videos copied elsewhere (new paths, new mtimes) are the same dataset: already done
    shutil.copytree(tmp_path / "a", tmp_path / "copy")
    assert cli("precompute", "--store", store, "--manifest", tmp_path / "copy" / "manifest.jsonl", *args) == 0
    assert "0 run(s) computed, 1 already done" in capsys.readouterr().out
    # one video replaced: only that item is named
    shutil.copy(tmp_path / "b" / "v2.mkv", tmp_path / "copy" / "v2.mkv")
    assert cli("precompute", "--store", store, "--manifest", tmp_path / "copy" / "manifest.jsonl", *args) == 2
    assert "other video content for 1 item(s): 'item2'" in capsys.readouterr().err
    assert store_state(store) == before


def _lying_header_video(path, n=12):
    """An MP4 whose header (moov first) states ``n`` frames while its data is cut short."""
    with av.open(str(path), "w", options={"movflags": "faststart", "fflags": "+bitexact"}) as c:
        s = c.add_stream("mpeg4", rate=10, options={"flags": "+bitexact"})
        s.width, s.height, s.pix_fmt = 32, 32, "yuv420p"
        for f in index_frames(n):
            for p in s.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    data = path.read_bytes()
    path.write_bytes(data[:-200])
    with av.open(str(path)) as c:  # independent count: PyAV's own decode
        stated = c.streams.video[0].frames
        real = sum(1 for _ in c.decode(c.streams.video[0]))
    assert stated == n and 0 < real < n
    return real


def test_header_with_more_frames_than_the_video_holds_is_noted(tmp_path, tiny, capsys):
    real = _lying_header_video(tmp_path / "cut.mp4")
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"id": "cut", "video": "cut.mp4", "captions": ["x"]}) + "\n")
    store = tmp_path / "s.duckdb"
    assert cli("precompute", "--store", store, "--manifest", manifest, "--dataset", "d", "--model", tiny["vit"],
               "--frames", "2", "--quiet") == 0
    assert "frame_count_mismatch" in capsys.readouterr().err
    con = duckdb.connect(str(store), read_only=True)
    (cfg,) = [json.loads(r[0]) for r in con.execute("SELECT config FROM runs").fetchall()]
    con.close()
    note = cfg["notes"]["frame_count_mismatch"]["cut"]
    assert (note["declared"], note["decoded"]) == (12, real)


def test_more_shards_than_items_leaves_no_shard_running_and_merge_completes(tmp_path, tiny, capsys):
    data = make_dataset(tmp_path / "data", n=3)
    args = ["--manifest", data, "--dataset", "toy", "--model", tiny["vit"], "--frames", "2", "--quiet"]
    whole = tmp_path / "whole.duckdb"
    assert cli("precompute", "--store", whole, *args) == 0
    shards = []
    for i in range(5):  # ceil(3/5) = 1 item per shard: shards 3 and 4 hold none
        shards.append(tmp_path / f"shard{i}.duckdb")
        assert cli("precompute", "--store", shards[-1], *args, "--shard", f"{i}/5") == 0
    (empty,) = list_runs(shards[4])
    assert (empty["status"], empty["n_items"]) == ("done", 0)
    assert "holds no items" in capsys.readouterr().err
    # a shard left "running 0/0" by an older LayerScope is finished by a rerun
    con = duckdb.connect(str(shards[3]))
    con.execute("UPDATE runs SET status = 'running', finished = NULL")
    con.close()
    assert cli("precompute", "--store", shards[3], *args, "--shard", "3/5") == 0
    assert [r["status"] for r in list_runs(shards[3])] == ["done"]
    merged = tmp_path / "merged.duckdb"
    assert cli("merge", "--store", merged, *shards) == 0
    out = capsys.readouterr().out
    assert "1 sharded run(s) merged" in out and "0 incomplete" in out
    np.testing.assert_allclose(load_embeddings(merged, model="vit", dataset="toy", n_frames=2),
                               load_embeddings(whole, model="vit", dataset="toy", n_frames=2), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("problem", ["not_an_image", "mixed_sizes"])
def test_bad_frame_folder_is_caught_before_any_run(tmp_path, tiny, capsys, problem):
    from PIL import Image

    folder = tmp_path / "frames"
    folder.mkdir()
    for k in range(3):
        Image.fromarray(index_frames(3)[k]).save(folder / f"{k:03d}.png")
    if problem == "not_an_image":
        (folder / "003.png").write_text("not a png")
    else:
        Image.fromarray(np.zeros((16, 48, 3), np.uint8)).save(folder / "003.png")
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"id": "f", "video": "frames", "captions": ["x"]}) + "\n")
    store = tmp_path / "s.duckdb"
    assert cli("precompute", "--store", store, "--manifest", manifest, "--dataset", "d", "--model", tiny["vit"],
               "--frames", "2", "--quiet") == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"{manifest}:1: field 'video'" in err
    assert ("003.png is not a readable image" if problem == "not_an_image" else "mixes image sizes") in err
    assert not store.exists()


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_model_folder_with_missing_or_truncated_weights(tmp_path, tiny, capsys, damage):
    model = tmp_path / "vit"
    shutil.copytree(tiny["vit"], model)
    weights = model / "model.safetensors"
    if damage == "missing":
        weights.unlink()
    else:
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    data = make_dataset(tmp_path / "data", n=2)
    store = tmp_path / "s.duckdb"
    assert cli("precompute", "--store", store, "--manifest", data, "--dataset", "d", "--model", model,
               "--frames", "2", "--quiet") == 2
    one_line_error(capsys, "holds no weight files" if damage == "missing" else f"weight file {weights} is truncated")
    assert not store.exists()


def test_absent_cuda_device_is_one_line(tmp_path, tiny, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a machine with one GPU
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    data = make_dataset(tmp_path / "data", n=2)
    store = tmp_path / "s.duckdb"
    assert cli("precompute", "--store", store, "--manifest", data, "--dataset", "d", "--model", tiny["vit"],
               "--device", "cuda:1", "--quiet") == 2
    one_line_error(capsys, "--device cuda:1: torch sees 1 CUDA device(s)")
    assert not store.exists()


def test_image_modality_on_a_video_model_and_absurd_frames(tmp_path, tiny, capsys):
    data = make_dataset(tmp_path / "data", n=2)
    store = tmp_path / "s.duckdb"
    base = ("precompute", "--store", store, "--manifest", data, "--dataset", "d", "--quiet")
    assert cli(*base, "--model", tiny["videomae"], "--modality", "image", "--frames", "2") == 2
    one_line_error(capsys, "'videomae' cannot be used as modality 'image'", "use --modality video")
    assert cli(*base, "--model", tiny["vit"], "--frames", "100000000000") == 2
    one_line_error(capsys, "--frames 100000000000: at most 4096")
    assert not store.exists()


def test_reversed_with_only_a_text_model_does_nothing(tmp_path, tiny, capsys):
    data = make_dataset(tmp_path / "data", n=2)
    store = tmp_path / "s.duckdb"
    assert cli("precompute", "--store", store, "--manifest", data, "--dataset", "d", "--model", tiny["bert"],
               "--variant", "reversed", "--quiet") == 0
    out = capsys.readouterr()
    assert "nothing to do" in out.err and "0 run(s) computed" in out.out
    assert not store.exists()  # no run to compute: no store created


def test_truncated_pickled_weights_are_one_line_and_no_run(tmp_path, tiny, capsys):
    import torch
    from safetensors.torch import load_file

    model = tmp_path / "vit"
    shutil.copytree(tiny["vit"], model)
    state = load_file(str(model / "model.safetensors"))
    (model / "model.safetensors").unlink()
    torch.save(state, model / "pytorch_model.bin")
    data = (model / "pytorch_model.bin").read_bytes()
    (model / "pytorch_model.bin").write_bytes(data[: len(data) // 2])
    manifest = make_dataset(tmp_path / "data", n=2)
    store = tmp_path / "s.duckdb"
    assert cli("precompute", "--store", store, "--manifest", manifest, "--dataset", "d", "--model", model,
               "--frames", "2", "--quiet") == 2
    one_line_error(capsys, f"cannot load the model {str(model)!r}")
    assert not store.exists()  # refused at model load: the store it would have created is not left


@pytest.mark.parametrize("n_items, batch, n", [(7, 2, 3), (10, 2, 2), (1024, 8, 5), (5, 8, 2), (3, 1, 7)])
def test_shards_cover_every_item_once_on_whole_batches(n_items, batch, n):
    from precompute.batch.runner import parse_shard

    ranges = [parse_shard(f"{i}/{n}", n_items, batch)[2] for i in range(n)]
    assert [x for r in ranges for x in r] == list(range(n_items))  # every item once, in order
    unsharded_batches = {range(b, min(n_items, b + batch)) for b in range(0, n_items, batch)}
    for r in ranges:
        assert r.start % batch == 0 or len(r) == 0  # starts on a batch boundary of the unsharded run
        shard_batches = {range(b, min(r.stop, b + batch)) for b in range(r.start, r.stop, batch)}
        assert shard_batches <= unsharded_batches  # the same batches the unsharded run forms


def test_a_truncated_mkv_is_embedded_with_a_note(tmp_path, tiny, capsys):
    # Matroska states a duration (3 s at 10 fps), not a frame count: a file cut on disk decodes fewer
    from precompute.synthetic.video_files import write_video

    whole = write_video(tmp_path / "whole.mkv", index_frames(30))
    cut = tmp_path / "cut.mkv"
    cut.write_bytes(whole.read_bytes()[: int(whole.stat().st_size * 0.35)])
    with av.open(str(cut)) as c:  # independent count: PyAV's own decode
        real = sum(1 for _ in c.decode(c.streams.video[0]))
    assert 2 <= real < 28
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps({"id": i, "video": f"{i}.mkv", "captions": ["x"]}) + "\n"
                                for i in ("whole", "cut")))
    store = tmp_path / "s.duckdb"
    assert cli("precompute", "--store", store, "--manifest", manifest, "--dataset", "d", "--model", tiny["vit"],
               "--frames", "2", "--quiet") == 0
    assert "truncated_videos" in capsys.readouterr().err
    (run,) = list_runs(store)
    assert run["status"] == "done"
    con = duckdb.connect(str(store), read_only=True)
    (cfg,) = [json.loads(r[0]) for r in con.execute("SELECT config FROM runs").fetchall()]
    con.close()
    assert cfg["notes"]["truncated_videos"] == {"cut": {"duration_frames": 30, "decoded": real, "handled": (
        "the file ends before the duration its header states (cut short?); frames were sampled from the decoded "
        "ones")}}
