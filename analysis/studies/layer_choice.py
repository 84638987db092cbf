"""Layer-choice study: per model, the layer each label-free curve recommends and their agreement
(``result_studies``, study ``layer_choice``). Reads the profiles and grids already stored, and
scores each curve on item resamples at the few layers a verdict compares (its pick, the last
layer, the ``default`` output), so the verdict's gains are paired differences."""

from __future__ import annotations

import numpy as np

from analysis.storage import results as R
from analysis.bootstrap import derived_lists_k, resample_indices, score_resamples
from analysis.methods.layer_selection import (COPY_TOL, layers_to_resample, named_layers, near_identical,
                                             one_input_reason, recommend_layers)
from analysis.metrics.degenerate import one_input
from analysis.registry import get_metric
from analysis.sides import side_label
from analysis.studies.context import Context, DatasetRuns
from analysis.studies.profiles import PROFILE_METRICS, params_for


def _row_max(grid, axis) -> np.ndarray:
    """Best value along ``axis`` ignoring NaN cells (NaN where a whole row is NaN)."""
    g = np.asarray(grid, dtype=float)
    filled = np.where(np.isfinite(g), g, -np.inf).max(axis=axis)
    return np.where(np.isfinite(filled), filled, np.nan)


def _masked(values, layers) -> np.ndarray:
    v = np.array(values, dtype=float)
    v[[i for i in layers if i < len(v)]] = np.nan
    return v


def paired_resamples(ctx: Context, run: dict, curves: dict, sources: dict, grids: dict, *, last, default,
                     degenerate) -> dict:
    """``{metric: {layer: (B,) scores}}``: each curve scored on the same ``B`` item resamples
    (``resample_indices(N, B, default_rng(seed))``, the draw the grids' best-cell intervals use) at
    the layers :func:`analysis.methods.layer_selection.layers_to_resample` names. A profile curve is its
    metric on the resampled rows of the layer; an alignment curve is the row maximum of a grid, so
    at layer ``l`` it is the cell ``(l, j*)`` with ``j*`` the partner layer that maximises it on the
    full sample, scored on the resampled pairs (the partner layer is not re-chosen per resample,
    as for a best cell's interval). Empty when the analysis has no bootstrap (``n_boot < 2``)."""
    s = ctx.settings
    if s.n_boot < 2:
        return {}
    E = ctx.engine.emb(run["run_id"])
    IX = resample_indices(E.shape[1], s.n_boot, np.random.default_rng(s.seed))
    need = layers_to_resample({m: v for m, (v, _) in curves.items()}, {m: h for m, (_, h) in curves.items()},
                              last_layer=last, default_layer=default, degenerate=degenerate)
    params = s.params_for("mutual_knn")
    k = derived_lists_k("mutual_knn", params)
    out = {}
    for metric, layers in need.items():
        per = {}
        for layer in layers:
            if not np.isfinite(curves[metric][0][layer]):
                continue  # a degenerate or undefined layer: no value, so nothing to resample
            if metric in sources:
                g, is_a = grids[sources[metric]]
                row = np.asarray(ctx.grid_of(g), dtype=float)
                row = row[layer] if is_a else row[:, layer]
                if not np.isfinite(row).any():
                    continue
                j = len(row) - 1 - int(np.nanargmax(row[::-1]))  # ties to the deepest layer, as every pick
                la, lb = (layer, j) if is_a else (j, layer)
                ra, rb = g["run_a"], g["run_b"]
                spaces = None if k is None else (ctx.engine.resample_space(ra, la, k, s.n_boot),
                                                 ctx.engine.resample_space(rb, lb, k, s.n_boot))
                per[layer] = score_resamples("mutual_knn", ctx.engine.emb(ra)[la], ctx.engine.emb(rb)[lb], IX,
                                             spaces=spaces, **params)
            else:
                per[layer] = score_resamples(metric, E[layer], IX=IX, **params_for(metric, E.shape[1]))
        out[metric] = per
    return out


def _partner(result_id: str, grids: dict) -> str:
    """The other model of the grid an alignment curve comes from."""
    g, is_a = grids[result_id]
    return g["model_b"] if is_a else g["model_a"]


def _json_samples(resamples: dict) -> dict:
    """The resamples as JSON lists (NaN, a resample that could not be scored, as null)."""
    return {m: {str(i): [None if not np.isfinite(x) else float(x) for x in v] for i, v in per.items()}
            for m, per in resamples.items()}


#: the grids an "alignment with" curve comes from: cross-modal ones (either model's curve), and text×text
#: ones, whose partner is a text side as a reference should be (a reference is a text side), so a text model is judged
#: against the other text models too (in a text-only store, only against them). Vision×vision grids
#: stay on the heatmap and model map: a vision model is not a reference. Curves join runs at each
#: model's largest setting, so a text×text curve needs the two models' largest n_c to be equal.
ALIGNMENT_KINDS = ("vision_text", "text_text")


def alignment_grids(ctx: Context, dataset: str) -> list[dict]:
    """The dataset's mutual k-NN rows of :data:`ALIGNMENT_KINDS`, vision×text first."""
    return [g for kind in ALIGNMENT_KINDS
            for g in ctx.result_rows("result_grids", dataset, metric="mutual_knn", pair_kind=kind)]


