"""What a store holds: overview, model labels, runs' provenance, a dataset's context, study payloads."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.storage import last_analysis, results as R
from analysis.storage.schema import TABLE_NAMES, stored_version
from analysis.studies import STUDY_ORDER, resolve_settings
from analysis.studies.context import ANALYSIS_VERSION
from analysis.views.text import fmt_number


def is_layerscope_store(con) -> bool:
    try:
        return stored_version(con) is not None
    except Exception:
        return False


def stale_results(con, store_path: str = "STORE") -> str | None:
    """Why the store's result tables must not be read, as one sentence naming ``store_path`` and the
    command that recomputes them; ``None`` when they may be (written by this :data:`ANALYSIS_VERSION`,
    or there are none).

    The result tables are ``layerscope analyze``'s caches and their payloads change shape with
    ``ANALYSIS_VERSION``; ``analyze`` recomputes them all when the store's ``meta.analysis_version``
    differs (:func:`analysis.studies.drop_stale_results`). So a reader refuses rows of another version
    (or of one that recorded none) instead of interpreting them, and needs no branch for old payloads.
    Embeddings are never part of this: ``analyze`` keeps them."""
    if not is_layerscope_store(con):
        return None
    row = con.execute("SELECT value FROM meta WHERE key = 'analysis_version'").fetchall()
    stored = row[0][0] if row else None
    if stored == str(ANALYSIS_VERSION):
        return None
    if not any(has_table(con, t) and con.execute(f"SELECT EXISTS (SELECT 1 FROM {t})").fetchall()[0][0]
               for t in R.RESULT_TABLES):
        return None  # nothing to misread: the pages say "no results yet" and name the command
    command = f"layerscope analyze --store {store_path}"
    if stored is None:
        by = "an analysis version older than any LayerScope that records it"
    elif stored.isdigit() and int(stored) > ANALYSIS_VERSION:
        return (f"The results in {store_path} were computed by a newer LayerScope (analysis version {stored}); "
                f"this one reads version {ANALYSIS_VERSION}. Use that newer LayerScope, or run `{command}` to "
                "recompute them with this one (embeddings are kept).")
    else:
        by = f"analysis version {stored}"
    return (f"The results in {store_path} were computed by {by}; this LayerScope reads version "
            f"{ANALYSIS_VERSION}. Run `{command}` to recompute them (embeddings are kept).")


@dataclass(frozen=True)
class Unfinished:
    """What the readers say about ``layerscope analyze`` runs that did not finish."""

    sentence: str  #: how each ended and where, which results are shown, and how to finish it (``resume``)
    resume: str  #: how to finish it, one sentence (or one per analysis, when they need other settings)
    command: str | None  #: the command that finishes it (None: it needs the settings ``resume`` names)
    #: the sentence's subject, for a list of what is missing ("the last `layerscope analyze` did not finish")
    summary: str = "the last `layerscope analyze` did not finish"
    #: the datasets whose last analysis did not finish them (empty: not known, a store without the record)
    datasets: tuple = ()


def unfinished_analysis(con, store_path: str = "STORE") -> Unfinished | None:
    """What every reader of results says first when a dataset's last ``layerscope analyze`` did not
    finish it: per such analysis (:mod:`analysis.storage.last_analysis`: each dataset's state is that of
    the last analysis of it, so an unfinished analysis of dataset B stays said after a finished one of
    A), how it ended and where, which results are shown (per dataset: the studies it completed, the
    dataset's earlier analysis, or none), and the command that finishes it. ``None`` when every
    dataset's last analysis finished it, or nothing says one did not.

    Only recorded facts are said: an analysis killed outright (SIGKILL, out of memory) recorded no end,
    so it is said to have stopped "or to be still running"."""
    if not is_layerscope_store(con):
        return None
    command = f"layerscope analyze --store {store_path}"
    runs = last_analysis.read_all(con)
    if not runs:
        return _unlisted_results(con, command)
    last = last_analysis.by_dataset(runs)
    parts, resumes, sames, left, firsts, named = [], [], [], [], [], []
    for i, run in enumerate(runs):
        own = [ds for ds in run.datasets if last[ds] is run]  # the datasets it is still the last analysis of
        unfinished = [ds for ds in own if run.unfinished(ds)]
        if not unfinished:  # (one that stopped after its last study listed every result complete)
            continue
        left += unfinished
        firsts.append(i)
        if i == 0:
            who = f"The last `layerscope analyze` of this store (started {run.started} UTC)"
        else:
            who = (f"An earlier `layerscope analyze` of this store (started {run.started} UTC), the last to "
                   f"analyse {_datasets_words(own)},")
        shown = [_shown_words(run, ds, named=len(own) > 1) for ds in own]
        resume, same = _resume_words(con, run, command)
        parts.append([f"{who} did not finish: {_ended_words(run, still=i == 0)}.", *[s for s in shown if s]])
        resumes.append(resume)
        named.append(_datasets_words(unfinished))
        sames.append(same)
    if not parts:
        return None
    if all(sames):  # the saved settings finish every one of them: one command
        resume = (resumes[0] if len(parts) == 1 else
                  f"Run `{command}` to finish them: it reuses every result already stored and computes the rest.")
        sentence = " ".join([*(s for p in parts for s in p), resume])
    else:  # each says how it is finished
        if len(parts) > 1:
            resumes = [f"For {n}: {r[0].lower()}{r[1:]}" for n, r in zip(named, resumes)]
        resume = " ".join(resumes)
        sentence = " ".join(s for p, r in zip(parts, resumes) for s in [*p, r])
    if firsts == [0]:
        summary = "the last `layerscope analyze` did not finish"
    else:
        summary = (f"the last `layerscope analyze` of {'each of ' if len(left) > 1 else ''}{_datasets_words(left)} "
                   "did not finish")
    return Unfinished(sentence, resume, command if all(sames) else None, summary, tuple(left))


def _datasets_words(datasets) -> str:
    return f"dataset{'s' if len(datasets) > 1 else ''} {', '.join(datasets)}"


def _ended_words(run, *, still: bool) -> str:
    """How ``run`` ended and where: ``"it was interrupted during scaling of dataset toy at ... UTC"``
    (``still``: it is the last analysis, so one that recorded no end may still be running; an earlier
    one cannot be, a later one has written the store since)."""
    where = (f"{_study_words(run.study)} of dataset {run.dataset}" if run.study and run.dataset
             else f"dataset {run.dataset}" if run.dataset else "its start")
    if run.state == "interrupted":
        return f"it was interrupted during {where} at {run.ended} UTC"
    if run.state == "terminated":
        return (f"it was cancelled (SIGTERM: the dashboard's Cancel button, `kill` or a job scheduler) during "
                f"{where} at {run.ended} UTC")
    if run.state == "failed":
        return f"it failed during {where} at {run.ended} UTC ({run.error})"
    return (f"it stopped during {where} without recording an end (killed outright or out of memory)"
            + (", unless it is still running" if still else ""))


def _study_words(study: str) -> str:
    return study.replace("_", " ")


def _shown_words(run, dataset: str, *, named: bool) -> str:
    """One sentence on which of ``dataset``'s results the readers show after ``run`` (``named``: the
    sentence names the dataset; a single dataset's complete analysis needs none)."""
    shown = run.shown(dataset)
    if shown == "complete":
        body = "complete." if named else ""
    elif shown == "earlier":
        body = ("the results shown are its previous complete analysis's; this one replaces them when it has "
                "finished every study.")
    elif shown == "none":
        body = f"no results are shown: it completed no study{' of it' if named else ''}."
    else:
        done = run.finished[dataset]
        rest = [s for s in STUDY_ORDER if s not in done]
        body = (f"the results shown are those of the studies it completed ({', '.join(map(_study_words, done))}); "
                f"the {len(rest)} others have none yet ({', '.join(map(_study_words, rest))}).")
    if not body:
        return ""
    return f"Dataset {dataset}: {body}" if named else body[0].upper() + body[1:]


def _resume_words(con, run, command: str) -> tuple[str, bool]:
    """How to finish ``run``, and whether ``command`` alone does (it analyses with the store's saved
    settings: the same as ``run``'s, or the sentence names the settings to give again)."""
    plain = resolve_settings(con, {}).stored()
    differ = {k: v for k, v in run.settings.items() if k in plain and plain[k] != v}
    if not differ:
        return f"Run `{command}` again to finish it: it reuses every result already stored and computes the rest.", True

    def text(settings):
        return ", ".join(f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in settings.items())

    return (f"Run it again with the settings it was given ({text(differ)}) to finish it, reusing every result "
            f"already stored; `{command}` alone analyses with the store's saved ones "
            f"({text({k: plain[k] for k in differ})})."), False


def _unlisted_results(con, command: str) -> Unfinished | None:
    """A store without the record (analysed before it existed) whose result tables hold rows of
    datasets that no analysis listed: an ``analyze`` computed them and stopped before its end."""
    if not has_table(con, R.CURRENT_TABLE):
        return None
    stored = {d for t in R.RESULT_TABLES if has_table(con, t)
              for (d,) in con.execute(f"SELECT DISTINCT dataset FROM {t}").fetchall()}
    unlisted = sorted(stored - last_analysis.listed_datasets(con))
    if not unlisted:
        return None
    resume = f"Run `{command}` again to finish it: it reuses every result already stored and computes the rest."
    return Unfinished(f"An earlier `layerscope analyze` of this store did not finish: it stored results of dataset(s) "
                      f"{', '.join(unlisted)} but stopped before showing them, so none of them is shown. {resume}",
                      resume, command)


def query_frame(con, sql, args=()):
    cur = con.execute(sql, list(args))
    return pd.DataFrame(cur.fetchall(), columns=[d[0] for d in cur.description])


def has_table(con, name) -> bool:
    return bool(con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name])
                .fetchall()[0][0])


