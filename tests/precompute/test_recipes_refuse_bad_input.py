"""`layerscope manifest`: a recipe given bad input says which file, entry or flag in one line, writes
nothing, never writes over one of its inputs, and never writes a manifest `precompute` would refuse."""

import json
import os

import pytest

from precompute.cli import main
from precompute.inputs.manifest import load_manifest


def _videos(root, ids):
    videos = root / "videos"
    videos.mkdir()
    for v in ids:
        (videos / f"{v}.mp4").write_bytes(b"x")
    return videos


def _refused(capsys, *needles):
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    for n in needles:
        assert n in err, err
    return err


def _nothing_written(root, out):
    assert not out.exists()
    assert not [p for p in root.rglob("*.tmp*")], "a temporary file was left behind"


@pytest.mark.parametrize("sen_id", [None, "first", 1.5])
def test_an_msrvtt_sentence_whose_sen_id_is_not_an_integer_is_named(tmp_path, capsys, sen_id):
    data = {"videos": [{"video_id": "video0"}],
            "sentences": [{"video_id": "video0", "caption": "a", "sen_id": 0},
                          {"video_id": "video0", "caption": "b", "sen_id": sen_id}]}
    (tmp_path / "a.json").write_text(json.dumps(data))
    out = tmp_path / "m.jsonl"
    assert main(["manifest", "msrvtt", str(tmp_path / "a.json"), str(_videos(tmp_path, ["video0"])),
                 "--out", str(out)]) == 2
    _refused(capsys, "a.json", "sentences[1]", "sen_id")
    _nothing_written(tmp_path, out)


def test_an_annotation_file_that_is_not_utf8_is_named(tmp_path, capsys):
    (tmp_path / "a.json").write_bytes(b'[{"videoID": "v\xff"}]')
    out = tmp_path / "m.jsonl"
    assert main(["manifest", "vatex", str(tmp_path / "a.json"), str(_videos(tmp_path, ["v"])), "--out", str(out)]) == 2
    _refused(capsys, "a.json", "UTF-8")
    _nothing_written(tmp_path, out)


@pytest.mark.parametrize("kind, data, needle", [
    ("vatex", [{"videoID": "v1", "enCap": ["a"]}, {"videoID": "v2", "enCap": ["b"]}, {"videoID": "v1", "enCap": ["c"]}],
     "entry 2: video id 'v1' is annotated twice (first: entry 0)"),
    ("msrvtt", {"videos": [{"video_id": "v1"}, {"video_id": "v1"}],
                "sentences": [{"video_id": "v1", "caption": "a", "sen_id": 0}]},
     "videos[1]: video id 'v1' is annotated twice (first: videos[0])"),
])
def test_a_recipe_refuses_ids_precompute_would_refuse_as_duplicates(tmp_path, capsys, kind, data, needle):
    (tmp_path / "a.json").write_text(json.dumps(data))
    out = tmp_path / "m.jsonl"
    assert main(["manifest", kind, str(tmp_path / "a.json"), str(_videos(tmp_path, ["v1", "v2"])),
                 "--out", str(out)]) == 2
    _refused(capsys, needle)
    _nothing_written(tmp_path, out)


def test_a_recipe_whose_videos_are_all_missing_writes_nothing_and_fails(tmp_path, capsys):
    (tmp_path / "a.json").write_text(json.dumps([{"videoID": "v1", "enCap": ["a"]}]))
    out = tmp_path / "m.jsonl"
    videos = _videos(tmp_path, ["other"])
    assert main(["manifest", "vatex", str(tmp_path / "a.json"), str(videos), "--out", str(out)]) == 2
    _refused(capsys, "no item", str(videos), "1 annotated")
    _nothing_written(tmp_path, out)


def test_an_out_that_is_a_folder_is_refused_and_leaves_no_temporary_file(tmp_path, capsys):
    (tmp_path / "a.json").write_text(json.dumps([{"videoID": "v1", "enCap": ["a"]}]))
    out = tmp_path / "m.jsonl"
    out.mkdir()
    assert main(["manifest", "vatex", str(tmp_path / "a.json"), str(_videos(tmp_path, ["v1"])),
                 "--out", str(out)]) == 2
    _refused(capsys, "--out", "folder")
    assert not [p for p in tmp_path.rglob("*.tmp*")]


def test_a_written_manifest_passes_precompute_validation(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps([{"videoID": "v1", "enCap": ["a"]}, {"videoID": "v2", "enCap": ["b"]}]))
    out = tmp_path / "m.jsonl"
    assert main(["manifest", "vatex", str(tmp_path / "a.json"), str(_videos(tmp_path, ["v1", "v2"])),
                 "--out", str(out)]) == 0
    assert [it.item_id for it in load_manifest(out, check_videos=False).items] == ["v1", "v2"]
    assert not [p for p in tmp_path.rglob("*.tmp*")]


def _pvd(root):
    folder = root / "pvd"
    folder.mkdir()
    for i in range(3):
        (folder / f"{i}.json").write_text(json.dumps({"video_id": str(i), "human_caption": f"long {i}"}))
        (folder / f"{i}.mp4").write_bytes(b"x")
    captions = root / "gemini.jsonl"
    captions.write_text("".join(json.dumps({"video_id": str(i), "captions": [f"c{i}"]}) + "\n" for i in range(3)))
    records = root / "records.jsonl"
    records.write_text("".join(json.dumps({"video_id": str(i), "human_caption": f"long {i}"}) + "\n"
                               for i in range(3)))
    return folder, captions, records


@pytest.mark.parametrize("which", ["captions", "annotations", "captions via a hard link"])
def test_an_out_naming_one_of_the_recipes_inputs_is_refused_and_the_input_kept(tmp_path, capsys, which):
    folder, captions, records = _pvd(tmp_path)
    before = {p: p.read_bytes() for p in (captions, records)}
    out = {"captions": captions, "annotations": records}.get(which)
    if out is None:
        out = tmp_path / "other.jsonl"
        os.link(captions, out)
    assert main(["manifest", "pvd", str(records), str(folder), "--captions", str(captions),
                 "--out", str(out)]) == 2
    _refused(capsys, "--out", "would overwrite", "pass another --out")
    assert {p: p.read_bytes() for p in before} == before


def test_rows_precompute_would_refuse_are_never_written(tmp_path):
    from precompute.inputs.recipes import write_manifest

    video = _videos(tmp_path, ["v"]) / "v.mp4"
    rows = [{"id": "v", "video": str(video), "captions": ["a"]}, {"id": "v", "video": str(video), "captions": ["b"]}]
    out = tmp_path / "m.jsonl"
    with pytest.raises(ValueError, match="would not pass precompute's checks.*duplicate id 'v'"):
        write_manifest(rows, out)
    _nothing_written(tmp_path, out)


def test_a_negative_seed_is_named(tmp_path, capsys):
    (tmp_path / "a.json").write_text(json.dumps([{"videoID": "v1", "enCap": ["a"]}, {"videoID": "v2", "enCap": ["b"]}]))
    out = tmp_path / "m.jsonl"
    assert main(["manifest", "vatex", str(tmp_path / "a.json"), str(_videos(tmp_path, ["v1", "v2"])),
                 "--out", str(out), "--n", "1", "--seed", "-1"]) == 2
    _refused(capsys, "--seed -1", "non-negative")
    _nothing_written(tmp_path, out)
