"""Dataset recipes: ``layerscope manifest vatex|msrvtt`` turns a public annotation file and a folder of
videos the user downloaded into a LayerScope manifest. Nothing is downloaded.

Layouts read (as published):

- **VATEX** (``vatex_*_v1.1.json``): a JSON list of ``{"videoID": "<youtube id>_<start>_<end>",
  "enCap": [10 English captions], "chCap": [...]}``; the video file is ``VIDEO_DIR/<videoID>.<ext>``.
- **MSR-VTT** (``train_val_videodatainfo.json`` / ``test_videodatainfo.json``): ``{"videos":
  [{"video_id": "video0", ...}], "sentences": [{"video_id": "video0", "caption": "...", "sen_id": 0}]}``;
  captions in ``sen_id`` order; the video file is ``VIDEO_DIR/<video_id>.<ext>``.

- **PVD** (PE-Video, Bolya et al. 2025; Hugging Face dataset ``facebook/PE-Video``): WebDataset shards
  ``train/*.tar`` and ``test/*.tar``, each sample a ``<key>.mp4`` and a ``<key>.json`` whose
  ``human_caption`` is the video's one long, detailed caption (other fields, e.g. ``description``,
  ``keywords``, ``video_duration_in_s``, are not read; the ``extended/`` shards have no
  ``human_caption``). Read from a shard ``.tar``, a folder of extracted ``<key>.json`` files and/or
  shards, or a JSONL/JSON of those records (``video_id`` naming the video, else the file's key). The
  caption becomes the item's ``long_caption`` (DR Fig. 8's baseline). DR splits it into 10 shorter
  captions with Gemini-2.5 Pro (App. A.3); that split is not published with PVD, so it is read from
  ``--captions FILE`` when the user has it (JSONL ``{"video_id", "captions": [...]}`` lines, a JSON
  list of those, or a JSON object ``{video_id: [captions]}``); without it the item's one caption is
  the long caption. With ``--captions``, annotated videos the file has no captions for are counted,
  named and left out like missing videos. The video file is ``VIDEO_DIR/<video_id or key>.<ext>``.

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
import tarfile
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
    ``n_annotated`` (items in the annotation file), ``left_out`` (``{reason: [ids]}``: annotated items
    left out before the subset for another reason than a missing video, e.g. PVD's without a
    synthesized caption set)."""
    items: list[dict]
    missing: list[str] = field(default_factory=list)
    n_annotated: int = 0
    left_out: dict[str, list[str]] = field(default_factory=dict)


def _not_utf8(path, exc: UnicodeDecodeError) -> ValueError:
    return ValueError(f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); "
                      "save it as UTF-8")


