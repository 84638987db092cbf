"""Predictors study: which label-free per-layer signal predicts per-layer downstream results
(``result_studies``, study ``predictors``, one row per dataset, subject ``all``).

Inputs: the per-layer rows of ``downstream_results`` (``layer`` >= 0) and the probes measured on this
dataset (:func:`analysis.studies.probes.measured_rows`: setting ``measured``), and for each model with such
rows the run the downstream study would use (``--downstream-setting``: paper or largest). Reads
only stored results (run it after profiles and grids); nothing here prepares a run.

Signals, one value per layer of the model's run:

- ``rankme``, ``lid``, ``uniformity``: the profiles (``result_profiles``).
- ``alignment with <ref> (<metric>)``: for each reference side (``--reference``, else every text
  side; a two-sided model's is named ``<model> [text]``, :mod:`analysis.sides`) and each grid
  metric, the row maximum of the stored vision×text grid: layer ``l``'s best score against any
  layer of the reference, ``max_j grid[l, j]``, over the reference's non-degenerate layers. (A
  text model's own rows use the column maximum of grids where it is the columns.)
- ``<metric> with <model_b> (<space>)`` (``<model_b> [text]`` when it has two sides): same-space and
  distributional values stored by the same-space study (``result_studies``, study ``same_space``,
  subject ``"<model_a>|<model_b>"``, payload ``{"run_a", "layers_a", "space", "metrics": {name:
  {"values", "higher_is_better"}}}``),
  when present for the model's run.

Signals are ordered by :func:`analysis.methods.predictors.rank_rows` (coverage, then an interval that excludes
0, then |ρ|). Excluded layers are counted per (task, signal), never used: ``degenerate`` (the run's layer is
collapsed, rank 1 or has < 2 distinct rows), ``undefined`` (the signal is NaN there) and
``missing`` (the signal has no value for that layer, e.g. a joint-space metric at a numbered layer).

Payload: ``{"tasks": [{"task", "metric", "setting", "higher_is_better", "fabricated", "measured", "sources",
"models": [{"model", "layers", "values", "best_layer", "best_value", "last_layer", "last_value",
"default_layer", "default_value", "best_vs_last", "best_vs_default"}], "signals": [{"signal",
"kind", "signal_higher_is_better", "rank", "rho_layers", "rho_layers_ci", "per_model_rho",
"rho_undefined" ({model: why its ρ is undefined: too_few_layers, constant_signal, constant_result
or constant_both; :func:`analysis.methods.predictors.undefined_rho`}), "n_models_layers", "rho_pooled",
"rho_pooled_ci", "n_points", "n_models", "n_models_covered", "ci_excludes_zero", "one_model", "better",
"excluded", "picks": [analysis.methods.predictors.signal_pick]}]}],
"models": {model: run setting and layers},
"models_without_runs", "notes", "setting", "n_boot", "level"}``.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from analysis.storage import results as R
from analysis.methods.downstream import better_direction
from analysis.methods.predictors import Series, layer_comparison, predictor_correlation, rank_rows, signal_pick
from analysis.registry import get_metric
from analysis.storage.schema import MODEL_LEVEL
from analysis.studies.context import Context, DatasetRuns
from analysis.studies.downstream import references
from analysis.studies.probes import MEASURED, measured_rows
from analysis.studies.profiles import PROFILE_METRICS

LEVEL = 0.95


def _run_layers(run: dict) -> dict:
    """Last numbered layer and the ``default`` layer of a run (from its config's ``layer_names``)."""
    import json

    cfg = run.get("config")
    cfg = json.loads(cfg) if isinstance(cfg, str) else (cfg or {})
    names = {int(i): n for i, n in (cfg.get("layer_names") or {}).items()}
    numbered = [i for i in range(int(run["n_layers"])) if i not in names]
    default = [i for i, n in names.items() if n == "default"]
    return {"n_layers": int(run["n_layers"]), "layer_names": {str(i): n for i, n in sorted(names.items())},
            "last_layer": max(numbered) if numbered else None, "default_layer": default[0] if default else None}


def _row_max(grid: np.ndarray, skip_cols) -> np.ndarray:
    g = np.array(grid, dtype=float)
    if skip_cols:
        g[:, [c for c in skip_cols if c < g.shape[1]]] = np.nan
    filled = np.where(np.isfinite(g), g, -np.inf).max(axis=1)
    return np.where(np.isfinite(filled), filled, np.nan)


def _stored_grid(ctx: Context, a: dict, b: dict, metric: str):
    """``(grid, the columns' degenerate layers, result id)`` of runs ``a`` × ``b`` (rows: ``a``) as
    stored, or None. A mutual k-NN grid of ``b`` × ``a`` serves transposed."""
    params = ctx.settings.params_for(metric)
    for x, y, flip in ((a, b, False), (b, a, True)):
        if flip and metric != "mutual_knn":  # only mutual k-NN cells are exactly symmetric
            break
        g = ctx.result_row("result_grids", x["dataset"], ctx.rid("grid", x["run_id"], y["run_id"], metric, params))
        if g is not None:
            flags = g.get("flags") or {}
            if flip:
                return g["grid"].T, flags.get("degenerate_a") or {}, g["result_id"]
            return g["grid"], flags.get("degenerate_b") or {}, g["result_id"]
    return None


def signals_for(ctx: Context, d: DatasetRuns, model: str, run: dict, chosen: dict, refs: dict) -> dict:
    """``{signal name: {"values" (L,), "run_id", "kind", "higher_is_better", "source"}}`` of one
    model's run, from stored results only. ``refs``: ``{label: key of chosen}``
    (:func:`.downstream.references`: sides named, ``clip [text]``)."""
    out = {}
    for prof in ctx.current_profiles(d.name, run["run_id"], PROFILE_METRICS):
        out[prof["metric"]] = {"values": prof["layer_values"], "run_id": run["run_id"], "kind": "profile",
                               "higher_is_better": get_metric(prof["metric"]).higher_is_better,
                               "source": prof["result_id"]}
    for label, key in refs.items():
        if chosen[key]["run_id"] == run["run_id"]:
            continue
        for metric in ctx.settings.metrics:
            got = _stored_grid(ctx, run, chosen[key], metric)
            if got is None:
                continue
            grid, ref_bad, rid = got
            out[f"alignment with {label} ({metric})"] = {
                "values": _row_max(grid, [int(i) for i in ref_bad]), "run_id": run["run_id"], "kind": "pairwise",
                "higher_is_better": get_metric(metric).higher_is_better, "source": rid}
    other_runs = set()
    for st in ctx.read_studies(study="same_space", dataset=d.name):
        a, _, b = st["subject"].partition("|")
        p = st["payload"]
        if a != model:
            continue
        if p.get("run_a") != run["run_id"]:
            other_runs.add(str(p.get("run_a")))
            continue
        layers = [int(x) for x in p.get("layers_a") or []]
        for name, m in (p.get("metrics") or {}).items():
            values = np.full(int(run["n_layers"]), np.nan)
            present = np.zeros(int(run["n_layers"]), bool)
            for layer, v in zip(layers, m.get("values") or []):
                if 0 <= layer < len(values):
                    values[layer] = np.nan if v is None else float(v)
                    present[layer] = True
            # the partner is a caption side: a two-sided model's is named "<model> [text]"
            partner = f"{b} [text]" if f"{b} [text]" in chosen else b
            out[f"{name} with {partner} ({p.get('space', 'layers')})"] = {
                "values": values, "present": present, "run_id": p["run_a"], "kind": "same_space",
                "higher_is_better": m.get("higher_is_better"), "source": st["result_id"]}
    if other_runs and not any(sig["kind"] == "same_space" for sig in out.values()):
        ctx.note(f"dataset {d.name!r}: same-space values of {model} exist only for run(s) "
                 f"{', '.join(sorted(other_runs))}, not for the run the predictor table uses ({run['run_id']}, "
                 f"--downstream-setting {ctx.settings.downstream_setting}); left out")
    return out


def _usable(model, results: dict, sig: dict, bad: dict) -> tuple[Series, dict]:
    """The layers of ``results`` the signal can speak for, and the count of the others by reason."""
    v = np.asarray(sig["values"], dtype=float)
    present = sig.get("present")
    keep, excluded = [], {"degenerate": 0, "undefined": 0, "missing": 0}
    for layer in sorted(results):
        if layer >= len(v) or (present is not None and not present[layer]):
            excluded["missing"] += 1
        elif layer in bad:
            excluded["degenerate"] += 1
        elif not np.isfinite(v[layer]):
            excluded["undefined"] += 1
        else:
            keep.append(layer)
    layers = np.array(keep, dtype=int)
    return Series(model, layers, v[layers] if len(keep) else np.empty(0),
                  np.array([results[l] for l in keep], dtype=float)), excluded


def _tasks(rows: list[dict]) -> dict:
    """``{(task, metric, setting): {"results": {model: {layer: value}}, "hib", "sources", "names":
    {model: its default layer}}}`` of the per-layer downstream rows."""
    tasks = defaultdict(lambda: {"results": defaultdict(dict), "hib": None, "sources": set(), "names": {}})
    for r in rows:
        t = tasks[(r["task"], r["metric"], r["setting"])]
        t["results"][r["model"]][int(r["layer"])] = float(r["value"])
        t["hib"] = bool(r["higher_is_better"])
        t["sources"].add(str(r["source"]))
        if r["layer_name"] == "default":
            t["names"][r["model"]] = int(r["layer"])
    return tasks


def _signal_row(name: str, res: dict, signals: dict, bad: dict, layout: dict, entry: dict, hib: bool, s) -> dict:
    """One label-free signal against one task: its correlation over the models' usable layers, which
    layers were left out and why, and each model's pick by it."""
    series, excluded, picks, kind, shib = [], defaultdict(int), [], None, None
    for m in sorted(res):
        sig = signals[m].get(name)
        if sig is None:
            continue
        kind, shib = sig["kind"], sig["higher_is_better"]
        ser, exc = _usable(m, res[m], sig, bad.get(sig["run_id"], {}))
        for k, v in exc.items():
            excluded[k] += v
        if len(ser.layers):
            series.append(ser)
            if shib is not None:  # a signal without a direction (LID) is shown, not used to pick
                picks.append(signal_pick(ser, res[m], signal_higher_is_better=bool(shib),
                                         task_higher_is_better=hib,
                                         last_layer=layout[m]["last_layer"],
                                         default_layer=next(e["default_layer"] for e in entry["models"]
                                                            if e["model"] == m)))
    corr = predictor_correlation(series, n_boot=s.n_boot, level=LEVEL, seed=s.seed)
    rho = corr["rho_layers"] if corr["rho_layers"] is not None else corr["rho_pooled"]
    return {"signal": name, "kind": kind, "signal_higher_is_better": shib, **corr,
            "better": None if rho is None else better_direction(rho, hib),
            "excluded": dict(excluded), "picks": picks}


def run(ctx: Context, d: DatasetRuns) -> None:
    s = ctx.settings
    chosen = d.downstream_settings(ctx.con, s.downstream_setting)
    # imported per-layer results, then the probes measured on this dataset (setting "measured")
    rows = R.rows(ctx.con, "SELECT * FROM downstream_results WHERE layer <> ? ORDER BY task, metric, setting, "
                           "model, layer", [MODEL_LEVEL]) + measured_rows(ctx, d, chosen)
    if not rows:
        return
    refs = references(ctx, chosen)
    models = sorted({r["model"] for r in rows} & set(chosen))
    if not models:
        return
    signals = {m: signals_for(ctx, d, m, chosen[m], chosen, refs) for m in models}
    rid = ctx.rid("predictors", d.name, sorted(refs.items()), s.k, s.downstream_setting, list(s.metrics))
    # the numbers, not when they were imported: re-importing the same results reuses the table
    ikey = R.key([(r["model"], r["task"], r["metric"], r["setting"], r["layer"], r["value"], r["higher_is_better"],
                   r["source"]) for r in rows],
                 [(m, chosen[m]["run_id"], str(chosen[m]["finished"]),
                   sorted((n, sig["source"], np.asarray(sig["values"]).round(12).tolist())
                          for n, sig in signals[m].items())) for m in models], s.n_boot, s.seed)
    if not ctx.fresh("predictors", "result_studies", rid, ikey):
        return
    bad = {}  # degenerate layers per run: decided once, where the embeddings are
    for m in models:
        for sig in signals[m].values():
            if sig["run_id"] not in bad:
                bad[sig["run_id"]] = ctx.engine.degenerate_layers(sig["run_id"])
    layout = {m: {**_run_layers(chosen[m]), "run_id": chosen[m]["run_id"], "n_frames": chosen[m]["n_frames"],
                  "n_captions": chosen[m]["n_captions"], "modality": chosen[m]["modality"],
                  "degenerate_layers": {str(i): why for i, why in bad.get(chosen[m]["run_id"], {}).items()}}
              for m in models}
    notes, out_tasks = [], []
    for (task, tmetric, setting), t in sorted(_tasks(rows).items()):
        hib = t["hib"]
        res = {m: v for m, v in t["results"].items() if m in chosen}
        if not res:
            continue  # its models have no run here: named in models_without_runs
        entry = {"task": task, "metric": tmetric, "setting": setting, "higher_is_better": hib,
                 "sources": sorted(t["sources"]),
                 "fabricated": any("fabricated" in x.lower() for x in (task, setting, *t["sources"])),
                 "measured": setting == MEASURED,
                 "models": [], "signals": []}
        for m in sorted(res):
            default = layout[m]["default_layer"] if layout[m]["default_layer"] is not None else t["names"].get(m)
            cmp = layer_comparison(res[m], higher_is_better=hib, last_layer=layout[m]["last_layer"],
                                   default_layer=default)
            entry["models"].append({"model": m, "layers": sorted(res[m]), "values": [res[m][l] for l in sorted(res[m])],
                                    **cmp})
        names = sorted({n for m in res for n in signals[m]})
        table = [_signal_row(name, res, signals, bad, layout, entry, hib, s) for name in names]
        entry["signals"] = rank_rows(table)
        if not table:
            notes.append(f"task {task!r} ({tmetric}{', ' + setting if setting else ''}): no label-free signal is "
                         "stored for its models' runs yet")
        out_tasks.append(entry)
    unknown = sorted({r["model"] for r in rows} - set(chosen))
    if unknown:
        notes.append(f"per-layer results of {', '.join(unknown)} have no done run on dataset {d.name!r}: left out")
    ctx.put_study(result_id=rid, study="predictors", dataset=d.name, subject="all",
                params={"k": s.k, "references": list(refs), "metrics": list(s.metrics), "n_boot": s.n_boot,
                        "seed": s.seed, "setting": s.downstream_setting},
                payload={"tasks": out_tasks, "models": layout, "models_without_runs": unknown, "notes": notes,
                         "setting": s.downstream_setting, "n_boot": s.n_boot, "level": LEVEL},
                input_key=ikey)
