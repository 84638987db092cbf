"""What an analysis setting costs in memory, checked before the setting is used or saved.

The settings whose arrays grow with their value, per dataset of ``N`` items and runs of ``L``
stored layers (``d`` wide):

- ``--null-perms P``: :func:`analysis.null.pairing_permutations` holds ``(P, N)`` random keys
  (float64), their order and the shuffles (int64): ``24 · P · N`` bytes at once.
- ``--bootstrap B``: the resample indices (int64) and linear CKA's resample weights and their four
  products with the Grams (float64, :func:`analysis.bootstrap._cka_linear_resamples`), ``(B, N)``
  each: ``48 · B · N`` bytes.
- ``--k K``: the k-NN lists (int64) and their cosines (float64) of every layer of a run, which the
  engine keeps prepared whole: ``L · N · K · 16`` bytes; a ``K`` of ``N`` or more leaves no dataset
  to analyse.

With ``--jobs W``, W workers may each hold these arrays at once. A value whose arrays alone (times
W) exceed the memory available is refused with its estimate and the
largest value that fits (the rest of the analysis needs memory too, so a value near that bound
may still be too much: the bound only rules out values that cannot work).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: bytes per (shuffle, item) of the null's shuffles; per (resample, item) of the bootstrap
NULL_BYTES_PER_ITEM = 24
BOOT_BYTES_PER_ITEM = 48
#: bytes per (layer, item, neighbour) of one run's k-NN lists and cosines
KNN_BYTES_PER_SLOT = 16


@dataclass(frozen=True)
class StoreShape:
    """The largest dataset and run the analysis will hold: ``n_items`` (N), ``n_layers`` (L),
    ``dim`` (d)."""

    n_items: int
    n_layers: int
    dim: int


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation now (``MemAvailable``), else the machine's
    physical memory, else None (unknown: nothing is refused)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError, AttributeError):
        return None


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def memory_problems(settings, shape: StoreShape, available: int | None, *, workers: int = 1) -> dict[str, str]:
    """``{setting name: one-line reason}`` for each setting of ``settings`` (a
    :class:`analysis.studies.context.Settings`) that cannot work on data of ``shape`` with
    ``available`` bytes shared by ``workers`` processes (None: only the ``--k`` against N check).
    Empty when all can."""
    out = {}
    n, layers = shape.n_items, max(1, shape.n_layers)
    if settings.k >= n:
        out["k"] = (f"--k {settings.k} needs more items than any dataset holds (the largest has N = {n}); "
                    f"pass --k {max(1, n - 1)} or less")
    if available is None:
        return out
    workers = max(1, int(workers))
    share = available // workers
    shared = f" ({workers} --jobs workers share it)" if workers > 1 else ""
    per = {"n_null": ("--null-perms", NULL_BYTES_PER_ITEM * n, "shuffles"),
           "n_boot": ("--bootstrap", BOOT_BYTES_PER_ITEM * n, "resamples")}
    if "k" not in out:
        per["k"] = ("--k", layers * n * KNN_BYTES_PER_SLOT, "neighbours")
    for name, (flag, unit, what) in per.items():
        value = getattr(settings, name)
        need = value * unit
        if need > share:
            fits = share // unit
            out[name] = (f"{flag} {value} needs about {_gib(need)} of memory for its {what} at N = {n} items"
                         f"{f' and L = {layers} layers' if name == 'k' else ''}; {_gib(available)} is available"
                         f"{shared}: pass {flag} {fits} or less")
    return out
