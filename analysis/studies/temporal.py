"""Temporal study (``result_studies``, study ``temporal``): Test of Time at k = 1, 2, 3 with
first-neighbour types, reorder negatives, arrow of time, and the nuanced-retrieval probes wherever a
video side and a text side share one space (an MLLM's layers, a dual encoder's ``joint`` layer;
:func:`analysis.studies.same_space.shared_spaces`).

Each ``reorder`` entry holds its layer pair (the positive's best), ``positive``, ``negative`` and
``drop`` there, and ``intervals``: paired item-bootstrap intervals of the three
(:func:`analysis.methods.temporal.reorder_intervals`, ``n_boot`` resamples, the analysis's seed,
conditional on the pair), each None with ``intervals["reason"]`` where there is none. The probes
where video and text share one space:

- ``chiral``: video to text, each video chooses between its caption and its temporal opposite
  (the manifest's ``negatives``; RTime V2T);
- ``time_reversal``: text to video, each caption chooses between its video and the reversed video
  (needs a ``reversed`` run of the video side; RTime T2V);
- ``chiral_gallery``: mAP of caption queries over chiral galleries (manifest fields
  ``chiral_group`` / ``chiral_action``; CiA's chiral, static and all settings);
- ``negation``: text to video Recall@k of each item's caption and of its negated caption (items
  whose manifest ``negatives_kind`` is ``negated``; NegBench R@k and R-Neg@k).

Each probe entry holds ``layers_a`` / ``layers_b`` (matched stored layers) and values per entry, NaN
(``null``) with a reason in ``reasons`` where a layer is degenerate or every choice ties."""

from __future__ import annotations

import json

import numpy as np

from analysis.storage import results as R
from analysis.storage.store import StoreError
from analysis.grid import NoBestCell, best_cell
from analysis.methods.temporal import (
    arrow_of_time_report,
    chiral_gallery_map,
    choice_report,
    first_neighbour_types,
    negated_query_recall,
    reorder_at_best_pair,
    reorder_intervals,
)
from analysis.studies.context import Context, DatasetRuns
from analysis.studies.same_space import cut, shared_spaces

#: manifest field of an item's negatives: "temporal" (default: the events in another order or the
#: temporally opposite action, a wrong caption) or "negated" (a right caption with a negation)
NEGATIVES_KIND = "negatives_kind"
GALLERY_SETTINGS = ("chiral", "static", "all")


def _arrow(V, Vr) -> tuple[float, str | None]:
    """Arrow of time of one layer with the reason when it is undefined (a collapsed layer, e.g. a
    CLS token at layer 0 that is one constant vector)."""
    try:
        return arrow_of_time_report(V, Vr)
    except ValueError as exc:
        return float("nan"), str(exc)


def _best(ctx, grid, run_a, run_b, k: int | None = None) -> dict:
    """Best cell off the degenerate layers, or the reason there is none. ``k``: the grid is mutual
    k-NN's at this k, whose tie-decided layers (NaN cells) are named in the reason."""
    invalid = np.zeros(grid.shape, dtype=bool)
    invalid[list(ctx.engine.degenerate_layers(run_a)), :] = True
    invalid[:, list(ctx.engine.degenerate_layers(run_b))] = True
    try:
        la, lb, v = best_cell(grid, invalid=invalid)
        return {"value": v, "layers": [la, lb], "reason": None}
    except NoBestCell as exc:
        reason = str(exc)
        if k is not None:
            for side, run in (("vision", run_a), ("text", run_b)):
                tied = ctx.engine.tie_decided_layers(run, "mutual_knn", k=k)
                if tied:
                    first = min(tied)
                    reason += (f"; {side} side, {len(tied)} layer(s) tie-decided at k = {k} "
                               f"(layer {first}: {tied[first]})")
        return {"value": None, "layers": None, "reason": reason}


