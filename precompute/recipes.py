"""Dataset recipes: ``layerscope manifest vatex|msrvtt`` turns a public annotation file and a folder of
videos the user downloaded into a LayerScope manifest (issue #31). Nothing is downloaded.

Layouts read (as published):

- **VATEX** (``vatex_*_v1.1.json``): a JSON list of ``{"videoID": "<youtube id>_<start>_<end>",
  "enCap": [10 English captions], "chCap": [...]}``; the video file is ``VIDEO_DIR/<videoID>.<ext>``.
- **MSR-VTT** (``train_val_videodatainfo.json`` / ``test_videodatainfo.json``): ``{"videos":
  [{"video_id": "video0", ...}], "sentences": [{"video_id": "video0", "caption": "...", "sen_id": 0}]}``;
  captions in ``sen_id`` order; the video file is ``VIDEO_DIR/<video_id>.<ext>``.

PVD (Bolya et al. 2025) is not here: DR splits its one long caption into ten with Gemini, and neither
paper gives the annotation layout to read.

DR's protocol (§"Dataset Construction"): a seeded random subset of N = 1024 videos with their 10
captions. Items whose video is missing from ``VIDEO_DIR`` are counted and named, then left out
*before* the subset is drawn, so the manifest only lists videos that exist; the subset is
``sorted(numpy.random.default_rng(seed).choice(n_present, N, replace=False))`` of the present items
in annotation order.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

#: video file extensions looked for, in this order, when an annotation names a video without one
VIDEO_EXTENSIONS = (".mp4", ".webm", ".mkv", ".avi", ".mov", ".m4v")
#: missing videos named in the summary (the rest are counted)
NAMED_MISSING = 10


@dataclass
class Recipe:
    """What a recipe produced: ``items`` (manifest rows), ``missing`` (ids without a video file),
    ``n_annotated`` (items in the annotation file)."""
    items: list[dict]
    missing: list[str] = field(default_factory=list)
    n_annotated: int = 0


def _load_json(path: Path):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise ValueError(f"{path}: no such annotation file") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None


def _video_index(video_dir: Path) -> dict[str, Path]:
    """``{file stem: path}`` of the video files in ``video_dir`` (one directory listing, not one
    ``stat`` per item: VATEX has 35k ids)."""
    if not video_dir.is_dir():
        raise ValueError(f"{video_dir}: no such video folder")
    out: dict[str, Path] = {}
    rank = {ext: i for i, ext in enumerate(VIDEO_EXTENSIONS)}
    for entry in os.scandir(video_dir):
        p = Path(entry.path)
        ext = p.suffix.lower()
        if ext in rank and (p.stem not in out or rank[ext] < rank[out[p.stem].suffix.lower()]):
            out[p.stem] = p.resolve()
    return out


def _captions(value, where: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(c, str) and c.strip() for c in value):
        raise ValueError(f"{where}: expected a non-empty list of caption strings, got {str(value)[:80]!r}")
    return [c.strip() for c in value]


def read_vatex(annotations: Path) -> list[tuple[str, list[str]]]:
    """``[(videoID, English captions)]`` in file order from a VATEX annotation file."""
    data = _load_json(annotations)
    if not isinstance(data, list):
        raise ValueError(f"{annotations}: expected VATEX's JSON list of {{videoID, enCap}}, got a {type(data).__name__}")
    out = []
    for i, entry in enumerate(data):
        where = f"{annotations}: entry {i}"
        if not isinstance(entry, dict) or not isinstance(entry.get("videoID"), str) or not entry["videoID"].strip():
            raise ValueError(f"{where}: no 'videoID'")
        out.append((entry["videoID"].strip(), _captions(entry.get("enCap"), f"{where} ({entry['videoID']}) 'enCap'")))
    return out


def read_msrvtt(annotations: Path) -> list[tuple[str, list[str]]]:
    """``[(video_id, captions in sen_id order)]`` in the order of ``videos`` from an MSR-VTT file."""
    data = _load_json(annotations)
    if not isinstance(data, dict) or not isinstance(data.get("videos"), list) or not isinstance(data.get("sentences"), list):
        raise ValueError(f"{annotations}: expected MSR-VTT's {{\"videos\": [...], \"sentences\": [...]}}")
    caps: dict[str, list[tuple[int, int, str]]] = {}
    for i, s in enumerate(data["sentences"]):
        if not isinstance(s, dict) or not isinstance(s.get("video_id"), str) or not isinstance(s.get("caption"), str):
            raise ValueError(f"{annotations}: sentences[{i}]: expected {{video_id, caption}}")
        if s["caption"].strip():
            caps.setdefault(s["video_id"], []).append((int(s.get("sen_id", i)), i, s["caption"].strip()))
    out = []
    for i, v in enumerate(data["videos"]):
        if not isinstance(v, dict) or not isinstance(v.get("video_id"), str):
            raise ValueError(f"{annotations}: videos[{i}]: no 'video_id'")
        got = sorted(caps.get(v["video_id"], []))
        if not got:
            raise ValueError(f"{annotations}: videos[{i}] ({v['video_id']}): no caption in 'sentences'")
        out.append((v["video_id"], [c for _, _, c in got]))
    return out


READERS = {"vatex": read_vatex, "msrvtt": read_msrvtt}


def seeded_subset(n_items: int, n: int | None, seed: int) -> list[int]:
    """DR's seeded random subset: ``sorted(default_rng(seed).choice(n_items, n, replace=False))``;
    every index when ``n`` is None. Raises when ``n`` exceeds ``n_items``."""
    if n is None:
        return list(range(n_items))
    if n < 1:
        raise ValueError(f"--n {n}: a subset needs at least one item")
    if n > n_items:
        raise ValueError(f"--n {n}: only {n_items} annotated item(s) have a video; ask for at most {n_items}")
    return sorted(int(i) for i in np.random.default_rng(seed).choice(n_items, n, replace=False))


def build_recipe(kind: str, annotations, video_dir, *, n: int | None = None, seed: int = 0) -> Recipe:
    """The manifest rows of dataset ``kind`` (:data:`READERS`): ``{"id", "video" (absolute path),
    "captions", "source"}`` for the seeded subset of the annotated items whose video exists."""
    if kind not in READERS:
        raise ValueError(f"unknown dataset {kind!r}; recipes: {', '.join(READERS)}")
    annotated = READERS[kind](Path(annotations))
    videos = _video_index(Path(video_dir))
    present, missing = [], []
    for vid, captions in annotated:
        path = videos.get(vid) or videos.get(Path(vid).stem)
        if path is None:
            missing.append(vid)
        else:
            present.append({"id": vid, "video": str(path), "captions": captions, "source": kind})
    chosen = seeded_subset(len(present), n, seed)
    return Recipe([present[i] for i in chosen], missing, len(annotated))


def write_manifest(items: list[dict], out) -> Path:
    """JSONL, one item per line, written to a temporary file and renamed (no half-written manifest)."""
    out = Path(out)
    if out.suffix.lower() not in (".jsonl", ".ndjson"):
        raise ValueError(f"--out {out}: a manifest recipe writes JSONL; name it *.jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for item in items:
            fh.write(json.dumps(item, ensure_ascii=False) + "\n")
    os.replace(tmp, out)
    return out


def summary(kind: str, recipe: Recipe, out: Path, n: int | None, seed: int) -> str:
    lines = [f"manifest: {len(recipe.items)} {kind} item(s) written to {out} "
             f"({recipe.n_annotated} annotated; {recipe.n_annotated - len(recipe.missing)} with a video"
             + (f"; seeded subset n={n}, seed={seed}" if n is not None else "") + ")"]
    if recipe.missing:
        shown = ", ".join(recipe.missing[:NAMED_MISSING])
        more = f" and {len(recipe.missing) - NAMED_MISSING} more" if len(recipe.missing) > NAMED_MISSING else ""
        lines.append(f"  {len(recipe.missing)} video(s) missing from the folder, left out: {shown}{more}")
    return "\n".join(lines)


def cmd_manifest(args) -> int:
    recipe = build_recipe(args.dataset, args.annotations, args.video_dir, n=args.n, seed=args.seed)
    out = write_manifest(recipe.items, args.out)
    print(summary(args.dataset, recipe, out, args.n, args.seed))
    return 0


EPILOG = """examples:
  layerscope manifest vatex vatex_public_test_english_v1.1.json videos/ --out vatex1024.jsonl --n 1024 --seed 0
  layerscope manifest msrvtt test_videodatainfo.json TestVideo/ --out msrvtt.jsonl
Users bring the annotation file and the videos; nothing is downloaded. PVD is not supported (see
`python -c "import precompute.recipes as r; print(r.__doc__)"`).
"""


def register(sub):
    p = sub.add_parser("manifest", help="a manifest from a public dataset's annotation file and a folder of videos",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", choices=sorted(READERS), help="the annotation layout")
    p.add_argument("annotations", help="the dataset's annotation JSON")
    p.add_argument("video_dir", metavar="VIDEO_DIR", help="folder of the downloaded videos (<id>.mp4 ...)")
    p.add_argument("--out", required=True, help="manifest to write (.jsonl)")
    p.add_argument("--n", type=int, help="a seeded random subset of N items (DR: 1024); default: all")
    p.add_argument("--seed", type=int, default=0, help="seed of the subset (default 0)")
    p.set_defaults(func=cmd_manifest)