def _current_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The done runs of the original variant the analysis uses: per setting (dataset, model, budgets)
    the latest finished one (an older run of the same setting is superseded and never analysed)."""
    done = runs[(runs["status"] == "done") & (runs["variant"] == "original")]
    if not len(done):
        return done
    key = ["dataset", "model", "modality", "n_frames", "n_captions"]
    return (done.sort_values("finished", na_position="first").groupby(key, dropna=False, sort=False).tail(1))


def partial_missing(con, runs: pd.DataFrame, store_path: str = "STORE") -> list[dict]:
    """What an analysed store still lacks, counted per dataset: done runs with no per-layer profile, and
    vision×text pairs of done runs with no grid (the analysis scores every such pair), e.g. runs
    precomputed after the last ``layerscope analyze``. ``[]`` when nothing is partially missing."""
    cur = _current_runs(runs)
    if not len(cur):
        return []
    # under the current analysis's settings: rows of an earlier analysis under others do not count
    profiled = ({r[0] for r in con.execute("SELECT DISTINCT run_id FROM result_profiles WHERE "
                                           + R.current_clause(con, "result_profiles")).fetchall()}
                if has_table(con, "result_profiles") else set())
    gridded = ({(a, b) for a, b in con.execute("SELECT DISTINCT run_a, run_b FROM result_grids "
                                                "WHERE pair_kind = 'vision_text' AND "
                                                + R.current_clause(con, "result_grids")).fetchall()}
               if has_table(con, "result_grids") else set())
    command = f"layerscope analyze --store {store_path}"
    out = []
    for ds, g in cur.groupby("dataset"):
        lacking = sorted(set(g["run_id"]) - profiled)
        if lacking:
            out.append({"what": f"dataset {ds}: {len(lacking)} of {len(g)} done run(s) have no per-layer results "
                                f"({', '.join(lacking[:3])}{' ...' if len(lacking) > 3 else ''})",
                        "command": command})
        vision = g[g["modality"].isin(["video", "image"])]["run_id"]
        text = g[g["modality"] == "text"]["run_id"]
        pairs = {(a, b) for a in vision for b in text}
        absent = pairs - gridded
        if absent:
            out.append({"what": f"dataset {ds}: {len(absent)} of {len(pairs)} vision×text run pair(s) have no "
                                "grid yet", "command": command})
    return out


def overview(con, store_path: str = "STORE") -> dict:
    """Datasets, models, runs, and what is missing with the command that would fill it."""
    if not is_layerscope_store(con):
        return {"empty": True}
    datasets = query_frame(con, "SELECT dataset, n_items, manifest, created FROM datasets ORDER BY dataset")
    models = query_frame(con, "SELECT model, modality, model_type, n_layers, dim, params, random_init, revision, source "
                      "FROM models ORDER BY modality, model")
    models["label"] = np.where(models["random_init"], models["model"] + " (random init)", models["model"])
    runs = query_frame(con, "SELECT dataset, model, modality, n_frames, n_captions, variant, status, n_done, n_items, "
                    "run_id, finished FROM runs ORDER BY dataset, model, variant, n_frames, n_captions")
    missing = []
    for r in runs[runs["status"] != "done"].itertuples():
        missing.append({"what": f"run {r.run_id}: {r.model} on {r.dataset} is at {r.n_done}/{r.n_items} items",
                        "command": "rerun the same `layerscope precompute ...` command; it resumes at item "
                                   f"{r.n_done}"})
    n_results = 0
    if has_table(con, "result_grids"):
        n_results = con.execute("SELECT count(*) FROM result_grids WHERE "
                                + R.current_clause(con, "result_grids")).fetchall()[0][0]
    unfinished = unfinished_analysis(con, store_path)
    if unfinished:  # (where it stopped and what is shown: the pages' note; without a command, the
        # sentence names the settings that finish it)
        missing.append({"what": f"{unfinished.summary}. {unfinished.resume}",
                        "command": unfinished.command})
    elif len(runs) and not n_results:
        missing.append({"what": "no analysis results yet (heatmaps, curves, scaling, model map need them)",
                        "command": f"layerscope analyze --store {store_path}"})
    if len(runs):
        done = runs[(runs["status"] == "done") & (runs["variant"] == "original")]
        for ds, g in done.groupby("dataset"):
            if not (g["modality"].isin(["video", "image"]).any() and (g["modality"] == "text").any()):
                if text_only(con, ds):  # no vision model can be run on it: say so, ask for nothing
                    missing.append({"what": NO_VIDEOS.format(dataset=ds), "command": None})
                    continue
                missing.append({"what": f"dataset {ds} has no vision×text pair of runs",
                                "command": f"layerscope precompute --store {store_path} --manifest MANIFEST "
                                           f"--dataset {ds} --model VIDEO_OR_TEXT_MODEL"})
    if n_results:
        missing += partial_missing(con, runs, store_path)
    if has_table(con, "result_studies") and len(runs):
        have = {r[0] for r in con.execute("SELECT DISTINCT study FROM result_studies WHERE "
                                          + R.current_clause(con, "result_studies")).fetchall()}
        if "downstream" not in have:
            missing.append({"what": "no downstream results to correlate with",
                            "command": f"layerscope downstream import results.csv --store {store_path} && "
                                       f"layerscope analyze --store {store_path}"})
    return {"empty": len(runs) == 0, "datasets": datasets, "models": models, "runs": runs, "missing": missing}


#: why a text-only dataset has no vision results: nothing to run, so no command
NO_VIDEOS = ("dataset {dataset} has no videos (its manifest is text-only): vision × text results (scaling over "
             "frames, temporal probes, the vision × text paper figures) do not apply; its text × text results are "
             "on the heatmap, curves and model map")


def text_only(con, dataset: str) -> bool:
    """Whether ``dataset``'s items have no video (a text-only manifest): no vision model can be run on it."""
    row = con.execute("SELECT count(*), count(video) FROM items WHERE dataset = ?", [dataset]).fetchall()
    return bool(row) and row[0][0] > 0 and row[0][1] == 0


