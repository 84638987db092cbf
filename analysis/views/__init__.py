"""Read-only views of a store for the dashboard and the reports: plain functions, no Streamlit.

Every function takes an open DuckDB connection and returns pandas DataFrames or dicts ready to
draw. Values chosen by a user (query parameters, widgets) are validated here against what the
store holds before they reach any query, and queries are parameterised.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.storage import results as R
from analysis.methods.layer_selection import PRACTICAL_MARGIN
from analysis.metrics.neighbors import l2_normalize
from analysis.views.nuance import same_space_studies  # noqa: F401  (pages read it through pages._shared.view)
from analysis.registry import REGISTRY
from analysis.methods.scaling import FORMS, predict_from_params, undetermined_params
from analysis.storage.schema import TABLE_NAMES, stored_version
from analysis.null import beyond_chance

# ---------------------------------------------------------------- text


#: characters that open Markdown inline syntax anywhere in a line: code, emphasis, links and images,
#: raw HTML and autolinks, entities, tables, strikethrough, Streamlit's $maths$ and :directives:
_MD_INLINE = re.compile(r"([\\`*_\[\]<>&|~$:!#])")
#: what starts a block at the start of a line: list items, headings (``#`` is escaped anyway), setext
#: underlines, block quotes, ordered list numbers
_MD_LEADING = re.compile(r"^(\s*)([-+=]|\d+(?=[.)]))")


def md_escape(text) -> str:
    """``text`` as literal text inside Markdown (CommonMark, GFM tables, Streamlit's markdown).

    Model, dataset and item names, captions and URL parameters are user strings: rendered as
    Markdown, ``![x](http://host/x.png)`` makes the browser fetch a remote image, ``[a](javascript:..)``
    is a link and ``<script>`` raw HTML. CommonMark lets a backslash escape any ASCII punctuation,
    so each character that can open inline syntax is escaped (``<`` becomes ``\\<``, shown as
    ``<``), as is a line start that would begin a list; line breaks become spaces. Plain words,
    ``-``, ``.`` and ``/`` inside a line stay as they are, so messages remain readable as source.
    """
    text = _MD_INLINE.sub(r"\\\1", " ".join(str(text).splitlines()))
    m = _MD_LEADING.match(text)
    if m:
        lead, mark = m.groups()
        text = lead + (mark + "\\" if mark[0].isdigit() else "\\" + mark) + text[m.end():]
    return text


# ---------------------------------------------------------------- validation of user choices


@dataclass
class Choice:
    value: object
    message: str | None = None  # set when the requested value was refused


def choose(requested, options, name: str, default=None) -> Choice:
    """``requested`` if it is one of ``options`` (compared as text, as URLs carry text), else the
    default with a friendly message. Nothing unvalidated reaches a query."""
    options = list(options)
    if not options:
        return Choice(None, None if requested in (None, "") else f"no {name} is available in this store")
    fallback = default if default in options else options[0]
    if requested is None or requested == "":
        return Choice(fallback)
    for opt in options:
        if str(opt) == str(requested):
            return Choice(opt)
    shown = str(requested)[:60]
    # numpy scalars print as np.int64(1) through repr: show the value as the URL would carry it
    plain = fallback.item() if isinstance(fallback, np.generic) else fallback
    return Choice(fallback, f"unknown {name} {shown!r} in the link; showing {plain!r} instead. "
                            f"Available: {', '.join(map(str, options[:12]))}{' ...' if len(options) > 12 else ''}")


def selection_to_layers(selection, n_rows: int, n_cols: int, default: tuple[int, int]) -> tuple[int, int]:
    """Layer pair from an Altair point selection on the heatmap (``{"layer_a": [..], "layer_b": [..]}``
    or a list of such points); anything malformed or out of range gives ``default``."""
    point = selection
    if isinstance(selection, dict) and "selection" in selection:
        point = selection["selection"]
    if isinstance(point, dict):
        for v in point.values():  # {"cell": [{"layer_a": 3, "layer_b": 5}]}
            if isinstance(v, list) and v and isinstance(v[0], dict):
                point = v[0]
                break
    if isinstance(point, list) and point:
        point = point[0]
    if not isinstance(point, dict):
        return default
    try:
        a, b = int(str(point.get("layer_a"))), int(str(point.get("layer_b")))
    except (TypeError, ValueError):
        return default
    if 0 <= a < n_rows and 0 <= b < n_cols:
        return a, b
    return default


def layers_from_params(la, lb, n_rows: int, n_cols: int, default: tuple[int, int]) -> tuple[int, int]:
    """Layer pair from URL text; anything that is not an in-range integer pair gives ``default``."""
    return selection_to_layers({"layer_a": la, "layer_b": lb}, n_rows, n_cols, default)


# ---------------------------------------------------------------- overview


def is_layerscope_store(con) -> bool:
    try:
        return stored_version(con) is not None
    except Exception:
        return False


def _df(con, sql, args=()):
    cur = con.execute(sql, list(args))
    return pd.DataFrame(cur.fetchall(), columns=[d[0] for d in cur.description])


def has_table(con, name) -> bool:
    return bool(con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name])
                .fetchall()[0][0])


def overview(con, store_path: str = "STORE") -> dict:
    """Datasets, models, runs, and what is missing with the command that would fill it."""
    if not is_layerscope_store(con):
        return {"empty": True}
    datasets = _df(con, "SELECT dataset, n_items, manifest, created FROM datasets ORDER BY dataset")
    models = _df(con, "SELECT model, modality, model_type, n_layers, dim, params, random_init, revision, source "
                      "FROM models ORDER BY modality, model")
    models["label"] = np.where(models["random_init"], models["model"] + " (random init)", models["model"])
    runs = _df(con, "SELECT dataset, model, modality, n_frames, n_captions, variant, status, n_done, n_items, "
                    "run_id, finished FROM runs ORDER BY dataset, model, variant, n_frames, n_captions")
    missing = []
    for r in runs[runs["status"] != "done"].itertuples():
        missing.append({"what": f"run {r.run_id}: {r.model} on {r.dataset} is at {r.n_done}/{r.n_items} items",
                        "command": "rerun the same `layerscope precompute ...` command; it resumes at item "
                                   f"{r.n_done}"})
    n_results = 0
    if has_table(con, "result_grids"):
        n_results = con.execute("SELECT count(*) FROM result_grids").fetchall()[0][0]
    if len(runs) and not n_results:
        missing.append({"what": "no analysis results yet (heatmaps, curves, scaling, model map need them)",
                        "command": f"layerscope analyze --store {store_path}"})
    if len(runs):
        done = runs[(runs["status"] == "done") & (runs["variant"] == "original")]
        for ds, g in done.groupby("dataset"):
            if not (g["modality"].isin(["video", "image"]).any() and (g["modality"] == "text").any()):
                missing.append({"what": f"dataset {ds} has no vision×text pair of runs",
                                "command": f"layerscope precompute --store {store_path} --manifest MANIFEST "
                                           f"--dataset {ds} --model VIDEO_OR_TEXT_MODEL"})
    if has_table(con, "result_studies") and len(runs):
        have = {r[0] for r in con.execute("SELECT DISTINCT study FROM result_studies").fetchall()}
        if "downstream" not in have:
            missing.append({"what": "no downstream results to correlate with",
                            "command": f"layerscope downstream import results.csv --store {store_path} && "
                                       f"layerscope analyze --store {store_path}"})
    return {"empty": len(runs) == 0, "datasets": datasets, "models": models, "runs": runs, "missing": missing}


def untrained_banner(models: list[str], n_models: int) -> str | None:
    """The warning every page shows when models of the store have random (untrained) weights."""
    if not models:
        return None
    which = "All models" if len(models) == n_models else f"{len(models)} of {n_models} models"
    return (f"{which} in this store have random, untrained weights ({', '.join(models[:6])}"
            f"{', …' if len(models) > 6 else ''}): it is a demo or test store, and their scores say nothing "
            "about the trained models.")


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


# ---------------------------------------------------------------- heatmaps


def grid_index(con) -> pd.DataFrame:
    """One row per stored grid: what can be picked."""
    if not has_table(con, "result_grids"):
        return pd.DataFrame(columns=["dataset", "pair_kind", "model_a", "model_b", "metric", "n_frames",
                                     "n_captions", "n_frames_b", "result_id"])
    return _df(con, "SELECT dataset, pair_kind, model_a, model_b, metric, n_frames, n_captions, n_frames_b, "
                    "result_id FROM result_grids ORDER BY dataset, model_a, model_b, metric, n_frames, n_captions")


def grid_by_id(con, result_id) -> dict:
    (g,) = R.read_grids(con, result_id=result_id)
    return g


def grid_long(g: dict) -> pd.DataFrame:
    """Long table of a grid for a heatmap: layer_a, layer_b, value, best flag, interval text,
    ``degenerate`` (the cell sits on a degenerate layer of either model: marked, never best) with
    ``note`` saying why (the reason travels from analyze in ``flags``), and ``near_best``
    (:func:`near_best_cells`)."""
    G = g["grid"]
    flags = g.get("flags") or {}
    deg_a = {int(k): v for k, v in (flags.get("degenerate_a") or {}).items()}
    deg_b = {int(k): v for k, v in (flags.get("degenerate_b") or {}).items()}
    a, b = np.meshgrid(np.arange(G.shape[0]), np.arange(G.shape[1]), indexing="ij")
    df = pd.DataFrame({"layer_a": a.ravel(), "layer_b": b.ravel(), "value": G.ravel()})
    df["value"] = df["value"].where(np.isfinite(df["value"]), None)
    df["best"] = (df["layer_a"] == g["best_a"]) & (df["layer_b"] == g["best_b"])
    df["degenerate"] = df["layer_a"].isin(list(deg_a)) | df["layer_b"].isin(list(deg_b))
    df["note"] = [("; ".join(x for x in (f"A layer {i}: {deg_a[i]}" if i in deg_a else "",
                                          f"B layer {j}: {deg_b[j]}" if j in deg_b else "") if x)
                   or ("undefined" if v is None else ""))
                  for i, j, v in zip(df["layer_a"], df["layer_b"], df["value"])]
    df["interval"] = ""
    if g.get("ci_low") is not None and g["best_a"] is not None:
        df.loc[df["best"], "interval"] = f"[{g['ci_low']:.3f}, {g['ci_high']:.3f}] ({g['n_boot']} resamples)"
    near = near_best_cells(g)
    df["near_best"] = near.ravel() & ~df["degenerate"].to_numpy()
    df.loc[df["near_best"], "note"] = "within the best cell's 95% interval: not distinguishable from it by that interval"
    df["beyond_null"] = beyond_null_cells(g).ravel() & ~df["degenerate"].to_numpy()
    return df


def grid_null(g: dict) -> dict | None:
    """The best cell's shuffled-pairing null stored with the grid (``flags["null"]``: ``p``, ``q95``,
    ``n_perm``, ``grouped``; :func:`analysis.null.selection_null`), as a dict or JSON text, also
    looked for on the row itself and in a ``payload``; None when there is none (switched off, no best
    cell, or a grid from before the null was computed)."""
    for where in (g.get("flags"), g, g.get("payload")):
        if isinstance(where, str):
            try:
                where = json.loads(where)
            except ValueError:
                continue
        null = where.get("null") if isinstance(where, dict) else None
        if isinstance(null, str):
            try:
                null = json.loads(null)
            except ValueError:
                null = None
        if isinstance(null, dict) and null.get("p") is not None:
            return null
    return None


def beyond_null_cells(g: dict) -> np.ndarray:
    """``(n_rows, n_cols)`` bool: finite cells past the shuffled-pairing null's 95th percentile
    (above it when higher is better, below when lower is): values the grid maximum reaches under
    random item pairings less than 5% of the time. All False without a stored null."""
    G = np.asarray(g["grid"], dtype=np.float64)
    null = grid_null(g)
    if null is None or null.get("q95") is None or not np.isfinite(null["q95"]):
        return np.zeros(G.shape, dtype=bool)
    spec = REGISTRY.get(g.get("metric"))
    with np.errstate(invalid="ignore"):
        out = G < null["q95"] if spec is not None and spec.higher_is_better is False else G > null["q95"]
    return out & np.isfinite(G)


def null_rule_text(g: dict, n_beyond: int) -> str:
    """The heatmap's caption for its null rule: which cells are outlined and the best cell's verdict."""
    null = grid_null(g)
    return (f"White dotted outline: {n_beyond} cell(s) past {fmt_number(null['q95'])}, the 95th percentile of this "
            f"grid's best value when the items are paired at random ({null['n_perm']} shuffles"
            f"{', within groups' if null.get('grouped') else ''}; the maximum over all layer pairs, so the "
            f"selection is counted). Best cell: {null_text(null)}.")


def null_text(null: dict | None) -> str:
    """One clause on a best cell against its shuffled-pairing null: the verdict, p, and the null's
    95th percentile ("" without a null). ``p <= NULL_ALPHA`` (0.05): beyond what the grid maximum
    reaches under random pairings; else "no alignment beyond chance" (DESIGN §9: the best cell is a maximum)."""
    if not null:
        return ""
    how = f"{null['n_perm']} {'within-group ' if null.get('grouped') else ''}shuffled pairings"
    verdict = "beyond chance" if beyond_chance(null) else "no alignment beyond chance"
    return (f"{verdict}: p = {fmt_number(null['p'])} against the grid maximum under {how} "
            f"(its 95th percentile {fmt_number(null['q95'])})")


def near_best_cells(g: dict) -> np.ndarray:
    """``(n_rows, n_cols)`` bool: cells other than the best whose value lies inside the best cell's
    bootstrap interval, on the metric's better side of its bound (``value >= ci_low`` when higher is
    better, ``value <= ci_high`` when lower is better). Only the best cell's interval is computed
    (per-cell intervals would cost a bootstrap per cell), so this is the overlap test the stored data
    allow: such a cell cannot be told apart from the best by that interval. All False when the grid
    has no best cell or no interval; NaN cells are never near-best."""
    G = np.asarray(g["grid"], dtype=np.float64)
    out = np.zeros(G.shape, dtype=bool)
    if g.get("best_a") is None or g.get("ci_low") is None or g.get("ci_high") is None:
        return out
    spec = REGISTRY.get(g.get("metric"))
    lower_better = spec is not None and spec.higher_is_better is False
    with np.errstate(invalid="ignore"):
        out = (G <= float(g["ci_high"])) if lower_better else (G >= float(g["ci_low"]))
    out &= np.isfinite(G)
    out[int(g["best_a"]), int(g["best_b"])] = False
    return out


def best_cell_text(g: dict, model_a: str, model_b: str) -> str:
    """One sentence on the grid's best cell, or why it has none (flat or degenerate grid)."""
    flags = g.get("flags") or {}
    if g.get("best_a") is None:
        return f"no best cell — {flags.get('best', 'no cell could be scored')}"
    text = (f"best cell: layer {g['best_a']} of {model_a} × layer {g['best_b']} of {model_b} = "
            f"{fmt_number(g['best_value'])}")
    if g.get("ci_low") is not None:
        text += f" (95% CI {fmt_number(g['ci_low'])}–{fmt_number(g['ci_high'])}, {g['n_boot']} resamples)"
    elif flags.get("interval"):
        text += f" (no interval: {flags['interval']})"
    if grid_null(g):
        text += f"; {null_text(grid_null(g))}"
    elif flags.get("null_skipped"):
        text += f"; {flags['null_skipped']}"
    n_deg = len(flags.get("degenerate_a") or {}) + len(flags.get("degenerate_b") or {})
    if n_deg:
        text += f"; {n_deg} degenerate layer(s) marked and excluded"
    if flags.get("best_caveat"):
        text += f". Caveat: {flags['best_caveat']}"
    return text


