import json

import numpy as np
import pytest

from precompute.inputs.manifest import ManifestError, load_manifest
from precompute.synthetic.video_files import index_frames, write_video
from precompute.inputs.video import clip_indices, read_frames, read_video, reverse, sample_indices
from tests.precompute.helpers import make_dataset, make_index_dataset


def test_valid_jsonl_and_csv_manifests(tmp_path):
    m = load_manifest(make_dataset(tmp_path, n=3, captions=2))
    assert [it.item_id for it in m.items] == ["item0", "item1", "item2"]
    assert all(len(it.captions) == 2 and it.negatives for it in m.items)
    assert m.items[0].metadata == {"source": "test"}
    assert m.items[0].n_video_frames == 12
    csv = tmp_path / "m.csv"
    csv.write_text('id,video,captions,extra\n'
                   'a,v0.mkv,"first caption | second caption",x\n'
                   'b,v1.mkv,"[""json one"", ""json two""]",y\n')
    m2 = load_manifest(csv)
    assert m2.items[0].captions == ["first caption", "second caption"]
    assert m2.items[1].captions == ["json one", "json two"]
    assert m2.items[1].metadata == {"extra": "y"}


def test_every_problem_reported_with_file_line_and_field(tmp_path):
    write_video(tmp_path / "ok.mkv", index_frames(5))
    (tmp_path / "corrupt.mp4").write_bytes(b"this is not a video at all" * 10)
    lines = [
        {"id": "a", "video": "ok.mkv", "captions": ["fine"]},
        {"id": "a", "video": "ok.mkv", "captions": ["duplicate id"]},
        {"id": "c", "video": "missing.mp4", "captions": ["x"]},
        {"id": "d", "video": "corrupt.mp4", "captions": ["x"]},
        {"id": "e", "video": "ok.mkv", "captions": []},
        {"id": "f", "video": "ok.mkv", "captions": ["", "ok"]},
        {"video": "ok.mkv", "captions": ["no id"]},
        {"id": "h", "captions": ["no video"]},
        {"id": "i", "video": "ok.mkv", "captions": "single string is fine", "negatives": [3]},
    ]
    text = "\n".join(json.dumps(l) for l in lines) + "\n{not json\n"
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(ManifestError) as err:
        load_manifest(path)
    msg = str(err.value)
    for expected in [
        f"{path}:2: field 'id': duplicate id 'a' (first on line 1)",
        f"{path}:3: field 'video':", "missing.mp4 does not exist",
        f"{path}:4: field 'video':", "could not be decoded",
        f"{path}:5: field 'captions' has no captions",
        f"{path}:6: field 'captions[0]' is empty",
        f"{path}:7: field 'id' is missing",
        f"{path}:8: field 'video' is missing",
        f"{path}:9: field 'negatives[0]' must be a string",
        f"{path}:10: not valid JSON",
    ]:
        assert expected in msg, expected
    assert len(err.value.problems) == 9


def test_missing_manifest_and_unknown_format(tmp_path):
    with pytest.raises(ManifestError, match="does not exist"):
        load_manifest(tmp_path / "nope.jsonl")
    (tmp_path / "m.txt").write_text("x")
    with pytest.raises(ManifestError, match="unknown manifest format"):
        load_manifest(tmp_path / "m.txt")


def test_sample_indices_formula():
    assert sample_indices(30, 1).tolist() == [0]
    assert sample_indices(30, 2).tolist() == [0, 29]
    assert sample_indices(30, 4).tolist() == np.round(np.linspace(0, 29, 4)).astype(int).tolist() == [0, 10, 19, 29]
    assert sample_indices(5, 8).tolist() == [0, 1, 1, 2, 2, 3, 3, 4]  # short video: frames repeat


@pytest.mark.parametrize("n_f,native,expected", [
    (1, 4, [[0, 0, 0, 0]]),
    (2, 4, [[0, 0, 1, 1]]),
    (4, 4, [[0, 1, 2, 3]]),
    (6, 4, [[0, 0, 1, 2], [3, 3, 4, 5]]),
    (8, 4, [[0, 1, 2, 3], [4, 5, 6, 7]]),
])
def test_clip_indices_nearest_neighbour_then_split(n_f, native, expected):
    assert clip_indices(n_f, native).tolist() == expected


def test_frames_decode_exactly_and_reverse(tmp_path):
    make_index_dataset(tmp_path, [20])
    frames = read_frames(tmp_path / "idx0.mkv")
    assert frames.shape == (20, 32, 32, 3)
    assert frames[:, 5, 5, 0].tolist() == list(range(20))
    assert reverse(frames)[:, 0, 0, 0].tolist() == list(range(19, -1, -1))
    # a folder of frame images is a video too
    from PIL import Image

    folder = tmp_path / "frames"
    folder.mkdir()
    for k, f in enumerate(index_frames(7)):
        Image.fromarray(f).save(folder / f"{k:03d}.png")
    assert read_frames(folder)[:, 0, 0, 0].tolist() == list(range(7))


@pytest.mark.parametrize("suffix", [".mkv", ".mp4"])  # Matroska states no frame count, MP4 does
def test_read_video_keeps_only_the_wanted_frames(tmp_path, suffix):
    frames = index_frames(30)
    path = write_video(tmp_path / f"v{suffix}", frames)
    seen = []

    def wanted(T):
        seen.append(T)
        return sample_indices(T, 5)

    video = read_video(path, wanted)
    assert video.n_frames == 30 and seen == [30]
    assert video.index.tolist() == [0, 7, 14, 22, 29]  # round(linspace(0, 29, 5)), half to even
    full = read_frames(path)
    np.testing.assert_array_equal(video.frames, full[[0, 7, 14, 22, 29]])
    np.testing.assert_array_equal(video.take([29, 0, 0]), full[[29, 0, 0]])
    with pytest.raises(ValueError, match=r"frames \[1\] were not decoded"):
        video.take([0, 1])


def test_read_video_with_a_wrong_stated_frame_count_decodes_again(tmp_path, monkeypatch):
    import precompute.inputs.video as V

    path = write_video(tmp_path / "v.mkv", index_frames(12))
    calls = []
    real = V._decode

    def lying(p, wanted, count):  # the first pass believes a container that says 40 frames
        calls.append(count)
        return real(p, wanted, 40 if count is None else count)

    monkeypatch.setattr(V, "_decode", lying)
    video = read_video(path, lambda T: [0, T - 1])
    assert calls == [None, 12]
    assert video.n_frames == 12 and video.frames[:, 0, 0, 0].tolist() == [0, 11]


def test_read_video_from_a_frame_folder_reads_only_wanted_images(tmp_path):
    from PIL import Image

    folder = tmp_path / "frames"
    folder.mkdir()
    for k, f in enumerate(index_frames(9)):
        Image.fromarray(f).save(folder / f"{k:03d}.png")
    (folder / "004.png").write_bytes(b"not a png")  # never opened: not wanted
    video = read_video(folder, lambda T: [0, 8])
    assert video.n_frames == 9 and video.frames[:, 0, 0, 0].tolist() == [0, 8]