def run(ctx: Context, d: DatasetRuns) -> None:
    k = ctx.settings.k
    emb = ctx.engine.emb
    meta = R.rows(ctx.con, "SELECT idx, metadata, negatives FROM items WHERE dataset = ? ORDER BY idx", [d.name])
    md = [json.loads(m["metadata"]) if isinstance(m["metadata"], str) else (m["metadata"] or {}) for m in meta]
    has_tot = all({"event", "phrasing", "bow_key"} <= set(m) for m in md)
    has_gallery = any(m.get("chiral_group") not in (None, "") for m in md)
    negatives = {r["model"]: r for r in d.runs if r["variant"] == "negative"}
    reversed_runs = {(r["model"], r["n_frames"]): r for r in d.runs if r["variant"] == "reversed"}
    if not (has_tot or negatives or reversed_runs or has_gallery):
        return
    inputs = sorted((r["run_id"], str(r["finished"])) for r in d.runs)
    rid = ctx.rid("temporal", d.name, k, ctx.settings.reorder_k)
    # the reorder intervals' resamples: a new count or seed recomputes the row (same result id)
    ikey = R.key(inputs, ctx.settings.n_boot, ctx.settings.seed)
    if not ctx.fresh("temporal", "result_studies", rid, ikey):
        return
    payload = {"test_of_time": [], "reorder": [], "arrow_of_time": [], "chiral": [], "notes": []}
    v_top = d.largest_settings(text=False)
    t_one = {r["model"]: r for r in d.text if r["n_captions"] == 1}  # the probes compare single captions
    if has_tot:
        payload["test_of_time"] = _test_of_time(ctx, md, v_top, t_one)
    has_neg = np.array([bool(m["negatives"]) for m in meta])
    kinds = np.array([str(m.get(NEGATIVES_KIND) or "temporal") for m in md])
    reorder_items = has_neg & (kinds != "negated")  # a negated caption is right for its video, not reordered
    _reorder(ctx, payload, negatives, t_one, v_top, has_neg, np.flatnonzero(reorder_items))
    for (vm, n_f), rr in sorted(reversed_runs.items()):
        fwd = next((r for r in d.vision if r["model"] == vm and r["n_frames"] == n_f), None)
        if fwd is None:
            continue
        V, Vr = emb(fwd["run_id"]), emb(rr["run_id"])
        reports = [_arrow(V[layer], Vr[layer]) for layer in range(len(V))]
        payload["arrow_of_time"].append({"vision": vm, "n_frames": n_f, "per_layer": [v for v, _ in reports],
                                         "reasons": {i: why for i, (_, why) in enumerate(reports) if why}})
    _shared_space_probes(ctx, d, md, payload, has_neg, negatives)
    ctx.put_study(result_id=rid, study="temporal", dataset=d.name, subject="all",
                params={"k": k, "reorder_k": ctx.settings.reorder_k, "n_boot": ctx.settings.n_boot,
                        "seed": ctx.settings.seed}, payload=payload, input_key=ikey)


def _test_of_time(ctx, md: list[dict], v_top: dict, t_one: dict) -> list[dict]:
    """Test of Time entries: each vision model (largest setting) against each single-caption text run,
    alignment at k = 1, 2, 3 and what kind of item each side's first neighbour is, per layer."""
    emb = ctx.engine.emb
    event = [m["event"] for m in md]
    phrasing = [m["phrasing"] for m in md]
    bow = [m["bow_key"] for m in md]
    entries = []
    for vm, vr in v_top.items():
        for tm, tr in t_one.items():
            V, T = emb(vr["run_id"]), emb(tr["run_id"])
            by_k = {}
            for kk in (1, 2, 3):
                g = ctx.engine.grid(vr["run_id"], tr["run_id"], "mutual_knn", k=kk)
                best = _best(ctx, g, vr["run_id"], tr["run_id"], k=kk)
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
            entries.append(entry)
    return entries


def _reorder(ctx, payload: dict, negatives: dict, t_one: dict, v_top: dict, has_neg, keep) -> None:
    """The reorder probe of every text model with negatives against every vision model, on the items
    ``keep`` (those with a reordered, not a negated, caption), appended to ``payload``."""
    emb = ctx.engine.emb
    for tm, neg_run in negatives.items():
        if tm not in t_one:
            continue
        rk = ctx.settings.reorder_k
        if len(keep) <= rk:
            payload["notes"].append(f"{tm}: only {len(keep)} items have negatives, too few for the reorder "
                                    f"probe's k={rk}; skipped")
            continue
        P, Nn = emb(t_one[tm]["run_id"]), negatives_by_item(emb(neg_run["run_id"]), has_neg, neg_run)
        for vm, vr in v_top.items():
            V = emb(vr["run_id"])
            entry = {"vision": vm, "text": tm, "n_items": len(keep), "k": rk}
            try:
                r = reorder_at_best_pair(V[:, keep], P[:, keep], Nn[:, keep], k=rk)
                entry.update(layers=[r["layer_v"], r["layer_t"]], positive=r["positive"], negative=r["negative"],
                             drop=r["drop"], positive_grid=r["positive_grid"].tolist())
                entry["intervals"] = _reorder_intervals(ctx, V[r["layer_v"]][keep], P[r["layer_t"]][keep],
                                                        Nn[r["layer_t"]][keep], rk, r)
            except NoBestCell as exc:
                entry["reason"] = str(exc)
            payload["reorder"].append(entry)


