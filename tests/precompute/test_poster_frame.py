"""The hover thumbnail's frame: the first frame of a video file or frame folder, without a whole decode."""

import numpy as np
import pytest
from PIL import Image

from precompute.synthetic.video_files import index_frames, write_video
from precompute.inputs.video import VideoError, poster_frame, read_video


def test_the_poster_frame_is_frame_0_of_the_full_decode(tmp_path):
    path = tmp_path / "v.mkv"
    write_video(path, index_frames(9, size=32))  # frame k has red channel k
    got = poster_frame(path)
    np.testing.assert_array_equal(got, read_video(path, lambda T: [0]).frames[0])
    assert got.shape == (32, 32, 3) and got.dtype == np.uint8


def test_a_frame_folder_gives_its_first_image(tmp_path):
    folder = tmp_path / "frames"
    folder.mkdir()
    for k, colour in enumerate([(10, 0, 0), (200, 0, 0)]):
        Image.new("RGB", (8, 6), colour).save(folder / f"{k:03d}.png")
    assert tuple(poster_frame(folder)[0, 0]) == (10, 0, 0)


def test_missing_and_broken_videos_are_named(tmp_path):
    with pytest.raises(VideoError, match="nope.mp4 does not exist"):
        poster_frame(tmp_path / "nope.mp4")
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"not a video")
    with pytest.raises(VideoError, match="bad.mp4 could not be decoded"):
        poster_frame(bad)