def fmt_number(v, digits: int = 3) -> str:
    """A number for people: 3 significant decimals, scientific only when tiny or huge, '—' for none."""
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "—"
    v = float(v)
    if v != 0 and (abs(v) < 10 ** -digits or abs(v) >= 1e6):
        return f"{v:.{digits}g}"
    return f"{v:.{digits}f}"


# ---------------------------------------------------------------- layer curves


def profiles_long(con, dataset) -> pd.DataFrame:
    """Per-layer single-space metrics for every model's largest setting, on relative depth."""
    if not has_table(con, "result_profiles"):
        return pd.DataFrame()
    rows = R.read_profiles(con, dataset=dataset)
    choice = _largest_setting_runs(rows)
    out = []
    for r in rows:
        if choice.get(r["model"]) != r["run_id"]:
            continue
        v = r["layer_values"]
        notes = {int(k): n for k, n in (r.get("flags") or {}).items()}
        for layer, value in enumerate(v):
            finite = bool(np.isfinite(value))
            out.append({"model": r["model"], "metric": r["metric"], "layer": layer,
                        "depth": layer / max(1, len(v) - 1), "value": float(value) if finite else None,
                        "note": notes.get(layer) or ("" if finite else "undefined"),
                        "flagged": layer in notes or not finite,
                        "n_frames": r["n_frames"], "n_captions": r["n_captions"]})
    return pd.DataFrame(out)


def flag_lines(data: pd.DataFrame) -> list[str]:
    """One line per (model, note) among flagged points of a long curve table: ``"model: note
    (layers 0, 1, 4)"`` — the notes said once, not once per layer."""
    if "flagged" not in data or not data["flagged"].any():
        return []
    out = []
    for (model, note), g in data[data["flagged"]].groupby(["model", "note"], sort=True):
        layers = ", ".join(str(int(x)) for x in sorted(g["layer"]))
        out.append(f"{model}: {note or 'undefined'} (layer{'s' if len(g) > 1 else ''} {layers})")
    return out


def _largest_setting_runs(rows):
    best = {}
    for r in rows:
        size = (r["n_frames"] or 0) + (r["n_captions"] or 0)
        if r["model"] not in best or size > best[r["model"]][0]:
            best[r["model"]] = (size, r["run_id"])
    return {m: v[1] for m, v in best.items()}


def layer_choices(con, dataset) -> dict:
    if not has_table(con, "result_studies"):
        return {}
    return {s["subject"]: s["payload"] for s in R.read_studies(con, study="layer_choice", dataset=dataset)}


def _row_best(grid, layer: int, model_is_a: bool) -> int:
    """The other model's layer that aligns best with ``layer`` (NaN cells skipped; 0 when none is finite)."""
    line = np.asarray(grid, dtype=float)[layer] if model_is_a else np.asarray(grid, dtype=float)[:, layer]
    return int(np.nanargmax(line)) if np.isfinite(line).any() else 0


