"""Temporal study (``result_studies``, study ``temporal``): Test of Time at k = 1, 2, 3 with
first-neighbour types, reorder negatives, arrow of time, and chiral retrieval where a model embeds
video and text in one space."""

from __future__ import annotations

import json

import numpy as np

from .. import results as R
from ..grid import NoBestCell, best_cell
from ..temporal import arrow_of_time_report, chiral_accuracy, first_neighbour_types, reorder_at_best_pair
from .context import Context, DatasetRuns


def _arrow(V, Vr) -> tuple[float, str | None]:
    """Arrow of time of one layer with the reason when it is undefined (a collapsed layer, e.g. a
    CLS token at layer 0 that is one constant vector)."""
    try:
        return arrow_of_time_report(V, Vr)
    except ValueError as exc:
        return float("nan"), str(exc)


def _best(ctx, grid, run_a, run_b) -> dict:
    """Best cell off the degenerate layers, or the reason there is none."""
    invalid = np.zeros(grid.shape, dtype=bool)
    invalid[list(ctx.engine.degenerate_layers(run_a)), :] = True
    invalid[:, list(ctx.engine.degenerate_layers(run_b))] = True
    try:
        la, lb, v = best_cell(grid, invalid=invalid)
        return {"value": v, "layers": [la, lb], "reason": None}
    except NoBestCell as exc:
        return {"value": None, "layers": None, "reason": str(exc)}


def run(ctx: Context, d: DatasetRuns) -> None:
    k = ctx.settings.k
    emb = ctx.engine.emb
    meta = R.rows(ctx.con, "SELECT idx, metadata, negatives FROM items WHERE dataset = ? ORDER BY idx", [d.name])
    md = [json.loads(m["metadata"]) if isinstance(m["metadata"], str) else (m["metadata"] or {}) for m in meta]
    has_tot = all({"event", "phrasing", "bow_key"} <= set(m) for m in md)
    negatives = {r["model"]: r for r in d.runs if r["variant"] == "negative"}
    reversed_runs = {(r["model"], r["n_frames"]): r for r in d.runs if r["variant"] == "reversed"}
    if not (has_tot or negatives or reversed_runs):
        return
    inputs = sorted((r["run_id"], str(r["finished"])) for r in d.runs)
    rid = ctx.rid("temporal", d.name, k, ctx.settings.reorder_k)
    ikey = R.key(inputs)
    if not ctx.fresh("temporal", "result_studies", rid, ikey):
        return
    payload = {"test_of_time": [], "reorder": [], "arrow_of_time": [], "chiral": [], "notes": []}
    v_top = d.largest_settings(text=False)
    t_one = {r["model"]: r for r in d.text if r["n_captions"] == 1}  # the probes compare single captions
    if has_tot:
        event = [m["event"] for m in md]
        phrasing = [m["phrasing"] for m in md]
        bow = [m["bow_key"] for m in md]
        for vm, vr in v_top.items():
            for tm, tr in t_one.items():
                V, T = emb(vr["run_id"]), emb(tr["run_id"])
                by_k = {}
                for kk in (1, 2, 3):
                    g = ctx.engine.grid(vr["run_id"], tr["run_id"], "mutual_knn", k=kk)
                    best = _best(ctx, g, vr["run_id"], tr["run_id"])
                    by_k[str(kk)] = {"value": best["value"], "layers": best["layers"], "grid": g.tolist(),
                                     **({"reason": best["reason"]} if best["reason"] else {})}
                entry = {"vision": vm, "text": tm, "n_frames": vr["n_frames"], "alignment": by_k,
                         "first_neighbours_per_layer": {
                             "vision": [first_neighbour_types(x, event=event, phrasing=phrasing, bow=bow) for x in V],
                             "text": [first_neighbour_types(x, event=event, phrasing=phrasing, bow=bow) for x in T]}}
                if by_k["1"]["layers"] is not None:
                    la, lb = by_k["1"]["layers"]
                    entry["first_neighbours"] = {
                        "vision": first_neighbour_types(V[la], event=event, phrasing=phrasing, bow=bow),
                        "text": first_neighbour_types(T[lb], event=event, phrasing=phrasing, bow=bow),
                        "layers": [la, lb]}
                else:
                    entry["first_neighbours"] = {"reason": by_k["1"]["reason"]}
                payload["test_of_time"].append(entry)
    has_neg = np.array([bool(m["negatives"]) for m in meta])
    for tm, neg_run in negatives.items():
        if tm not in t_one:
            continue
        keep = np.flatnonzero(has_neg)
        rk = ctx.settings.reorder_k
        if len(keep) <= rk:
            payload["notes"].append(f"{tm}: only {len(keep)} items have negatives, too few for the reorder "
                                    f"probe's k={rk}; skipped")
            continue
        P, Nn = emb(t_one[tm]["run_id"]), emb(neg_run["run_id"])
        for vm, vr in v_top.items():
            V = emb(vr["run_id"])
            entry = {"vision": vm, "text": tm, "n_items": int(len(keep)), "k": rk}
            try:
                r = reorder_at_best_pair(V[:, keep], P[:, keep], Nn[:, keep], k=rk)
                entry.update(layers=[r["layer_v"], r["layer_t"]], positive=r["positive"], negative=r["negative"],
                             drop=r["drop"], positive_grid=r["positive_grid"].tolist())
            except NoBestCell as exc:
                entry["reason"] = str(exc)
            payload["reorder"].append(entry)
    for (vm, n_f), rr in sorted(reversed_runs.items()):
        fwd = next((r for r in d.vision if r["model"] == vm and r["n_frames"] == n_f), None)
        if fwd is None:
            continue
        V, Vr = emb(fwd["run_id"]), emb(rr["run_id"])
        reports = [_arrow(V[layer], Vr[layer]) for layer in range(len(V))]
        payload["arrow_of_time"].append({"vision": vm, "n_frames": n_f, "per_layer": [v for v, _ in reports],
                                         "reasons": {i: why for i, (_, why) in enumerate(reports) if why}})
    shared = sorted({r["model"] for r in d.vision} & set(negatives) & set(t_one))
    if not shared:
        payload["notes"].append("chiral retrieval needs a model that embeds video and text in one space "
                                "(e.g. a CLIP-like model precomputed as both); none in this store")
    for m in shared:
        V = emb(v_top[m]["run_id"])
        P, Nn = emb(t_one[m]["run_id"]), emb(negatives[m]["run_id"])
        keep = np.flatnonzero(has_neg)
        payload["chiral"].append({"model": m, "per_layer": [
            chiral_accuracy(V[l][keep], P[l][keep], Nn[l][keep]) for l in range(min(len(V), len(P)))]})
    R.put_study(ctx.con, result_id=rid, study="temporal", dataset=d.name, subject="all",
                params={"k": k, "reorder_k": ctx.settings.reorder_k}, payload=payload, input_key=ikey)
