"""Temporal study (``result_studies``, study ``temporal``): Test of Time at k = 1, 2, 3 with
first-neighbour types, reorder negatives, arrow of time, and chiral retrieval where a model embeds
video and text in one space."""

from __future__ import annotations

import json

import numpy as np

from .. import results as R
from ..grid import best_cell
from ..temporal import arrow_of_time, chiral_accuracy, first_neighbour_types, reorder_alignment
from .context import ANALYSIS_VERSION, Context, DatasetRuns


def _or_nan(fn, *args, **kw) -> float:
    """A per-layer value, NaN where it is undefined (e.g. a CLS token at layer 0 is one constant vector)."""
    try:
        return fn(*args, **kw)
    except ValueError:
        return float("nan")


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
    rid = R.key("temporal", d.name, k, ANALYSIS_VERSION)
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
                    la, lb, v = best_cell(g)
                    by_k[str(kk)] = {"value": v, "layers": [la, lb], "grid": g.tolist()}
                la, lb = by_k["1"]["layers"]
                payload["test_of_time"].append({
                    "vision": vm, "text": tm, "n_frames": vr["n_frames"], "alignment": by_k,
                    "first_neighbours": {
                        "vision": first_neighbour_types(V[la], event=event, phrasing=phrasing, bow=bow),
                        "text": first_neighbour_types(T[lb], event=event, phrasing=phrasing, bow=bow),
                        "layers": [la, lb]},
                    "first_neighbours_per_layer": {
                        "vision": [first_neighbour_types(x, event=event, phrasing=phrasing, bow=bow) for x in V],
                        "text": [first_neighbour_types(x, event=event, phrasing=phrasing, bow=bow) for x in T]},
                })
    has_neg = np.array([bool(m["negatives"]) for m in meta])
    for tm, neg_run in negatives.items():
        if tm not in t_one:
            continue
        keep = np.flatnonzero(has_neg)
        if len(keep) <= k:
            payload["notes"].append(f"{tm}: only {len(keep)} items have negatives; reorder probe skipped")
            continue
        P, Nn = emb(t_one[tm]["run_id"]), emb(neg_run["run_id"])
        for vm, vr in v_top.items():
            V = emb(vr["run_id"])
            pos = np.zeros((len(V), len(P)))
            neg = np.zeros_like(pos)
            for a in range(len(V)):
                for b in range(len(P)):
                    r = reorder_alignment(V[a][keep], P[b][keep], Nn[b][keep], k=k)
                    pos[a, b], neg[a, b] = r["positive"], r["negative"]
            payload["reorder"].append({"vision": vm, "text": tm, "n_items": int(len(keep)),
                                       "positive": pos.tolist(), "negative": neg.tolist()})
    for (vm, n_f), rr in sorted(reversed_runs.items()):
        fwd = next((r for r in d.vision if r["model"] == vm and r["n_frames"] == n_f), None)
        if fwd is None:
            continue
        V, Vr = emb(fwd["run_id"]), emb(rr["run_id"])
        payload["arrow_of_time"].append({"vision": vm, "n_frames": n_f,
                                         "per_layer": [_or_nan(arrow_of_time, V[l], Vr[l]) for l in range(len(V))]})
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
                params={"k": k}, payload=payload, input_key=ikey)
