"""Dataset manifests (JSONL or CSV) and their validation.

Every problem is collected with file, line and field, and reported together before any model runs.
"""

from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from .video import VideoError, count_frames

KNOWN_FIELDS = {"id", "video", "captions", "negatives"}
#: Optional fields read by the nuanced-retrieval probes (kept, like any other field, in the item's
#: metadata): ``negatives_kind`` says what the ``negatives`` are (``temporal``, the default: the
#: events in another order or the temporally opposite action, a wrong caption; ``negated``: a right
#: caption with a negation, NegBench-style); ``chiral_group`` names a set of temporally opposite
#: actions (e.g. ``door``) and ``chiral_action`` the item's own (``opening``), for chiral galleries.
#: ``group`` names the source an item shares with others (several clips of one scene): each best
#: cell's shuffled-pairing null then shuffles within groups (``analysis/null.py``).
NEGATIVES_KINDS = ("temporal", "negated")
CHIRAL_FIELDS = ("chiral_group", "chiral_action")
#: Optional: one long original caption of the item (a dataset's own description, e.g. PVD's paragraph),
#: embedded by every text model as its own run (variant ``long_caption``, never part of the n_c sweep)
#: and drawn as a baseline beside the caption sweep (DR Fig. 8). Given on every item or on none: the
#: baseline is compared item for item with the vision runs. Kept in the item's metadata too.
LONG_CAPTION = "long_caption"
#: bytes read from each end of a video file for its content fingerprint
FINGERPRINT_BYTES = 64 << 10


class ManifestError(ValueError):
    """All problems found in a manifest, one per line."""

    def __init__(self, path, problems: list[str]):
        self.problems = problems
        shown = problems[:50]
        more = f"\n  ... and {len(problems) - 50} more" if len(problems) > 50 else ""
        super().__init__(f"manifest {path} has {len(problems)} problem(s):\n  " + "\n  ".join(shown) + more)


@dataclass
class Item:
    idx: int
    item_id: str
    video: str | None  # absolute path; None in a text-only manifest (no item has a video)
    captions: list[str]
    negatives: list[str] = field(default_factory=list)
    metadata: dict = field(default_factory=dict)
    n_video_frames: int | None = None
    content: str | None = None  # video_fingerprint() of the file or frame folder

    @property
    def long_caption(self) -> str | None:
        """The item's long original caption (:data:`LONG_CAPTION`), or None."""
        value = self.metadata.get(LONG_CAPTION)
        return value.strip() if isinstance(value, str) and value.strip() else None


def _file_digest(h, f: Path) -> None:
    size = f.stat().st_size
    h.update(f"{f.name}\0{size}\0".encode())
    with f.open("rb") as fh:
        if size <= 2 * FINGERPRINT_BYTES:
            h.update(fh.read())
        else:
            h.update(fh.read(FINGERPRINT_BYTES))
            fh.seek(-FINGERPRINT_BYTES, 2)
            h.update(fh.read())


def video_fingerprint(path) -> str:
    """What a video's bytes are, cheaply: ``"<bytes>:<sha256 prefix>"`` of its size and its first and
    last 64 KiB (the whole file when smaller); for a frame folder, of every image's name, size and
    ends. Another video under the same name almost surely differs in size or in those bytes (the
    container header and index sit at the ends); a copied or touched file keeps its fingerprint."""
    from .video import frame_files

    path = Path(path)
    h = hashlib.sha256()
    if path.is_dir():
        files = frame_files(path)
        total = 0
        for f in files:
            _file_digest(h, f)
            total += f.stat().st_size
        return f"{total}:{h.hexdigest()[:16]}"
    _file_digest(h, path)
    return f"{path.stat().st_size}:{h.hexdigest()[:16]}"


@dataclass
class Manifest:
    path: str
    items: list[Item]

    @property
    def text_only(self) -> bool:
        """No item has a video: only text models can run on it (captions are the whole dataset)."""
        return all(it.video is None for it in self.items)

    @property
    def sha(self) -> str:
        """Hash of what changes embeddings: ids, video paths as written, captions, negatives, and the
        long caption where there is one (absent, the hash is what it was before the field existed)."""
        h = hashlib.sha256()
        for it in self.items:
            # (a text-only item hashes None, a long caption is hashed only where given: the hash of a
            # manifest with videos and no long captions is what it always was)
            fields = [it.item_id, Path(it.video).name if it.video else None, it.captions, it.negatives]
            h.update(json.dumps(fields + ([it.long_caption] if it.long_caption else [])).encode())
        return h.hexdigest()[:16]


def _check_utf8(path: Path) -> None:
    """Raise a ManifestError naming the line and byte when the file is not UTF-8 text."""
    data = path.read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ManifestError(path, [f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                                   f"{exc.start}); save the manifest as UTF-8"]) from None


