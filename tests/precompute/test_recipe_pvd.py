"""Issue #31: `layerscope manifest pvd` on tiny fixtures written in PE-Video's published layout
(WebDataset shards of <key>.mp4 + <key>.json, the JSON's `human_caption` the one long caption):
the long caption kept as `long_caption`, DR's synthesized caption sets read when given, samples
without a caption or a video counted and named, DR's seeded subset among the usable items."""

import io
import json
import tarfile

import numpy as np
import pytest

from precompute.cli import main
from precompute.inputs.manifest import load_manifest
from precompute.inputs.recipes import build_recipe, read_caption_sets

KEYS = ["158873272", "161608120", "174851788", "179235024", "199091666", "251241216"]


def sample_json(key, i, caption=True):
    """One sample's JSON as PE-Video publishes it (the fields a recipe does not read are kept to show
    they are passed over)."""
    record = {"video_id": key, "description": f"stock clip {i}", "keywords": "hands, plant",
              "video_duration_in_s": 8.5 + i}
    if caption:
        record["human_caption"] = f"  A person's hands prune plant {i}; the camera pans left, then the leaves shake.  "
    return record


def write_shard(path, samples, videos=True):
    """A WebDataset shard: members <key>.json and (``videos``) <key>.mp4, in ``samples`` order."""
    with tarfile.open(path, "w") as tar:
        for key, record in samples:
            members = [(f"{key}.json", json.dumps(record).encode())]
            if videos:
                members.append((f"{key}.mp4", b"not decoded here"))
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def extracted(root, n=6, no_caption=(4,), no_video=(2,)):
    """A shard extracted into a folder (<key>.json beside <key>.mp4): sample 4 has no human_caption
    (an extended-split sample), sample 2's video was not downloaded."""
    folder = root / "pvd_test"
    folder.mkdir()
    for i, key in enumerate(KEYS[:n]):
        (folder / f"{key}.json").write_text(json.dumps(sample_json(key, i, caption=i not in no_caption)))
        if i not in no_video:
            (folder / f"{key}.mp4").write_bytes(b"x")
    return folder


def caption(i):
    return f"A person's hands prune plant {i}; the camera pans left, then the leaves shake."


