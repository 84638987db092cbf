"""Video decoding and the papers' frame-sampling protocol. No torch here: frames are numpy.

Protocol (DR's frame sampling): pick ``n_f`` time points ``round(linspace(0, T-1, n_f))``; a video model with
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


def frame_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)


class DecodedVideo:
    """The frames of one video that a job needs, with the video's length.

    ``n_frames``: frames in the video (T); ``index``: the kept frame numbers, ascending;
    ``frames``: ``(len(index), H, W, 3)`` uint8; ``declared_frames``: the header's count. A 10 s
    720p clip is ~0.8 GB as RGB: a sweep that samples 16 of its 300 frames keeps 16.
    """

    def __init__(self, n_frames: int, index: np.ndarray, frames: np.ndarray, declared_frames: int | None = None,
                 duration_frames: int | None = None):
        self.n_frames, self.index, self.frames = int(n_frames), np.asarray(index, dtype=np.int64), frames
        #: the frame count the container's header states (None: it states none, or a frame folder);
        #: differs from ``n_frames`` when the header is wrong (runs note it)
        self.declared_frames = declared_frames
        #: frames the header's duration implies at the stream's average rate, for containers that
        #: state a duration but no count (Matroska): an estimate, so only a clear shortfall
        #: (:meth:`truncated`) is noted, never used to pick frames
        self.duration_frames = duration_frames

    def truncated(self) -> bool:
        """Fewer frames decoded than the header's duration implies, by more than rounding and a
        variable frame rate explain (at least 2 frames and 5%): a file cut short."""
        d = self.duration_frames
        return self.declared_frames is None and d is not None and self.n_frames <= min(d - 2, 0.95 * d)

    @property
    def nbytes(self) -> int:
        return self.frames.nbytes

    def take(self, indices) -> np.ndarray:
        """Frames ``indices`` (frame numbers of the whole video; must be kept) as ``(n, H, W, 3)``."""
        indices = np.asarray(indices, dtype=np.int64)
        pos = np.searchsorted(self.index, indices)
        if (pos >= len(self.index)).any() or (self.index[np.minimum(pos, len(self.index) - 1)] != indices).any():
            raise ValueError(f"frames {sorted(set(indices.tolist()) - set(self.index.tolist()))} were not decoded")
        return self.frames[pos]


def read_video(path, wanted=None) -> DecodedVideo:
    """Decode a video file (any container PyAV reads) or a folder of images, keeping the frames in
    ``wanted(T)`` (a callable from the frame count to frame numbers; default: all).

    Every frame is decoded (inter-frame codecs need it), but only the wanted ones are converted to
    RGB and kept; a frame folder reads only the wanted images. When the container's frame count
    turns out wrong, the video is decoded a second time with the true count.
    """
    path = Path(path)
    if not path.exists():
        raise VideoError(f"video {path} does not exist")
    if path.is_dir():
        from PIL import Image

        files = frame_files(path)
        if not files:
            raise VideoError(f"frame folder {path} holds no images ({', '.join(sorted(IMAGE_SUFFIXES))})")
        index = _wanted(wanted, len(files))
        frames = []
        for i in index:
            try:
                with Image.open(files[i]) as im:
                    frames.append(np.asarray(im.convert("RGB")))
            except Exception as exc:  # PIL raises many error types for damaged or non-image files
                raise VideoError(f"frame {files[i]} could not be read as an image: {exc}") from None
        if len({f.shape for f in frames}) != 1:
            raise VideoError(f"frame folder {path} mixes image sizes")
        return DecodedVideo(len(files), index, np.stack(frames))
    try:
        n, numbers, kept, trusted, declared = _decode(path, wanted, None)
        if not trusted:  # the container stated a wrong frame count: decode again with the true one
            n, numbers, kept, _, _ = _decode(path, wanted, n)
        implied = None if declared else _duration_frames(path)
    except VideoError:
        raise
    except Exception as exc:  # PyAV raises many error types for corrupt files
        raise VideoError(f"video {path} could not be decoded: {exc}") from None
    if n == 0:
        raise VideoError(f"video {path} has no decodable frames")
    return DecodedVideo(n, np.asarray(numbers), np.stack(kept) if kept else np.zeros((0, 0, 0, 3), np.uint8),
                        declared_frames=declared or None, duration_frames=implied)


def _duration_frames(path) -> int | None:
    """``round(duration × average frame rate)`` from the container's header (no decoding), or None
    when it states either not at all."""
    import av

    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            rate = stream.average_rate
            if stream.duration is not None and stream.time_base is not None:
                seconds = float(stream.duration * stream.time_base)
            elif container.duration:
                seconds = container.duration / 1e6  # av.time_base: microseconds
            else:
                return None
            return int(round(seconds * float(rate))) if rate else None
    except Exception:  # only an estimate for a note: a header PyAV cannot read states nothing
        return None


def _decode(path, wanted, count):
    """One pass: ``(T, kept frame numbers, kept RGB frames, whether the count used was right, the
    header's count (0: none))``."""
    import av

    with av.open(str(path)) as container:
        if not container.streams.video:
            raise VideoError(f"{path} has no video stream")
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"  # frame- and slice-threaded decoding: decoding is the main non-model cost
        declared = int(stream.frames or 0)
        count = count or declared
        keep = set(_wanted(wanted, count).tolist()) if wanted is not None and count > 0 else None
        kept, numbers, n = [], [], 0
        for frame in container.decode(stream):
            if keep is None:
                # all frames, or a container that does not state its length: hold the decoded
                # (YUV, half the size of RGB) frames and convert the wanted ones once T is known
                kept.append(frame if wanted is not None else frame.to_ndarray(format="rgb24"))
                numbers.append(n)
            elif n in keep:
                kept.append(frame.to_ndarray(format="rgb24"))
                numbers.append(n)
            n += 1
    if wanted is not None and keep is None:
        index = _wanted(wanted, n)
        kept, numbers = [kept[i].to_ndarray(format="rgb24") for i in index], list(index)
    return n, numbers, kept, keep is None or n == count, declared


def _wanted(wanted, n_total: int) -> np.ndarray:
    if n_total < 1:
        return np.zeros(0, dtype=np.int64)
    if wanted is None:
        return np.arange(n_total)
    index = np.unique(np.asarray(wanted(n_total), dtype=np.int64))
    if len(index) and (index[0] < 0 or index[-1] >= n_total):
        raise ValueError(f"wanted frames must lie in 0..{n_total - 1}")
    return index


def read_frames(path) -> np.ndarray:
    """All frames of a video file (any container PyAV reads) or a folder of images, ``(T, H, W, 3)`` uint8."""
    return read_video(path).frames


def count_frames(path) -> int:
    """Number of frames, decoding only when the container does not say (used by manifest checks).

    The first frame is always decoded, so a corrupt or empty file fails here, before any model runs.
    """
    path = Path(path)
    if path.is_dir():
        return _check_frame_folder(path)
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


def _check_frame_folder(path: Path) -> int:
    """Frames in a folder of images, after checking that every one is an image of one size.

    Reads each file's header only (PIL opens lazily), so a folder with a damaged or non-image frame,
    or frames of mixed sizes, fails in validation rather than mid-run.
    """
    from PIL import Image

    files = frame_files(path)
    if not files:
        raise VideoError(f"frame folder {path} holds no images ({', '.join(sorted(IMAGE_SUFFIXES))})")
    sizes = {}
    for f in files:
        try:
            with Image.open(f) as im:
                sizes.setdefault(im.size, f)
        except Exception as exc:
            raise VideoError(f"frame {f} is not a readable image: {exc}") from None
    if len(sizes) > 1:
        shown = ", ".join(f"{w}x{h} ({f.name})" for (w, h), f in list(sizes.items())[:3])
        raise VideoError(f"frame folder {path} mixes image sizes: {shown}")
    return len(files)


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


def poster_frame(path) -> np.ndarray:
    """The first frame of a video file, or the first image of a frame folder, ``(H, W, 3)`` uint8,
    decoding nothing past it (a hover thumbnail must not cost a whole decode). Raises
    :class:`VideoError` naming the file."""
    path = Path(path)
    if not path.exists():
        raise VideoError(f"video {path} does not exist")
    if path.is_dir():
        return read_video(path, lambda T: [0]).frames[0]
    try:
        import av

        with av.open(str(path)) as container:
            if not container.streams.video:
                raise VideoError(f"{path} has no video stream")
            for frame in container.decode(container.streams.video[0]):
                return frame.to_ndarray(format="rgb24")
    except VideoError:
        raise
    except Exception as exc:  # PyAV raises many error types for corrupt files
        raise VideoError(f"video {path} could not be decoded: {exc}") from None
    raise VideoError(f"video {path} has no decodable frames")
