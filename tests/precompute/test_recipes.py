"""Issue #31: `layerscope manifest vatex|msrvtt` on tiny fixtures written in the datasets' published
layouts: every annotated caption kept in order, missing videos counted and named, DR's seeded subset."""

import json

import numpy as np
import pytest

from precompute.cli import main
from precompute.inputs.manifest import load_manifest
from precompute.inputs.recipes import build_recipe, seeded_subset


def vatex_fixture(root, n=6, missing=(2,)):
    ann = [{"videoID": f"yt{i:03d}_000010_000020", "enCap": [f"clip {i} caption {c}" for c in range(10)],
            "chCap": ["中文"] * 10} for i in range(n)]
    (root / "vatex.json").write_text(json.dumps(ann))
    videos = root / "videos"
    videos.mkdir()
    for i in range(n):
        if i not in missing:
            (videos / f"yt{i:03d}_000010_000020.mp4").write_bytes(b"x")
    (videos / "notes.txt").write_text("not a video")
    return root / "vatex.json", videos


def msrvtt_fixture(root):
    data = {"videos": [{"video_id": "video0", "category": 1}, {"video_id": "video1", "category": 2}],
            "sentences": [{"video_id": "video1", "caption": "b second", "sen_id": 3},
                          {"video_id": "video0", "caption": "a first", "sen_id": 0},
                          {"video_id": "video1", "caption": "b first", "sen_id": 1}]}
    (root / "msrvtt.json").write_text(json.dumps(data))
    videos = root / "TestVideo"
    videos.mkdir()
    for v in ("video0", "video1"):
        (videos / f"{v}.mp4").write_bytes(b"x")
    return root / "msrvtt.json", videos


def test_vatex_keeps_the_ten_english_captions_and_names_missing_videos(tmp_path, capsys):
    ann, videos = vatex_fixture(tmp_path)
    out = tmp_path / "m.jsonl"
    assert main(["manifest", "vatex", str(ann), str(videos), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "5 vatex item(s)" in printed and "1 video(s) missing" in printed and "yt002_000010_000020" in printed
    man = load_manifest(out, check_videos=False)
    assert [it.item_id for it in man.items] == [f"yt{i:03d}_000010_000020" for i in (0, 1, 3, 4, 5)]
    assert man.items[0].captions == [f"clip 0 caption {c}" for c in range(10)]
    assert man.items[0].video == str((videos / "yt000_000010_000020.mp4").resolve())


def test_msrvtt_orders_captions_by_sen_id(tmp_path):
    ann, videos = msrvtt_fixture(tmp_path)
    recipe = build_recipe("msrvtt", ann, videos)
    assert [(r["id"], r["captions"]) for r in recipe.items] == [("video0", ["a first"]),
                                                                 ("video1", ["b first", "b second"])]


def test_the_seeded_subset_is_drs_draw_among_present_videos(tmp_path):
    ann, videos = vatex_fixture(tmp_path, n=12, missing=(0, 7))
    recipe = build_recipe("vatex", ann, videos, n=4, seed=3)
    present = [f"yt{i:03d}_000010_000020" for i in range(12) if i not in (0, 7)]
    # the documented draw: sorted(default_rng(seed).choice(n_present, N, replace=False))
    expected = [present[i] for i in sorted(np.random.default_rng(3).choice(10, 4, replace=False))]
    assert [r["id"] for r in recipe.items] == expected
    assert build_recipe("vatex", ann, videos, n=4, seed=3).items == recipe.items


def test_seeded_subset_bounds():
    assert seeded_subset(5, None, 0) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="only 5 annotated"):
        seeded_subset(5, 6, 0)


@pytest.mark.parametrize("body, message", [
    ('{"a": 1}', "expected VATEX's JSON list"),
    ('[{"enCap": ["x"]}]', "entry 0: no 'videoID'"),
    ('[{"videoID": "v", "enCap": []}]', "entry 0 (v) 'enCap': expected a non-empty list"),
    ('[{"videoID": "v", "enCap": ["x"]', "not JSON"),
])
def test_a_bad_vatex_file_says_where(tmp_path, capsys, body, message):
    (tmp_path / "v.json").write_text(body)
    (tmp_path / "videos").mkdir()
    assert main(["manifest", "vatex", str(tmp_path / "v.json"), str(tmp_path / "videos"),
                 "--out", str(tmp_path / "m.jsonl")]) == 2
    err = capsys.readouterr().err
    assert message in err and "v.json" in err
    assert not (tmp_path / "m.jsonl").exists()