def test_the_long_caption_is_the_items_caption_and_its_long_caption(tmp_path, capsys):
    folder = extracted(tmp_path)
    out = tmp_path / "pvd.jsonl"
    assert main(["manifest", "pvd", str(folder), str(folder), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "4 pvd item(s)" in printed and "6 annotated; 4 usable with a video" in printed
    assert f"1 sample(s) without a 'human_caption', left out: {KEYS[4]}" in printed
    assert f"1 video(s) missing from the folder, left out: {KEYS[2]}" in printed
    man = load_manifest(out, check_videos=False)
    kept = [0, 1, 3, 5]
    assert [it.item_id for it in man.items] == [KEYS[i] for i in kept]
    for it, i in zip(man.items, kept):
        assert it.captions == [caption(i)]
        assert it.long_caption == caption(i)
        assert it.video == str((folder / f"{KEYS[i]}.mp4").resolve())
        assert it.metadata["source"] == "pvd"
        assert "description" not in it.metadata  # fields the recipe does not read stay out


def test_a_shard_tar_reads_like_the_extracted_folder(tmp_path):
    folder = extracted(tmp_path)
    shard = tmp_path / "000000.tar"
    order = [5, 0, 3, 1, 2, 4]  # member order, not name order, is the annotation order of a shard
    write_shard(shard, [(KEYS[i], sample_json(KEYS[i], i, caption=i != 4)) for i in order])
    from_tar = build_recipe("pvd", shard, folder)
    assert [r["id"] for r in from_tar.items] == [KEYS[i] for i in (5, 0, 3, 1)]
    from_folder = {r["id"]: r for r in build_recipe("pvd", folder, folder).items}
    assert all(r == from_folder[r["id"]] for r in from_tar.items)
    # a folder of shards reads them in name order
    shards = tmp_path / "shards"
    shards.mkdir()
    write_shard(shards / "000001.tar", [(KEYS[1], sample_json(KEYS[1], 1))])
    write_shard(shards / "000000.tar", [(KEYS[3], sample_json(KEYS[3], 3)), (KEYS[0], sample_json(KEYS[0], 0))])
    assert [r["id"] for r in build_recipe("pvd", shards, folder).items] == [KEYS[3], KEYS[0], KEYS[1]]


def test_records_in_a_jsonl_name_their_video_by_video_id(tmp_path):
    folder = extracted(tmp_path)
    jsonl = tmp_path / "samples.jsonl"
    jsonl.write_text("".join(json.dumps(sample_json(KEYS[i], i)) + "\n" for i in (3, 0)))
    recipe = build_recipe("pvd", jsonl, folder)
    assert [(r["id"], r["long_caption"]) for r in recipe.items] == [(KEYS[3], caption(3)), (KEYS[0], caption(0))]


def test_synthesized_caption_sets_replace_the_one_caption_and_keep_the_long_one(tmp_path, capsys):
    folder = extracted(tmp_path, n=6, no_caption=(), no_video=())
    ten = {KEYS[i]: [f"video {i} detail {c}" for c in range(10)] for i in (0, 1, 2, 5)}
    sets = tmp_path / "gemini10.jsonl"
    sets.write_text("".join(json.dumps({"video_id": k, "captions": v}) + "\n" for k, v in ten.items()))
    out = tmp_path / "pvd.jsonl"
    assert main(["manifest", "pvd", str(folder), str(folder), "--captions", str(sets), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"2 video(s) without synthesized captions in --captions, left out: {KEYS[3]}, {KEYS[4]}" in printed
    man = load_manifest(out, check_videos=False)
    assert [it.item_id for it in man.items] == [KEYS[i] for i in (0, 1, 2, 5)]
    for it, i in zip(man.items, (0, 1, 2, 5)):
        assert it.captions == ten[KEYS[i]] and it.long_caption == caption(i)
    # the same sets as one JSON object {video_id: [captions]}
    as_object = tmp_path / "gemini10.json"
    as_object.write_text(json.dumps(ten))
    assert read_caption_sets(as_object) == read_caption_sets(sets) == ten


def test_the_seeded_subset_is_drs_draw_among_usable_videos(tmp_path):
    folder = extracted(tmp_path, n=6, no_caption=(4,), no_video=(2,))
    recipe = build_recipe("pvd", folder, folder, n=3, seed=5)
    usable = [KEYS[i] for i in (0, 1, 3, 5)]
    # the documented draw: sorted(default_rng(seed).choice(n_usable, N, replace=False))
    assert [r["id"] for r in recipe.items] == [usable[i] for i in sorted(np.random.default_rng(5).choice(4, 3, replace=False))]
    with pytest.raises(ValueError, match="only 4 annotated"):
        build_recipe("pvd", folder, folder, n=5)


@pytest.mark.parametrize("write, message", [
    (lambda d: (d / "1.json").write_text(json.dumps({"video_id": "1", "keywords": "x"})),
     "none of 1 sample(s) has a 'human_caption'"),
    (lambda d: (d / "1.json").write_text(json.dumps({"video_id": "1", "human_caption": ["a", "b"]})),
     "'human_caption': expected a string"),
    (lambda d: (d / "1.json").write_text("[1, 2]"), "expected a PE-Video sample's JSON object"),
    (lambda d: (d / "notes.txt").write_text("x"), "no PE-Video .json samples or .tar shards"),
    (lambda d: ((d / "1.json").write_text(json.dumps({"video_id": "7", "human_caption": "a"})),
                (d / "2.json").write_text(json.dumps({"video_id": "7", "human_caption": "b"}))),
     "annotated more than once: 7"),
])
def test_a_bad_pvd_annotation_says_where(tmp_path, capsys, write, message):
    ann = tmp_path / "ann"
    ann.mkdir()
    write(ann)
    assert main(["manifest", "pvd", str(ann), str(ann), "--out", str(tmp_path / "m.jsonl")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "m.jsonl").exists()


@pytest.mark.parametrize("body, message", [
    ('{"video_id": "158873272", "captions": []}\n', "'captions': expected a non-empty list"),
    ('{"captions": ["a"]}\n', 'expected {"video_id": ..., "captions": [...]}'),
    ('{"video_id": "158873272", "captions": ["a"]}\n{"video_id": "158873272", "captions": ["b"]}\n',
     "video '158873272' has captions twice"),
    ('{"video_id": "1", "captions": ["a"]\n', "gemini.jsonl:1: not JSON"),
])
def test_a_bad_caption_file_says_where(tmp_path, capsys, body, message):
    folder = extracted(tmp_path)
    (tmp_path / "gemini.jsonl").write_text(body)
    assert main(["manifest", "pvd", str(folder), str(folder), "--captions", str(tmp_path / "gemini.jsonl"),
                 "--out", str(tmp_path / "m.jsonl")]) == 2
    assert message in capsys.readouterr().err


def test_caption_sets_go_with_pvd_only(tmp_path, capsys):
    (tmp_path / "v.json").write_text(json.dumps([{"videoID": "a", "enCap": ["x"]}]))
    (tmp_path / "videos").mkdir()
    assert main(["manifest", "vatex", str(tmp_path / "v.json"), str(tmp_path / "videos"), "--captions",
                 str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "m.jsonl")]) == 2
    assert "--captions (synthesized caption sets) goes with the pvd recipe only" in capsys.readouterr().err