def _alignment_sources(p: dict, curves, grids: list, by_id: dict) -> dict:
    """``{"alignment with REF": (grid, model is A)}``: the mutual k-NN grid behind each alignment
    curve of one layer-choice payload (its stored source, else the grid of the payload's run against
    the reference's largest setting, for payloads written before sources were kept)."""
    run_id = (p.get("setting") or {}).get("run_id")
    found = {}
    for metric in curves:
        if not metric.startswith("alignment with "):
            continue
        ref = metric.removeprefix("alignment with ")
        g = by_id.get((p.get("sources") or {}).get(metric))
        if g is None:
            cands = [g for g in grids if (g["run_a"] == run_id and g["model_b"] == ref)
                     or (g["run_b"] == run_id and g["model_a"] == ref)]
            g = max(cands, key=lambda g: ((g["n_frames"] or 0), (g["n_captions"] or 0)), default=None)
        if g is not None:
            found[metric] = (g, g["run_a"] == run_id)
    return found


def curve_intervals(con, dataset) -> pd.DataFrame:
    """The intervals that exist for the layer curves: per model and alignment curve, the 95%
    bootstrap CI of the mutual k-NN grid's best cell, at that model's best layer (the curve is the
    row maximum, so its value there is the best cell's). Columns: model, metric, layer, depth, low,
    high, n_boot. Per-layer profiles have no stored intervals."""
    choices = layer_choices(con, dataset)
    grids = R.read_grids(con, dataset=dataset, metric="mutual_knn") if has_table(con, "result_grids") else []
    by_id = {g["result_id"]: g for g in grids}
    rows = []
    for model, p in choices.items():
        curves = p.get("curves") or {}
        n = len(next(iter(curves.values()))) if curves else 1
        last = p.get("last_layer", n - 1)
        for metric, (g, is_a) in _alignment_sources(p, curves, grids, by_id).items():
            if g.get("best_a") is None or g.get("ci_low") is None:
                continue
            layer = int(g["best_a"] if is_a else g["best_b"])
            rows.append({"model": model, "metric": metric, "layer": layer, "depth": layer / max(1, last),
                         "low": float(g["ci_low"]), "high": float(g["ci_high"]), "n_boot": int(g["n_boot"] or 0)})
    return pd.DataFrame(rows, columns=["model", "metric", "layer", "depth", "low", "high", "n_boot"])


def curve_null_levels(con, dataset) -> pd.DataFrame:
    """The shuffled-pairing null of each alignment curve's source grid: per model and curve, the
    null's 95th percentile ``q95`` of the grid maximum (a rule the curve's peak must clear), ``p`` of
    the best cell, ``n_perm`` and ``grouped``. The curve is a row maximum, whose own null lies at or
    below the grid maximum's, so the rule is conservative for layers other than the best."""
    choices = layer_choices(con, dataset)
    grids = R.read_grids(con, dataset=dataset, metric="mutual_knn") if has_table(con, "result_grids") else []
    by_id = {g["result_id"]: g for g in grids}
    rows = []
    for model, p in choices.items():
        for metric, (g, _) in _alignment_sources(p, p.get("curves") or {}, grids, by_id).items():
            null = grid_null(g)
            if null is not None and null.get("q95") is not None and np.isfinite(null["q95"]):
                rows.append({"model": model, "metric": metric, "q95": float(null["q95"]), "p": float(null["p"]),
                             "n_perm": int(null["n_perm"]), "grouped": bool(null.get("grouped"))})
    return pd.DataFrame(rows, columns=["model", "metric", "q95", "p", "n_perm", "grouped"])


def null_levels_text(nulls: pd.DataFrame, labels: dict) -> str:
    """A caption for the dotted null rules of the layer curves: what they are and each model's p."""
    parts = [f"{labels.get(r.model, r.model)}: p = {fmt_number(r.p)}" + (" (grouped)" if r.grouped else "")
             for r in nulls.itertuples()]
    return ("Dotted rules: each model's shuffled-pairing null, the 95th percentile of its grid's best value when "
            "the items are paired at random (the maximum over all layer pairs, so it already counts the "
            f"selection); a peak below its rule is no alignment beyond chance. Best cells: {'; '.join(parts)}.")


def dataset_context(con, dataset) -> dict:
    """What a chart needs to place baselines: ``n_items`` of the dataset and the analysis ``k``
    (from its mutual k-NN grids; None when there are none)."""
    row = con.execute("SELECT n_items FROM datasets WHERE dataset = ?", [dataset]).fetchall()
    k = None
    for g in (R.read_grids(con, dataset=dataset, metric="mutual_knn") if has_table(con, "result_grids") else [])[:1]:
        k = (g.get("params") or {}).get("k")
    return {"n_items": int(row[0][0]) if row else None, "k": k}


#: how a verdict line is decided, said under the verdicts on the Overview and in the report
VERDICT_RULE = (
    "Per model: the layer most label-free metrics pick (layer 0, degenerate and named layers never count; "
    "alignment with a random-init control, or no better than shuffled pairings, never votes), its value with a "
    "95% interval, and its gain over the last layer and over the model's own default output, each a paired "
    "bootstrap difference on the same item resamples with its 95% interval. \"Use layer N\" only when both "
    "intervals exclude zero and both gains reach the practical margin of {margin:.0%}; otherwise a tie. A pick "
    "below the default output is never recommended over it. Random-init models are controls: shown, never "
    "recommended.").format(margin=PRACTICAL_MARGIN)


def verdicts(con, dataset) -> list[dict]:
    """Per model of ``dataset``, the layer to use (:func:`analysis.methods.layer_selection.layer_verdict` on
    the stored layer-choice curves and their item resamples: gains over the last layer and the
    model's ``default`` output are paired bootstrap differences), with the stored 95% interval of
    each alignment pick (the mutual k-NN grid's best-cell bootstrap CI), a sentence, and the query
    parameters of the heatmap and curves views that show the evidence. Random-init models are
    controls: alignment with one never votes, and a random-init model's own line is a control's,
    never a recommendation. A grid whose best cell carries a shuffled-pairing null (``"null": {"p",
    "q95", "n_perm"}``) with p ≥ 0.05 is no alignment beyond chance and does not vote either.

    Returns ``[{"model", "label", "verdict", "sentence", "n_boot", "heatmap": {param: value} | None,
    "curves": {param: value}}]`` sorted by model."""
    from analysis.methods.layer_selection import layer_verdict, named_layers, no_verdict, verdict_sentence

    choices = layer_choices(con, dataset)
    if not choices:
        return []
    labels = model_labels(con)
    random = {m for m, ri in con.execute("SELECT model, random_init FROM models").fetchall() if ri}
    grids = R.read_grids(con, dataset=dataset, metric="mutual_knn") if has_table(con, "result_grids") else []
    by_id = {g["result_id"]: g for g in grids}
    out = []
    for model, p in sorted(choices.items()):
        run_id = (p.get("setting") or {}).get("run_id")
        names = {int(k): n for k, n in (p.get("layer_names") or {}).items()}
        if not names and run_id and "layer_names" not in p:  # payloads written before layer names were kept
            row = con.execute("SELECT config FROM runs WHERE run_id = ?", [run_id]).fetchall()
            names = named_layers(row[0][0]) if row else {}
        curves = {k: np.asarray(v, dtype=float) for k, v in (p.get("curves") or {}).items()}
        hib = p.get("higher_is_better") or {}
        base = model.removesuffix(" [text]")
        label = labels.get(base, base) + model[len(base):]
        if not curves:  # stored without curves: every one is undefined (degenerate layers)
            v = no_verdict(p.get("reason") or "no per-layer curve is defined", p.get("last_layer"),
                           p.get("undefined_curves") or [])
            out.append({"model": model, "label": label, "verdict": v, "n_boot": None,
                        "sentence": verdict_sentence(label, v), "heatmap": None,
                        "curves": {"dataset": dataset, "models": base}})
            continue
        found = _alignment_sources(p, curves, grids, by_id)
        intervals = {m: ((g["best_a"] if is_a else g["best_b"]), g["ci_low"], g["ci_high"])
                     for m, (g, is_a) in found.items() if g.get("best_a") is not None and g.get("ci_low") is not None}
        deg = [int(i) for i in (p.get("degenerate_layers") or {})]
        n_layers = len(next(iter(curves.values())))
        last = min(names) - 1 if names and 1 <= min(names) - 1 < n_layers else None
        default = next((i for i, n in names.items() if n == "default"), None)
        partners = {m: (g["model_b"] if is_a else g["model_a"]) for m, (g, is_a) in found.items()}
        partners.update({m: m.removeprefix("alignment with ") for m in curves
                         if m.startswith("alignment with ") and m not in partners})
        controls = [m for m, ref in partners.items() if ref.removesuffix(" [text]") in random]
        # the null is the grid's maximum under shuffled pairings: when the best cell is within chance,
        # every row maximum (each layer's value on the curve) is too, so the whole curve does not vote
        nulls = {m: nl for m, (g, _) in found.items() if (nl := grid_null(g)) is not None}
        v = layer_verdict(curves, {m: hib.get(m, True) for m in curves}, last_layer=last, default_layer=default,
                          degenerate=deg, intervals=intervals, resamples=p.get("resamples"), controls=controls,
                          nulls=nulls, control_model=base in random)
        lead = v["lead"] if v["lead"] in found else next((m for m in v["agreeing"] if m in found),
                                                          next(iter(sorted(found)), None))
        heat = None
        if lead is not None:
            g, is_a = found[lead]
            layer = v["layer"] if v["layer"] is not None else (g["best_a"] if is_a else g["best_b"]) or 0
            other = _row_best(g["grid"], layer, is_a)
            heat = {"dataset": dataset, "a": g["model_a"], "b": g["model_b"], "metric": "mutual_knn",
                    "nf": str(int(g["n_frames"])) if g["n_frames"] is not None else None,
                    "nc": str(int(g["n_captions"])) if g["n_captions"] is not None else None,
                    "la": str(layer if is_a else other), "lb": str(other if is_a else layer)}
            heat = {k: x for k, x in heat.items() if x is not None}
        n_boot = v["n_boot"] or (found[v["lead"]][0].get("n_boot") if v["lead"] in found and v["interval"] else None)
        out.append({"model": model, "label": label, "verdict": v, "n_boot": n_boot,
                    "sentence": verdict_sentence(label, v, n_boot=n_boot), "heatmap": heat,
                    "curves": {"dataset": dataset, "metric": v["lead"] or next(iter(sorted(curves))), "models": base}})
    return out


