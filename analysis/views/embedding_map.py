"""The embedding-map page's data: stored maps, points with captions and metadata, the map command."""

from __future__ import annotations


import numpy as np
import pandas as pd

from analysis.storage import results as R
from analysis.views.neighbours import items
from analysis.views.store_info import query_frame, has_table, model_labels


def embedding_maps(con, dataset) -> pd.DataFrame:
    """The stored embedding maps of a dataset (what the page can pick): one row per map with
    ``result_id, subject, kind, models, layers, why, requested, reason, method`` (``reason``: why the
    layer has no picture, else empty; ``method``: umap, pca or tsne). Two-sided maps (a shared space)
    come first."""
    cols = ["result_id", "subject", "kind", "models", "layers", "why", "requested", "reason", "method"]
    if not has_table(con, "result_studies"):
        return pd.DataFrame(columns=cols)
    rows = R.read_studies(con, current=True, study="embedding_map", dataset=dataset)
    out = pd.DataFrame([{"result_id": r["result_id"], "subject": r["subject"], "kind": r["payload"]["kind"],
                         "models": tuple(r["payload"]["models"]), "layers": tuple(r["payload"]["layers"]),
                         "why": r["payload"]["why"], "requested": bool(r["payload"].get("requested")),
                         "reason": r["payload"].get("reason") or "",
                         "method": r["payload"]["method"]} for r in rows], columns=cols)
    if out.empty:
        return out
    out["order"] = out["kind"] != "pair"
    return out.sort_values(["order", "subject"]).drop(columns="order").reset_index(drop=True)


def _caption_text(captions, n_captions) -> str:
    """The caption(s) a run embedded (its first ``n_captions``; a vision run: the first), shortened."""
    caps = [str(c) for c in (list(captions) if captions is not None else [])]
    text = " | ".join(caps[: max(1, int(n_captions or 1))])
    return text if len(text) <= 160 else text[:157] + "..."


#: a metadata field colours a map when it has between 2 and this many values over the items
MAX_COLOUR_LEVELS = 12


def flatten_metadata(md: dict | None) -> dict:
    """One item's metadata as ``{field: value}`` with nested dicts flattened one level
    (``{"scene": {"colour": ..}}`` gives ``scene_colour``; dots become ``_``, which Vega-Lite would
    read as nesting) and private fields (a leading ``_``) left out; values as they are."""
    row = {}
    for k, v in (md or {}).items():
        if str(k).startswith("_"):
            continue
        inner = v.items() if isinstance(v, dict) else [(None, v)]
        for k2, v2 in inner:
            row[(str(k) if k2 is None else f"{k}_{k2}").replace(".", "_")] = v2
    return row


def categorical_metadata(metadata: list, max_levels: int = MAX_COLOUR_LEVELS) -> pd.DataFrame:
    """Item metadata usable as a map's colour: one column per field with 2..``max_levels`` distinct
    values over the items (``metadata``: one dict per item, in order). Fields as
    :func:`flatten_metadata` names them; lists (and deeper dicts) are left out; a missing value is
    ``none``."""
    flat = [{name: "none" if v is None else str(v) for name, v in flatten_metadata(md).items()
             if v is None or isinstance(v, (str, int, float, bool))} for md in metadata]
    df = pd.DataFrame(flat, index=range(len(metadata))).fillna("none")
    keep = [c for c in df.columns if 2 <= df[c].nunique() <= max_levels]
    return df[sorted(keep)]


def embedding_map_points(con, result_id) -> dict:
    """One stored map as points to draw: ``{"points": DataFrame, "meta": dict, "reason": str | None}``.

    ``points`` has one row per drawn point: ``x, y, side`` (``video``/``image``/``text``), ``series``
    (model, side and layer, with "(random init)" where the weights are random), ``idx, item_id,
    caption`` (the caption(s) that side embedded), ``video`` (the item's file, for a frame on hover).
    ``meta`` holds the map's settings and notes (sampled items, duplicates, n_neighbors, seed), and
    ``colour_fields``: the item metadata columns added to ``points`` (:func:`categorical_metadata`).
    """
    rows = R.read_studies(con, study="embedding_map", result_id=result_id)
    if not rows:
        raise ValueError(f"no embedding map {result_id!r} in this store")
    r = rows[0]
    p = r["payload"]
    labels = model_labels(con)
    meta = {k: p.get(k) for k in ("kind", "models", "layers", "layer_names", "sides", "why", "requested", "n_items",
                                  "sampled", "n_neighbors", "min_dist", "seed", "n_distinct", "n_duplicates")}
    meta.update(subject=r["subject"], dataset=r["dataset"], run_ids=p["run_ids"], method=p["method"],
                random_init=[labels.get(m, m) != m for m in p["models"]])
    if p.get("reason"):
        return {"points": pd.DataFrame(), "meta": meta, "reason": p["reason"]}
    import json

    it = items(con, r["dataset"]).set_index("idx")
    md = query_frame(con, "SELECT idx, metadata FROM items WHERE dataset = ? ORDER BY idx", [r["dataset"]])
    cats = categorical_metadata([json.loads(m) if isinstance(m, str) else (m or {}) for m in md["metadata"]])
    cats.index = md["idx"].to_numpy()
    meta["colour_fields"] = [c for c in cats.columns if c not in {"x", "y", "side", "series", "idx", "item_id",
                                                                  "video", "caption", "image"}]
    idx = np.asarray(p["items"], dtype=int)
    n = len(idx)
    side_of = np.asarray(p["side"] if p.get("side") is not None else [0] * n, dtype=int)
    pos = np.tile(idx, len(p["run_ids"]))
    frames = []
    for s, (model, side, layer, name, setting) in enumerate(zip(p["models"], p["sides"], p["layers"],
                                                                p["layer_names"], p["settings"])):
        sel = side_of == s
        ids = pos[sel]
        layer_text = f"L{layer}" + (f" ({name})" if name else "")
        frames.append(pd.DataFrame({
            "x": np.asarray(p["x"])[sel], "y": np.asarray(p["y"])[sel], "side": side,
            "series": f"{labels.get(model, model)} · {side} {layer_text}", "idx": ids,
            "item_id": it.loc[ids, "item_id"].to_numpy(), "video": it.loc[ids, "video"].to_numpy(),
            "caption": [_caption_text(it.at[i, "captions"], setting.get("n_captions") if side == "text" else 1)
                        for i in ids]}))
    points = pd.concat(frames, ignore_index=True)
    for c in meta["colour_fields"]:
        points[c] = cats.loc[points["idx"], c].to_numpy()
    return {"points": points, "meta": meta, "reason": None}


