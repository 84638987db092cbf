"""Export every per-layer and whole-model downstream value a store holds, imported and measured, as
the CSV ``layerscope downstream import`` reads (``model, task, metric, value, higher_is_better, layer,
setting``) plus ``ci_low, ci_high, source``, so results travel to other tools and back.

Imported rows come from ``downstream_results`` (``source``: the CSV they came from; no interval).
Measured rows are the current probes of every dataset (``result_studies``, study ``probes``): task
the manifest field, metric the score (``knn_accuracy``, ``linear_accuracy``, ``kmeans_nmi``,
``kmeans_ari``), setting ``measured on DATASET (MODALITY, BUDGET)``, the 95% item-resampling interval,
source ``measured``. A named layer is written by its name (``default``), as import expects.
"""

from __future__ import annotations

import csv
import io

from analysis.storage import results as R
from analysis.storage.schema import MODEL_LEVEL

HEADER = ("model", "task", "metric", "value", "higher_is_better", "layer", "setting", "ci_low", "ci_high", "source")


def _budget(p: dict) -> str:
    if p.get("n_frames") is not None:
        return f"{p['modality']}, {p['n_frames']} frames"
    return f"{p['modality']}, {p['n_captions']} captions"


def export_rows(con) -> list[dict]:
    """Every downstream value as a row of :data:`HEADER`: imported rows first (by model, task, metric,
    setting, layer), then measured ones (by dataset, model, field, score, budget, layer)."""
    out = []
    for r in R.rows(con, "SELECT * FROM downstream_results ORDER BY model, task, metric, setting, layer"):
        layer = "" if r["layer"] == MODEL_LEVEL else (r["layer_name"] or str(r["layer"]))
        out.append({"model": r["model"], "task": r["task"], "metric": r["metric"], "value": repr(float(r["value"])),
                    "higher_is_better": "true" if r["higher_is_better"] else "false", "layer": layer,
                    "setting": r["setting"], "ci_low": "", "ci_high": "", "source": r["source"] or "imported"})
    studies = sorted(R.read_studies(con, current=True, study="probes"),
                     key=lambda s: (s["dataset"], s["subject"], s["payload"]["run_id"]))
    for s in studies:
        p = s["payload"]
        names = {int(i): n for i, n in (p.get("layer_names") or {}).items()}
        setting = f"measured on {s['dataset']} ({_budget(p)})"
        for score, sc in p["scores"].items():
            for layer, v in enumerate(sc["values"]):
                if v is None:
                    continue
                lo, hi = sc["ci_low"][layer], sc["ci_high"][layer]
                out.append({"model": p["model"], "task": p["field"], "metric": score, "value": repr(float(v)),
                            "higher_is_better": "true", "layer": names.get(layer, str(layer)), "setting": setting,
                            "ci_low": "" if lo is None else repr(float(lo)),
                            "ci_high": "" if hi is None else repr(float(hi)), "source": "measured"})
    return out


def export_csv(con) -> str:
    """:func:`export_rows` as CSV text (header first)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=HEADER, lineterminator="\n")
    w.writeheader()
    w.writerows(export_rows(con))
    return buf.getvalue()
