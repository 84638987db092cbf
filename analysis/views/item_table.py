"""The Embedding map's per-item table: for each item, how far two chosen layers agree on its neighbours,
where its first right answer ranks in retrieval (two sides of one model's shared space; its own pair, or
an item sharing its video or caption embedding, as the stored recall counts), and whether the best
layer's k-NN probe gets it right (where the probes study stored that field); outliers first. Also the
layer pair's alignment on a selection of items, with its chance level. Plain functions, no Streamlit;
the maths is :mod:`analysis.methods.item_scores`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.methods import item_scores
from analysis.methods.probes import categorical
from analysis.methods.same_space import first_right_ranks, ranking_groups
from analysis.metrics.base import one_blas_thread
from analysis.storage import results as R
from analysis.views.store_info import query_frame, has_table


@dataclass(frozen=True)
class ItemTable:
    table: pd.DataFrame  #: one row per item both layers hold: idx, item_id, caption, agreement[, pair_rank][, probe …]
    k: int  #: neighbours per item used (the asked k, at most n - 1)
    chance: float  #: k / (n - 1): an unrelated pair's expected agreement
    notes: list = field(default_factory=list)  #: sentences on what is missing and why
    rank_help: str = ""  #: what ``pair_rank`` counts and among how many items (the column's help); "" without it


def default_comparison(runs: pd.DataFrame, series: list[tuple[str, int]]) -> tuple[str, int]:
    """The layer the per-item table compares a map's layer with when the link names none: a two-sided
    map's other side; else the largest run (the last of ``runs``, ordered by model and budget as
    :func:`analysis.views.neighbours.runs_for_neighbours` orders them) of another model at its last layer, the
    cross-model alignment the grids measure; else the same run's layer below (layer 0: itself).
    ``series``: the map's ``(run_id, layer)`` pairs, the first being the table's own layer."""
    if len(series) > 1:
        return str(series[1][0]), int(series[1][1])
    run_a, layer_a = series[0]
    model = runs.loc[runs["run_id"] == run_a, "model"]
    others = runs[runs["model"] != (model.iloc[0] if len(model) else None)]
    if len(others):
        last = others.iloc[-1]
        return str(last["run_id"]), int(last["n_layers"]) - 1
    return str(run_a), max(0, int(layer_a) - 1)


def _run(con, run_id: str) -> dict:
    rows = query_frame(con, "SELECT run_id, model, modality, dataset, dim, config FROM runs WHERE run_id = ?",
                       [run_id])
    if rows.empty:
        raise ValueError(f"no run {run_id!r} in this store")
    return rows.iloc[0].to_dict()


def _layers(con, run_a, layer_a, run_b, layer_b, only=None):
    """The two layers on the items both runs hold: ``(A, B, idx, rows)``, rows aligned by item, and
    ``rows`` the positions of the items ``only`` names (None: all)."""
    from analysis.storage.store import load_layer

    A, ia = load_layer(con, run_a, int(layer_a), with_idx=True)
    B, ib = load_layer(con, run_b, int(layer_b), with_idx=True)
    common = np.intersect1d(ia, ib)
    pa = {int(i): p for p, i in enumerate(ia)}
    pb = {int(i): p for p, i in enumerate(ib)}
    A = A[[pa[int(i)] for i in common]].astype(np.float64)
    B = B[[pb[int(i)] for i in common]].astype(np.float64)
    rows = None
    if only is not None:
        rows = np.flatnonzero(np.isin(common, np.asarray(list(only), dtype=common.dtype)))
    return A, B, common, rows


#: what ``pair_rank`` counts, whatever the pair: the start of the column's help text on the page
RANK_HELP = ("pair_rank: the rank of the first right answer when the item queries the other layer (1 = first), "
             "as the same-space study's recall counts it: the item's own other side, or any item sharing its "
             "video or caption embedding (a duplicated caption); a wrong item with an equal cosine ranks before "
             "it. Items of one source (the manifest's group) with their own videos and captions are wrong "
             "answers.")


def _rank_space(con, ra: dict, la: int, rb: dict, lb: int) -> tuple[str | None, int | None, str]:
    """Where the two layers can be ranked against each other, by the same-space study's rule
    (:func:`analysis.studies.same_space.shared_spaces`): ``(kind, width, text)``.

    ``kind``: ``"stored"`` for a pair the study scores (an MLLM's video and text sides at one layer
    index; a dual encoder's two ``joint`` layers of one width, cut to that ``width``); ``"across"``
    for an MLLM's two sides at two layer indices (one width, one language model, but a pair the
    study never scores); None where there is no shared space (``text`` says why). For the other
    kinds ``text`` names the layers."""
    from analysis.studies.same_space import is_mllm_side, named_layer

    video, text = (ra, rb) if rb["modality"] == "text" else (rb, ra)
    lv, lt = (la, lb) if video is ra else (lb, la)
    if ra["modality"] == rb["modality"] or text["modality"] != "text":
        return None, None, "the two layers are not a video side and a text side, so they share no space to retrieve in"
    if is_mllm_side(video) and is_mllm_side(text):
        if video["model"] != text["model"]:
            return None, None, "the two layers are not one model's video and text sides, so they share no space"
        if int(video["dim"]) != int(text["dim"]):
            return None, None, f"the sides have widths {video['dim']} and {text['dim']} (no shared space)"
        kind = "stored" if lv == lt else "across"
        return kind, None, f"video layer {lv} and text layer {lt}"
    jv, jt = named_layer(video, "joint"), named_layer(text, "joint")
    same_model = video["model"] == text["model"]
    if not same_model:
        ident = query_frame(con, "SELECT model, source, revision FROM models WHERE model IN (?, ?)",
                            [video["model"], text["model"]])
        pairs = {(s, r) for s, r in zip(ident["source"], ident["revision"])}
        same_model = len(ident) == 2 and len(pairs) == 1
    if not same_model:
        return None, None, "the two layers are not one model's video and text sides, so they share no space"
    if jv is None or jt is None:
        return None, None, ("a dual encoder's towers share a space only at their joint layers, and these runs "
                            "store none (precompute both towers with --named-layers)")
    if (lv, lt) != (jv[0], jt[0]):
        return None, None, (f"a dual encoder's towers share a space only at their joint layers (video layer "
                            f"{jv[0]}, text layer {jt[0]}); video layer {lv} and text layer {lt} belong to two "
                            "towers")
    if jv[1] != jt[1]:
        return None, None, f"the joint layers have widths {jv[1]} and {jt[1]} (no shared space)"
    return "stored", jv[1], f"the joint layers (video layer {lv}, text layer {lt})"


def _rank_column(con, ra: dict, la: int, rb: dict, lb: int, A, B, rows=None
                 ) -> tuple[np.ndarray | None, str, str | None]:
    """Each item's 1-based rank of its first right answer, A's row querying all of B's rows, where
    the two layers share a space (:func:`_rank_space`); else None and why. ``rows``: the positions
    of the items listed (a sampled map's), each still ranked among all ``N`` items, as the stored
    recall ranks. Returns ``(ranks, help, why)``: ``ranks`` ``(m,)`` integers in ``[1, N]``,
    ``help`` what the column counts (empty without one), ``why`` a sentence for the notes: why there
    is no column, or what a kept one needs said.

    The rule is the same-space study's, the same functions
    (:func:`analysis.methods.same_space.ranking_groups`, :func:`~analysis.methods.same_space.first_right_ranks`):
    items whose video or caption has one embedding are right answers for each other, so with every
    item listed, for a pair the study scores, the share of items with rank ``<= k`` is the stored
    recall@k (v2t when A is the video side). No column where the study ranks nothing among the
    ``N`` items: a collapsed or rank-1 side (every cosine ties), or every item in one group (every
    rank would be 1). An MLLM's two sides at two layer indices are ranked by the same rule, with a
    sentence saying that this is not the stored recall.

    On one BLAS thread, as ``analyze`` ranks (:func:`analysis.metrics.base.one_blas_thread`): a
    caption and its duplicate have equal cosines only as far as the product rounds them alike, and
    OpenBLAS rounds some product shapes differently on two threads (300 items of 13 features: a few
    duplicated captions' items ranked one place lower), so an item's rank would depend on the pool."""
    kind, width, where = _rank_space(con, ra, la, rb, lb)
    if kind is None:
        return None, "", f"no rank in retrieval: {where}"
    if width is not None:  # a joint layer is zero-padded to its run's width in the store
        A, B = A[:, :width], B[:, :width]
    video_first = ra["modality"] != "text"
    V, T = (A, B) if video_first else (B, A)
    n = len(A)
    with one_blas_thread():
        groups, why, note = ranking_groups(V, T)
        if why is not None:
            return None, "", f"no rank in retrieval: {why}"
        ranks = first_right_ranks(A, B, groups, rows) + 1
    sampled = rows is not None and len(rows) < n
    among = (f" Each item is ranked among all {n} items both runs hold at these layers, not among the "
             f"{len(ranks)} this table lists." if sampled else "")
    if kind == "stored":
        share = (" The share of these rows with rank ≤ k is that of a sample, not the stored recall@k."
                 if sampled else " With every item listed, the share of rows with rank ≤ k is the stored recall@k.")
        help_text = RANK_HELP + among + share
    else:
        help_text = (RANK_HELP + f" Here it is computed across {where}: the stored recall ranks a layer only "
                     "against the same layer of the other side, so this rank is not the stored recall and no "
                     "stored number is its share." + among)
    return ranks, help_text, (None if note is None else
                              f"pair_rank: among all {n} items, {note}; an item is found at the first of its group")


def _probe_columns(con, dataset: str, run_id: str, idx: np.ndarray) -> tuple[dict, list[str]]:
    """``{column: (n,) bool or None}`` per field the probes study stored for ``run_id``: the k-NN probe's
    verdict at its best layer (an item without a label: None)."""
    from analysis.storage.store import load_layer

    if not has_table(con, "result_studies"):
        return {}, []
    cols, notes = {}, []
    md = query_frame(con, "SELECT idx, metadata FROM items WHERE dataset = ? ORDER BY idx", [dataset])
    meta = {int(i): (json.loads(m) if isinstance(m, str) else (m or {})) for i, m in zip(md["idx"], md["metadata"])}
    for r in R.read_studies(con, current=True, study="probes", dataset=dataset):
        p = r["payload"]
        acc = (p.get("scores") or {}).get("knn_accuracy")
        if p.get("run_id") != run_id or not acc:
            continue
        values = np.array([np.nan if v is None else v for v in acc["values"]], dtype=float)
        if not np.isfinite(values).any():
            notes.append(f"no k-NN probe verdicts on {p['field']}: no layer has a probe value")
            continue
        best = int(np.nanargmax(values))
        from analysis.studies.probes import field_value

        names = [categorical(field_value(meta.get(int(i)), p["field"])) for i in idx]
        code = {c: n for n, c in enumerate(p["classes"])}
        have = np.array([n in code for n in names])
        X, ids = load_layer(con, run_id, best, with_idx=True)
        pos = {int(i): q for q, i in enumerate(ids)}
        rows = [pos[int(i)] for i, h in zip(idx, have) if h]
        y = np.array([code[n] for n, h in zip(names, have) if h])
        ok = item_scores.knn_probe_correct(X[rows], y, k=min(int(p["k"]), len(rows) - 1))
        col = np.full(len(idx), None, dtype=object)
        if ok is None:
            notes.append(f"no k-NN probe verdicts on {p['field']}: layer {best} is collapsed among these items "
                         "(every neighbour list decided by tie-breaking)")
        else:
            col[have] = ok
        cols[f"probe {p['field']} (L{best})"] = col
    return cols, notes


def item_table(con, dataset: str, run_a: str, layer_a: int, run_b: str, layer_b: int, k: int = 10,
               only: tuple | None = None) -> ItemTable:
    """One row per item both layers hold (``only``: among these item ``idx`` alone, neighbours searched
    among them: a sampled map's items, so a page never searches a huge dataset): ``idx, item_id,
    caption`` (the first), ``agreement``
    (:func:`analysis.methods.item_scores.item_agreement`, NaN on a collapsed layer), ``pair_rank``
    (1 = a right answer retrieved first: its own pair, or an item sharing its video or caption
    embedding, as the stored recall counts (:data:`RANK_HELP`), ranked among all the items both runs
    hold even when ``only`` lists a sample; only where the two layers share a space
    (:func:`_rank_column`), :attr:`ItemTable.rank_help` saying whether it is the stored recall's) and
    one ``probe <field> (L<best>)`` column per field the probes study stored for ``run_a`` (True: its
    k-NN probe at the best layer gets the item right). Sorted outliers first: lowest agreement, then
    worst rank."""
    ra, rb = _run(con, run_a), _run(con, run_b)
    A_all, B_all, idx_all, rows = _layers(con, run_a, layer_a, run_b, layer_b, only)
    A, B, idx = (A_all, B_all, idx_all) if rows is None else (A_all[rows], B_all[rows], idx_all[rows])
    n = len(idx)
    k = int(max(1, min(int(k), n - 1)))
    items = query_frame(con, "SELECT idx, item_id, captions FROM items WHERE dataset = ? ORDER BY idx", [dataset])
    info = items.set_index("idx")
    table = pd.DataFrame({"idx": idx, "item_id": info.loc[idx, "item_id"].to_numpy(),
                          "caption": [(list(c) or [""])[0] if c is not None else "" for c in info.loc[idx, "captions"]],
                          "agreement": item_scores.item_agreement(A, B, k=k)})
    notes = []
    if not np.isfinite(table["agreement"]).all():
        notes.append("no agreement: a layer is collapsed (every item at one point), so it has no neighbours")
    ranks, rank_help, why = _rank_column(con, ra, int(layer_a), rb, int(layer_b), A_all, B_all, rows)
    del A_all, B_all
    if ranks is not None:
        table["pair_rank"] = ranks
    if why is not None:
        notes.append(why)
    probes, probe_notes = _probe_columns(con, dataset, run_a, idx) if only is None else ({}, [
        "no probe verdicts on a sample of the items (a probe votes among all of them)"])
    for name, col in probes.items():
        table[name] = col
    notes += probe_notes
    order = ["agreement"] + (["pair_rank"] if ranks is not None else [])
    table = table.sort_values(order, ascending=[True] + [False] * (len(order) - 1), kind="stable")
    return ItemTable(table.reset_index(drop=True), k, k / (n - 1), notes, rank_help)


def subset_alignment(con, run_a: str, layer_a: int, run_b: str, layer_b: int, items: tuple,
                     k: int = 10) -> item_scores.SubsetAgreement:
    """Mutual k-NN of the two layers on the items ``items`` (their ``idx``) alone, with its chance
    level (:func:`analysis.methods.item_scores.subset_agreement`); items a run lacks are left out."""
    A, B, idx, _ = _layers(con, run_a, layer_a, run_b, layer_b)
    pos = {int(i): p for p, i in enumerate(idx)}
    rows = [pos[int(i)] for i in items if int(i) in pos]
    return item_scores.subset_agreement(A, B, rows, k=k)
