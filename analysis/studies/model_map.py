"""Model map study: best-layer mutual k-NN between every two models at their largest settings,
hierarchical clustering and a 2-D map (``result_studies``, study ``model_map``)."""

from __future__ import annotations

import numpy as np

from analysis.storage import results as R
from analysis.grid import NoBestCell, best_cell
from analysis.methods.model_map import model_map
from analysis.studies.context import Context, DatasetRuns
from analysis.studies.grids import stored_grid


def run(ctx: Context, d: DatasetRuns) -> None:
    k = ctx.settings.k
    chosen = d.largest_settings()
    names = sorted(chosen)
    if len(names) < 2:
        ctx.note(f"dataset {d.name!r}: a model map needs at least 2 models, the store has {len(names)}")
        return
    # the search is part of the key when approximate (as for the grids the map reads), so an exact
    # and an approximate analysis of one store never share, or overwrite, one map
    search = ctx.settings.params_for("mutual_knn")
    rid = ctx.rid("model_map", d.name, names, k, *([search["knn"]] if "knn" in search else []))
    ikey = R.key([(chosen[m]["run_id"], str(chosen[m]["finished"])) for m in names])
    if not ctx.fresh("model_map", "result_studies", rid, ikey):
        return
    M = len(names)
    S = np.eye(M)
    layers = [[None] * M for _ in range(M)]
    undefined = []
    for i in range(M):
        for j in range(i + 1, M):
            ra, rb = chosen[names[i]], chosen[names[j]]
            # the settings' parameters (k, and the search when approximate): the grids study's rows
            g = stored_grid(ctx, ra, rb, "mutual_knn")
            invalid = np.zeros(g.shape, dtype=bool)
            invalid[list(ctx.engine.degenerate_layers(ra["run_id"])), :] = True
            invalid[:, list(ctx.engine.degenerate_layers(rb["run_id"]))] = True
            try:
                la, lb, v = best_cell(g, invalid=invalid)
            except NoBestCell as exc:
                # no layer pair can be scored: the models are placed as unrelated (0) and the pair is listed
                undefined.append({"models": [names[i], names[j]], "reason": str(exc)})
                la = lb = None
                v = 0.0
            S[i, j] = S[j, i] = v
            layers[i][j], layers[j][i] = ([la, lb], [lb, la]) if la is not None else (None, None)
    mm = model_map(S, names)
    payload = {"models": names, "similarity": S.tolist(), "order": mm.order, "coords": mm.coords.tolist(),
               "clusters": mm.clusters, "best_layers": layers,
               "settings": {m: {"run_id": chosen[m]["run_id"], "modality": chosen[m]["modality"],
                                "n_frames": chosen[m]["n_frames"], "n_captions": chosen[m]["n_captions"]}
                            for m in names},
               "metric": "mutual_knn", "undefined_pairs": undefined}
    ctx.put_study(result_id=rid, study="model_map", dataset=d.name, subject="all",
                params={"k": k, "metric": "mutual_knn", **({"knn": search["knn"]} if "knn" in search else {})},
                payload=payload, input_key=ikey)
