"""What every study shares: the settings, the store connection, the engine, notes and bookkeeping.

A study is a function ``run(ctx, ds)`` over one dataset's :class:`DatasetRuns`. It asks
``ctx.engine`` for grids, profiles and embeddings (never loading or preparing a run itself), checks
``ctx.fresh(...)`` before computing a result, and writes result rows with ``ctx.put_grid`` /
``put_profile`` / ``put_study``, which batch them (:meth:`Context.flush`).

Store I/O is per table, not per row: freshness is one query per result table (``result_id →
input_key``, kept current by the writes); rows are held and written in one transaction per batch
(:meth:`Context.flush`: at each study's end, before the write connection is released to worker
processes, before any read of result studies, and when a batch reaches ``FLUSH_ROWS`` rows or
``FLUSH_SECONDS`` of age); grids and profiles this process wrote are read back from memory, and
those of an earlier analyze in one query per dataset. A crash loses at most the unflushed batch
(recomputed next time); the store never holds part of a batch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np

from analysis.storage import results as R
from analysis.metrics.preprocess import CLAMP_MODES
from analysis.registry import get_metric
from analysis.storage.store import connect
from analysis.methods.probes import DEFAULT_PROBES, PROBES
from analysis.methods.temporal import REORDER_K
from analysis.studies.engine import LRU, Engine
from analysis.null import NULL_PERMUTATIONS

#: bump when a result payload changes shape (or its values' arithmetic); cached results of another
#: version are cleared. 6: grids carry ``flags["best_caveat"]``; CKNNA's cosines and LID's
#: distances are summed in a new fixed order (values move in the last bits). 7: scaling fits solve
#: their small systems by Cholesky (fitted exponents move within the search's ~1e-7 resolution).
#: 8: CKA's packed contractions run on 32-row tiles of 2048 columns (values move in the last bits)
#: 9: verdicts you can defend: layer choice stores paired item resamples and its
#: controls; grids carry a shuffled-pairing null; downstream and predictors read best cells as the
#: grid study defines them and name model sides; CiA mAP counts one query per action; the whole
#: analysis computes on one BLAS thread (results no longer depend on --jobs; last bits move)
#: 10: text×text grids and the layer choice of text models reads them; an all-zero
#: layer's RankMe/LID/uniformity are NaN with a note; runs holding NaN are left out, not fatal;
#: ``--knn ann`` searches a principal subspace and flags recall below 0.95; the caption-baseline
#: study and PCA/t-SNE pair maps are new rows; above 16,384 items uniformity and LID are seeded
#: estimates with their standard error in the layer's flag, and above 8,192 items linear CKA sums
#: float32 block products in float64 (each cell within 1e-3 by a computed bound, float64 where not)
#: 11: reorder entries carry paired item-bootstrap ``intervals``, and the reorder
#: negative's lists are exact float64 cosine neighbours, ties to the lower index (were float32/argpartition)
#: 12: every sentence says what its numbers support: CKA centres every layer (debiased
#: and RBF too); downstream p-values are exact permutation tests below 10 models, no interval below
#: 5; scaling fits store ``undetermined`` (a vanished term's exponent is blank, not a number); with
#: item groups the null shuffles whole groups as blocks (``kind``) and ``null_within`` sits beside it;
#: equal best cells go to the deepest layers; layer choices flag identical partner runs (``copies``);
#: the labelled probes (``--labels``) are a new study
#: 13: verdicts are a study of their own (``result_studies``, study ``verdict``): decided and stored by
#: ``analyze``, read by the dashboard and the report
ANALYSIS_VERSION = 13

#: resamples for the scaling study's parameter intervals (each one refits the law): at most this
#: many; the grids study keeps this many of each vision×text best cell's resample scores for them
MAX_BOOT = 50

VISION = ("video", "image")
DEFAULT_METRICS = ("mutual_knn", "cka", "cknna")
#: ``paper``: one caption and each vision model's standard (native) frame count, as the alignment
#: paper correlates; ``largest``: each model's largest budgets
DOWNSTREAM_SETTINGS = ("paper", "largest")
#: settings that change numbers, stored in the store and part of every result's key
STORED = ("k", "metrics", "references", "n_boot", "seed", "clamp", "reorder_k", "downstream_setting", "maps",
          "knn", "n_null", "null_metrics", "null_budgets", "labels", "probes",
          "probe_budgets")
#: neighbour search of the k-NN metrics: exact (float32 candidates, float64 re-rank) or ann (faiss;
#: its measured recall goes into each grid's flags)
KNN_SEARCH = ("exact", "ann")
#: embedding maps ``analyze`` computes on its own per dataset (``--maps``; maps asked for with
#: ``layerscope map`` come on top): each costs about a second, the first of a process 10-40 s of
#: umap-learn's compilation
DEFAULT_MAPS = 24


#: grids whose best cells carry the shuffled null by default: mutual k-NN, the one the verdicts read,
#: whose shuffles only relabel k-NN lists and recount intersections (no measurable cost at N = 1024,
#: 13 × 13 layers). CKNNA's 200 shuffles cost ~5 s a 13 × 13 pair there and CKA's ~30 s (each
#: re-contracts the Grams), against ~4 s for the pair's whole analysis: asked for with --null-metric.
NULL_METRICS = ("mutual_knn",)


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
    #: shuffled pairings behind each best cell's selection-aware null (0: none); see analysis/null.py
    n_null: int = NULL_PERMUTATIONS
    #: the grid metrics whose best cells carry the shuffled null (see :meth:`null_for`)
    null_metrics: tuple = NULL_METRICS
    #: which budgets' grids carry it: ``largest`` (each model pair's largest setting) | ``all``
    null_budgets: str = "largest"
    #: manifest fields probed per layer (``--labels``; nested fields by dotted name): none by default
    labels: tuple = ()
    #: which labelled probes run on them (:data:`analysis.methods.probes.PROBES`)
    probes: tuple = DEFAULT_PROBES
    #: which runs are probed: ``largest`` (the runs the verdicts and the predictor table read: each
    #: model's largest setting and its ``--downstream-setting`` run) | ``all`` (every budget)
    probe_budgets: str = "largest"
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
        if self.knn == "ann":  # checked before the settings are saved: a failed --knn ann is never kept
            try:
                import faiss  # noqa: F401
            except ImportError:
                from analysis.metrics.neighbors import INSTALL_FAISS

                raise ValueError(f"--knn ann: {INSTALL_FAISS}; or pass --knn exact") from None
        if self.n_null < 0:
            raise ValueError(f"--null-perms must be 0 (off) or a positive count, got {self.n_null}")
        if self.maps < 0:
            raise ValueError(f"--maps must be 0 (none) or a positive count, got {self.maps}")
        if self.jobs < 1:
            raise ValueError(f"--jobs must be at least 1, got {self.jobs}")
        unknown = [p for p in self.probes if p not in PROBES]
        if unknown:
            raise ValueError(f"--probes: unknown probe {unknown[0]!r}; probes: {', '.join(PROBES)}")
        if self.probe_budgets not in ("largest", "all"):
            raise ValueError(f"--probe-budgets must be largest or all, got {self.probe_budgets!r}")
        if any(not str(f).strip() for f in self.labels):
            raise ValueError("--labels: an empty field name; give manifest fields, e.g. --labels scene.shape,digit")
        if self.null_budgets not in ("largest", "all"):
            raise ValueError(f"--null-budgets must be largest or all, got {self.null_budgets!r}")
        for m in self.null_metrics:
            if get_metric(m).kind != "pairwise":
                raise ValueError(f"--null-metric takes pairwise metrics; {m!r} is {get_metric(m).kind}")
        for m in self.metrics:
            if get_metric(m).kind != "pairwise":
                raise ValueError(f"analyze grids take pairwise metrics; {m!r} is {get_metric(m).kind}")

    def null_for(self, metric: str) -> tuple[int, str | None]:
        """``(shuffles, why none)`` of ``metric``'s selection-aware null: ``n_null`` for the metrics
        of ``null_metrics``, else none, with the reason stored in the grid's flags."""
        if not self.n_null:
            return 0, None
        if get_metric(metric).name not in self.null_metrics:
            return 0, (f"no shuffled-pairing null for {metric}: only the grids of --null-metric carry one "
                       f"(now {', '.join(self.null_metrics) or 'none'}; each of the {self.n_null} shuffles "
                       "rescores the whole grid)")
        return self.n_null, None

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


