"""The layer-curves page's data and chart: profiles, alignment curves, intervals, recommended marks."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.storage import results as R
from analysis.views.charts import _alt
from analysis.views.metric_help import baseline_rules
from analysis.views.store_info import has_table


def profiles_long(con, dataset) -> pd.DataFrame:
    """Per-layer single-space metrics for every model's largest setting, on relative depth."""
    if not has_table(con, "result_profiles"):
        return pd.DataFrame()
    rows = R.read_profiles(con, dataset=dataset)
    choice = _largest_setting_runs(rows)
    out = []
    for r in rows:
        if choice.get(r["model"]) != r["run_id"]:
            continue
        v = r["layer_values"]
        notes = {int(k): n for k, n in (r.get("flags") or {}).items()}
        for layer, value in enumerate(v):
            finite = bool(np.isfinite(value))
            out.append({"model": r["model"], "metric": r["metric"], "layer": layer,
                        "depth": layer / max(1, len(v) - 1), "value": float(value) if finite else None,
                        "note": notes.get(layer) or ("" if finite else "undefined"),
                        "flagged": layer in notes or not finite,
                        "n_frames": r["n_frames"], "n_captions": r["n_captions"]})
    return pd.DataFrame(out)


def flag_lines(data: pd.DataFrame) -> list[str]:
    """One line per (model, note) among flagged points of a long curve table: ``"model: note
    (layers 0, 1, 4)"`` — the notes said once, not once per layer."""
    if "flagged" not in data or not data["flagged"].any():
        return []
    out = []
    for (model, note), g in data[data["flagged"]].groupby(["model", "note"], sort=True):
        layers = ", ".join(str(int(x)) for x in sorted(g["layer"]))
        out.append(f"{model}: {note or 'undefined'} (layer{'s' if len(g) > 1 else ''} {layers})")
    return out


def _largest_setting_runs(rows):
    best = {}
    for r in rows:
        size = (r["n_frames"] or 0) + (r["n_captions"] or 0)
        if r["model"] not in best or size > best[r["model"]][0]:
            best[r["model"]] = (size, r["run_id"])
    return {m: v[1] for m, v in best.items()}


def layer_choices(con, dataset) -> dict:
    if not has_table(con, "result_studies"):
        return {}
    return {s["subject"]: s["payload"] for s in R.read_studies(con, study="layer_choice", dataset=dataset)}


def _row_best(grid, layer: int, model_is_a: bool) -> int:
    """The other model's layer that aligns best with ``layer`` (NaN cells skipped; 0 when none is finite)."""
    line = np.asarray(grid, dtype=float)[layer] if model_is_a else np.asarray(grid, dtype=float)[:, layer]
    return int(np.nanargmax(line)) if np.isfinite(line).any() else 0


def _alignment_sources(p: dict, curves, grids: list, by_id: dict) -> dict:
    """``{"alignment with REF": (grid, model is A)}``: the mutual k-NN grid behind each alignment
    curve of one layer-choice payload (its stored source, else the grid of the payload's run against
    the reference's largest setting, for payloads written before sources were kept)."""
    run_id = (p.get("setting") or {}).get("run_id")
    found = {}
    for metric in curves:
        if not metric.startswith("alignment with "):
            continue
        ref = metric.removeprefix("alignment with ")
        g = by_id.get((p.get("sources") or {}).get(metric))
        if g is None:
            cands = [g for g in grids if (g["run_a"] == run_id and g["model_b"] == ref)
                     or (g["run_b"] == run_id and g["model_a"] == ref)]
            g = max(cands, key=lambda g: ((g["n_frames"] or 0), (g["n_captions"] or 0)), default=None)
        if g is not None:
            found[metric] = (g, g["run_a"] == run_id)
    return found


def curve_intervals(con, dataset) -> pd.DataFrame:
    """The intervals that exist for the layer curves: per model and alignment curve, the 95%
    bootstrap CI of the mutual k-NN grid's best cell, at that model's best layer (the curve is the
    row maximum, so its value there is the best cell's). Columns: model, metric, layer, depth, low,
    high, n_boot. Per-layer profiles have no stored intervals."""
    choices = layer_choices(con, dataset)
    grids = R.read_grids(con, dataset=dataset, metric="mutual_knn") if has_table(con, "result_grids") else []
    by_id = {g["result_id"]: g for g in grids}
    rows = []
    for model, p in choices.items():
        curves = p.get("curves") or {}
        n = len(next(iter(curves.values()))) if curves else 1
        last = p.get("last_layer", n - 1)
        for metric, (g, is_a) in _alignment_sources(p, curves, grids, by_id).items():
            if g.get("best_a") is None or g.get("ci_low") is None:
                continue
            layer = int(g["best_a"] if is_a else g["best_b"])
            rows.append({"model": model, "metric": metric, "layer": layer, "depth": layer / max(1, last),
                         "low": float(g["ci_low"]), "high": float(g["ci_high"]), "n_boot": int(g["n_boot"] or 0)})
    return pd.DataFrame(rows, columns=["model", "metric", "layer", "depth", "low", "high", "n_boot"])


def alignment_curves_long(choices: dict) -> pd.DataFrame:
    out = []
    for model, p in choices.items():
        for metric, values in p.get("curves", {}).items():
            if not metric.startswith("alignment with"):
                continue
            last = p.get("last_layer", len(values) - 1)  # named layers after it fall outside [0, 1]
            for layer, v in enumerate(values):
                out.append({"model": model, "metric": metric, "layer": layer, "depth": layer / max(1, last),
                            "value": v if v is not None and np.isfinite(v) else None})
    return pd.DataFrame(out)