def _load_json(path: Path, what: str = "annotation file"):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise ValueError(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise ValueError(f"{path}: is a folder, not a JSON {what}") from None
    except UnicodeDecodeError as exc:
        raise _not_utf8(path, exc) from None
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
    out, first = [], {}
    for i, entry in enumerate(data):
        where = f"{annotations}: entry {i}"
        if not isinstance(entry, dict) or not isinstance(entry.get("videoID"), str) or not entry["videoID"].strip():
            raise ValueError(f"{where}: no 'videoID'")
        _once(entry["videoID"].strip(), where, first, f"entry {i}")
        out.append((entry["videoID"].strip(), _captions(entry.get("enCap"), f"{where} ({entry['videoID']}) 'enCap'")))
    return out


def _once(vid: str, where: str, first: dict, here: str) -> None:
    """A manifest's ids are unique (precompute refuses a repeated one): an id annotated twice is
    refused naming both entries."""
    if vid in first:
        raise ValueError(f"{where}: video id {vid!r} is annotated twice (first: {first[vid]}); "
                         "a manifest holds each video once")
    first[vid] = here


def read_msrvtt(annotations: Path) -> list[tuple[str, list[str]]]:
    """``[(video_id, captions in sen_id order)]`` in the order of ``videos`` from an MSR-VTT file."""
    data = _load_json(annotations)
    if not isinstance(data, dict) or not isinstance(data.get("videos"), list) or not isinstance(data.get("sentences"), list):
        raise ValueError(f"{annotations}: expected MSR-VTT's {{\"videos\": [...], \"sentences\": [...]}}")
    caps: dict[str, list[tuple[int, int, str]]] = {}
    for i, s in enumerate(data["sentences"]):
        if not isinstance(s, dict) or not isinstance(s.get("video_id"), str) or not isinstance(s.get("caption"), str):
            raise ValueError(f"{annotations}: sentences[{i}]: expected {{video_id, caption}}")
        sen_id = s.get("sen_id", i)
        if isinstance(sen_id, bool) or not isinstance(sen_id, int):
            raise ValueError(f"{annotations}: sentences[{i}] ({s['video_id']}): 'sen_id' must be an integer "
                             f"(the caption's order), got {sen_id!r}")
        if s["caption"].strip():
            caps.setdefault(s["video_id"], []).append((sen_id, i, s["caption"].strip()))
    out, first = [], {}
    for i, v in enumerate(data["videos"]):
        if not isinstance(v, dict) or not isinstance(v.get("video_id"), str):
            raise ValueError(f"{annotations}: videos[{i}]: no 'video_id'")
        _once(v["video_id"], f"{annotations}: videos[{i}]", first, f"videos[{i}]")
        got = sorted(caps.get(v["video_id"], []))
        if not got:
            raise ValueError(f"{annotations}: videos[{i}] ({v['video_id']}): no caption in 'sentences'")
        out.append((v["video_id"], [c for _, _, c in got]))
    return out


#: PVD's field holding the one long, human-verified caption of a video
PVD_CAPTION = "human_caption"


def _pvd_record(record, key: str, where: str):
    """``(video id, long caption, key)`` of one PVD sample's JSON; the caption is None when the sample
    has none (the ``extended`` shards: keywords and descriptions only)."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a PE-Video sample's JSON object, got a {type(record).__name__}")
    vid = record.get("video_id", key)
    if vid is None or not str(vid).strip():
        raise ValueError(f"{where}: no 'video_id' (and no file key to name the video by)")
    caption = record.get(PVD_CAPTION)
    if caption is None or (isinstance(caption, str) and not caption.strip()):
        return str(vid).strip(), None, key
    if not isinstance(caption, str):
        raise ValueError(f"{where} ({vid}) '{PVD_CAPTION}': expected a string, got {str(caption)[:80]!r}")
    return str(vid).strip(), caption.strip(), key


def _wds_key(name: str) -> str:
    """A WebDataset sample's key: the member's file name up to its first dot (``123.json`` -> ``123``)."""
    return Path(name).name.split(".", 1)[0]


def _pvd_tar(path: Path) -> list[tuple]:
    out = []
    try:
        with tarfile.open(path) as tar:
            for m in tar:
                if m.isfile() and m.name.endswith(".json"):
                    where = f"{path}:{m.name}"
                    try:
                        record = json.loads(tar.extractfile(m).read().decode("utf-8"))
                    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                        raise ValueError(f"{where}: not JSON ({exc})") from None
                    out.append(_pvd_record(record, _wds_key(m.name), where))
    except tarfile.TarError as exc:
        raise ValueError(f"{path}: not a readable tar shard ({exc})") from None
    return out


def _pvd_json_lines(path: Path) -> list[tuple]:
    """A ``.jsonl`` of sample records, or a ``.json`` holding one record or a list of them."""
    if path.suffix.lower() == ".json":
        data = _load_json(path)
        records = data if isinstance(data, list) else [data]
        return [_pvd_record(r, None, f"{path}: record {i}") for i, r in enumerate(records)]
    out = []
    try:
        with open(path, encoding="utf-8") as fh:
            for line_no, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{line_no}: not JSON ({exc.msg}, column {exc.colno})") from None
                out.append(_pvd_record(record, None, f"{path}:{line_no}"))
    except UnicodeDecodeError as exc:
        raise _not_utf8(path, exc) from None
    return out


def read_pvd_samples(annotations: Path) -> tuple[list[tuple[str, str, str | None]], list[str]]:
    """``([(video id, long caption, file key)], [ids of samples without a caption])`` in file order from PVD's
    published layout (module docstring): a shard ``.tar``; a folder of ``*.json`` (extracted samples)
    and ``*.tar`` (shards), each read in name order; or a ``.jsonl``/``.json`` of sample records."""
    if annotations.is_dir():
        files = sorted(p for p in annotations.iterdir() if p.suffix.lower() in (".json", ".tar"))
        if not files:
            raise ValueError(f"{annotations}: no PE-Video .json samples or .tar shards in this folder")
        got = []
        for f in files:
            if f.suffix.lower() == ".tar":
                got += _pvd_tar(f)
            else:
                got.append(_pvd_record(_load_json(f), _wds_key(f.name), str(f)))
    elif not annotations.exists():
        raise ValueError(f"{annotations}: no such annotation file or folder")
    elif annotations.suffix.lower() == ".tar":
        got = _pvd_tar(annotations)
    elif annotations.suffix.lower() in (".jsonl", ".ndjson", ".json"):
        got = _pvd_json_lines(annotations)
    else:
        raise ValueError(f"{annotations}: expected a PE-Video shard (.tar), a folder of its .json samples, "
                         "or a .jsonl/.json of sample records")
    samples = [g for g in got if g[1] is not None]
    if not samples:
        raise ValueError(f"{annotations}: none of {len(got)} sample(s) has a '{PVD_CAPTION}' (the extended/ "
                         "shards have none: use train/ or test/)")
    seen: dict[str, int] = {}
    for vid, _, _ in samples:
        seen[vid] = seen.get(vid, 0) + 1
    twice = [v for v, n in seen.items() if n > 1]
    if twice:
        raise ValueError(f"{annotations}: video id(s) annotated more than once: {', '.join(twice[:5])}")
    return samples, [g[0] for g in got if g[1] is None]


def read_caption_sets(path: Path) -> dict[str, list[str]]:
    """``{video_id: captions}`` of a synthesized-caption file (DR App. A.3's split of PVD's long
    caption): JSONL lines ``{"video_id": ..., "captions": [...]}``, a JSON list of such records, or a
    JSON object ``{video_id: [captions]}``. A video given twice is an error naming it."""
    path = Path(path)
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        records = []
        try:
            fh = open(path, encoding="utf-8")
        except FileNotFoundError:
            raise ValueError(f"{path}: no such caption file") from None
        except IsADirectoryError:
            raise ValueError(f"--captions {path}: is a folder, not a caption file") from None
        try:
            with fh:
                for line_no, line in enumerate(fh, start=1):
                    if line.strip():
                        try:
                            records.append((f"{path}:{line_no}", json.loads(line)))
                        except json.JSONDecodeError as exc:
                            raise ValueError(f"{path}:{line_no}: not JSON ({exc.msg}, column {exc.colno})") from None
        except UnicodeDecodeError as exc:
            raise _not_utf8(path, exc) from None
    else:
        data = _load_json(path, "caption file")
        if isinstance(data, dict):
            records = [(f"{path}: {k!r}", {"video_id": k, "captions": v}) for k, v in data.items()]
        elif isinstance(data, list):
            records = [(f"{path}: record {i}", r) for i, r in enumerate(data)]
        else:
            raise ValueError(f"{path}: expected {{video_id: [captions]}} or a list of {{video_id, captions}}")
    out: dict[str, list[str]] = {}
    for where, r in records:
        if not isinstance(r, dict) or r.get("video_id") is None or not str(r["video_id"]).strip():
            raise ValueError(f"{where}: expected {{\"video_id\": ..., \"captions\": [...]}}")
        vid = str(r["video_id"]).strip()
        if vid in out:
            raise ValueError(f"{where}: video {vid!r} has captions twice in this file")
        out[vid] = _captions(r.get("captions"), f"{where} ({vid}) 'captions'")
    if not out:
        raise ValueError(f"{path}: no caption sets in this file")
    return out


def read_pvd(annotations: Path, captions=None) -> tuple[list[tuple[str, list[str], dict, tuple]], dict]:
    """PVD's annotated videos as ``[(video id, captions, extra row fields, file keys)]`` and
    ``{reason: [ids]}`` left out: ``captions`` the synthesized set from ``captions`` (a file, see
    :func:`read_caption_sets`) or else ``[long caption]``; ``extra`` ``{"long_caption": ...}``."""
    samples, no_caption = read_pvd_samples(annotations)
    sets = read_caption_sets(captions) if captions is not None else None
    out, left_out = [], {}
    if no_caption:
        left_out[f"sample(s) without a '{PVD_CAPTION}'"] = no_caption
    for vid, long_caption, key in samples:
        if sets is not None and vid not in sets:
            left_out.setdefault("video(s) without synthesized captions in --captions", []).append(vid)
            continue
        caps = sets[vid] if sets is not None else [long_caption]
        out.append((vid, caps, {"long_caption": long_caption}, (vid, key) if key and key != vid else (vid,)))
    return out, left_out


def _simple(reader):
    """A reader of ``[(id, captions)]`` in :func:`read_pvd`'s form (no extra fields, nothing left out)."""
    def read(annotations: Path, captions=None):
        if captions is not None:
            raise ValueError("--captions (synthesized caption sets) goes with the pvd recipe only")
        return [(vid, caps, {}, (vid,)) for vid, caps in reader(annotations)], {}
    return read


READERS = {"vatex": _simple(read_vatex), "msrvtt": _simple(read_msrvtt), "pvd": read_pvd}


def seeded_subset(n_items: int, n: int | None, seed: int) -> list[int]:
    """DR's seeded random subset: ``sorted(default_rng(seed).choice(n_items, n, replace=False))``;
    every index when ``n`` is None. Raises when ``n`` exceeds ``n_items``."""
    if n is None:
        return list(range(n_items))
    if seed < 0:
        raise ValueError(f"--seed {seed}: a seed is a non-negative integer")
    if n < 1:
        raise ValueError(f"--n {n}: a subset needs at least one item")
    if n > n_items:
        raise ValueError(f"--n {n}: only {n_items} annotated item(s) have a video; ask for at most {n_items}")
    return sorted(int(i) for i in np.random.default_rng(seed).choice(n_items, n, replace=False))


def build_recipe(kind: str, annotations, video_dir, *, n: int | None = None, seed: int = 0,
                 captions=None) -> Recipe:
    """The manifest rows of dataset ``kind`` (:data:`READERS`): ``{"id", "video" (absolute path),
    "captions", "source"}`` (PVD: and ``long_caption``) for the seeded subset of the annotated items
    whose video exists. ``captions``: PVD's synthesized caption sets (:func:`read_caption_sets`)."""
    if kind not in READERS:
        raise ValueError(f"unknown dataset {kind!r}; recipes: {', '.join(READERS)}")
    annotated, left_out = READERS[kind](Path(annotations), captions)
    videos = _video_index(Path(video_dir))
    present, missing = [], []
    for vid, caps, extra, keys in annotated:
        # the video is named by the id, else (PVD) by the sample's key in its shard
        path = next(filter(None, (videos.get(k) or videos.get(Path(k).stem) for k in keys)), None)
        if path is None:
            missing.append(vid)
        else:
            present.append({"id": vid, "video": str(path), "captions": caps, **extra, "source": kind})
    n_annotated = len(annotated) + sum(len(v) for v in left_out.values())
    if not present:
        raise ValueError(f"no item of the {n_annotated} annotated has a video in {video_dir} (looked for "
                         f"<id>{'|'.join(VIDEO_EXTENSIONS)}); nothing written")
    chosen = seeded_subset(len(present), n, seed)
    return Recipe([present[i] for i in chosen], missing, n_annotated, left_out)


def write_manifest(items: list[dict], out) -> Path:
    """JSONL, one item per line, written to a temporary file, checked by precompute's own manifest
    validation, then renamed: no half-written manifest, none precompute would refuse, and no
    temporary file left behind."""
    from precompute.inputs.manifest import ManifestError, load_manifest

    out = Path(out)
    if out.suffix.lower() not in (".jsonl", ".ndjson"):
        raise ValueError(f"--out {out}: a manifest recipe writes JSONL; name it *.jsonl")
    if out.is_dir():
        raise ValueError(f"--out {out} is a folder; pass a file such as {out / 'manifest.jsonl'}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.stem}.tmp{out.suffix}")  # the manifest's own suffix: validated as one
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            for item in items:
                fh.write(json.dumps(item, ensure_ascii=False) + "\n")
        try:
            load_manifest(tmp, check_videos=False)
        except ManifestError as exc:
            shown = "; ".join(p.replace(str(tmp), str(out)) for p in exc.problems[:3])
            raise ValueError(f"--out {out}: the manifest would not pass precompute's checks, so nothing was "
                             f"written ({len(exc.problems)} problem(s): {shown})") from None
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def _named(ids: list[str]) -> str:
    more = f" and {len(ids) - NAMED_MISSING} more" if len(ids) > NAMED_MISSING else ""
    return ", ".join(ids[:NAMED_MISSING]) + more


def summary(kind: str, recipe: Recipe, out: Path, n: int | None, seed: int) -> str:
    n_left = sum(len(v) for v in recipe.left_out.values())
    lines = [f"manifest: {len(recipe.items)} {kind} item(s) written to {out} "
             f"({recipe.n_annotated} annotated; {recipe.n_annotated - n_left - len(recipe.missing)} usable with a video"
             + (f"; seeded subset n={n}, seed={seed}" if n is not None else "") + ")"]
    for reason, ids in recipe.left_out.items():
        lines.append(f"  {len(ids)} {reason}, left out: {_named(ids)}")
    if recipe.missing:
        lines.append(f"  {len(recipe.missing)} video(s) missing from the folder, left out: {_named(recipe.missing)}")
    return "\n".join(lines)


def cmd_manifest(args) -> int:
    from analysis.storage.outputs import refuse_input_as_output

    refuse_input_as_output(args.out, {"the annotation file": args.annotations, "the --captions file": args.captions})
    recipe = build_recipe(args.dataset, args.annotations, args.video_dir, n=args.n, seed=args.seed,
                          captions=args.captions)
    out = write_manifest(recipe.items, args.out)
    print(summary(args.dataset, recipe, out, args.n, args.seed))
    return 0


EPILOG = """examples:
  layerscope manifest vatex vatex_public_test_english_v1.1.json videos/ --out vatex1024.jsonl --n 1024 --seed 0
  layerscope manifest msrvtt test_videodatainfo.json TestVideo/ --out msrvtt.jsonl
  layerscope manifest pvd pvd_test/ pvd_test/ --out pvd1024.jsonl --n 1024 --seed 0
  layerscope manifest pvd pvd_test/ pvd_test/ --captions pvd_gemini10.jsonl --out pvd1024.jsonl --n 1024
Users bring the annotation files and the videos; nothing is downloaded. PVD: pvd_test/ holds PE-Video's
test/*.tar shards extracted (<key>.json beside <key>.mp4); a shard .tar or a JSONL of the samples'
JSON is read as well (the videos must be files in VIDEO_DIR); each video's human_caption is written
as long_caption (see
`python -c "import precompute.inputs.recipes as r; print(r.__doc__)"`).
"""


def register(sub):
    p = sub.add_parser("manifest", help="a manifest from a public dataset's annotation file and a folder of videos",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", choices=sorted(READERS), help="the annotation layout")
    p.add_argument("annotations", help="the dataset's annotation JSON (pvd: a shard .tar, a folder of its "
                                       ".json samples and/or shards, or a .jsonl of sample records)")
    p.add_argument("video_dir", metavar="VIDEO_DIR", help="folder of the downloaded videos (<id>.mp4 ...)")
    p.add_argument("--out", required=True, help="manifest to write (.jsonl)")
    p.add_argument("--n", type=int, help="a seeded random subset of N items (DR: 1024); default: all")
    p.add_argument("--seed", type=int, default=0, help="seed of the subset (default 0)")
    p.add_argument("--captions", metavar="FILE",
                   help="pvd only: synthesized caption sets per video (DR App. A.3's 10 Gemini captions), JSONL "
                        "{\"video_id\", \"captions\": [...]} lines or JSON {video_id: [...]}; default: the one "
                        "human_caption is the item's caption")
    p.set_defaults(func=cmd_manifest)