def _read_rows(path: Path):
    """Yield ``(line_number, dict)`` from JSONL or CSV; unparsable lines become problems.

    Files are read as UTF-8 with an optional byte-order mark. CSV is read strictly: a quote that
    is never closed, a field count other than the header's (an unquoted comma in a caption), or a
    record spanning several lines (a quote that swallowed the rows after it) is a problem with its
    file:line.
    """
    suffix = path.suffix.lower()
    if suffix not in (".jsonl", ".ndjson", ".json", ".csv"):
        raise ManifestError(path, [f"{path}: unknown manifest format {suffix!r}; use .jsonl or .csv"])
    _check_utf8(path)
    if suffix in (".jsonl", ".ndjson", ".json"):
        with path.open(encoding="utf-8-sig") as fh:
            for no, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    yield no, ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})")
                    continue
                yield no, row if isinstance(row, dict) else ValueError("a line must be a JSON object")
    else:
        yield from _read_csv(path)


def _read_csv(path: Path):
    with path.open(encoding="utf-8-sig", newline="") as fh:  # -sig: a BOM is not part of the first name
        reader = csv.reader(fh, strict=True)
        try:
            header = next(reader, None)
        except csv.Error as exc:
            raise ManifestError(path, [f"{path}:{reader.line_num}: header is not valid CSV ({exc})"]) from None
        if not header:
            return
        header = [h.strip() for h in header]
        twice = sorted({h for h in header if h and header.count(h) > 1})
        if twice:  # a row would keep only the last of the two cells, silently
            raise ManifestError(path, [f"{path}:1: column(s) {', '.join(map(repr, twice))} appear more than once in "
                                       "the header; keep one of each"])
        while True:
            start = reader.line_num + 1
            try:
                fields = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                yield start, ValueError(f"not valid CSV ({exc}); a quote that is never closed?")
                return  # the reader cannot find the next record's start after this
            if not fields:
                continue
            if reader.line_num != start:
                yield start, ValueError(
                    f"one record spans lines {start}-{reader.line_num}: a quote that is not closed on its line? "
                    "(captions may not contain line breaks)")
                continue
            if len(fields) != len(header):
                yield start, ValueError(
                    f"{len(fields)} fields where the header has {len(header)} ({', '.join(header)}): "
                    "quote a caption that contains a comma")
                continue
            out = dict(zip(header, fields))
            for key in ("captions", "negatives"):
                raw = (out.get(key) or "").strip()
                if raw.startswith("["):
                    try:
                        out[key] = json.loads(raw)
                    except json.JSONDecodeError:
                        out[key] = ValueError(f"{key} looks like a JSON list but does not parse")
                elif key in out:
                    # CSV cells hold several captions separated by " | "
                    out[key] = [c.strip() for c in raw.split("|")] if raw else []
            yield start, out


def _caption_list(value, where, name, problems, *, required):
    if value is None:
        if required:
            problems.append(f"{where}: field '{name}' is missing")
        return []
    if isinstance(value, ValueError):
        problems.append(f"{where}: field '{name}': {value}")
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        problems.append(f"{where}: field '{name}' must be a list of strings, got {type(value).__name__}")
        return []
    out = []
    for j, c in enumerate(value):
        if not isinstance(c, str):
            problems.append(f"{where}: field '{name}[{j}]' must be a string, got {type(c).__name__}")
        elif not c.strip():
            problems.append(f"{where}: field '{name}[{j}]' is empty")
        else:
            out.append(c.strip())
    if required and not value:
        problems.append(f"{where}: field '{name}' has no captions")
    return out


def _check_nuance_fields(metadata: dict, negatives: list, where: str, problems: list[str]) -> None:
    """``negatives_kind`` one of :data:`NEGATIVES_KINDS` (and ``negated`` only with negatives);
    ``chiral_group`` and ``chiral_action`` non-empty text, given together (an empty CSV cell: absent)."""
    kind = metadata.get("negatives_kind")
    if kind not in (None, ""):
        if kind not in NEGATIVES_KINDS:
            problems.append(f"{where}: field 'negatives_kind' must be one of {', '.join(NEGATIVES_KINDS)}, got {kind!r}")
        elif kind == "negated" and not negatives:
            problems.append(f"{where}: field 'negatives_kind' is 'negated' but the item has no negatives")
    given = {f: metadata.get(f) for f in CHIRAL_FIELDS if metadata.get(f) not in (None, "")}
    for f, v in given.items():
        if not isinstance(v, (str, int)) or isinstance(v, bool) or not str(v).strip():
            problems.append(f"{where}: field '{f}' must be a non-empty string, got {v!r}")
    if len(given) == 1:
        (have,) = given
        other = next(f for f in CHIRAL_FIELDS if f != have)
        problems.append(f"{where}: field '{have}' needs '{other}' too (a chiral gallery needs the group and the "
                        "item's action)")