def _reorder_intervals(ctx, V, P, Nn, k: int, point: dict) -> dict:
    """The reorder probe's paired bootstrap intervals at its chosen pair (:func:`reorder_intervals`:
    ``n_boot`` resamples with the analysis's seed; the pair is the full data's choice, so the
    intervals are conditional on it), or the reason there are none."""
    s = ctx.settings
    if s.n_boot < 2:
        return {"positive": None, "negative": None, "drop": None, "n_boot": s.n_boot, "n_valid": 0,
                "k": k, "n_items": len(V), "chance": k / (len(V) - 1),
                "reason": "no interval: the analysis ran without item resamples (--bootstrap 0)"}
    return reorder_intervals(V, P, Nn, k=k, n_boot=s.n_boot, seed=s.seed, estimate=point)


def negatives_by_item(E: np.ndarray, has_neg: np.ndarray, run: dict) -> np.ndarray:
    """A negative run's ``(L, n, d)`` rows placed at their items: ``(L, N, d)`` (``has_neg`` ``(N,)``
    bool, from the items table). A negative run holds only the items with a negative (``n =
    has_neg.sum()``, in item order) and the others' rows here are zeros; an older LayerScope's run
    holds every item (``n = N``; an item without a negative has its first caption there; stored
    embeddings are not recomputed by an analysis version, so both shapes are read). Either way those
    rows are never read: every probe takes only items with a negative (as queries or as kept rows)."""
    n, N = E.shape[1], len(has_neg)
    if n == N:
        return E
    if n != int(has_neg.sum()):
        raise StoreError(f"negative run {run['run_id']} holds {n} item(s), but {int(has_neg.sum())} of the "
                         f"dataset's {N} items have a negative; rerun its precompute")
    out = np.zeros((E.shape[0], N, E.shape[2]), dtype=E.dtype)
    out[:, has_neg] = E
    return out


def _degenerate(**statuses) -> str | None:
    """The reason a probe is undefined at a layer (a side collapsed or rank 1), or None; each
    keyword is a side's :class:`analysis.metrics.degenerate.LayerStatus` (the engine's, memoised per run)."""
    bad = [f"{name} {st.reason}" for name, st in statuses.items() if st.degenerate]
    return "; ".join(bad) if bad else None


def _choices(A_layers, R_layers, W_layers, names, statuses) -> dict:
    """Per-entry :func:`choice_report` with the reason for every undefined entry; ``statuses[e]``
    the three sides' layer statuses at entry e."""
    values, ties, reasons = [], [], {}
    for e, (A, Rt, W) in enumerate(zip(A_layers, R_layers, W_layers)):
        why = _degenerate(**dict(zip(names, statuses[e])))
        if why:
            values.append(float("nan"))
            ties.append(None)
            reasons[str(e)] = why
            continue
        v, t, why = choice_report(A, Rt, W)
        values.append(v)
        ties.append(t)
        if why:
            reasons[str(e)] = why
    return {"per_layer": values, "ties": ties, "reasons": reasons}


def _largest(runs, key):
    return max(runs, key=lambda r: r[key]) if runs else None