def alignment_curves_long(choices: dict) -> pd.DataFrame:
    out = []
    for model, p in choices.items():
        for metric, values in p.get("curves", {}).items():
            if not metric.startswith("alignment with"):
                continue
            last = p.get("last_layer", len(values) - 1)  # named layers after it fall outside [0, 1]
            for layer, v in enumerate(values):
                out.append({"model": model, "metric": metric, "layer": layer, "depth": layer / max(1, last),
                            "value": v if v is not None and np.isfinite(v) else None})
    return pd.DataFrame(out)


def recommended_marks(choices: dict) -> pd.DataFrame:
    out = []
    for model, p in choices.items():
        last = p.get("last_layer", p.get("n_layers", 1) - 1)
        for metric, pick in p.get("picks", {}).items():
            out.append({"model": model, "metric": metric, "layer": pick["layer"],
                        "depth": pick["layer"] / max(1, last), "value": pick["value"]})
    return pd.DataFrame(out)


# ---------------------------------------------------------------- scaling


def scaling_subjects(con, dataset) -> list[str]:
    if not has_table(con, "result_studies"):
        return []
    return [s["subject"] for s in R.read_studies(con, study="scaling", dataset=dataset)]


def scaling_view(con, dataset, subject) -> dict:
    """Points (degenerate ones marked); the curves of :func:`drawn_forms` (DR's saturating law, and
    the held-out-best form beside it when that is another one; ``curves`` with each one's own R²,
    ``drawn`` their forms, ``held_out_best``) on a dense n_f/n_c range, one ``form`` label per curve;
    the saturating law's parameter table with intervals, blank where the data do not determine a
    parameter (``undetermined``: ``{parameter: why}``, issue #29 item 7); the fit's status, and
    every form's held-out error."""
    (s,) = R.read_studies(con, study="scaling", dataset=dataset, subject=subject)
    p = s["payload"]
    n = len(p["scores"])
    points = pd.DataFrame({"n_frames": p["n_frames"], "n_captions": p["n_captions"], "score": p["scores"],
                           "degenerate": p.get("degenerate", [False] * n)})
    score = pd.to_numeric(points["score"], errors="coerce").astype(float)  # stored NaN comes back as null
    points["score"] = score.where(np.isfinite(score), None)
    # each point is a grid's best cell: its stored bootstrap interval is the point's error bar
    model_a, model_b, metric = subject.split("|")
    cis = {}
    for g in R.read_grids(con, dataset=dataset, metric=metric) if has_table(con, "result_grids") else []:
        if (g["model_a"], g["model_b"]) == (model_a, model_b) and g.get("ci_low") is not None:
            cis[(float(g["n_frames"] or 0), float(g["n_captions"] or 0))] = (g["ci_low"], g["ci_high"], g["n_boot"])
    got = [cis.get((float(f), float(c)), (None, None, None)) for f, c in zip(points["n_frames"], points["n_captions"])]
    points["ci_low"], points["ci_high"] = [x[0] for x in got], [x[1] for x in got]
    points["n_boot"] = [x[2] for x in got]
    row = con.execute("SELECT n_items FROM datasets WHERE dataset = ?", [dataset]).fetchall()
    n_items = int(row[0][0]) if row else None
    hib = p.get("higher_is_better") is not False
    fit = p.get("fit") or {}
    best = p.get("drawn") or ("saturating" if fit else None)  # stored: the lowest held-out error
    drawn = drawn_forms(p)
    blank = undetermined_params("saturating", fit.get("params") or {}, fit.get("status"), fit.get("reason"),
                                bounds=p.get("bounds")) if fit.get("params") else {}
    out = {"points": points, "error": p.get("error"), "fit": p.get("fit"), "forms": p.get("forms", []),
           "intervals": p.get("intervals"), "params": s["params"], "drawn": [c["form"] for c in drawn],
           "held_out_best": best, "curves": drawn, "undetermined": blank, "notes": p.get("notes", []),
           "bounds": p.get("bounds"),
           "status": fit.get("status"), "reason": fit.get("reason"),
           "intervals_detail": p.get("intervals_detail"), "metric": metric, "n_items": n_items,
           "intervals_n_boot": p.get("intervals_n_boot"),
           "chance": chance_level(metric, n_items, {k: v for k, v in s["params"].items() if k != "n_boot"})}
    if drawn:
        good = points[~points["degenerate"]]
        dense_f = np.geomspace(1, max(good["n_frames"]), 40)
        dense_c = np.geomspace(1, max(good["n_captions"]), 40)

        def curve(c, f, n):
            return float(predict_from_params(c["form"], c["params"], f, n, higher_is_better=hib))

        out["curve_vs_frames"] = pd.DataFrame([{"n_frames": f, "n_captions": n, "score": curve(c, f, n),
                                                "form": c["label"]}
                                               for c in drawn for n in sorted(good["n_captions"].unique())
                                               for f in dense_f])
        out["curve_vs_captions"] = pd.DataFrame([{"n_frames": f, "n_captions": n, "score": curve(c, f, n),
                                                  "form": c["label"]}
                                                 for c in drawn for f in sorted(good["n_frames"].unique())
                                                 for n in dense_c])
        out["table"] = pd.DataFrame(saturating_param_rows(fit["params"], p.get("intervals"), blank))
        out["held_out"] = pd.DataFrame([{"form": f["form"], "formula": f["formula"],
                                         "drawn": "yes" if f["form"] in out["drawn"] else "",
                                         "held-out best": "yes" if f.get("best") else "",
                                         "status": f.get("status") or "", "r2": fmt_number(f.get("r2")),
                                         "loo_rmse": fmt_number(f.get("loo_rmse")),
                                         "extrapolation_rmse": fmt_number((f.get("extrapolation") or {}).get("rmse")),
                                         "note": f.get("error") or f.get("reason")
                                         or (f.get("extrapolation") or {}).get("error") or ""}
                                        for f in p.get("forms", [])])
    return out


#: DR's law, the one every scaling chart draws and names first (DESIGN §4)
SATURATING_TITLE = "DR's saturating law S∞ − (C_f·n_f^−α + C_c·n_c^−β)"


def drawn_forms(payload: dict) -> list[dict]:
    """The curves a scaling chart draws, from a stored scaling payload: DR's saturating law first
    (whenever it was fitted), then the form with the lowest held-out error when that is another
    one. Each: ``form``, ``formula``, ``params``, ``r2`` (in-sample R² of *that* form's own fit),
    ``status``, ``reason``, ``held_out_best``, ``name`` and ``label`` (the legend entry, naming the
    form and its R²)."""
    fit = payload.get("fit") or {}
    if not fit.get("params"):
        return []
    forms = {f["form"]: f for f in payload.get("forms", [])}
    best = payload.get("drawn") or "saturating"
    law = {"form": "saturating", "formula": FORMS["saturating"].formula, "params": fit["params"], "r2": fit.get("r2"),
           "status": fit.get("status"), "reason": fit.get("reason"), "held_out_best": best == "saturating"}
    out = [law]
    other = forms.get(best) if best != "saturating" else None
    if other and other.get("params"):
        out.append({"form": best, "formula": other["formula"], "params": other["params"], "r2": other.get("r2"),
                    "status": other.get("status"), "reason": other.get("reason"), "held_out_best": True})
    for c in out:
        c["name"] = name = ("DR's saturating law" if c["form"] == "saturating"
                            else f"{c['form'].replace('_', '-')} form")
        c["label"] = f"{name}{' (held-out best)' if c['held_out_best'] else ''}, R² {fmt_number(c['r2'])}"
    return out


def saturating_param_rows(params: dict, intervals: dict | None, blank: dict[str, str]) -> list[dict]:
    """The saturating law's parameter table: ``parameter, value, low, high, note``; a parameter the
    data do not determine (``blank``, from :func:`analysis.methods.scaling.undetermined_params`) is an empty
    cell with the reason in ``note``, its interval too (never a number)."""
    rows = []
    for name in FORMS["saturating"].params:
        lo, hi = (intervals or {}).get(name, (None, None))
        why = blank.get(name)
        rows.append({"parameter": name, "value": "" if why else fmt_number(params.get(name)),
                     "low": "" if why else fmt_number(lo), "high": "" if why else fmt_number(hi),
                     "note": f"not determined: {why}" if why else ""})
    return rows


def scaling_heading(sv: dict) -> str:
    """What a scaling chart's title says it draws: DR's saturating law, and the held-out-best form
    beside it when that is another one (the page and the report title their charts with it)."""
    others = [c["form"].replace("_", "-") for c in sv.get("curves", []) if c["form"] != "saturating"]
    if not sv.get("curves"):
        return "no law fitted"
    return SATURATING_TITLE + (f", and the held-out-best {others[0]} form" if others else "")


