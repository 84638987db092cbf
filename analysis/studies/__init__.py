"""``layerscope analyze``: every study over everything in the store, cached as result tables.

One module per study, run in this order per dataset (payloads are JSON in ``result_studies`` unless
said otherwise):

- :mod:`.profiles` (``result_profiles``): RankMe, LID (MLE), uniformity per layer for every run.
- :mod:`.grids` (``result_grids``): every vision×text pair of done runs at every (n_f, n_c), every
  vision×vision pair at each shared n_f and every text×text pair of different models at each shared
  n_c (``pair_kind``); best cell and a bootstrap interval for it.
- :mod:`.scaling`: per vision×text model pair and metric, the best-cell score over the (n_f, n_c)
  grid, the saturating law's fit, held-out errors, parameter intervals and the other forms.
- :mod:`.model_map`: best-layer mutual k-NN between every two models, clustering, 2-D map.
- :mod:`.downstream`: correlations between label-free scores and imported downstream results.
- :mod:`.predictors`: per-layer downstream results against every per-layer label-free signal
  (profiles, alignment row maxima, same-space values): Spearman ρ across layers and pooled, and the
  layer each signal picks vs the truly best, the last and the ``default`` layer.
- :mod:`.temporal`: Test of Time at k=1,2,3 with first-neighbour types, reorder negatives, arrow of
  time, chiral retrieval where models share a space.
- :mod:`.caption_baseline`: each text model's run on the long original captions against every vision
  run (DR Fig. 8's baseline beside the caption sweep).
- :mod:`.layer_choice`: per model, the layer each label-free metric recommends and their agreement.
- :mod:`.verdicts`: per model, the layer to use (a typed verdict), decided from the layer choice's
  curves and resamples and the grids' intervals and nulls; the dashboard and the report read it.

Every study asks one :class:`~analysis.studies.engine.Engine` for grids, profiles and embeddings, so
each run's layers are prepared once and scored against every partner (cost grows with runs, not
pairs). Results are keyed by their inputs: unchanged ones are reused, changed ones recomputed.
"""

from __future__ import annotations

import dataclasses
import json

from analysis.storage import last_analysis, results as R
from analysis.storage.schema import create_all
from analysis.sides import split_side
from analysis.storage.integrity import scan_store
from analysis.signals import Terminated, sigterm_raises
from analysis.storage.store import StoreError, check_store_path, connect, is_interrupt, latest_per_setting, transaction
from analysis.studies import (
    caption_baseline, downstream, embedding_map, grids, layer_choice, model_map, predictors, probes, profiles,
    same_space, scaling, temporal, verdicts,
)
from analysis.studies.budget import StoreShape, available_memory, memory_problems
from analysis.studies.context import ANALYSIS_VERSION, AnalyzeOptions, STORED, Context, DatasetRuns, Settings, group_runs
from analysis.studies.parallel import default_jobs
from analysis.metrics.base import one_blas_thread

__all__ = ["ANALYSIS_VERSION", "AnalyzeOptions", "Settings", "analyze_store", "stored_settings", "default_jobs"]

RESULT_TABLES = ("result_grids", "result_profiles", "result_studies")
#: the settings a later ``analyze`` (and the dashboard's actions) reuse when given none
SETTINGS_KEY = "analysis_settings"


def drop_stale_results(con, log) -> None:
    """Result tables are caches: when their payloads changed shape (a new ANALYSIS_VERSION), clear
    them rather than mix two formats. Embeddings and downstream results are never touched."""
    row = con.execute("SELECT value FROM meta WHERE key = 'analysis_version'").fetchall()
    if row and row[0][0] == str(ANALYSIS_VERSION):
        return
    with transaction(con):
        for table in RESULT_TABLES:
            con.execute(f"DELETE FROM {table}")
        R.clear_current(con)
        last_analysis.clear(con)  # the analyses on record list rows that are gone
        _put_meta(con, "analysis_version", str(ANALYSIS_VERSION))
    if row:
        log(f"note: cached results were from analysis version {row[0][0]}; recomputing all (now {ANALYSIS_VERSION})")


def _put_meta(con, key: str, value: str) -> None:
    con.execute("INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value", [key, value])