def _check_long_captions(path: Path, items: list, problems: list[str]) -> None:
    """``long_caption`` a non-empty string, on every item or on none (the baseline run is compared item
    for item with the vision runs: a baseline over some items would not be the same test)."""
    given = [it for it in items if it.metadata.get(LONG_CAPTION) not in (None, "")]
    for it in given:
        if it.long_caption is None:
            problems.append(f"{path}: item {it.item_id!r}: field '{LONG_CAPTION}' must be a non-empty string, "
                            f"got {it.metadata[LONG_CAPTION]!r}")
    if given and len(given) < len(items):
        missing = [it.item_id for it in items if it.metadata.get(LONG_CAPTION) in (None, "")]
        problems.append(f"{path}: field '{LONG_CAPTION}' is on {len(given)} of {len(items)} items; give it on every "
                        f"item or on none (missing on {', '.join(map(repr, missing[:5]))}"
                        f"{' ...' if len(missing) > 5 else ''})")


def load_manifest(path, *, check_videos: bool = True) -> Manifest:
    """Read and validate a manifest. Raises ``ManifestError`` listing every problem found.

    Checks: parsable lines, ``id`` present and unique, ``video`` existing and decodable (when
    ``check_videos``; a video file, a frame folder or one image), ``captions`` a non-empty list of
    non-empty strings, ``negatives`` the same when given; the optional ``negatives_kind``,
    ``chiral_group`` and ``chiral_action`` fields well formed. Other fields are kept as metadata
    (these three too). ``video`` may be left out of every item (a text-only dataset: ``Item.video``
    None, text models only), never out of some: a vision run needs every item's video.
    """
    path = Path(path)
    if not path.exists():
        raise ManifestError(path, [f"{path}: file does not exist"])
    if not path.is_file():
        raise ManifestError(path, [f"{path}: is a directory, not a manifest file (.jsonl or .csv)"])
    problems: list[str] = []
    items: list[Item] = []
    seen: dict[str, int] = {}
    with_video: list[int] = []  # line numbers: every item has a video, or none has (text-only)
    without_video: list[int] = []
    for no, row in _read_rows(path):
        where = f"{path}:{no}"
        if isinstance(row, ValueError):
            problems.append(f"{where}: {row}")
            continue
        item_id = row.get("id")
        if item_id is None or str(item_id).strip() == "":
            problems.append(f"{where}: field 'id' is missing or empty")
            item_id = None
        else:
            item_id = str(item_id).strip()
            if item_id in seen:
                problems.append(f"{where}: field 'id': duplicate id {item_id!r} (first on line {seen[item_id]})")
            else:
                seen[item_id] = no
        video = row.get("video")
        n_video_frames = None
        video_path = None
        if video is None or (isinstance(video, str) and not video.strip()):
            without_video.append(no)  # fine when no item has one (a text-only manifest), checked below
        elif not isinstance(video, str):
            problems.append(f"{where}: field 'video' must be a path (text), got {type(video).__name__}")
            with_video.append(no)
        else:
            with_video.append(no)
            video_path = (path.parent / video.strip()).resolve()
            if not video_path.exists():
                problems.append(f"{where}: field 'video': {video_path} does not exist")
            elif check_videos:
                try:
                    n_video_frames = count_frames(video_path)
                except VideoError as exc:
                    problems.append(f"{where}: field 'video': {exc}")
        captions = _caption_list(row.get("captions"), where, "captions", problems, required=True)
        negatives = _caption_list(row.get("negatives"), where, "negatives", problems, required=False)
        metadata = {k: v for k, v in row.items() if k not in KNOWN_FIELDS}
        _check_nuance_fields(metadata, negatives, where, problems)
        content = None
        if video_path is not None and video_path.exists():
            try:
                content = video_fingerprint(video_path)
            except OSError as exc:
                problems.append(f"{where}: field 'video': {video_path} cannot be read ({exc.strerror or exc})")
        if item_id is not None:  # (any problem above raises below: such an item is never used)
            items.append(Item(len(items), item_id, None if video_path is None else str(video_path), captions,
                              negatives, metadata, n_video_frames, content))
    if with_video and without_video:
        problems.extend(f"{path}:{no}: field 'video' is missing or empty while {len(with_video)} other item(s) have "
                        "one; give every item a video, or leave it out of every item for a text-only dataset "
                        "(text models only)" for no in without_video)
    if not items and not problems:
        problems.append(f"{path}: no items")
    _check_long_captions(path, items, problems)
    if problems:
        raise ManifestError(path, problems)
    return Manifest(str(path.resolve()), items)
