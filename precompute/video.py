"""Video decoding and the papers' frame-sampling protocol. No torch here: frames are numpy.

Protocol (DESIGN §4): pick ``n_f`` time points ``round(linspace(0, T-1, n_f))``; a video model with
native clip length ``n_0`` sees them repeated by nearest neighbour up to the next multiple of
``n_0`` and split into consecutive sub-clips of ``n_0`` frames.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".webp"}


class VideoError(ValueError):
    """A video that cannot be read; the message names the file."""


def _frame_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)


def read_frames(path) -> np.ndarray:
    """All frames of a video file (any container PyAV reads) or a folder of images, ``(T, H, W, 3)`` uint8."""
    path = Path(path)
    if not path.exists():
        raise VideoError(f"video {path} does not exist")
    if path.is_dir():
        from PIL import Image

        files = _frame_files(path)
        if not files:
            raise VideoError(f"frame folder {path} holds no images ({', '.join(sorted(IMAGE_SUFFIXES))})")
        frames = [np.asarray(Image.open(f).convert("RGB")) for f in files]
        if len({f.shape for f in frames}) != 1:
            raise VideoError(f"frame folder {path} mixes image sizes")
        return np.stack(frames)
    import av

    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise VideoError(f"{path} has no video stream")
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"  # frame- and slice-threaded decoding: decoding is the main non-model cost
            frames = [f.to_ndarray(format="rgb24") for f in container.decode(stream)]
    except VideoError:
        raise
    except Exception as exc:  # PyAV raises many error types for corrupt files
        raise VideoError(f"video {path} could not be decoded: {exc}") from None
    if not frames:
        raise VideoError(f"video {path} has no decodable frames")
    return np.stack(frames)


def count_frames(path) -> int:
    """Number of frames, decoding only when the container does not say (used by manifest checks).

    The first frame is always decoded, so a corrupt or empty file fails here, before any model runs.
    """
    path = Path(path)
    if path.is_dir():
        n = len(_frame_files(path))
        if n == 0:
            raise VideoError(f"frame folder {path} holds no images")
        return n
    import av

    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise VideoError(f"{path} has no video stream")
            stream = container.streams.video[0]
            # decoding the first frame proves the file is readable; the count comes from the
            # container when it states one (cheap), else from decoding everything
            frames = container.decode(stream)
            next(frames)
            n = int(stream.frames or 0) or 1 + sum(1 for _ in frames)
    except VideoError:
        raise
    except StopIteration:
        raise VideoError(f"video {path} has no decodable frames") from None
    except Exception as exc:
        raise VideoError(f"video {path} could not be decoded: {exc}") from None
    if n == 0:
        raise VideoError(f"video {path} has no decodable frames")
    return n


def sample_indices(n_total: int, n_frames: int) -> np.ndarray:
    """``round(linspace(0, T-1, n_f))`` (round half to even, as numpy and torch do).

    With ``n_frames > n_total`` some frames repeat; callers record that.
    """
    if n_total < 1:
        raise ValueError("a video needs at least one frame")
    if n_frames < 1:
        raise ValueError(f"n_frames must be >= 1, got {n_frames}")
    return np.round(np.linspace(0, n_total - 1, n_frames)).astype(np.int64)


def clip_indices(n_frames: int, native: int) -> np.ndarray:
    """Positions into the ``n_f`` sampled frames, ``(n_clips, native)``.

    Nearest-neighbour repetition up to ``m = ceil(n_f / native) * native`` frames (position j of m
    takes sampled frame ``floor(j * n_f / m)``), then ``m / native`` consecutive sub-clips.
    """
    if native < 1:
        raise ValueError(f"native clip length must be >= 1, got {native}")
    m = math.ceil(n_frames / native) * native
    pos = (np.arange(m) * n_frames) // m
    return pos.reshape(m // native, native)


def reverse(frames: np.ndarray) -> np.ndarray:
    """The time-reversed video (arrow-of-time probe); a view, so a sweep does not copy every video."""
    return frames[::-1]
