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
from ..preprocess import CLAMP_MODES
from ..registry import get_metric
from ..store import connect
from ..temporal import REORDER_K
from .engine import Engine

#: bump when a result payload changes shape; cached results of another version are cleared
ANALYSIS_VERSION = 5
VISION = ("video", "image")
DEFAULT_METRICS = ("mutual_knn", "cka", "cknna")
#: ``paper``: one caption and each vision model's standard (native) frame count, as the alignment
#: paper correlates; ``largest``: each model's largest budgets
DOWNSTREAM_SETTINGS = ("paper", "largest")
#: settings that change numbers, stored in the store and part of every result's key
STORED = ("k", "metrics", "references", "n_boot", "seed", "clamp", "reorder_k", "downstream_setting", "maps",
          "knn")
#: neighbour search of the k-NN metrics: exact (float32 candidates, float64 re-rank) or ann (faiss;
#: its measured recall goes into each grid's flags)
KNN_SEARCH = ("exact", "ann")
#: embedding maps ``analyze`` computes on its own per dataset (``--maps``; maps asked for with
#: ``layerscope map`` come on top): each costs about a second, the first of a process 10-40 s of
#: umap-learn's compilation
DEFAULT_MAPS = 24


@dataclass
class Settings:
    """``layerscope analyze`` parameters; stored in the store's ``meta`` so later runs reuse them."""

    k: int = 10
    metrics: tuple = DEFAULT_METRICS
    references: tuple = ()
    n_boot: int = 200
    seed: int = 0
    clamp: str = "off"  # outlier clamp before every metric: off | platonic | feature
    reorder_k: int = REORDER_K  # the reorder (VideoComp) probe's own k (the paper: 5 at N = 512)
    downstream_setting: str = "paper"  # which runs downstream correlation uses: paper | largest
    maps: int = DEFAULT_MAPS  # default embedding maps per dataset (0: none)
    knn: str = "exact"  # neighbour search of the k-NN metrics: exact | ann
    jobs: int = 1

    def check(self) -> None:
        if self.k < 1:
            raise ValueError(f"--k must be at least 1, got {self.k}")
        if self.n_boot < 0:
            raise ValueError(f"--bootstrap must be 0 (off) or a positive count, got {self.n_boot}")
        if self.clamp not in CLAMP_MODES:
            raise ValueError(f"--clamp must be one of {', '.join(CLAMP_MODES)}, got {self.clamp!r}")
        if self.reorder_k < 1:
            raise ValueError(f"--reorder-k must be at least 1, got {self.reorder_k}")
        if self.downstream_setting not in DOWNSTREAM_SETTINGS:
            raise ValueError(f"--downstream-setting must be one of {', '.join(DOWNSTREAM_SETTINGS)}, "
                             f"got {self.downstream_setting!r}")
        if self.knn not in KNN_SEARCH:
            raise ValueError(f"--knn must be one of {', '.join(KNN_SEARCH)}, got {self.knn!r}")
        if self.maps < 0:
            raise ValueError(f"--maps must be 0 (none) or a positive count, got {self.maps}")
        if self.jobs < 1:
            raise ValueError(f"--jobs must be at least 1, got {self.jobs}")
        for m in self.metrics:
            if get_metric(m).kind != "pairwise":
                raise ValueError(f"analyze grids take pairwise metrics; {m!r} is {get_metric(m).kind}")

    def params_for(self, metric: str) -> dict:
        """The metric's parameters from the settings. ``knn`` appears only when approximate, so
        exact results keep the keys (and cached rows) they always had."""
        known = get_metric(metric).params
        out = {"k": self.k} if "k" in known else {}
        if self.knn != "exact" and "knn" in known:
            out["knn"] = self.knn
        return out

    def stored(self) -> dict:
        """The settings saved in the store (tuples as lists)."""
        return {n: (list(v) if isinstance(v, tuple) else v) for n in STORED for v in [getattr(self, n)]}


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


    def downstream_settings(self, con, setting: str) -> dict:
        """Each model's run correlated with downstream results (``--downstream-setting``): ``paper``
        (:meth:`paper_settings`, with the models' native frame counts from the store) or
        ``largest`` (:meth:`largest_settings`)."""
        if setting == "paper":
            return self.paper_settings(dict(con.execute("SELECT model, native_frames FROM models").fetchall()))
        return self.largest_settings()

    def paper_settings(self, native_frames: dict) -> dict:
        """Each model's run at the alignment paper's downstream protocol: one caption (the run with
        the n_c closest to 1) and the vision model's standard frame count (its native clip length;
        1 for image models), else the closest n_f the store has (ties: the larger). Keys as
        :meth:`largest_settings`."""
        def closest(runs, key, target):
            return min(runs, key=lambda r: (abs(r[key] - target), -r[key]))

        chosen = {}
        by_model: dict = {}
        for r in self.vision:
            by_model.setdefault(r["model"], []).append(r)
        for m, runs in by_model.items():
            chosen[m] = closest(runs, "n_frames", native_frames.get(m) or 1)
        by_text: dict = {}
        for r in self.text:
            by_text.setdefault(r["model"], []).append(r)
        for m, runs in by_text.items():
            chosen[f"{m} [text]" if m in by_model else m] = closest(runs, "n_captions", 1)
        return chosen


class Context:
    """Settings + connection + engine + the record of what was computed and reused, per study."""

    def __init__(self, store: str, con, settings: Settings, *, log=print, progress: bool = False):
        self.store = str(store)
        self.con = con
        self.settings = settings
        self.engine = Engine(con, clamp=settings.clamp)
        self.log = log
        self.progress = progress
        self.notes: list[str] = []
        self.computed: Counter = Counter()
        self.reused: Counter = Counter()

    def note(self, msg: str) -> None:
        self.notes.append(msg)
        self.log(f"note: {msg}")

    def rid(self, *parts) -> str:
        """A result id: what it is, plus the analysis version and the settings every number depends on."""
        return R.key(*parts, ANALYSIS_VERSION, self.settings.clamp)

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
