"""Views of the shared-space results for the Temporal page and the report: the ``same_space``
study's rows and the temporal study's nuanced-retrieval probes as long tables. Undefined values
stay as rows with their reason (never dropped); no maths beyond reshaping."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.storage import results as R
from analysis.storage.schema import fetch_one


def same_space_studies(con, dataset) -> list[dict]:
    """Every ``same_space`` row of a dataset: ``[{"subject", "payload"}]`` (empty before analyze)."""
    if fetch_one(con, "SELECT count(*) FROM information_schema.tables WHERE table_name = 'result_studies'")[0] == 0:
        return []
    return [{"subject": r["subject"], "payload": r["payload"]} for r in R.read_studies(con, study="same_space",
                                                                                        dataset=dataset)]


def pair_label(subject: str, payload: dict) -> str:
    """``video × text (space, n_f, n_c)``, e.g. ``clip × clip (joint, n_f=8, n_c=1)``."""
    a, _, b = subject.partition("|")
    return f"{a} × {b} ({payload['space']}, n_f={payload['n_frames']}, n_c={payload['n_captions']})"


def _finite(v):
    return None if v is None or not np.isfinite(v) else float(v)


def _depth(i: int, n: int) -> float:
    return i / max(1, n - 1)


def same_space_long(rows: list[dict]) -> pd.DataFrame:
    """One row per (pair, entry, metric): ``pair, space, layer_a, layer_b, depth, metric, value,
    ci_low, ci_high, better, note``; ``layer`` is ``"joint"`` for a dual encoder's joint layer."""
    out = []
    for r in rows:
        p = r["payload"]
        label = pair_label(r["subject"], p)
        reasons = (p.get("flags") or {}).get("reasons") or {}
        n = len(p["layers_a"])
        for name, m in p["metrics"].items():
            cis = m.get("ci") or [None] * n
            for e, v in enumerate(m["values"]):
                ci = cis[e] if e < len(cis) else None
                out.append({"pair": label, "space": p["space"], "layer": "joint" if p["space"] == "joint" else str(
                            p["layers_a"][e]), "layer_a": p["layers_a"][e], "layer_b": p["layers_b"][e],
                            "depth": _depth(e, n), "metric": name, "value": _finite(v),
                            "ci_low": ci[0] if ci else None, "ci_high": ci[1] if ci else None,
                            "better": "higher" if m["higher_is_better"] else "lower",
                            "note": reasons.get(name, {}).get(str(e), "")})
    return pd.DataFrame(out)


def _entry_label(e: dict) -> str:
    return f"{e['video']} × {e['text']} ({e['space']})"


def _per_layer(entries, value_key="per_layer", **extra) -> list[dict]:
    out = []
    for e in entries:
        n = len(e["layers_a"])
        for i, v in enumerate(e[value_key]):
            out.append({"pair": _entry_label(e), "layer": "joint" if e["space"] == "joint" else str(e["layers_a"][i]),
                        "depth": _depth(i, n), "accuracy": _finite(v), "n_items": e.get("n_items"),
                        "ties": (e.get("ties") or [None] * n)[i], "note": (e.get("reasons") or {}).get(str(i), ""),
                        **extra})
    return out


def nuance_view(payload: dict) -> dict:
    """Long tables of the temporal study's shared-space probes: ``chiral`` and ``time_reversal``
    (accuracy per layer, 0.5 is chance), ``gallery`` (mAP per layer and gallery setting; a setting's
    own name is one query per action, ``"<setting>, item queries"`` one per item's caption) and
    ``negation`` (Recall@k per layer of each item's caption and of its negated caption)."""
    chiral = _per_layer([e for e in payload.get("chiral", []) if "layers_a" in e])
    rev = _per_layer(payload.get("time_reversal", []))
    gallery = []
    for e in payload.get("chiral_gallery", []):
        n = len(e["layers_a"])
        # one query per action (TARA's protocol) is the setting's own name; the item-query mAP, when
        # stored (payloads before it held the item average under ``map``), is labelled as such
        variants = [("", "map", "n_queries", "one per action" if "map_item_queries" in e else "one per item")]
        if "map_item_queries" in e:
            variants.append((", item queries", "map_item_queries", "n_item_queries", "one per item"))
        for suffix, values_key, n_key, protocol in variants:
            for s, values in e[values_key].items():
                for i, v in enumerate(values):
                    gallery.append({"pair": _entry_label(e), "setting": s + suffix, "depth": _depth(i, n),
                                    "layer": "joint" if e["space"] == "joint" else str(e["layers_a"][i]),
                                    "mAP": _finite(v), "queries": e.get(n_key), "query protocol": protocol,
                                    "note": (e.get("reasons") or {}).get(f"{s} {i}", "")})
    negation = []
    for e in payload.get("negation", []):
        n = len(e["layers_a"])
        for key, values in e["recall"].items():
            kind, _, k = key.partition("@")
            for i, v in enumerate(values):
                negation.append({"pair": _entry_label(e), "queries": kind, "k": int(k), "depth": _depth(i, n),
                                 "layer": "joint" if e["space"] == "joint" else str(e["layers_a"][i]),
                                 "recall": _finite(v), "n_queries": e.get("n_queries"),
                                 "note": (e.get("reasons") or {}).get(str(i), "")})
    return {"chiral": pd.DataFrame(chiral), "time_reversal": pd.DataFrame(rev), "gallery": pd.DataFrame(gallery),
            "negation": pd.DataFrame(negation)}
