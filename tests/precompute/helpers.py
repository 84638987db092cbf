"""Small on-disk datasets and models for precompute tests."""

import json
from pathlib import Path

import numpy as np

from precompute.synthetic_video import index_frames, write_video

CAPTION_WORDS = ["red", "blue", "green", "circle", "square", "moves", "left", "right", "fast", "slow"]


def make_dataset(root, n=6, *, frames=12, size=32, captions=3, suffix=".mkv", seed=0, name="manifest.jsonl"):
    """n videos of random-but-seeded content with `captions` captions each; returns the manifest path."""
    root = Path(root)
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(n):
        video = rng.integers(0, 256, size=(frames, size, size, 3), dtype=np.uint8)
        write_video(root / f"v{i}{suffix}", video)
        caps = [" ".join(rng.choice(CAPTION_WORDS, size=5)) for _ in range(captions)]
        lines.append({"id": f"item{i}", "video": f"v{i}{suffix}", "captions": caps,
                      "negatives": [caps[0] + " reversed"], "source": "test"})
    path = root / name
    path.write_text("\n".join(json.dumps(l) for l in lines) + "\n")
    return path


def make_index_dataset(root, lengths, *, size=32):
    """Videos whose frame k has red channel k: frame sampling can be read back from pixels."""
    root = Path(root)
    lines = []
    for i, T in enumerate(lengths):
        write_video(root / f"idx{i}.mkv", index_frames(T, size=size))
        lines.append({"id": f"idx{i}", "video": f"idx{i}.mkv", "captions": ["a caption"]})
    path = root / "index.jsonl"
    path.write_text("\n".join(json.dumps(l) for l in lines) + "\n")
    return path