def vision_results_missing(con, dataset: str) -> str | None:
    """Why a page of vision × text results has none for ``dataset`` when ``layerscope analyze`` cannot
    help (a text-only dataset), else ``None`` (the page's usual advice holds)."""
    return NO_VIDEOS.format(dataset=dataset) + "." if text_only(con, dataset) else None


#: the random-init banner's icon (a Material icon: it ships with the app, unlike emoji fonts)
UNTRAINED_ICON = ":material/science:"


def untrained_banner(models: list[str], n_models: int) -> str | None:
    """The warning every page shows when models of the store have random (untrained) weights."""
    if not models:
        return None
    listed = f"{', '.join(models[:6])}{', …' if len(models) > 6 else ''}"
    if len(models) == n_models:
        return (f"All models in this store have random, untrained weights ({listed}): every score here is a "
                "control's, what architecture and chance give without training, and no verdict recommends a layer.")
    # --random-init is the standard control: beside trained models it is a baseline, not a defect
    return (f"{len(models)} of {n_models} models in this store have random, untrained weights ({listed}): they are "
            "controls, drawn beside the trained models and never counted in their verdicts.")


def display_table(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``df`` for people: missing values as empty cells (not ``None``/``nan``), floats as
    :func:`fmt_number` text, whole-number floats (a column with gaps) as integers."""
    out = df.copy()
    for col in out.columns:
        s = out[col]
        if pd.api.types.is_bool_dtype(s):
            continue
        if pd.api.types.is_float_dtype(s) or s.dtype == object or pd.api.types.is_string_dtype(s):
            def cell(x):
                if x is None or (isinstance(x, float) and not np.isfinite(x)) or x is pd.NaT:
                    return ""
                if isinstance(x, (float, np.floating)):
                    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else fmt_number(x)
                if isinstance(x, (np.integer,)):
                    return str(int(x))
                return x
            out[col] = s.astype(object).map(cell)
        elif pd.api.types.is_datetime64_any_dtype(s):
            out[col] = s.map(lambda x: "" if pd.isna(x) else str(x)[:19])
    return out


def model_labels(con) -> dict[str, str]:
    rows = con.execute("SELECT model, random_init FROM models").fetchall()
    return {m: f"{m} (random init)" if ri else m for m, ri in rows}


def dataset_runs(con, dataset) -> list[dict]:
    """The dataset's done runs, ``{"run_id", "model", "modality"}`` each: what names a model's sides
    (:mod:`analysis.sides`; a model with a vision and a text run here has two)."""
    rows = con.execute("SELECT run_id, model, modality FROM runs WHERE dataset = ? AND status = 'done' ORDER BY run_id",
                       [dataset]).fetchall()
    return [{"run_id": r, "model": m, "modality": kind} for r, m, kind in rows]


def dataset_context(con, dataset) -> dict:
    """What a chart needs to place baselines: ``n_items`` of the dataset and the ``k`` of its current
    analysis (from its mutual k-NN grids, else any of its grids with a ``k``; None when there are
    none). Grids of an earlier analysis under another ``k`` are never read."""
    row = con.execute("SELECT n_items FROM datasets WHERE dataset = ?", [dataset]).fetchall()
    k = None
    if has_table(con, "result_grids"):
        got = con.execute("SELECT params FROM result_grids WHERE dataset = ? AND "
                          + R.current_clause(con, "result_grids")
                          + " ORDER BY metric <> 'mutual_knn', model_a, model_b, metric, result_id",
                          [dataset]).fetchall()
        k = next((p["k"] for (text,) in got for p in [json.loads(text or "{}")] if "k" in p), None)
    return {"n_items": int(row[0][0]) if row else None, "k": k}


def study(con, study_name, dataset, subject="all") -> dict | None:
    """The payload of one study row of the dataset's current analysis (None when it has none)."""
    if not has_table(con, "result_studies"):
        return None
    rows = R.read_studies(con, study=study_name, dataset=dataset, subject=subject, current=True)
    return rows[0]["payload"] if rows else None


def provenance(con, run_ids=()) -> dict:
    """Model revisions, dataset sizes, code versions and parameters behind a view."""
    out = {"schema_tables": TABLE_NAMES}
    if not run_ids:
        return out
    placeholders = ", ".join("?" * len(run_ids))
    out["runs"] = query_frame(con, f"SELECT r.run_id, r.model, m.revision, r.dataset, r.n_items, r.n_frames, r.n_captions, "
                           f"r.dtype, r.code_version, r.finished FROM runs r JOIN models m USING (model) "
                           f"WHERE r.run_id IN ({placeholders})", list(run_ids))
    return out
