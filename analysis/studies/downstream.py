"""Downstream study: correlations between label-free scores and imported downstream results
(``result_studies``, study ``downstream``), and per-depth curves.

Scores per model (the run of ``--downstream-setting``):

- ``alignment with <reference>``: the best cell of the model × reference mutual k-NN grid as the grid
  study defines it (:func:`.grids.stored_best`: cells on degenerate layers never count; a grid
  with no valid cell or a flat one has no best). A reference is a side (:mod:`analysis.sides`): a
  text side unless the user names another (``clip [image]``), labelled ``clip [text]`` when the
  model has two sides; ``pair_kind`` says which kind of pair it is. Its per-layer curve is each
  layer's best over the reference's valid layers, NaN on the model's degenerate layers.
- ``rankme at last layer`` (curve: ``rankme``): the last layer's RankMe (none when that layer is
  degenerate).

A model without a score (no best cell, a degenerate last layer) is left out of that correlation and
named with the reason in the row's ``excluded``; a correlation that still cannot be computed keeps
``error``, which names the models left out and why. Depth curves leave a model out of the depths
where its layer has no value (:func:`analysis.methods.downstream.depth_curve`).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from analysis.storage import results as R
from analysis.methods.downstream import correlate, depth_curve
from analysis.storage.schema import MODEL_LEVEL
from analysis.sides import default_references, pair_kind, resolve_reference, side_label
from analysis.studies.context import Context, DatasetRuns
from analysis.studies.grids import stored_best


def references(ctx: Context, chosen: dict) -> dict[str, str]:
    """``{label: key of chosen}`` of the references: the user's ``--reference`` names resolved to
    sides (:func:`analysis.sides.resolve_reference`; one that has no run here is noted and skipped),
    else every text side."""
    names = list(ctx.settings.references)
    if not names:
        return {side_label(chosen[k], chosen): k for k in default_references(chosen)}
    out = {}
    for name in names:
        try:
            key = resolve_reference(name, chosen)
        except ValueError as exc:
            ctx.note(str(exc))
            continue
        out[side_label(chosen[key], chosen)] = key
    return out


def model_scores(ctx: Context, chosen: dict, refs: dict) -> tuple[dict, dict, dict, dict]:
    """``(scores, curves, excluded, kinds)``: ``scores[name][model]`` a float, ``curves[name][model]``
    ``(L,)`` (NaN on layers without a value), ``excluded[name][model]`` why a model has no score,
    ``kinds[name][model]`` the pair kind of an alignment score. Models are the vision sides of ``chosen``
    (downstream results are about a model's vision side) and one-sided text models."""
    scores, curves, excluded, kinds = defaultdict(dict), defaultdict(dict), defaultdict(dict), defaultdict(dict)
    own = {k: r for k, r in chosen.items() if k == r["model"]}  # "clip", not "clip [text]"
    for m, run in own.items():
        bad = ctx.engine.degenerate_layers(run["run_id"])
        for label, key in refs.items():
            ref = chosen[key]
            if ref["run_id"] == run["run_id"]:
                continue
            name = f"alignment with {label}"
            kinds[name][m] = pair_kind(run, ref)
            cell = stored_best(ctx, run, ref, "mutual_knn")
            curves[name][m] = cell.row_best()
            if cell.value is None:
                excluded[name][m] = cell.reason or "no best cell"
            else:
                scores[name][m] = cell.value
        rk = np.array(ctx.stored_profile(run["run_id"], "rankme", dataset=run["dataset"]), dtype=float)
        rk[[i for i in bad if i < len(rk)]] = np.nan  # a degenerate layer's value measures no representation
        curves["rankme"][m] = rk
        last = len(rk) - 1
        if last in bad or not np.isfinite(rk[last]):
            excluded["rankme at last layer"][m] = (f"layer {last} is degenerate ({bad[last]})" if last in bad
                                                   else f"RankMe is undefined at layer {last}")
        else:
            scores["rankme at last layer"][m] = float(rk[last])
    return scores, curves, excluded, kinds


def _why_not(exc: ValueError, left_out: dict) -> str:
    """A correlation's error, naming the models left out and why."""
    if not left_out:
        return str(exc)
    return f"{exc}; left out: " + "; ".join(f"{m}: {why}" for m, why in sorted(left_out.items()))


def run(ctx: Context, d: DatasetRuns) -> None:
    s = ctx.settings
    # whole-model results only: per-layer ones feed the predictors study
    rows = R.rows(ctx.con, "SELECT * FROM downstream_results WHERE layer = ? ORDER BY task, setting, model",
                  [MODEL_LEVEL])
    if not rows:
        return
    chosen = d.downstream_settings(ctx.con, s.downstream_setting)
    tasks = defaultdict(dict)
    hib = {}
    for r in rows:  # a task run in several settings is one task per setting: "task [setting]"
        name = f"{r['task']} [{r['setting']}]" if r["setting"] else r["task"]
        tasks[(name, r["metric"])][r["model"]] = r["value"]
        hib[(name, r["metric"])] = r["higher_is_better"]
    refs = references(ctx, chosen)
    rid = ctx.rid("downstream", d.name, sorted(refs.items()), s.k, s.downstream_setting)
    ikey = R.key(rows, [(m, c["run_id"], str(c["finished"])) for m, c in sorted(chosen.items())], s.n_boot)
    if not ctx.fresh("downstream", "result_studies", rid, ikey):
        return
    scores, curves, excluded, kinds = model_scores(ctx, chosen, refs)
    table = []
    for (task, tmetric), res in tasks.items():
        for score_name in sorted(set(scores) | set(excluded)):
            per_model = scores.get(score_name, {})
            common = sorted(set(per_model) & set(res))
            left_out = {m: why for m, why in excluded.get(score_name, {}).items() if m in res}
            entry = {"task": task, "task_metric": tmetric, "score": score_name, "models": common,
                     "x": [per_model[m] for m in common], "y": [res[m] for m in common],
                     "higher_is_better": bool(hib[(task, tmetric)]), "excluded": left_out}
            if score_name in kinds:  # of the models correlated (a text model's score is a text × text pair)
                entry["pair_kind"] = "/".join(sorted({kinds[score_name][m] for m in [*common, *left_out]}))
            try:
                c = correlate(entry["x"], entry["y"], higher_is_better=entry["higher_is_better"],
                              n_boot=s.n_boot, seed=s.seed)
                entry.update(c.__dict__)
            except ValueError as exc:
                entry["error"] = _why_not(exc, left_out)
            table.append(entry)
        for curve_name, per_model in curves.items():
            try:
                table.append({"task": task, "task_metric": tmetric, "curve": curve_name,
                              **depth_curve(per_model, res, higher_is_better=bool(hib[(task, tmetric)]))})
            except ValueError as exc:
                table.append({"task": task, "task_metric": tmetric, "curve": curve_name, "error": str(exc)})
    unknown = sorted({r["model"] for r in rows} - set(chosen))
    ctx.put_study(result_id=rid, study="downstream", dataset=d.name, subject="all",
                params={"k": s.k, "references": list(refs), "n_boot": s.n_boot, "setting": s.downstream_setting},
                payload={"rows": table, "models_without_runs": unknown, "setting": s.downstream_setting,
                         "references": {label: {"model": chosen[k]["model"], "modality": chosen[k]["modality"],
                                                "run_id": chosen[k]["run_id"]} for label, k in refs.items()},
                         "settings": {m: {"run_id": c["run_id"], "n_frames": c["n_frames"],
                                          "n_captions": c["n_captions"]} for m, c in sorted(chosen.items())}},
                input_key=ikey)