def _model_curves(ctx: Context, dataset: str, run: dict, chosen: dict, by_run: dict, params: dict):
    """``(curves, sources, grids)`` of one run: ``{name: (per-layer values, higher is better)}`` from its
    profiles and its alignment grids, ``{alignment curve: grid result id}``, ``{result id: (grid row,
    whether the run is the grid's run_a)}``."""
    curves, sources, grids = {}, {}, {}
    for prof in ctx.current_profiles(dataset, run["run_id"], PROFILE_METRICS):
        hib = get_metric(prof["metric"]).higher_is_better
        if hib is None:
            continue  # LID has no direction: shown, not used to pick
        curves[prof["metric"]] = (prof["layer_values"], hib)
    for g in alignment_grids(ctx, dataset):
        if g["result_id"] != ctx.rid("grid", g["run_a"], g["run_b"], "mutual_knn", params):
            continue  # computed with other settings (k, --clamp): not this analysis's grid
        # the partner by its run, named by its side: a dual encoder's text tower is "clip [text]",
        # never its image tower's plain name
        if g["run_a"] == run["run_id"] and g["run_b"] in by_run:
            name = f"alignment with {side_label(by_run[g['run_b']], chosen)}"
            curves[name] = (_row_max(ctx.grid_of(g), axis=1), True)
            sources[name] = g["result_id"]
            grids[g["result_id"]] = (g, True)
        elif g["run_b"] == run["run_id"] and g["run_a"] in by_run:
            name = f"alignment with {side_label(by_run[g['run_a']], chosen)}"
            curves[name] = (_row_max(ctx.grid_of(g), axis=0), True)
            sources[name] = g["result_id"]
            grids[g["result_id"]] = (g, False)
    return curves, sources, grids


def _copies(ctx: Context, run: dict, curves: dict, sources: dict, grids: dict) -> dict:
    """``{curve: why}`` for alignment with an identical copy of this run: 1 by construction, so
    flagged, never a vote."""
    copies = {}
    for name, result_id in sources.items():
        g, is_a = grids[result_id]
        partner = g["run_b"] if is_a else g["run_a"]
        if name in curves and near_identical(ctx.engine.emb(run["run_id"]), ctx.engine.emb(partner)):
            copies[name] = (f"{partner} is an identical copy of {run['run_id']} (cosine ≥ 1 − {COPY_TOL:g} "
                            "for every item at every layer)")
    return copies


def _no_curve_reason(statuses: list, run: dict, undefined: list, bad: list) -> str:
    """Why no curve of ``run`` is defined at any layer it could pick. When every layer, the first
    included, is one point (:func:`analysis.metrics.degenerate.one_input`) the model received one
    input for every item, and the reason says so with the frames or captions the run's settings name
    (:func:`analysis.methods.layer_selection.one_input_reason`); otherwise it names the curves."""
    if one_input(statuses):
        return one_input_reason(statuses[0].n_items, run.get("modality"), n_frames=run.get("n_frames"),
                                n_captions=run.get("n_captions"), image_mode=run.get("image_mode"))
    return f"every curve is undefined ({', '.join(undefined)}): its layers are {'degenerate' if bad else 'not finite'}"


def run(ctx: Context, d: DatasetRuns) -> None:
    chosen = d.largest_settings()
    random = {r[0] for r in ctx.con.execute("SELECT model FROM models WHERE random_init").fetchall()}
    by_run = {r["run_id"]: r for r in chosen.values()}
    params = ctx.settings.params_for("mutual_knn")
    for m, run in chosen.items():
        curves, sources, grids = _model_curves(ctx, d.name, run, chosen, by_run, params)
        if not curves:
            continue
        # a degenerate layer's value is not a measurement of a representation: never a pick
        bad = list(ctx.engine.degenerate_layers(run["run_id"]))
        if bad:
            curves = {name: (_masked(v, bad), hib) for name, (v, hib) in curves.items()}
        # a curve with no finite value past layer 0 cannot pick a layer: listed, not used
        undefined = sorted(name for name, (v, _) in curves.items() if not np.isfinite(np.asarray(v)[1:]).any())
        curves = {name: c for name, c in curves.items() if name not in undefined}
        # alignment with a random-init model is a control: picked and shown, never a vote
        controls = sorted(name for name in curves if name in sources and _partner(sources[name], grids) in random)
        rid = ctx.rid("layer_choice", d.name, m)
        # named layers (the model's own ``default`` output, ``joint``) follow the numbered ones: they are
        # compared against, never picked, and "the last layer" is the last numbered one
        names = named_layers(run.get("config"))
        last = min(names) - 1 if names else None
        default = next((i for i, n in names.items() if n == "default"), None)
        ikey = R.key(run["run_id"], str(run["finished"]), sorted(sources.values()),
                     {k: np.asarray(v[0]).round(12).tolist() for k, v in curves.items()},
                     {str(i): n for i, n in sorted(names.items())}, undefined, ctx.settings.n_boot, ctx.settings.seed,
                     controls)
        if not ctx.fresh("layer_choice", "result_studies", rid, ikey):
            continue
        if curves:
            rec = recommend_layers(curves, last_layer=last, controls=controls)
            # the verdict's gains are paired differences on these resamples (studies.verdicts)
            rec["resamples"] = _json_samples(paired_resamples(ctx, run, curves, sources, grids, last=last,
                                                              default=default, degenerate=bad))
            rec["n_boot"], rec["resample_seed"] = ctx.settings.n_boot, ctx.settings.seed
        else:  # stored all the same, so every page can say why this model has no recommendation
            reason = _no_curve_reason(ctx.engine.status(run["run_id"]), run, undefined, bad)
            ctx.note(f"dataset {d.name!r}: no layer of {m} can be recommended: {reason}")
            n = int(run.get("n_layers") or 0)
            rec = {"picks": {}, "agreement": None, "n_layers": n, "last_layer": last if last is not None else n - 1,
                   "reason": reason}
        rec["copies"] = _copies(ctx, run, curves, sources, grids)
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
