"""Layer-choice study: per model, the layer each label-free curve recommends and their agreement
(``result_studies``, study ``layer_choice``). Reads only the profiles and grids already stored."""

from __future__ import annotations

import numpy as np

from .. import results as R
from ..layer_selection import named_layers, recommend_layers
from ..registry import get_metric
from ..sides import side_label
from .context import Context, DatasetRuns
from .profiles import PROFILE_METRICS


def _row_max(grid, axis) -> np.ndarray:
    """Best value along ``axis`` ignoring NaN cells (NaN where a whole row is NaN)."""
    g = np.asarray(grid, dtype=float)
    filled = np.where(np.isfinite(g), g, -np.inf).max(axis=axis)
    return np.where(np.isfinite(filled), filled, np.nan)


def _masked(values, layers) -> np.ndarray:
    v = np.array(values, dtype=float)
    v[[i for i in layers if i < len(v)]] = np.nan
    return v


def run(ctx: Context, d: DatasetRuns) -> None:
    chosen = d.largest_settings()
    by_run = {r["run_id"]: r for r in chosen.values()}
    params = ctx.settings.params_for("mutual_knn")
    for m, run in chosen.items():
        curves, sources = {}, {}
        for prof in ctx.current_profiles(d.name, run["run_id"], PROFILE_METRICS):
            hib = get_metric(prof["metric"]).higher_is_better
            if hib is None:
                continue  # LID has no direction: shown, not used to pick
            curves[prof["metric"]] = (prof["layer_values"], hib)
        for g in ctx.result_rows("result_grids", d.name, metric="mutual_knn", pair_kind="vision_text"):
            if g["result_id"] != ctx.rid("grid", g["run_a"], g["run_b"], "mutual_knn", params):
                continue  # computed with other settings (k, --clamp): not this analysis's grid
            # the partner by its run, named by its side: a dual encoder's text tower is "clip [text]",
            # never its image tower's plain name
            if g["run_a"] == run["run_id"] and g["run_b"] in by_run:
                name = f"alignment with {side_label(by_run[g['run_b']], chosen)}"
                curves[name] = (_row_max(ctx.grid_of(g), axis=1), True)
                sources[name] = g["result_id"]
            elif g["run_b"] == run["run_id"] and g["run_a"] in by_run:
                name = f"alignment with {side_label(by_run[g['run_a']], chosen)}"
                curves[name] = (_row_max(ctx.grid_of(g), axis=0), True)
                sources[name] = g["result_id"]
        if not curves:
            continue
        # a degenerate layer's value is not a measurement of a representation: never a pick
        bad = list(ctx.engine.degenerate_layers(run["run_id"]))
        if bad:
            curves = {name: (_masked(v, bad), hib) for name, (v, hib) in curves.items()}
        # a curve with no finite value past layer 0 cannot pick a layer: listed, not used
        undefined = sorted(name for name, (v, _) in curves.items() if not np.isfinite(np.asarray(v)[1:]).any())
        curves = {name: c for name, c in curves.items() if name not in undefined}
        rid = ctx.rid("layer_choice", d.name, m)
        # named layers (the model's own ``default`` output, ``joint``) follow the numbered ones: they are
        # compared against, never picked, and "the last layer" is the last numbered one
        names = named_layers(run.get("config"))
        last = min(names) - 1 if names else None
        ikey = R.key(run["run_id"], str(run["finished"]), sorted(sources.values()),
                     {k: np.asarray(v[0]).round(12).tolist() for k, v in curves.items()},
                     {str(i): n for i, n in sorted(names.items())}, undefined)
        if not ctx.fresh("layer_choice", "result_studies", rid, ikey):
            continue
        if curves:
            rec = recommend_layers(curves, last_layer=last)
        else:  # stored all the same, so every page can say why this model has no recommendation
            reason = (f"every curve is undefined ({', '.join(undefined)}): its layers are "
                      f"{'degenerate' if bad else 'not finite'}")
            ctx.note(f"dataset {d.name!r}: no layer of {m} can be recommended: {reason}")
            n = int(run.get("n_layers") or 0)
            rec = {"picks": {}, "agreement": None, "n_layers": n, "last_layer": last if last is not None else n - 1,
                   "reason": reason}
        rec["layer_names"] = {str(i): n for i, n in sorted(names.items())}
        rec["sources"] = sources
        rec["undefined_curves"] = undefined
        rec["degenerate_layers"] = {str(i): why for i, why in ctx.engine.degenerate_layers(run["run_id"]).items()}
        rec["curves"] = {k: np.asarray(v[0]).tolist() for k, v in curves.items()}
        rec["higher_is_better"] = {k: v[1] for k, v in curves.items()}
        rec["setting"] = {"run_id": run["run_id"], "modality": run["modality"], "n_frames": run["n_frames"],
                          "n_captions": run["n_captions"]}
        ctx.put_study(result_id=rid, study="layer_choice", dataset=d.name, subject=m,
                    params={"k": ctx.settings.k}, payload=rec, input_key=ikey)
