"""What every study shares: the settings, the store connection, the engine, notes and bookkeeping.

A study is a function ``run(ctx, ds)`` over one dataset's :class:`DatasetRuns`. It asks
``ctx.engine`` for grids, profiles and embeddings (never loading or preparing a run itself), checks
``ctx.fresh(...)`` before computing a result, and writes result rows through :mod:`analysis.results`.
"""

from __future__ import annotations

import contextlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np

from .. import results as R
from ..registry import get_metric
from ..store import connect
from .engine import Engine

#: bump when a result payload changes shape; cached results of another version are cleared
ANALYSIS_VERSION = 4
VISION = ("video", "image")
DEFAULT_METRICS = ("mutual_knn", "cka", "cknna")


@dataclass
class Settings:
    """``layerscope analyze`` parameters; stored in the store's ``meta`` so later runs reuse them."""

    k: int = 10
    metrics: tuple = DEFAULT_METRICS
    references: tuple = ()
    n_boot: int = 200
    seed: int = 0
    jobs: int = 1

    def check(self) -> None:
        if self.k < 1:
            raise ValueError(f"--k must be at least 1, got {self.k}")
        if self.n_boot < 0:
            raise ValueError(f"--bootstrap must be 0 (off) or a positive count, got {self.n_boot}")
        if self.jobs < 1:
            raise ValueError(f"--jobs must be at least 1, got {self.jobs}")
        for m in self.metrics:
            if get_metric(m).kind != "pairwise":
                raise ValueError(f"analyze grids take pairwise metrics; {m!r} is {get_metric(m).kind}")

    def params_for(self, metric: str) -> dict:
        return {"k": self.k} if "k" in get_metric(metric).params else {}


@dataclass
class DatasetRuns:
    """One dataset's done runs, split the ways the studies need them."""

    name: str
    runs: list
    n_items: int
    originals: list = field(init=False)
    vision: list = field(init=False)
    text: list = field(init=False)

    def __post_init__(self):
        self.originals = [r for r in self.runs if r["variant"] == "original"]
        self.vision = [r for r in self.originals if r["modality"] in VISION]
        self.text = [r for r in self.originals if r["modality"] == "text"]

    def largest_settings(self, *, text: bool = True) -> dict:
        """Each model's run at its largest setting. A model with both sides (an MLLM) keeps its name
        for the video side and appears as ``"<model> [text]"`` for its caption side."""
        chosen = {}
        for r in self.vision:
            if r["model"] not in chosen or r["n_frames"] > chosen[r["model"]]["n_frames"]:
                chosen[r["model"]] = r
        vision_models = set(chosen)
        for r in (self.text if text else []):
            key = f"{r['model']} [text]" if r["model"] in vision_models else r["model"]
            if key not in chosen or r["n_captions"] > chosen[key]["n_captions"]:
                chosen[key] = r
        return chosen


class Context:
    """Settings + connection + engine + the record of what was computed and reused, per study."""

    def __init__(self, store: str, con, settings: Settings, *, log=print, progress: bool = False):
        self.store = str(store)
        self.con = con
        self.settings = settings
        self.engine = Engine(con)
        self.log = log
        self.progress = progress
        self.notes: list[str] = []
        self.computed: Counter = Counter()
        self.reused: Counter = Counter()

    def note(self, msg: str) -> None:
        self.notes.append(msg)
        self.log(f"note: {msg}")

    def fresh(self, study: str, table: str, result_id: str, input_key: str) -> bool:
        """Whether a result must be (re)computed; counts it as computed or reused under ``study``."""
        if R.is_current(self.con, table, result_id, input_key):
            self.reused[study] += 1
            return False
        self.computed[study] += 1
        return True

    def stored_profile(self, run_id: str, metric: str) -> np.ndarray:
        """A run's per-layer profile from the result table (the profiles study runs first)."""
        rows = R.read_profiles(self.con, run_id=run_id, metric=metric)
        if rows:
            return rows[0]["layer_values"]
        return self.engine.profile(run_id, metric)

    @contextlib.contextmanager
    def released(self):
        """Close the write connection while worker processes open the store read-only (DuckDB
        lets one process write or many read, not both), then reopen it for writing."""
        self.con.close()
        try:
            yield
        finally:
            self.con = connect(self.store, read_only=False)
            self.engine.con = self.con

    def summary(self) -> dict:
        c = self.engine.counters
        return {"computed": sum(self.computed.values()), "skipped": sum(self.reused.values()),
                "notes": self.notes, "computed_by_study": dict(self.computed),
                "reused_by_study": dict(self.reused),
                "preparations": c.preparations, "layer_preparations": c.layer_preparations,
                "grids_scored": c.grids_scored}


def group_runs(rows: list[dict]) -> dict[str, list[dict]]:
    by_dataset = defaultdict(list)
    for r in rows:
        if r["status"] == "done":
            by_dataset[r["dataset"]].append(r)
    return by_dataset