@dataclass(frozen=True)
class AnalyzeOptions:
    """What one ``analyze`` is asked for: the CLI's flags, a sweep file's ``[analyze]`` table and the
    Python API (:func:`analysis.studies.analyze_store`) all build one. A field left ``None`` is the
    store's own (from its last analysis), else the :class:`Settings` default.

    ``datasets``: only these (None: all); ``jobs``: worker processes.
    """

    k: int | None = None
    metrics: tuple | None = None
    references: tuple | None = None
    n_boot: int | None = None
    seed: int | None = None
    clamp: str | None = None
    reorder_k: int | None = None
    downstream_setting: str | None = None
    maps: int | None = None
    knn: str | None = None
    n_null: int | None = None
    null_metrics: tuple | None = None
    null_budgets: str | None = None
    labels: tuple | None = None
    probes: tuple | None = None
    probe_budgets: str | None = None
    datasets: tuple | None = None
    jobs: int = 1

    def with_overrides(self, **overrides) -> "AnalyzeOptions":
        """A copy with ``overrides``; an unknown name is a ValueError naming it and the known ones."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"unknown analyze option(s) {unknown}; known: {', '.join(sorted(known))}")
        return dataclasses.replace(self, **overrides)

    def given(self) -> dict:
        """The stored settings this asks for (``None``: the store's own)."""
        return {name: getattr(self, name) for name in STORED}


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
    """Settings + connection + engine + the record of what was computed and reused, per study,
    and the result rows written or read this analysis (batched writes, in-memory read-backs)."""

    #: a batch of result rows is written when it holds this many rows or its first is this old, so a
    #: crash loses a bounded amount of work while a commit is paid per batch, not per row
    FLUSH_ROWS = 500
    FLUSH_SECONDS = 2.0
    #: tables whose rows are kept decoded in memory for later studies' read-backs
    CACHED = ("result_grids", "result_profiles")
    #: bytes of grid arrays kept in memory. A ``result_grids`` row is cached without its grid (the
    #: scaling study reads only the best cell of every pair; the studies after it read the grids of
    #: the largest settings only), and a grid not in this LRU is read back from the store: what is
    #: kept grows ~2.5 KB a grid whatever its size (the row, its input key; ``bench/analyze_memory.py``)
    #: instead of holding every grid of a papers-scale analysis (~450k)
    GRID_BYTES = 64 << 20

    def __init__(self, store: str, con, settings: Settings, *, log=print, progress: bool = False, executor=None):
        self.store = str(store)
        self.con = con
        self.settings = settings
        self.engine = Engine(con, clamp=settings.clamp)
        self.log = log
        self.progress = progress
        #: where independent tasks run instead of local processes (:mod:`analysis.studies.parallel`)
        self.executor = executor
        self.notes: list[str] = []
        self.computed: Counter = Counter()
        self.reused: Counter = Counter()
        self._pending: dict = {t: {} for t in R.RESULT_TABLES}  # table -> {result_id: row as stored}
        self._pending_since: float | None = None
        self._keys: dict = {}  # table -> {result_id: input_key}: the store's, plus what is pending
        self._rows: dict = {t: {} for t in self.CACHED}  # table -> {result_id: decoded row (grids: no grid)}
        self._grids = LRU(self.GRID_BYTES)  # result_id -> the row's read-only grid
        self._loaded: set = set()  # (table, dataset) whose stored rows are in ``_rows``
        #: vision×text grid result id -> the first ``MAX_BOOT`` bootstrap resample scores of
        #: its best cell computed in this analysis (``BootstrapCI.samples``), so the scaling intervals
        #: reuse them instead of rescoring the same resamples (same seed, so the same draws)
        self.boot_samples: dict = {}
        #: table -> result ids this analysis computed or reused (every result passes :meth:`fresh`):
        #: the rows of the current analysis, recorded at its end (:func:`analysis.storage.results.record_current`)
        self.touched: dict = {t: set() for t in R.RESULT_TABLES}

    def note(self, msg: str) -> None:
        self.notes.append(msg)
        self.log(f"note: {msg}")

    def rid(self, *parts) -> str:
        """A result id: what it is, plus the analysis version and the settings every number depends on."""
        return R.key(*parts, ANALYSIS_VERSION, self.settings.clamp)

    def input_keys(self, table: str) -> dict:
        """``{result_id: input_key}`` of a result table: read once (one query), then kept current
        by this context's writes."""
        if table not in self._keys:
            self._keys[table] = R.input_keys(self.con, table)
        return self._keys[table]

    def fresh(self, study: str, table: str, result_id: str, input_key: str) -> bool:
        """Whether a result must be (re)computed; counts it as computed or reused under ``study``."""
        self.touched[table].add(result_id)
        if self.input_keys(table).get(result_id) == input_key:
            self.reused[study] += 1
            return False
        self.computed[study] += 1
        return True

    # ------------------------------------------------------------------ batched writes
    def put_grid(self, **row) -> None:
        self._put("result_grids", R.grid_row(**row))

    def put_profile(self, **row) -> None:
        self._put("result_profiles", R.profile_row(**row))

    def put_study(self, **row) -> None:
        self._put("result_studies", R.study_row(**row))

    def _put(self, table: str, row: dict) -> None:
        row.setdefault("computed", R.now())
        self.input_keys(table)[row["result_id"]] = row["input_key"]
        self._pending[table][row["result_id"]] = row
        if table in self._rows:
            self._cache(table, R.decode(table, row))
        if self._pending_since is None:
            self._pending_since = time.monotonic()
        if (sum(map(len, self._pending.values())) >= self.FLUSH_ROWS
                or time.monotonic() - self._pending_since >= self.FLUSH_SECONDS):
            self.flush()

    def flush(self) -> None:
        """Write the pending rows: every table's in one transaction (all or nothing)."""
        if any(self._pending.values()):
            R.replace_rows(self.con, {t: list(rows.values()) for t, rows in self._pending.items()})
        for rows in self._pending.values():
            rows.clear()
        self._pending_since = None

    # ------------------------------------------------------------------ read-backs
    def _cache(self, table: str, row: dict) -> None:
        """Keep a decoded row (a grid row's array goes to the grid LRU, the rest to the row cache)."""
        grid = row.pop("grid", None) if table == "result_grids" else None
        if grid is not None:
            self._keep_grid(row["result_id"], grid)
        self._rows[table][row["result_id"]] = _frozen(row)

    def _keep_grid(self, result_id: str, grid: np.ndarray) -> None:
        """Put a grid, made read-only (every reader shares it), in the grid LRU."""
        grid.flags.writeable = False
        self._grids.put(result_id, grid, grid.nbytes)

    def _load(self, table: str, dataset: str) -> None:
        """The dataset's stored rows of a cached table, in one query (rows written by this context
        stay as written; grid rows are read without their grids)."""
        if (table, dataset) in self._loaded:
            return
        cache = self._rows[table]
        cols = "*" if table != "result_grids" else "* EXCLUDE (grid_values)"
        for r in R.rows(self.con, f"SELECT {cols} FROM {table} WHERE dataset = ?", [dataset]):
            if r["result_id"] not in cache:
                self._cache(table, R.decode(table, r))
        self._loaded.add((table, dataset))

    def grid_of(self, row: dict) -> np.ndarray:
        """The read-only ``(n_rows, n_cols)`` grid of a cached ``result_grids`` row: from memory
        when recently written or read, else read back from the store (pending rows written first)."""
        grid = self._grids.get(row["result_id"])
        if grid is None:
            self.flush()
            got = self.con.execute("SELECT grid_values FROM result_grids WHERE result_id = ?",
                                   [row["result_id"]]).fetchone()
            if got is None:
                raise KeyError(f"result_grids holds no row {row['result_id']!r}")
            grid = np.asarray(got[0], dtype=float).reshape(row["n_rows"], row["n_cols"])
            self._keep_grid(row["result_id"], grid)
        return grid

    def result_row(self, table: str, dataset: str, result_id: str, *, grid: bool = True) -> dict | None:
        """One decoded row of ``result_grids`` / ``result_profiles`` (as :func:`analysis.storage.results.read_grids`
        gives it; arrays read-only, shared), or None: from memory when this context wrote it or
        loaded its dataset, else from the dataset's rows read once. ``grid=False``: a grid row
        without its ``grid`` (no read of the grid when it is not in memory)."""
        cache = self._rows[table]
        if result_id not in cache:
            self._load(table, dataset)
        row = cache.get(result_id)
        if row is None or table != "result_grids" or not grid:
            return row
        return {**row, "grid": self.grid_of(row)}

    def result_rows(self, table: str, dataset: str, **where) -> list[dict]:
        """The dataset's decoded rows of ``result_grids`` / ``result_profiles`` whose columns equal
        ``where``, in the readers' order (:func:`analysis.storage.results.read_grids`). Grid rows come
        without their ``grid``: :meth:`grid_of` gives it for the rows a study uses."""
        unknown = set(where) - R.COLUMNS[table]
        if unknown:
            raise ValueError(f"{table} has no column(s) {sorted(unknown)}")
        self._load(table, dataset)
        out = [r for r in self._rows[table].values()
               if r["dataset"] == dataset and all(r[c] == v for c, v in where.items())]
        return sorted(out, key=lambda r: R.order_key(table, r))

    def read_studies(self, **where) -> list[dict]:
        """:func:`analysis.storage.results.read_studies` after writing what is pending."""
        self.flush()
        return R.read_studies(self.con, **where)

    def profile_rid(self, run_id: str, metric: str) -> str:
        """The result id of a run's profile under these settings (the profiles study's key)."""
        return self.rid("profile", run_id, metric)

    def current_profiles(self, dataset: str, run_id: str, metrics) -> list[dict]:
        """The run's stored profile rows of ``metrics`` computed with these settings (a store
        analysed before with another ``--clamp`` holds rows of that clamp too: never mixed in)."""
        rows = (self.result_row("result_profiles", dataset, self.profile_rid(run_id, m)) for m in sorted(metrics))
        return [r for r in rows if r is not None]

    def stored_profile(self, run_id: str, metric: str, dataset: str | None = None) -> np.ndarray:
        """A run's per-layer profile under these settings from the result table (the profiles study
        runs first), else computed. With ``dataset``, from memory / one read of the dataset's rows."""
        rid = self.profile_rid(run_id, metric)
        if dataset is not None:
            row = self.result_row("result_profiles", dataset, rid)
        else:
            self.flush()
            row = next(iter(R.read_profiles(self.con, result_id=rid)), None)
        if row is not None:
            return row["layer_values"]
        return self.engine.profile(run_id, metric)

    @contextlib.contextmanager
    def released(self):
        """Close the write connection while worker processes open the store read-only (DuckDB
        lets one process write or many read, not both), then reopen it for writing. Pending rows are
        written first: nothing is left uncommitted across the release."""
        self.flush()
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


def _frozen(row: dict) -> dict:
    """A cached row's arrays made read-only: every reader shares them."""
    for v in row.values():
        if isinstance(v, np.ndarray):
            v.flags.writeable = False
    return row


def group_runs(rows: list[dict]) -> dict[str, list[dict]]:
    by_dataset = defaultdict(list)
    for r in rows:
        if r["status"] == "done":
            by_dataset[r["dataset"]].append(r)
    return by_dataset