def scaling_fit_lines(sv: dict) -> list[str]:
    """One sentence per drawn curve: which form, its own in-sample R², and why it is drawn."""
    n = (sv.get("fit") or {}).get("n_points")
    lines = []
    for c in sv.get("curves", []):
        why = ("DR's law, drawn by default" if c["form"] == "saturating" else "drawn beside it")
        best = "; lowest held-out error" if c["held_out_best"] else ""
        lines.append(f"{c['name']} {c['formula']}: R² = {fmt_number(c['r2'])} in sample on {n} grid points "
                     f"({why}{best})")
    return lines


# ---------------------------------------------------------------- model map, downstream, temporal


def study(con, study_name, dataset, subject="all") -> dict | None:
    if not has_table(con, "result_studies"):
        return None
    rows = R.read_studies(con, study=study_name, dataset=dataset, subject=subject)
    return rows[0]["payload"] if rows else None


def model_map_view(payload: dict) -> dict:
    names = payload["models"]
    S = np.asarray(payload["similarity"])
    order = [names[i] for i in payload["order"]]
    cells = [{"model_a": names[i], "model_b": names[j], "similarity": float(S[i, j])}
             for i in range(len(names)) for j in range(len(names))]
    coords = pd.DataFrame({"model": names, "x": [c[0] for c in payload["coords"]],
                           "y": [c[1] for c in payload["coords"]], "cluster": [str(c) for c in payload["clusters"]],
                           "modality": [payload["settings"][m]["modality"] for m in names]})
    return {"cells": pd.DataFrame(cells), "order": order, "coords": coords}


def downstream_view(payload: dict) -> dict:
    """The downstream study as tables: ``table`` one row per (task, score) with the pair kind of an
    alignment score and the models left out with their reason; ``curves`` one row per (task, curve,
    depth) with the models used there and those left out (their layer has no value)."""
    rows = payload.get("rows", [])
    table = pd.DataFrame([{**{k: r.get(k) for k in ("task", "task_metric", "score", "n", "pearson_r", "pearson_p",
                                                     "spearman_rho", "spearman_p", "r_ci", "rho_ci")},
                           "pair kind": r.get("pair_kind") or "",
                           "task direction": ("higher is better" if r.get("higher_is_better", True)
                                              else "lower is better"),
                           "higher score goes with": ("" if r.get("better") is None
                                                      else "better results" if r["better"] else "worse results"),
                           "left out": "; ".join(f"{m}: {why}" for m, why in sorted((r.get("excluded") or {}).items())),
                           "error": r.get("error") or ""}
                          for r in rows if "score" in r])
    curves = pd.DataFrame([{"task": r["task"], "curve": r["curve"], "depth": d, "r": v,
                            "models": (r.get("n_models") or [None] * len(r["depth"]))[i],
                            "left out": ", ".join(f"{e['model']} (layer {e['layer']})"
                                                  for e in (r.get("excluded") or [[]] * len(r["depth"]))[i])}
                           for r in rows if "curve" in r and "depth" in r
                           for i, (d, v) in enumerate(zip(r["depth"], r["r"]))])
    return {"table": table, "curves": curves, "rows": [r for r in rows if "score" in r]}


