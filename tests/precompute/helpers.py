"""Small on-disk datasets and models for precompute tests."""

import json
from pathlib import Path

import numpy as np

from precompute.synthetic.video_files import index_frames, write_video

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


def stored_rows(store) -> list:
    """Every embedding row ``(run_id, layer, idx, vec)`` of a store, sorted; vectors as float lists,
    so two stores compare bitwise with ``==``."""
    import duckdb

    from analysis.storage.schema import embedding_tables

    con = duckdb.connect(str(store), read_only=True)
    try:
        return sorted(row for t in embedding_tables(con).values()
                      for row in con.execute(f"SELECT run_id, layer, idx, vec FROM {t}").fetchall())
    finally:
        con.close()


def stored_contents(store) -> tuple[list, list]:
    """``(rows, runs)``: :func:`stored_rows` and each run's ``(run_id, status, n_done, n_items)``."""
    from analysis.storage.store import list_runs

    runs = sorted((r["run_id"], r["status"], r["n_done"], r["n_items"]) for r in list_runs(store))
    return stored_rows(store), runs


def write_sweep(path, *, manifest, models, precompute="frames = [1, 3]\ncaptions = [1, 3]\nbatch_size = 3",
                extra="") -> Path:
    """A sweep file at ``path``: ``[precompute]`` lines, one dataset ``toy`` at ``manifest``, one
    ``[[models]]`` table per entry of ``models`` (a source, or a dict of the table's fields), then ``extra``."""
    def value(v):
        return json.dumps(v) if not isinstance(v, bool) else str(v).lower()

    tables = []
    for m in models:
        fields = m if isinstance(m, dict) else {"source": m}
        tables.append("[[models]]\n" + "".join(f"{k} = {value(v)}\n" for k, v in fields.items()))
    text = (f"[precompute]\n{precompute}\n\n[[datasets]]\nname = \"toy\"\nmanifest = {json.dumps(str(manifest))}\n\n"
            + "\n".join(tables) + "\n" + extra)
    path = Path(path)
    path.write_text(text)
    return path