def stored_settings(con) -> dict:
    """The analysis settings the store was last analysed with (``{}`` if never)."""
    try:
        row = con.execute("SELECT value FROM meta WHERE key = ?", [SETTINGS_KEY]).fetchall()
    except Exception:  # a store without a meta table has never been analysed
        return {}
    return json.loads(row[0][0]) if row else {}


def resolve_settings(con, given: dict) -> Settings:
    """Given settings over the store's saved ones over the defaults."""
    saved = stored_settings(con)
    s = Settings()
    for name in STORED:
        value = given.get(name)
        value = value if value is not None else saved.get(name)
        if value is None:
            continue
        if name in ("metrics", "references", "null_metrics", "labels", "probes"):
            value = tuple(value)
        elif name in ("k", "n_boot", "seed", "reorder_k", "maps", "n_null"):
            value = int(value)
        setattr(s, name, value)
    return s


def _store_shape(con) -> StoreShape | None:
    """The largest N, L and d among the store's done runs (None: no done run)."""
    n, layers, dim = con.execute("SELECT max(n_items), max(n_layers), max(dim) FROM runs WHERE status = 'done'").fetchone()
    return None if n is None else StoreShape(int(n), int(layers or 1), int(dim or 1))


def _saved_problem(name: str, s: Settings, shape: StoreShape | None, available: int | None,
                   workers: int = 1) -> str | None:
    """Why the saved value of setting ``name`` (now on ``s``) cannot work, or None."""
    try:
        Settings(**{name: getattr(s, name)}).check()
    except (ValueError, KeyError, TypeError) as exc:
        return str(exc).strip("'\"")
    return None if shape is None else memory_problems(s, shape, available, workers=workers).get(name)


def _checked(con, given: dict, log, *, workers: int = 1) -> Settings:
    """The settings this analysis uses (:func:`resolve_settings`), every one checked against the store's data
    and the memory available before anything is computed or saved. A value given now that cannot
    work is a ValueError naming its flag, its cost and the largest value that fits; a saved one (an
    older version kept values that fail) falls back to the default with a one-line note."""
    s = resolve_settings(con, given)
    saved = stored_settings(con)
    shape, available = _store_shape(con), available_memory()
    default = Settings()
    for name in STORED:
        if given.get(name) is not None or name not in saved:
            continue
        why = _saved_problem(name, s, shape, available, workers)
        if why:
            setattr(s, name, getattr(default, name))
            log(f"note: the store's saved setting {name} = {saved[name]!r} cannot work ({why}); "
                f"using the default {getattr(default, name)!r}")
    s.check()
    problems = memory_problems(s, shape, available, workers=workers) if shape is not None else {}
    if problems:
        raise ValueError(next(iter(problems.values())))
    return s


def _non_finite_note(r: dict, n_bad: int, store) -> str:
    # a done run is skipped by precompute, so rerunning it changes nothing: it must be removed first
    return (f"run {r['run_id']} ({r['model']} on {r['dataset']}) holds NaN or inf in {n_bad} of {r['n_items']} "
            f"items; left out. Remove it (`layerscope runs rm --store {store} {r['run_id']}`) and run its "
            "precompute command again (a half-precision model that overflows: --dtype float32)")


def plan_datasets(con, datasets, ctx, non_finite: dict[str, int] | None = None) -> dict[str, DatasetRuns]:
    """The done runs to analyse per dataset. Runs not done, superseded, or holding NaN/inf
    (``non_finite``: ``{run_id: items}`` from :func:`analysis.storage.integrity.scan_store`) are left
    out with a note; when that leaves nothing, a :class:`StoreError` naming the runs left out."""
    from analysis.storage.results import rows as fetch

    non_finite = non_finite or {}
    rows = fetch(con, "SELECT * FROM runs ORDER BY dataset, model, run_id")
    if not rows:
        raise StoreError("the store has no runs yet; run `layerscope precompute` or `layerscope demo` first")
    for r in rows:
        if r["status"] != "done":
            ctx.note(f"run {r['run_id']} ({r['model']} on {r['dataset']}) is not done "
                     f"({r['n_done']}/{r['n_items']}); left out — rerun its precompute command to finish it")
    damaged = [r for r in rows if r["status"] == "done" and r["run_id"] in non_finite]
    if damaged and all(r["status"] != "done" or r["run_id"] in non_finite for r in rows):
        raise StoreError("nothing could be analysed: " + "; ".join(
            _non_finite_note(r, non_finite[r["run_id"]], ctx.store) for r in damaged))
    for r in damaged:
        ctx.note(_non_finite_note(r, non_finite[r["run_id"]], ctx.store))
    done, superseded = latest_per_setting([r for r in rows if r["status"] == "done" and r["run_id"] not in non_finite])
    for r in superseded:
        ctx.note(f"run {r['run_id']} ({r['model']} on {r['dataset']}, n_f={r['n_frames']}, n_c={r['n_captions']}) "
                 "is superseded by a newer run of the same setting (another configuration); the newer one is used")
    by_dataset = group_runs(done)
    if datasets:
        missing = set(datasets) - set(by_dataset)
        if missing:
            raise StoreError(f"no done runs for dataset(s) {sorted(missing)}; datasets: {sorted(by_dataset)}")
    return {ds: DatasetRuns(ds, runs, runs[0]["n_items"]) for ds, runs in by_dataset.items()
            if not datasets or ds in datasets}