def scatter_frame(row: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Points and the least-squares line of one downstream correlation."""
    df = pd.DataFrame({"model": row["models"], "score": row["x"], "result": row["y"]})
    line = pd.DataFrame()
    if len(df) >= 2 and np.ptp(df["score"]) > 0:
        slope, intercept = np.polyfit(df["score"], df["result"], 1)
        xs = np.linspace(df["score"].min(), df["score"].max(), 20)
        line = pd.DataFrame({"score": xs, "result": slope * xs + intercept})
    return df, line


def temporal_view(payload: dict) -> dict:
    """Long tables of the temporal probes; undefined values stay as rows with a note (never dropped)."""
    tot = []
    types = []
    types_missing = []  # pairs without a k = 1 best layer pair, so without first-neighbour types
    for e in payload.get("test_of_time", []):
        for k, v in e["alignment"].items():
            tot.append({"pair": f"{e['vision']} × {e['text']}", "k": int(k), "alignment": v["value"],
                        "note": v.get("reason") or ""})
        for space in ("vision", "text"):
            for t, share in (e["first_neighbours"].get(space) or {}).items():
                types.append({"pair": f"{e['vision']} × {e['text']}", "space": space, "type": t, "share": share,
                              "model": e[space]})
        if e["first_neighbours"].get("reason"):
            types_missing.append(f"{e['vision']} × {e['text']}: {e['first_neighbours']['reason']}")
    reorder = [{"pair": f"{e['vision']} × {e['text']}", "k": e.get("k"),
                "layers": "" if not e.get("layers") else f"{e['layers'][0]} × {e['layers'][1]}",
                "positive": e.get("positive"), "negative": e.get("negative"), "drop": e.get("drop"),
                "note": e.get("reason") or ""}
               for e in payload.get("reorder", [])]
    arrow = [{"model": e["vision"], "n_frames": e["n_frames"], "layer": l,
              "depth": l / max(1, len(e["per_layer"]) - 1),
              "arrow_of_time": v if v is not None and np.isfinite(v) else None,
              "note": (e.get("reasons") or {}).get(str(l), "")}
             for e in payload.get("arrow_of_time", []) for l, v in enumerate(e["per_layer"])]
    return {"tot": pd.DataFrame(tot), "types": pd.DataFrame(types), "reorder": pd.DataFrame(reorder),
            "arrow": pd.DataFrame(arrow), "chiral": payload.get("chiral", []), "notes": payload.get("notes", []),
            "types_missing": types_missing}


# ---------------------------------------------------------------- neighbours


def items(con, dataset) -> pd.DataFrame:
    return _df(con, "SELECT idx, item_id, video, captions FROM items WHERE dataset = ? ORDER BY idx", [dataset])


def runs_for_neighbours(con, dataset) -> pd.DataFrame:
    return _df(con, "SELECT run_id, model, modality, n_frames, n_captions, n_layers FROM runs WHERE dataset = ? "
                    "AND status = 'done' AND variant = 'original' ORDER BY model, n_frames, n_captions", [dataset])


def neighbours(con, run_id: str, layer: int, idx: int, k: int = 5) -> pd.DataFrame:
    """The k nearest items (cosine) to item ``idx`` in one layer of one run: one small query, one row of maths."""
    from analysis.storage.store import load_layer

    X, ids = load_layer(con, run_id, layer, with_idx=True)
    X = l2_normalize(X.astype(np.float64))
    pos = int(np.flatnonzero(ids == idx)[0])
    sims = X @ X[pos]
    sims[pos] = -np.inf
    order = np.argsort(-sims)[:k]
    return pd.DataFrame({"rank": np.arange(1, len(order) + 1), "idx": ids[order], "cosine": sims[order]})


# ---------------------------------------------------------------- provenance


def provenance(con, run_ids=()) -> dict:
    """Model revisions, dataset sizes, code versions and parameters behind a view."""
    out = {"schema_tables": TABLE_NAMES}
    if not run_ids:
        return out
    placeholders = ", ".join("?" * len(run_ids))
    out["runs"] = _df(con, f"SELECT r.run_id, r.model, m.revision, r.dataset, r.n_items, r.n_frames, r.n_captions, "
                           f"r.dtype, r.code_version, r.finished FROM runs r JOIN models m USING (model) "
                           f"WHERE r.run_id IN ({placeholders})", list(run_ids))
    return out


def metric_direction(metric: str) -> str:
    hib = REGISTRY[metric].higher_is_better
    return {True: "higher is better", False: "lower is better", None: "no preferred direction"}[hib]


def chance_level(metric: str, n_items: int | None, params: dict | None = None) -> float | None:
    """The metric's expected value on unrelated spaces (registry ``chance``, e.g. mutual k-NN's
    k/(N−1)) for ``n_items`` items and the stored parameters; None where none is defined."""
    spec = REGISTRY.get(metric)
    if spec is None or spec.chance is None or not n_items or n_items < 2:
        return None
    known = spec.params
    return float(spec.chance(int(n_items), **spec.resolve(**{k: v for k, v in (params or {}).items() if k in known})))


def metric_help(metric: str, n_items: int | None = None, params: dict | None = None) -> str:
    """One paragraph on a registered metric, from the registry: what it measures, its range, its
    direction and its chance level (at ``n_items`` and ``params`` when given), and its reference."""
    spec = REGISTRY.get(metric)
    if spec is None:
        return ""
    lo, hi = spec.bounds
    rng = f"{'(−∞' if lo is None else f'[{lo:g}'}, {'∞)' if hi is None else f'{hi:g}]'}"
    text = (f"{metric}: {spec.summary}. Range {rng}; "
            f"{metric_direction(metric)}.")
    if spec.chance is not None:
        formula = {"mutual_knn": "k/(N−1)", "recall_at_k": "k/N", "mean_ap": "H_N/N", "median_rank": "(N+1)/2"}
        c = chance_level(metric, n_items, params)
        at = ", ".join(f"{k}={v}" for k, v in (params or {}).items() if k in spec.params)
        text += (f" Chance (unrelated spaces): {formula.get(metric, 'defined')}"
                 + (f" = {fmt_number(c)} at N={n_items}{', ' + at if at else ''}." if c is not None else "."))
    if spec.reference:
        text += f" Reference: {spec.reference}."
    return text


# ---------------------------------------------------------------- layer predictors


def _ci_text(ci) -> str:
    return "" if not ci or ci[0] is None else f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def _coverage_text(s: dict) -> str:
    """How many models a signal's ρ stands on, ``"1 model only"`` marked (payloads written before
    the coverage was stored: from the per-model counts)."""
    n = s.get("n_models_covered")
    if n is None:
        n = s["n_models_layers"] if s.get("rho_layers") is not None else s.get("n_models") or 0
    return "1 model only" if n == 1 else f"{n} models"


def predictor_task_label(t: dict) -> str:
    """``task · metric [setting]``, marked ``(fabricated)`` when its numbers are made up (the demo)."""
    label = f"{t['task']} · {t['metric']}" + (f" [{t['setting']}]" if t.get("setting") else "")
    return label + (" (fabricated)" if t.get("fabricated") and "fabricated" not in label.lower() else "")


def predictors_tables(con, dataset) -> dict | None:
    """The predictors study of ``dataset`` as tables (None when it has none):

    - ``table``: one row per (task, signal): rank (coverage first: the models the ρ stands on, then
      whether its interval excludes 0, then |ρ|; :func:`analysis.methods.predictors.rank_rows`), ``coverage``
      (``"3 models"``, ``"1 model only"``), Spearman ρ across layers (mean of per-model ρ)
      and pooled over models × layers, each with its bootstrap interval, counts of models, points
      and excluded layers, the task's direction and whether a higher signal goes with better results;
    - ``picks``: per (task, signal, model) the layer the signal picks vs the truly best, last and
      ``default`` layer, gaps in the task's metric (positive: the pick is better; ``shortfall`` >= 0);
    - ``models``: per (task, model) the truly best layer vs the last numbered layer and ``default``;
    - ``curves``: per (task, model, layer) the imported result, for a chart;
    - ``tasks`` (labels in order), ``fabricated`` (labels whose numbers are made up), ``notes``, ``setting``.
    """
    payload = study(con, "predictors", dataset)
    if payload is None:
        return None
    table, picks, models, curves = [], [], [], []
    for t in payload.get("tasks", []):
        label = predictor_task_label(t)
        direction = "higher is better" if t["higher_is_better"] else "lower is better"
        for s in t["signals"]:
            exc = s.get("excluded") or {}
            table.append({"task": label, "rank": s["rank"], "signal": s["signal"], "kind": s["kind"],
                          "coverage": _coverage_text(s), "interval excludes 0": s.get("ci_excludes_zero"),
                          "ρ across layers": s["rho_layers"], "interval (layers)": _ci_text(s["rho_layers_ci"]),
                          "models with ρ": s["n_models_layers"], "ρ pooled": s["rho_pooled"],
                          "interval (pooled)": _ci_text(s["rho_pooled_ci"]), "models": s["n_models"],
                          "layers used": s["n_points"],
                          "layers excluded": ", ".join(f"{v} {k}" for k, v in sorted(exc.items()) if v),
                          "higher signal goes with": ("" if s.get("better") is None else
                                                      "better results" if s["better"] else "worse results"),
                          "task direction": direction})
            for p in s.get("picks", []):
                picks.append({"task": label, "signal": s["signal"], "model": p["model"],
                              "picked layer": p["pick_layer"], "result there": p["pick_value"],
                              "truly best layer": p["best_layer"], "best result": p["best_value"],
                              "shortfall vs best": p["shortfall"], "last layer": p["last_layer"],
                              "pick vs last": p["vs_last"], "default layer": p["default_layer"],
                              "pick vs default": p["vs_default"], "found best": bool(p["found_best"])})
        for e in t["models"]:
            models.append({"task": label, "model": e["model"], "truly best layer": e["best_layer"],
                           "best result": e["best_value"], "last layer": e["last_layer"],
                           "last result": e["last_value"], "best vs last": e["best_vs_last"],
                           "default layer": e["default_layer"], "default result": e["default_value"],
                           "best vs default": e["best_vs_default"]})
            curves += [{"task": label, "model": e["model"], "layer": layer, "result": v}
                       for layer, v in zip(e["layers"], e["values"])]
    tasks = [predictor_task_label(t) for t in payload.get("tasks", [])]
    return {"table": pd.DataFrame(table), "picks": pd.DataFrame(picks), "models": pd.DataFrame(models),
            "curves": pd.DataFrame(curves), "tasks": tasks,
            "fabricated": [predictor_task_label(t) for t in payload.get("tasks", []) if t.get("fabricated")],
            "notes": payload.get("notes", []), "setting": payload.get("setting"),
            "level": payload.get("level"), "n_boot": payload.get("n_boot")}


def predictor_matrix(table: pd.DataFrame, statistic: str = "ρ across layers") -> pd.DataFrame:
    """Signal × task grid of ``statistic`` with its interval as text (``"0.93 [0.80, 1.00]"``, marked
    ``(1 model only)`` when it stands on one model), rows ordered by the best rank a signal reaches
    in any task."""
    if not len(table):
        return pd.DataFrame()
    ci = "interval (layers)" if statistic == "ρ across layers" else "interval (pooled)"
    one = table["coverage"] == "1 model only" if "coverage" in table else [False] * len(table)
    cells = table.assign(cell=[("—" if v is None or not np.isfinite(v) else
                                f"{v:+.2f} {c}".strip() + (" (1 model only)" if o else ""))
                               for v, c, o in zip(table[statistic], table[ci], one)])
    grid = cells.pivot_table(index="signal", columns="task", values="cell", aggfunc="first")
    order = cells.groupby("signal")["rank"].min().sort_values(kind="stable").index
    return grid.reindex(order).reset_index()


# ---------------------------------------------------------------- embedding map


def embedding_maps(con, dataset) -> pd.DataFrame:
    """The stored embedding maps of a dataset (what the page can pick): one row per map with
    ``result_id, subject, kind, models, layers, why, requested, reason`` (``reason``: why the layer
    has no picture, else empty). Two-sided maps (a shared space) come first."""
    cols = ["result_id", "subject", "kind", "models", "layers", "why", "requested", "reason"]
    if not has_table(con, "result_studies"):
        return pd.DataFrame(columns=cols)
    rows = R.read_studies(con, study="embedding_map", dataset=dataset)
    out = pd.DataFrame([{"result_id": r["result_id"], "subject": r["subject"], "kind": r["payload"]["kind"],
                         "models": tuple(r["payload"]["models"]), "layers": tuple(r["payload"]["layers"]),
                         "why": r["payload"]["why"], "requested": bool(r["payload"].get("requested")),
                         "reason": r["payload"].get("reason") or ""} for r in rows], columns=cols)
    if out.empty:
        return out
    out["order"] = out["kind"] != "pair"
    return out.sort_values(["order", "subject"]).drop(columns="order").reset_index(drop=True)


def _caption_text(captions, n_captions) -> str:
    """The caption(s) a run embedded (its first ``n_captions``; a vision run: the first), shortened."""
    caps = [str(c) for c in (list(captions) if captions is not None else [])]
    text = " | ".join(caps[: max(1, int(n_captions or 1))])
    return text if len(text) <= 160 else text[:157] + "..."


#: a metadata field colours a map when it has between 2 and this many values over the items
MAX_COLOUR_LEVELS = 12


def categorical_metadata(metadata: list, max_levels: int = MAX_COLOUR_LEVELS) -> pd.DataFrame:
    """Item metadata usable as a map's colour: one column per field with 2..``max_levels`` distinct
    values over the items (``metadata``: one dict per item, in order). Nested dicts are flattened one
    level (``{"scene": {"colour": ..}}`` gives ``scene_colour``: no dots, which Vega-Lite would read
    as nesting); lists and private fields (a leading ``_``) are left out; a missing value is ``none``."""
    flat = []
    for md in metadata:
        row = {}
        for k, v in (md or {}).items():
            if str(k).startswith("_"):
                continue
            inner = v.items() if isinstance(v, dict) else [(None, v)]
            for k2, v2 in inner:
                if v2 is None or isinstance(v2, (str, int, float, bool)):
                    name = str(k) if k2 is None else f"{k}_{k2}"
                    row[name.replace(".", "_")] = "none" if v2 is None else str(v2)
        flat.append(row)
    df = pd.DataFrame(flat, index=range(len(metadata))).fillna("none")
    keep = [c for c in df.columns if 2 <= df[c].nunique() <= max_levels]
    return df[sorted(keep)]


def embedding_map_points(con, result_id) -> dict:
    """One stored map as points to draw: ``{"points": DataFrame, "meta": dict, "reason": str | None}``.

    ``points`` has one row per drawn point: ``x, y, side`` (``video``/``image``/``text``), ``series``
    (model, side and layer, with "(random init)" where the weights are random), ``idx, item_id,
    caption`` (the caption(s) that side embedded), ``video`` (the item's file, for a frame on hover).
    ``meta`` holds the map's settings and notes (sampled items, duplicates, n_neighbors, seed), and
    ``colour_fields``: the item metadata columns added to ``points`` (:func:`categorical_metadata`).
    """
    rows = R.read_studies(con, study="embedding_map", result_id=result_id)
    if not rows:
        raise ValueError(f"no embedding map {result_id!r} in this store")
    r = rows[0]
    p = r["payload"]
    labels = model_labels(con)
    meta = {k: p.get(k) for k in ("kind", "models", "layers", "layer_names", "sides", "why", "requested", "n_items",
                                  "sampled", "n_neighbors", "min_dist", "seed", "n_distinct", "n_duplicates")}
    meta.update(subject=r["subject"], dataset=r["dataset"], run_ids=p["run_ids"],
                random_init=[labels.get(m, m) != m for m in p["models"]])
    if p.get("reason"):
        return {"points": pd.DataFrame(), "meta": meta, "reason": p["reason"]}
    import json

    it = items(con, r["dataset"]).set_index("idx")
    md = _df(con, "SELECT idx, metadata FROM items WHERE dataset = ? ORDER BY idx", [r["dataset"]])
    cats = categorical_metadata([json.loads(m) if isinstance(m, str) else (m or {}) for m in md["metadata"]])
    cats.index = md["idx"].to_numpy()
    meta["colour_fields"] = [c for c in cats.columns if c not in {"x", "y", "side", "series", "idx", "item_id",
                                                                  "video", "caption", "image"}]
    idx = np.asarray(p["items"], dtype=int)
    n = len(idx)
    side_of = np.asarray(p["side"] if p.get("side") is not None else [0] * n, dtype=int)
    pos = np.tile(idx, len(p["run_ids"]))
    frames = []
    for s, (model, side, layer, name, setting) in enumerate(zip(p["models"], p["sides"], p["layers"],
                                                                p["layer_names"], p["settings"])):
        sel = side_of == s
        ids = pos[sel]
        layer_text = f"L{layer}" + (f" ({name})" if name else "")
        frames.append(pd.DataFrame({
            "x": np.asarray(p["x"])[sel], "y": np.asarray(p["y"])[sel], "side": side,
            "series": f"{labels.get(model, model)} · {side} {layer_text}", "idx": ids,
            "item_id": it.loc[ids, "item_id"].to_numpy(), "video": it.loc[ids, "video"].to_numpy(),
            "caption": [_caption_text(it.at[i, "captions"], setting.get("n_captions") if side == "text" else 1)
                        for i in ids]}))
    points = pd.concat(frames, ignore_index=True)
    for c in meta["colour_fields"]:
        points[c] = cats.loc[points["idx"], c].to_numpy()
    return {"points": points, "meta": meta, "reason": None}


def map_command(store_path: str, dataset: str, model: str, layer, side: str = "auto") -> str:
    """The command that computes a map the dashboard does not hold (the dashboard never writes)."""
    import shlex

    parts = ["layerscope", "map", "--store", store_path, "--dataset", dataset, "--model", model, "--layer", str(layer)]
    if side != "auto":
        parts += ["--side", side]
    return " ".join(shlex.quote(str(x)) for x in parts)


# ---------------------------------------------------------------- charts (Altair specs; pages render them)


def _alt():
    import altair as alt  # only pages and reports draw

    return alt


def chart_title(text: str, *, dataset: str | None = None, details=(), labels: dict | None = None,
                models=()) -> dict:
    """A self-describing chart title: the text, then the dataset, budgets and other details, and
    "(random init)" on models with random weights, so an exported PNG/SVG says what it shows."""
    sub = [f"dataset {dataset}"] if dataset else []
    sub += [d for d in details if d]
    untrained = [m for m in models if (labels or {}).get(m, m).endswith("(random init)")]
    if untrained:
        sub.append(f"random init (untrained weights): {', '.join(untrained)}")
    return {"text": text, "subtitle": sub, "anchor": "start"}  # one subtitle line each: exports stay narrow


def baselines(metric: str, values, *, n_items=None, params=None, chance_label: str | None = None) -> list:
    """Reference levels worth drawing for ``metric`` next to ``values``: its chance level (registry
    ``chance``) and the bounds of its range that lie near the data (within a quarter of the data's
    span), as ``[(level, label)]``. A bound far off the data is said in the caption, not drawn."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    out = []
    c = chance_level(metric, n_items, params)
    if c is not None:
        out.append((c, chance_label or f"chance {fmt_number(c)}"))
    spec = REGISTRY.get(metric)
    if spec is not None and len(v):
        span = max(float(np.ptp(v)), 1e-12)
        for b, name in zip(spec.bounds, ("lower bound", "upper bound")):
            if b is not None and v.min() - span / 4 <= b <= v.max() + span / 4:
                out.append((float(b), f"{name} {b:g}"))
    return out



def baseline_rules(rules, field: str) -> list:
    """Dashed horizontal rules with a label for baselines (chance, bounds, a fitted ceiling):
    ``rules`` is ``[(value, name)]``, ``field`` the y field of the chart they join. Empty for none."""
    if not rules:
        return []
    import altair as alt

    df = pd.DataFrame([{field: float(v), "baseline": name} for v, name in rules])
    return [alt.Chart(df).mark_rule(strokeDash=[5, 4], color="#6e7781").encode(
                y=f"{field}:Q", tooltip=["baseline", alt.Tooltip(f"{field}:Q", format=".4g")]),
            alt.Chart(df).mark_text(align="left", dx=4, dy=-6, color="#57606a", fontSize=11).encode(
                y=f"{field}:Q", x=alt.value(0), text="baseline:N")]


def curves_chart(data: pd.DataFrame, metric: str, *, labels: dict, marks: pd.DataFrame | None = None,
                 intervals: pd.DataFrame | None = None, rules=(), title: dict | None = None, height: int = 380,
                 null_levels: pd.DataFrame | None = None):
    """Per-layer curves on relative depth: one line per model (legend by model label, "(random
    init)" included), the recommended layers as diamonds, flagged values ringed, stored intervals
    as error bars, reference rules (chance, bounds) dashed, and each model's shuffled-pairing null
    (``null_levels`` rows of :func:`curve_null_levels`: the 95th percentile of the grid maximum
    under random pairings) dotted in the model's colour."""
    alt = _alt()
    d = data.assign(model=data["model"].map(lambda m: labels.get(m, m)))
    tips = ["model", "layer", alt.Tooltip("value:Q", format=".4g")] + (["note"] if "note" in d else [])
    x = alt.X("depth:Q", title="relative depth (0 = embeddings, 1 = last layer)", scale=alt.Scale(domain=[0, 1]))
    y = alt.Y("value:Q", title=metric, scale=alt.Scale(zero=False))
    color = alt.Color("model:N", title="model")
    layers = [alt.Chart(d).mark_line().encode(x=x, y=y, color=color, tooltip=tips),
              alt.Chart(d).mark_point(filled=True, size=40).encode(x=x, y=y, color="model:N",
                                                                     tooltip=tips)]
    if intervals is not None and len(intervals):
        iv = intervals.assign(model=intervals["model"].map(lambda m: labels.get(m, m)))
        layers.append(alt.Chart(iv).mark_rule(strokeWidth=2).encode(
            x="depth:Q", y="low:Q", y2="high:Q", color="model:N",
            tooltip=["model", "layer", alt.Tooltip("low:Q", format=".4g", title="95% CI low"),
                     alt.Tooltip("high:Q", format=".4g", title="95% CI high"), alt.Tooltip("n_boot:Q", title="resamples")]))
    if marks is not None and len(marks):
        mk = marks.assign(model=marks["model"].map(lambda m: labels.get(m, m)))
        layers.append(alt.Chart(mk).mark_point(size=180, shape="diamond", filled=True).encode(
            x="depth:Q", y="value:Q", color="model:N", tooltip=["model", "layer", "metric"]))
    if "flagged" in d:
        flagged = d[d["flagged"] & d["value"].notna()]
        if len(flagged):  # a value that needs a note (collapsed layer, duplicates merged) is ringed
            layers.append(alt.Chart(flagged).mark_point(size=260, shape="circle", color="#d62728", filled=False)
                          .encode(x="depth:Q", y="value:Q", tooltip=["model", "layer", "value", "note"]))
    if null_levels is not None and len(null_levels):
        nl = null_levels.assign(model=null_levels["model"].map(lambda m: labels.get(m, m)))
        layers.append(alt.Chart(nl).mark_rule(strokeDash=[2, 3], strokeWidth=1.5).encode(
            y="q95:Q", color="model:N",
            tooltip=["model", alt.Tooltip("q95:Q", format=".4g", title="shuffled null, 95th percentile"),
                     alt.Tooltip("p:Q", format=".3g", title="best cell p"), alt.Tooltip("n_perm:Q", title="shuffles")]))
    layers += baseline_rules(rules, "value")
    chart = alt.layer(*layers).properties(height=height)
    return chart.properties(title=title) if title else chart


def budget_text(data: pd.DataFrame, choices: dict, models) -> str:
    """The test-time budgets behind a curve chart, e.g. "each model at its largest budget: n_f 4, n_c 4"."""
    nf, nc = set(), set()
    if "n_frames" in data:
        nf |= {int(x) for x in data["n_frames"].dropna()}
        nc |= {int(x) for x in data["n_captions"].dropna()}
    else:
        for m in models:
            st = (choices.get(m) or {}).get("setting") or {}
            nf |= {int(st["n_frames"])} if st.get("n_frames") is not None else set()
            nc |= {int(st["n_captions"])} if st.get("n_captions") is not None else set()
    parts = ([f"n_f {', '.join(map(str, sorted(nf)))}"] if nf else []) + (
        [f"n_c {', '.join(map(str, sorted(nc)))}"] if nc else [])
    return f"each model at its largest budget: {'; '.join(parts)}" if parts else ""


def uncertainty_text(intervals: pd.DataFrame, is_alignment: bool, n_items) -> str:
    """What the curve chart shows of uncertainty, and what was not computed."""
    on = f" on all {n_items} items" if n_items else ""
    if is_alignment and len(intervals):
        boots = sorted({int(b) for b in intervals["n_boot"]})
        return (f"Error bars: the 95% bootstrap interval of the grid's best cell ({', '.join(map(str, boots))} item "
                "resamples), at each model's best layer. Other layers' values are point estimates"
                f"{on}: no per-layer interval was computed.")
    if is_alignment:
        return (f"No interval is drawn: the best cells' bootstrap was off (`--bootstrap 0`) or undefined; values are "
                f"point estimates{on}.")
    return f"Values are point estimates{on}: per-layer profiles have no stored intervals, so none is drawn."


def export_name(kind: str, dataset: str, *parts) -> str:
    """A file name stem for downloads that says what they hold: ``curves_DATASET_METRIC`` (unsafe
    characters replaced)."""
    stem = "_".join(str(x) for x in (kind, dataset, *parts) if x not in (None, ""))
    return re.sub(r"[^A-Za-z0-9._=-]+", "-", stem).strip("-")[:150]


def scaling_panels(sv: dict, *, title: dict | None = None):
    """The two scaling panels of :func:`scaling_view` — score against n_f (one colour per n_c) and
    against n_c (one colour per n_f) — as separate charts, so each has its own colour scale and
    legend and each fits its column. Points carry their best cell's stored 95% bootstrap interval as
    an error bar; the drawn law's curves, the chance level, the fitted ceiling S∞ (when the fit is
    trusted) and bounds near the data are drawn. Returns ``(panel_frames, panel_captions, export)``,
    ``export`` being both stacked with independent colours and the title, for PNG/SVG."""
    alt = _alt()
    pts = sv["points"][sv["points"]["score"].notna()]
    fit = sv.get("fit") or {}
    rules = []
    if sv.get("chance") is not None:
        rules.append((sv["chance"], "chance"))
    s_inf = (fit.get("params") or {}).get("s_inf")
    if s_inf is not None and sv.get("status") in (None, "ok") and "s_inf" not in sv.get("undetermined", {}):
        rules.append((s_inf, f"fitted ceiling S∞ {fmt_number(s_inf)}"))
    rules += [r for r in baselines(sv.get("metric", ""), pts["score"]) if "bound" in r[1]]
    panels = []
    for x, other, x_title, other_title, curve in (
            ("n_frames", "n_captions", "frames n_f", "n_c", sv.get("curve_vs_frames")),
            ("n_captions", "n_frames", "captions n_c", "n_f", sv.get("curve_vs_captions"))):
        color = alt.Color(f"{other}:O", title=other_title, scale=alt.Scale(scheme="tableau10"),
                          legend=alt.Legend(orient="bottom", direction="horizontal"))
        # the data's own range (a "nice" log axis would run on to the next power of ten)
        budgets = sorted(float(v) for v in pts[x].unique())
        xs = alt.X(f"{x}:Q", title=x_title, axis=alt.Axis(values=budgets) if budgets else alt.Undefined,
                   scale=alt.Scale(type="log", nice=False, padding=14,
                                   domain=[budgets[0], budgets[-1]] if budgets else alt.Undefined))
        tips = [alt.Tooltip("n_frames:Q", title="n_f"), alt.Tooltip("n_captions:Q", title="n_c"),
                alt.Tooltip("score:Q", format=".4g"), alt.Tooltip("ci_low:Q", format=".4g", title="95% CI low"),
                alt.Tooltip("ci_high:Q", format=".4g", title="95% CI high"), alt.Tooltip("n_boot:Q", title="resamples")]
        layers = [alt.Chart(pts).mark_point(filled=True, size=70).encode(
            x=xs, y=alt.Y("score:Q", title=sv.get("metric") or "score", scale=alt.Scale(zero=False)), color=color,
            tooltip=tips)]
        bars = pts[pts["ci_low"].notna()]
        if len(bars):
            layers.append(alt.Chart(bars).mark_rule().encode(x=f"{x}:Q", y="ci_low:Q", y2="ci_high:Q", color=color))
        if curve is not None and len(curve):
            # one dash per form, named with its own R² in the legend (DR's law solid, listed first)
            dash = alt.StrokeDash("form:N", title="curve", sort=list(dict.fromkeys(curve["form"])),
                                  legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=400))
            layers.append(alt.Chart(curve).mark_line().encode(
                x=f"{x}:Q", y="score:Q", color=color, strokeDash=dash,
                tooltip=[alt.Tooltip("n_frames:Q", format=".3g", title="n_f"),
                         alt.Tooltip("n_captions:Q", format=".3g", title="n_c"),
                         alt.Tooltip("score:Q", format=".4g", title="law"), alt.Tooltip("form:N", title="curve")]))
        layers += baseline_rules(rules, "score")
        panels.append(alt.layer(*layers).properties(height=240))
    export = alt.vconcat(*(p.properties(width=520) for p in panels)).resolve_scale(color="independent")
    return panels[0], panels[1], (export.properties(title=title) if title else export)