def recommended_marks(choices: dict) -> pd.DataFrame:
    out = []
    for model, p in choices.items():
        last = p.get("last_layer", p.get("n_layers", 1) - 1)
        for metric, pick in p.get("picks", {}).items():
            out.append({"model": model, "metric": metric, "layer": pick["layer"],
                        "depth": pick["layer"] / max(1, last), "value": pick["value"]})
    return pd.DataFrame(out)


def curves_chart(data: pd.DataFrame, metric: str, *, labels: dict, marks: pd.DataFrame | None = None,
                 intervals: pd.DataFrame | None = None, rules=(), title: dict | None = None, height: int = 380,
                 null_levels: pd.DataFrame | None = None):
    """Per-layer curves on relative depth: one line per model (legend by model label, "(random
    init)" included), the recommended layers as diamonds, flagged values ringed, stored intervals
    as error bars, reference rules (chance, bounds) dashed, and each model's shuffled-pairing null
    (``null_levels`` rows of :func:`curve_null_levels`: the 95th percentile of the grid maximum
    under random pairings) dotted in the model's colour."""
    alt = _alt()
    d = data.assign(model=data["model"].map(lambda m: labels.get(m, m)))
    tips = ["model", "layer", alt.Tooltip("value:Q", format=".4g")] + (["note"] if "note" in d else [])
    x = alt.X("depth:Q", title="relative depth (0 = embeddings, 1 = last layer)", scale=alt.Scale(domain=[0, 1]))
    y = alt.Y("value:Q", title=metric, scale=alt.Scale(zero=False))
    color = alt.Color("model:N", title="model")
    layers = [alt.Chart(d).mark_line().encode(x=x, y=y, color=color, tooltip=tips),
              alt.Chart(d).mark_point(filled=True, size=40).encode(x=x, y=y, color="model:N",
                                                                     tooltip=tips)]
    if intervals is not None and len(intervals):
        iv = intervals.assign(model=intervals["model"].map(lambda m: labels.get(m, m)))
        layers.append(alt.Chart(iv).mark_rule(strokeWidth=2).encode(
            x="depth:Q", y="low:Q", y2="high:Q", color="model:N",
            tooltip=["model", "layer", alt.Tooltip("low:Q", format=".4g", title="95% CI low"),
                     alt.Tooltip("high:Q", format=".4g", title="95% CI high"), alt.Tooltip("n_boot:Q", title="resamples")]))
    if marks is not None and len(marks):
        mk = marks.assign(model=marks["model"].map(lambda m: labels.get(m, m)))
        layers.append(alt.Chart(mk).mark_point(size=180, shape="diamond", filled=True).encode(
            x="depth:Q", y="value:Q", color="model:N", tooltip=["model", "layer", "metric"]))
    if "flagged" in d:
        flagged = d[d["flagged"] & d["value"].notna()]
        if len(flagged):  # a value that needs a note (collapsed layer, duplicates merged) is ringed
            layers.append(alt.Chart(flagged).mark_point(size=260, shape="circle", color="#d62728", filled=False)
                          .encode(x="depth:Q", y="value:Q", tooltip=["model", "layer", "value", "note"]))
    if null_levels is not None and len(null_levels):
        nl = null_levels.assign(model=null_levels["model"].map(lambda m: labels.get(m, m)))
        layers.append(alt.Chart(nl).mark_rule(strokeDash=[2, 3], strokeWidth=1.5).encode(
            y="q95:Q", color="model:N",
            tooltip=["model", alt.Tooltip("q95:Q", format=".4g", title="shuffled null, 95th percentile"),
                     alt.Tooltip("p:Q", format=".3g", title="best cell p"), alt.Tooltip("n_perm:Q", title="shuffles")]))
    layers += baseline_rules(rules, "value")
    chart = alt.layer(*layers).properties(height=height)
    return chart.properties(title=title) if title else chart


def budget_text(data: pd.DataFrame, choices: dict, models) -> str:
    """The test-time budgets behind a curve chart, e.g. "each model at its largest budget: n_f 4, n_c 4"."""
    nf, nc = set(), set()
    if "n_frames" in data:
        nf |= {int(x) for x in data["n_frames"].dropna()}
        nc |= {int(x) for x in data["n_captions"].dropna()}
    else:
        for m in models:
            st = (choices.get(m) or {}).get("setting") or {}
            nf |= {int(st["n_frames"])} if st.get("n_frames") is not None else set()
            nc |= {int(st["n_captions"])} if st.get("n_captions") is not None else set()
    parts = ([f"n_f {', '.join(map(str, sorted(nf)))}"] if nf else []) + (
        [f"n_c {', '.join(map(str, sorted(nc)))}"] if nc else [])
    return f"each model at its largest budget: {'; '.join(parts)}" if parts else ""


def uncertainty_text(intervals: pd.DataFrame, is_alignment: bool, n_items) -> str:
    """What the curve chart shows of uncertainty, and what was not computed."""
    on = f" on all {n_items} items" if n_items else ""
    if is_alignment and len(intervals):
        boots = sorted({int(b) for b in intervals["n_boot"]})
        return (f"Error bars: the 95% bootstrap interval of the grid's best cell ({', '.join(map(str, boots))} item "
                "resamples), at each model's best layer. Other layers' values are point estimates"
                f"{on}: no per-layer interval was computed.")
    if is_alignment:
        return (f"No interval is drawn: the best cells' bootstrap was off (`--bootstrap 0`) or undefined; values are "
                f"point estimates{on}.")
    return f"Values are point estimates{on}: per-layer profiles have no stored intervals, so none is drawn."