#: the studies of one dataset, in the order :func:`run_dataset` runs them (its progress counter counts these)
STUDY_ORDER = ("profiles", "grids", "probes", "scaling", "model_map", "downstream", "same_space", "predictors", "temporal",
               "caption_baseline", "layer_choice", "verdicts", "embedding_map")


def progress_line(done: int, total: int, what: str) -> str:
    """The analyze log's progress counter, ``"[done/total] what"`` (:func:`analysis.jobs.parse_progress`
    reads it back for a background job's percentage and ETA)."""
    return f"[{done}/{total}] {what}"


def run_dataset(ctx: Context, d: DatasetRuns, position: tuple[int, int] = (0, 1),
                progress: Progress | None = None) -> None:
    """Every study of one dataset, in dependency order (later studies read earlier results).
    ``position``: ``(index, count)`` of this dataset among those analysed, for the progress counter
    (one step per study: ``index · len(STUDY_ORDER) + study``, of ``count · len(STUDY_ORDER)``).
    ``progress``: records in the store which studies have finished (:class:`Progress`)."""
    base, total = position[0] * len(STUDY_ORDER), position[1] * len(STUDY_ORDER)

    def finished(i: int) -> None:
        # each study's rows are written in batches, the last here at its end: a crash loses at most
        # the current study's unwritten rows, never leaves part of one, and every study finished
        # before it is recorded as such
        ctx.flush()
        if progress is not None:
            progress.study_done(d.name, STUDY_ORDER[i - 1])
        ctx.log(progress_line(base + i, total, f"{d.name}: finished {STUDY_ORDER[i - 1]}"))  # the name ends the line

    if d.n_items <= ctx.settings.k:
        ctx.note(f"dataset {d.name!r} has {d.n_items} items, too few for k={ctx.settings.k}: "
                 "pass a smaller --k; skipped")
        if progress is not None:
            progress.skipped(d.name)
        return
    ctx.log(f"analyze {d.name}: {len(d.runs)} run(s)")
    if progress is not None:
        progress.begin(d.name)
    profiles.run(ctx, d)
    finished(1)
    pairs = grids.run(ctx, d)
    finished(2)
    probes.run(ctx, d)  # while the grids' k-NN lists are still cached: the k-NN probe reads them
    finished(3)
    scaling.run(ctx, d, pairs)
    finished(4)
    for i, study in enumerate((model_map, downstream, same_space, predictors, temporal, caption_baseline,
                               layer_choice, verdicts, embedding_map), start=5):
        # same_space before predictors, which read its per-layer values; verdicts after layer_choice,
        # whose curves and resamples they decide from
        study.run(ctx, d)
        finished(i)