def _shared_space_probes(ctx, d, md, payload, has_neg, negatives) -> None:
    """Chiral choice, time reversal, chiral galleries and negated queries for every shared space."""
    emb = ctx.engine.emb

    def status(run, layers):
        """The engine's layer statuses of a run's matched layers (cutting zero padding keeps them)."""
        st = ctx.engine.status(run["run_id"])
        return [st[i] for i in layers]

    spaces, _ = shared_spaces(ctx, d)
    kinds = np.array([str(m.get(NEGATIVES_KIND) or "temporal") for m in md])
    temporal_neg = np.flatnonzero(has_neg & (kinds != "negated"))
    negated = np.flatnonzero(has_neg & (kinds == "negated"))
    group = [m.get("chiral_group") for m in md]
    action = [m.get("chiral_action") for m in md]
    has_gallery = any(g not in (None, "") for g in group)
    reversed_runs = [r for r in d.runs if r["variant"] == "reversed"]
    for key in ("chiral", "time_reversal", "chiral_gallery", "negation"):
        payload.setdefault(key, [])
    if not spaces:
        payload["notes"].append("chiral, time-reversal, chiral-gallery and negated-query probes need a video side "
                                "and a text side in one space (an MLLM, or a dual encoder's joint layer on both "
                                "towers); none in this store")
        return
    for sp in spaces:
        rv = _largest([r for r in d.vision if r["model"] == sp.model_a], "n_frames")
        rt = min((r for r in d.text if r["model"] == sp.model_b), key=lambda r: r["n_captions"], default=None)
        if rv is None or rt is None:
            continue
        try:
            la, lb, width = sp.layers(rv, rt)
        except ValueError as exc:
            payload["notes"].append(str(exc))
            continue
        V, T = cut(emb(rv["run_id"]), la, width), cut(emb(rt["run_id"]), lb, width)
        base = {"video": sp.model_a, "text": sp.model_b, "space": sp.space, "n_frames": rv["n_frames"],
                "n_captions": rt["n_captions"], "layers_a": la, "layers_b": lb}
        neg_run = negatives.get(sp.model_b)
        if neg_run is not None and len(temporal_neg):
            Nn = cut(negatives_by_item(emb(neg_run["run_id"]), has_neg, neg_run), lb, width)
            keep = temporal_neg
            # statuses of the whole runs: a subset of a healthy layer's items is taken as healthy
            out = _choices([x[keep] for x in V], [x[keep] for x in T], [x[keep] for x in Nn],
                           ("video side", "caption side", "opposite-caption side"),
                           list(zip(status(rv, la), status(rt, lb), status(neg_run, lb))))
            payload["chiral"].append({"model": sp.model_a, **base, "n_items": len(keep), **out})
        back = [r for r in reversed_runs if r["model"] == sp.model_a and r["n_frames"] == rv["n_frames"]]
        if not back:
            back = sorted((r for r in reversed_runs if r["model"] == sp.model_a), key=lambda r: -r["n_frames"])
        if back:
            fwd = next((r for r in d.vision if r["model"] == sp.model_a and r["n_frames"] == back[0]["n_frames"]), None)
            if fwd is not None:
                Vf = cut(emb(fwd["run_id"]), la, width)
                Vr = cut(emb(back[0]["run_id"]), la, width)
                out = _choices(T, Vf, Vr, ("caption side", "video side", "reversed-video side"),
                               list(zip(status(rt, lb), status(fwd, la), status(back[0], la))))
                payload["time_reversal"].append({**base, "n_frames": fwd["n_frames"], "n_items": len(T[0]), **out})
        if has_gallery:
            payload["chiral_gallery"].append(_gallery_entry(base, V, T, zip(status(rv, la), status(rt, lb)),
                                                            group, action))
        if neg_run is not None and len(negated):
            Nn = cut(negatives_by_item(emb(neg_run["run_id"]), has_neg, neg_run), lb, width)
            statuses = zip(status(rv, la), status(rt, lb), status(neg_run, lb))
            payload["negation"].append(_negation_entry(base, V, T, Nn, statuses, negated))


def _gallery_entry(base: dict, V, T, statuses, group: list, action: list) -> dict:
    """Chiral-gallery mAP per layer of one shared space, at every :data:`GALLERY_SETTINGS`;
    ``statuses``: per layer, the video and caption sides' layer statuses."""
    # ``map``: one query per action (TARA's protocol, the default); ``map_item_queries``: one
    # per item's caption (an action with more videos weighs more), kept beside it, labelled
    entry = {**base, "map": {s: [] for s in GALLERY_SETTINGS}, "n_queries": None,
             "map_item_queries": {s: [] for s in GALLERY_SETTINGS}, "n_item_queries": None,
             "queries": "action", "reasons": {}}
    for e, (Ve, Te, (sv, st)) in enumerate(zip(V, T, statuses)):
        why = _degenerate(**{"video side": sv, "caption side": st})
        for s in GALLERY_SETTINGS:
            if why:
                entry["map"][s].append(float("nan"))
                entry["map_item_queries"][s].append(float("nan"))
                entry["reasons"][f"{s} {e}"] = why
                continue
            m, nq, reason = chiral_gallery_map(Te, Ve, group=group, action=action, setting=s)
            mi, nqi, _ = chiral_gallery_map(Te, Ve, group=group, action=action, setting=s, queries="item")
            entry["map"][s].append(m)
            entry["map_item_queries"][s].append(mi)
            entry["n_queries"], entry["n_item_queries"] = nq, nqi
            if reason:
                entry["reasons"][f"{s} {e}"] = reason
    return entry


def _negation_entry(base: dict, V, T, Nn, statuses, negated) -> dict:
    """Recall@1/5/10 per layer of the standard and the negated caption queries (``negated``: their
    items) against the videos of one shared space; ``statuses``: per layer, the three sides'."""
    ks = (1, 5, 10)
    entry = {**base, "n_queries": len(negated), "recall": {f"{w}@{k}": [] for w in ("standard", "negated")
                                                           for k in ks}, "reasons": {}}
    for e, (Ve, Te, Ne, (sv, st, sn)) in enumerate(zip(V, T, Nn, statuses)):
        why = _degenerate(**{"video side": sv, "caption side": st, "negated-caption side": sn})
        std = negated_query_recall(Te, Ve, ks=ks, queries=negated)
        neg = negated_query_recall(Ne, Ve, ks=ks, queries=negated)
        for kk in ks:
            entry["recall"][f"standard@{kk}"].append(float("nan") if why else std[f"recall@{kk}"])
            entry["recall"][f"negated@{kk}"].append(float("nan") if why else neg[f"recall@{kk}"])
        if why:
            entry["reasons"][str(e)] = why
    return entry