def scaling_uncertainty_text(sv: dict) -> str:
    """What the scaling panels show of uncertainty and baselines, and what was not computed."""
    pts = sv["points"]
    with_ci = pts["ci_low"].notna().sum() if "ci_low" in pts else 0
    boots = sorted({int(b) for b in pts.get("n_boot", pd.Series(dtype=float)).dropna()})
    parts = []
    if with_ci:
        parts.append(f"Error bars: each point's 95% bootstrap interval (its grid's best cell, {', '.join(map(str, boots))} "
                     f"item resamples; {with_ci} of {len(pts)} points).")
    else:
        parts.append("No error bars: the grids' bootstrap was off or undefined.")
    if sv.get("intervals"):
        parts.append(f"The parameter intervals in the table come from {sv.get('intervals_n_boot') or 'the'} refits on "
                     "item resamples; no band is drawn around the curve (per-parameter intervals do not make one).")
    if sv.get("chance") is not None:
        parts.append(f"Chance (unrelated spaces) = {fmt_number(sv['chance'])} at N = {sv['n_items']}.")
    if (sv.get("fit") or {}).get("params") and sv.get("status") not in (None, "ok"):
        parts.append("S∞ is not drawn: the fit cannot determine it here.")
    return " ".join(parts)


def budget_lists(points: pd.DataFrame) -> list[str]:
    """``["n_f 1, 2, 4", "n_c 1, 2"]``: the budgets a scaling chart spans."""
    return [f"{name} {', '.join(str(int(x)) for x in sorted(points[col].dropna().unique()))}"
            for col, name in (("n_frames", "n_f"), ("n_captions", "n_c")) if col in points]