class Progress:
    """Where the analysis stands, recorded in the store as it goes
    (:mod:`analysis.storage.last_analysis`): the study under way, the studies finished, and with
    them the rows the readers show. A dataset without an earlier analysis shows each study's rows as
    the study finishes; one with an earlier analysis keeps showing that one until every study of the
    dataset has finished, then shows the new one whole."""

    def __init__(self, ctx: Context, plan, settings: dict):
        self.ctx = ctx
        before = last_analysis.read_all(ctx.con)
        # a dataset its own last analysis left unfinished (whichever analyses of other datasets ran
        # since) shows a part of it: not an analysis to keep showing whole, so its list is emptied and
        # refilled as this one's studies finish
        partial = {ds for ds, run in last_analysis.by_dataset(before).items() if run.unfinished(ds)}
        earlier = last_analysis.listed_datasets(ctx.con) - partial
        self.run = last_analysis.LastAnalysis(
            state="running", started=last_analysis.now(), datasets=tuple(plan), settings=settings,
            kept=tuple(ds for ds in plan if ds in earlier))
        # the analyses still the last of a dataset this one leaves alone: their states stay on record
        self.earlier = last_analysis.still_last(before, plan)
        self._seen = {t: set(ids) for t, ids in ctx.touched.items()}  # the rows listed, or not to list
        self._write([ds for ds in plan if ds in partial], replace=True)

    def _write(self, listed=(), *, replace: bool = False) -> None:
        """Write the record; with ``listed`` datasets, also their current rows: the rows touched since
        the last write (a study's own) added to their lists, or with ``replace`` their lists replaced
        by every row of them touched."""
        touched = self.ctx.touched
        rows = touched if replace else {t: touched[t] - self._seen[t] for t in touched}
        last_analysis.record(self.ctx.con, self.run, earlier=self.earlier, rows=rows, datasets=listed, replace=replace)
        if listed:
            self._seen = {t: set(ids) for t, ids in touched.items()}

    def begin(self, dataset: str) -> None:
        self.run = dataclasses.replace(self.run, dataset=dataset, study=STUDY_ORDER[0])
        self._write()

    def study_done(self, dataset: str, study: str) -> None:
        done = [*self.run.finished.get(dataset, []), study]
        whole = len(done) == len(STUDY_ORDER)
        self.run = dataclasses.replace(
            self.run, finished={**self.run.finished, dataset: done},
            study=None if whole else STUDY_ORDER[len(done)],
            complete=self.run.complete + ((dataset,) if whole else ()))
        if dataset not in self.run.kept:
            self._write([dataset])
        elif whole:  # the earlier analysis gives way to this one, whole
            self._write([dataset], replace=True)
        else:
            self._write()

    def skipped(self, dataset: str) -> None:
        """A dataset too small to analyse: its list is emptied (its earlier rows were of another k)."""
        self.run = dataclasses.replace(self.run, dataset=dataset, study=None, complete=self.run.complete + (dataset,))
        self._write([dataset], replace=True)

    def end(self) -> None:
        self.run = dataclasses.replace(self.run, state="finished", ended=last_analysis.now(), dataset=None, study=None)
        self._write()

    def stopped(self, exc: BaseException, *, terminated: bool = False) -> None:
        """Record how the analysis ended early: ``terminated`` (SIGTERM, ``terminated``: whatever
        ``exc`` it surfaced as, DuckDB's interrupted query among them), ``interrupted`` (Ctrl-C) or
        ``failed`` with the error. Best effort: a store that cannot be written any more keeps the
        ``running`` record, which says as much, and the original error goes on."""
        state = ("terminated" if terminated or isinstance(exc, Terminated)
                 else "interrupted" if is_interrupt(exc) else "failed")
        self.run = dataclasses.replace(
            self.run, state=state, ended=last_analysis.now(),
            error=(" ".join(str(exc).split()) or type(exc).__name__)[:300] if state == "failed" else None)
        try:
            self._write()
        except Exception:  # noqa: BLE001 - the error that stopped the analysis is the one to report
            pass


def analyze_store(store, options: AnalyzeOptions | None = None, *, progress: bool = False, log=print,
                  executor=None, **overrides) -> dict:
    """Compute every study the store supports; idempotent (unchanged inputs are reused).

    ``options`` (:class:`AnalyzeOptions`, with keyword ``overrides`` of its fields on top): settings
    left ``None`` are the store's own (from its last analysis), else the defaults (k=10,
    mutual_knn/cka/cknna, every text model as reference, 200 resamples, seed 0, clamp off, reorder
    k=5, downstream setting ``paper``, 200 shuffled pairings per best cell); the settings used are saved for the next run. ``jobs``
    processes share independent work (each process, this one included, computes on one BLAS thread,
    so results are the same bits whatever ``jobs``); ``executor`` runs it elsewhere instead (see
    :mod:`analysis.studies.parallel`; ``layerscope sweep run --ray`` passes a Ray one).

    Returns ``{"computed", "skipped", "notes", "computed_by_study", "reused_by_study",
    "preparations", "layer_preparations", "grids_scored", "settings"}``.

    An analysis that stops early records how (:mod:`analysis.storage.last_analysis`) and raises on:
    Ctrl-C as ``KeyboardInterrupt`` (or DuckDB's interrupted query), SIGTERM, in the main thread, as
    :class:`~analysis.signals.Terminated` (:func:`~analysis.signals.sigterm_raises`; the
    command line exits with 143), an error as itself. Every study finished before keeps its rows.
    """
    options = (options or AnalyzeOptions()).with_overrides(**overrides)
    with sigterm_raises() as sigterm:
        return _analyze_store(store, options, progress, log, executor, sigterm)


