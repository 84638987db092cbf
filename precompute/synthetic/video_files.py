"""Writing frames as real video files (PyAV) so tests and the demo go through the decode path."""

from __future__ import annotations

from pathlib import Path

import numpy as np

#: lossless (FFV1 in Matroska) keeps pixels exact for tests; mp4/h264 is what users usually have
CODECS = {".mkv": ("ffv1", "bgr0"), ".mp4": ("libx264", "yuv420p"), ".avi": ("mpeg4", "yuv420p")}


def write_video(path, frames: np.ndarray, *, fps: int = 10) -> Path:
    """Write ``(T, H, W, 3)`` uint8 frames to ``path``; the suffix picks the codec (``.mkv`` is lossless)."""
    import av

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    codec, pix_fmt = CODECS.get(path.suffix.lower(), CODECS[".mkv"])
    frames = np.asarray(frames, dtype=np.uint8)
    # bitexact: no random segment ids or encoder version strings, so the same frames give the same bytes
    with av.open(str(path), "w", options={"fflags": "+bitexact"}) as container:
        stream = container.add_stream(codec, rate=fps, options={"flags": "+bitexact"})
        stream.width, stream.height = frames.shape[2], frames.shape[1]
        stream.pix_fmt = pix_fmt
        if codec == "libx264":
            stream.options = {"crf": "18", "preset": "veryfast", "threads": "1", "flags": "+bitexact"}
        for f in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def index_frames(n: int, *, size: int = 32) -> np.ndarray:
    """Frames whose pixels encode their own index (red = index, green = 255 - index)."""
    if n > 256:
        raise ValueError("index_frames encodes at most 256 frames")
    out = np.zeros((n, size, size, 3), dtype=np.uint8)
    out[..., 0] = np.arange(n, dtype=np.uint8)[:, None, None]
    out[..., 1] = 255 - np.arange(n, dtype=np.uint8)[:, None, None]
    return out
