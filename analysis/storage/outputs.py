"""Where a command may write: never over one of its own inputs."""

from __future__ import annotations

import os
from pathlib import Path


def same_file(a, b) -> bool:
    """Whether paths ``a`` and ``b`` name one existing file (the same inode: a symlink or hard link
    to it counts), or resolve to one path."""
    a, b = Path(a), Path(b)
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
        return a.resolve() == b.resolve()
    except (OSError, RuntimeError):
        return False


def refuse_input_as_output(out, inputs: dict, *, flag: str = "--out") -> None:
    """A ValueError when ``out`` is one of ``inputs`` (``{what it is: path or None}``), naming both:
    a command writes its output only where no input of it lives."""
    for what, path in inputs.items():
        if path is not None and same_file(out, path):
            raise ValueError(f"{flag} {out} would overwrite {what} {path}; nothing was written: pass another {flag}")