def _analyze_store(store, options: AnalyzeOptions, progress: bool, log, executor, sigterm) -> dict:
    """:func:`analyze_store`'s work, with SIGTERM raising (``sigterm``: whether it came)."""
    datasets = options.datasets
    check_store_path(store, must_exist=True)  # a mistyped path must not become a new, empty store
    con = connect(store, read_only=False)
    ctx = None
    try:
        # read everything before the first write: a damaged block is refused with the file unchanged
        non_finite = scan_store(con)
        create_all(con, str(store))
        s = _checked(con, options.given(), log, workers=int(options.jobs))
        s.jobs = int(options.jobs)
        s.check()
        known = {r[0] for r in con.execute("SELECT model FROM models").fetchall()}
        # a reference may name a side ("clip [text]", "clip [image]"; analysis.sides)
        bad_refs = [r for r in s.references if split_side(r)[0] not in known]
        if bad_refs and options.references is None:  # saved, and the model since removed or renamed
            s.references = tuple(r for r in s.references if r not in bad_refs)
            log(f"note: the store's saved references name model(s) {bad_refs} it no longer holds; analysing "
                f"with {list(s.references) or 'every text model'} (pass --reference to choose)")
            bad_refs = []
        if bad_refs:
            raise StoreError(f"unknown --reference model(s) {bad_refs}; models: {sorted(known)} (a side may "
                             "follow the name: 'clip [text]', 'clip [image]')")
        drop_stale_results(con, log)
        ctx = Context(store, con, s, log=log, progress=progress, executor=executor)
        plan = plan_datasets(con, datasets, ctx, non_finite)
        if s.labels:  # a bad label field is refused before any setting is saved (a saved field that
            # the datasets analysed now lack is noted per dataset by the study instead)
            try:
                found = probes.check_labels(con, list(plan), s.labels, require_all=options.labels is not None)
            except ValueError as exc:
                raise StoreError(str(exc)) from None
            for field in s.labels:  # one note per field that some datasets lack (not one per dataset)
                lacking = [ds for ds in plan if field not in found.get(ds, {})]
                if lacking:
                    having = [ds for ds in plan if ds not in lacking]
                    ctx.note(f"--labels {field}: probed on {', '.join(having) or 'no dataset'}; not a field of "
                             f"{', '.join(lacking)}")
        saved = s.stored()
        progress = Progress(ctx, plan, saved)
        try:
            # every number on one BLAS thread, in this process as in every worker: OpenBLAS's products
            # (syrk for X Xᵀ, some gemm shapes) round differently on 2 threads than on 1, so a serial
            # analysis and a --jobs one would store different last bits (and a status could flip); the
            # OpenMP pools too (faiss's searches, scikit-learn's), which on one thread give the same results
            with one_blas_thread(openmp=True):
                for j, d in enumerate(plan.values()):
                    run_dataset(ctx, d, (j, len(plan)), progress)
                    if j == 0:  # saved once they have configured a whole dataset's studies: a failed one is never kept
                        _put_meta(ctx.con, SETTINGS_KEY, json.dumps(saved))
            if not plan:
                _put_meta(ctx.con, SETTINGS_KEY, json.dumps(saved))
            ctx.flush()  # (each study flushes at its end; nothing may stay pending past the close below)
            # each dataset's rows became its current rows as it finished (the dashboard and reports
            # read those only); the record now says the analysis finished
            progress.end()
        except BaseException as exc:
            progress.stopped(exc, terminated=sigterm.received)
            raise
        out = ctx.summary()
        out["settings"] = saved
        return out
    finally:
        (ctx.con if ctx is not None else con).close()