def model_map_charts(mv: dict, *, labels: dict, title: dict | None = None):
    """The model map's two charts: the similarity matrix (values written in the cells while the
    matrix is small enough to read) and the 2-D map with one shape per modality, one colour per
    cluster, and equal scales on both axes (a distance on the map means the same either way).
    Model names carry "(random init)". Returns ``(matrix, map)``."""
    alt = _alt()
    cells = mv["cells"].assign(model_a=mv["cells"]["model_a"].map(lambda m: labels.get(m, m)),
                               model_b=mv["cells"]["model_b"].map(lambda m: labels.get(m, m)))
    order = [labels.get(m, m) for m in mv["order"]]
    base = alt.Chart(cells).encode(x=alt.X("model_b:N", sort=order, title=None),
                                   y=alt.Y("model_a:N", sort=order, title=None))
    heat = base.mark_rect().encode(color=alt.Color("similarity:Q", scale=alt.Scale(scheme="viridis"),
                                                   title="mutual k-NN"),
                                   tooltip=["model_a", "model_b", alt.Tooltip("similarity:Q", format=".3f")])
    if len(order) <= 10:
        heat = heat + base.mark_text(fontSize=11).encode(
            text=alt.Text("similarity:Q", format=".2f"),
            color=alt.condition(alt.datum.similarity > 0.5 * float(cells["similarity"].max() or 1),
                                alt.value("black"), alt.value("white")))
    coords = mv["coords"].assign(model=mv["coords"]["model"].map(lambda m: labels.get(m, m)))
    half = max(float(np.ptp(coords["x"])), float(np.ptp(coords["y"])), 1e-9) / 2 * 1.25
    cx, cy = float(coords["x"].mean()) if len(coords) else 0.0, float(coords["y"].mean()) if len(coords) else 0.0
    sx = alt.Scale(domain=[cx - half, cx + half], nice=False, zero=False)
    sy = alt.Scale(domain=[cy - half, cy + half], nice=False, zero=False)
    points = alt.Chart(coords).mark_point(filled=True, size=220, opacity=0.9).encode(
        x=alt.X("x:Q", title="MDS 1", scale=sx), y=alt.Y("y:Q", title="MDS 2", scale=sy),
        color=alt.Color("cluster:N", title="cluster"), shape=alt.Shape("modality:N", title="modality"),
        tooltip=["model", "modality", "cluster"])
    names = points.mark_text(dy=-16, fontSize=11).encode(text="model:N", shape=alt.value("circle"))
    side = 380
    matrix = heat.properties(width=side, height=side)
    mapped = (points + names).properties(width=side, height=side)  # square, same domain span: equal scales
    if title:
        matrix = matrix.properties(title=title)
        mapped = mapped.properties(title={**title, "text": "2-D map (classical MDS of 1 − similarity)"})
    return matrix, mapped
