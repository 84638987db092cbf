"""Downstream study: correlations between label-free scores and imported downstream results
(``result_studies``, study ``downstream``), and per-depth curves."""

from __future__ import annotations

from collections import defaultdict

from analysis.storage import results as R
from analysis.methods.downstream import correlate, depth_curve
from analysis.storage.schema import MODEL_LEVEL
from analysis.studies.context import Context, DatasetRuns
from analysis.studies.grids import stored_grid


def run(ctx: Context, d: DatasetRuns) -> None:
    s = ctx.settings
    # whole-model results only: per-layer ones feed the predictors study
    rows = R.rows(ctx.con, "SELECT * FROM downstream_results WHERE layer = ? ORDER BY task, setting, model",
                  [MODEL_LEVEL])
    if not rows:
        return
    chosen = d.downstream_settings(ctx.con, s.downstream_setting)
    refs = list(s.references) or sorted({r["model"] for r in d.text})
    tasks = defaultdict(dict)
    hib = {}
    for r in rows:  # a task run in several settings is one task per setting: "task [setting]"
        name = f"{r['task']} [{r['setting']}]" if r["setting"] else r["task"]
        tasks[(name, r["metric"])][r["model"]] = r["value"]
        hib[(name, r["metric"])] = r["higher_is_better"]
    rid = ctx.rid("downstream", d.name, refs, s.k, s.downstream_setting)
    ikey = R.key(rows, [(m, c["run_id"], str(c["finished"])) for m, c in sorted(chosen.items())], s.n_boot)
    if not ctx.fresh("downstream", "result_studies", rid, ikey):
        return
    # label-free scores per model: alignment with each reference at the best layer pair, and
    # per-layer curves (alignment row maxima, RankMe) for the depth curves
    scores, curves = defaultdict(dict), defaultdict(dict)
    for m, run in chosen.items():
        for ref in refs:
            if ref == m or ref not in chosen:
                continue
            g = stored_grid(ctx, run, chosen[ref], "mutual_knn", k=s.k)
            scores[f"alignment with {ref}"][m] = float(g.max())
            curves[f"alignment with {ref}"][m] = g.max(axis=1)
        rk = ctx.stored_profile(run["run_id"], "rankme", dataset=d.name)
        scores["rankme at last layer"][m] = float(rk[-1])
        curves["rankme"][m] = rk
    table = []
    for (task, tmetric), res in tasks.items():
        for score_name, per_model in scores.items():
            common = sorted(set(per_model) & set(res))
            entry = {"task": task, "task_metric": tmetric, "score": score_name, "models": common,
                     "x": [per_model[m] for m in common], "y": [res[m] for m in common],
                     "higher_is_better": bool(hib[(task, tmetric)])}
            try:
                c = correlate(entry["x"], entry["y"], higher_is_better=entry["higher_is_better"],
                              n_boot=s.n_boot, seed=s.seed)
                entry.update(c.__dict__)
            except ValueError as exc:
                entry["error"] = str(exc)
            table.append(entry)
        for curve_name, per_model in curves.items():
            try:
                table.append({"task": task, "task_metric": tmetric, "curve": curve_name,
                              **depth_curve(per_model, res, higher_is_better=bool(hib[(task, tmetric)]))})
            except ValueError as exc:
                table.append({"task": task, "task_metric": tmetric, "curve": curve_name, "error": str(exc)})
    unknown = sorted({r["model"] for r in rows} - set(chosen))
    ctx.put_study(result_id=rid, study="downstream", dataset=d.name, subject="all",
                params={"k": s.k, "references": refs, "n_boot": s.n_boot, "setting": s.downstream_setting},
                payload={"rows": table, "models_without_runs": unknown, "setting": s.downstream_setting,
                         "settings": {m: {"run_id": c["run_id"], "n_frames": c["n_frames"],
                                          "n_captions": c["n_captions"]} for m, c in sorted(chosen.items())}},
                input_key=ikey)