def map_of_layer(con, dataset: str, run_id: str, layer: int, method: str = "umap") -> str | None:
    """The result id of the stored one-sided map of ``run_id``'s layer ``layer`` by ``method``, or None
    when the store holds none (or only its reason)."""
    if not has_table(con, "result_studies"):
        return None
    for r in R.read_studies(con, current=True, study="embedding_map", dataset=dataset):
        p = r["payload"]
        if (list(p["run_ids"]) == [run_id] and [int(x) for x in p["layers"]] == [int(layer)]
                and p["method"] == method and not p["reason"]):
            return r["result_id"]
    return None


def map_command(store_path: str, dataset: str, model: str, layer, side: str = "auto", method: str = "umap") -> str:
    """The command that computes a map the dashboard does not hold (the dashboard never writes)."""
    import shlex

    parts = ["layerscope", "map", "--store", store_path, "--dataset", dataset, "--model", model, "--layer", str(layer)]
    if side != "auto":
        parts += ["--side", side]
    if method != "umap":
        parts += ["--method", method]
    return " ".join(shlex.quote(str(x)) for x in parts)


#: human names of the point fields shown on hover
TOOLTIP_TITLES = {"series": "model · side · layer", "item_id": "item", "caption": "caption", "side": "side"}




def map_modality_gap(con, dataset: str, run_ids: tuple, layers: tuple) -> dict | None:
    """The modality gap behind a two-sided map (``run_ids``, ``layers``: its video and text runs and
    layers, from :func:`embedding_map_points`' meta), from the ``same_space`` row of the same runs and
    layers: ``{"value", "ci": (low, high) or None, "n_boot"}``; ``None`` for a one-sided map or when
    no such row is stored. The gap is ``||mean(x̂) - mean(ŷ)||`` of the two sides' L2-normalised
    embeddings, in [0, 2] (Liang et al. 2022, arXiv:2203.02053), measured in the embedding space, not
    on the map (UMAP distances have no units)."""
    if len(run_ids) != 2 or not has_table(con, "result_studies"):
        return None
    run_a, run_b = run_ids
    la, lb = layers
    for r in R.read_studies(con, current=True, study="same_space", dataset=dataset):
        p = r["payload"]
        if p.get("run_a") != run_a or p.get("run_b") != run_b or "modality_gap" not in p.get("metrics", {}):
            continue
        for e, (a, b) in enumerate(zip(p["layers_a"], p["layers_b"])):
            if int(a) == int(la) and int(b) == int(lb):
                m = p["metrics"]["modality_gap"]
                v = m["values"][e]
                if v is None or not np.isfinite(v):
                    return None
                ci = (m.get("ci") or [None] * (e + 1))[e]
                return {"value": float(v), "ci": tuple(ci) if ci else None,
                        "n_boot": (r.get("params") or {}).get("n_boot")}
    return None


def gap_text(gap: dict | None) -> str:
    """The caption's sentence on the gap between a two-sided map's clouds, with its number when stored."""
    from analysis.views.text import fmt_number

    if gap is None:
        return ("the two sides share one space: a gap between the clouds suggests a modality gap (not measured "
                "for these layers: no same-space result is stored)")
    ci = (f" (95% interval {fmt_number(gap['ci'][0])}–{fmt_number(gap['ci'][1])})" if gap.get("ci")
          else " (no interval: the bootstrap was off)")
    return (f"the two sides share one space: modality gap {fmt_number(gap['value'])}{ci} on a 0–2 scale "
            "(distance between the sides' mean unit embeddings, measured in the embedding space, not on the map)")


