"""DR Fig. 8's data: the caption sweep of one vision model × text model (best alignment at each n_c,
with its interval) and, as a horizontal line beside it, the same text model on the items' long
original captions (study ``caption_baseline``, :mod:`analysis.studies.caption_baseline`).

Every number is read from ``result_grids`` and ``result_studies``; nothing is recomputed here.
"""

from __future__ import annotations

import pandas as pd

from analysis.methods.paper_figures import budget_reaching
from analysis.storage import results as R
from analysis.views.charts import lazy_altair
from analysis.views.store_info import has_table

STUDY = "caption_baseline"


def _baselines(con, dataset: str) -> list[dict]:
    if not has_table(con, "result_studies"):
        return []
    return R.read_studies(con, current=True, study=STUDY, dataset=dataset)


def baseline_choices(con, dataset: str) -> dict:
    """What the Fig. 8 section offers: ``pairs`` ``[(vision, text)]`` with a stored baseline and
    ``metrics`` scored for them."""
    rows = _baselines(con, dataset)
    pairs = sorted({tuple(r["subject"].split("|", 1)) for r in rows})
    metrics = sorted({r["payload"]["metric"] for r in rows})
    return {"pairs": pairs, "metrics": metrics}


def fig8_view(con, dataset: str, metric: str, vision: str, text: str) -> dict:
    """``{sweep, baselines, reached, error}`` for one vision × text pair and metric.

    ``sweep``: one row per (n_f, n_c): ``n_frames, n_captions, value, ci_low, ci_high`` (the
    original-caption runs' best cells, latest computed). ``baselines``: one row per n_f: ``n_frames,
    value, ci_low, ci_high, layers`` (``L{vision}/L{text}``, or why there is no best cell).
    ``reached``: ``{n_f: budget_reaching(...)}`` (the smallest n_c whose alignment reaches the long
    caption's). ``error``: why there is nothing to draw."""
    out = {"sweep": pd.DataFrame(columns=["n_frames", "n_captions", "value", "ci_low", "ci_high"]),
           "baselines": pd.DataFrame(columns=["n_frames", "value", "ci_low", "ci_high", "layers"]),
           "reached": {}, "error": None, "metric": metric, "vision": vision, "text": text}
    base = [r["payload"] for r in _baselines(con, dataset)
            if r["subject"] == f"{vision}|{text}" and r["payload"]["metric"] == metric]
    if not base:
        out["error"] = (f"no long-caption baseline of {vision} × {text} ({metric}) in {dataset}: give each manifest "
                        "item a `long_caption`, precompute the text model again, then `layerscope analyze`")
        return out
    out["baselines"] = pd.DataFrame([{
        "n_frames": p["n_frames"], "value": p["value"], "ci_low": p["ci_low"], "ci_high": p["ci_high"],
        "layers": (f"L{p['best_a']}/L{p['best_b']}" if p["value"] is not None
                   else (p["flags"] or {}).get("best", "no best cell"))} for p in base]).sort_values("n_frames")
    if has_table(con, "result_grids"):
        rows = R.rows(con, """
            SELECT g.n_frames, g.n_captions, g.best_value AS value, g.ci_low, g.ci_high
            FROM result_grids g JOIN runs r ON r.run_id = g.run_b
            WHERE g.dataset = ? AND g.metric = ? AND g.pair_kind = 'vision_text' AND g.model_a = ? AND g.model_b = ?
                  AND r.variant = 'original' AND """ + R.current_clause(con, "result_grids", "g") + """
            ORDER BY g.computed""", [dataset, metric, vision, text])
        latest = {(r["n_frames"], r["n_captions"]): r for r in rows}  # the latest computed wins
        if latest:
            out["sweep"] = pd.DataFrame(list(latest.values())).sort_values(["n_frames", "n_captions"])
    for _, b in out["baselines"].iterrows():
        s = out["sweep"][out["sweep"]["n_frames"] == b["n_frames"]]
        out["reached"][int(b["n_frames"])] = budget_reaching(
            s["n_captions"].astype(float), s["value"].astype(float),
            None if b["value"] is None or pd.isna(b["value"]) else float(b["value"]))
    return out


def fig8_text(fv: dict, n_frames: int) -> str:
    """One sentence: the baseline at ``n_frames`` and the smallest caption budget that reaches it."""
    if fv.get("error"):
        return fv["error"]
    b = fv["baselines"][fv["baselines"]["n_frames"] == n_frames]
    if not len(b) or b.iloc[0]["value"] is None or pd.isna(b.iloc[0]["value"]):
        return f"No long-caption baseline at n_f = {n_frames}" + (f": {b.iloc[0]['layers']}" if len(b) else "")
    b = b.iloc[0]
    ci = (f" [{b['ci_low']:.3f}, {b['ci_high']:.3f}]" if b["ci_low"] is not None and not pd.isna(b["ci_low"]) else "")
    r = fv["reached"].get(int(n_frames), {})
    if r.get("error"):
        tail = r["error"]
    else:
        where = f"{abs(r['margin']):.3f} {'above' if r['margin'] >= 0 else 'below'} it"
        tail = (f"the caption sweep reaches it at n_c = {r['n_c']} (its largest value is {where})"
                if r.get("n_c") is not None else f"no caption budget reaches it (the sweep's largest value is {where})")
    return f"Long original caption at n_f = {n_frames}: {fv['metric']} {b['value']:.3f}{ci} ({b['layers']}); {tail}."


def fig8_chart(fv: dict, n_frames: int, *, title=None):
    """The caption sweep at ``n_frames`` (line, interval band) and the long caption's value (dashed
    horizontal line, its interval a shaded band across the sweep)."""
    alt = lazy_altair()
    sweep = fv["sweep"][fv["sweep"]["n_frames"] == n_frames]
    b = fv["baselines"][fv["baselines"]["n_frames"] == n_frames]
    x = alt.X("n_captions:Q", title="captions per item (n_c)", scale=alt.Scale(type="log", base=2))
    layers = []
    if len(sweep):
        band = sweep.dropna(subset=["ci_low", "ci_high"])
        if len(band):
            layers.append(alt.Chart(band).mark_area(opacity=0.2).encode(x=x, y="ci_low:Q", y2="ci_high:Q"))
        layers.append(alt.Chart(sweep).mark_line(point=True).encode(
            x=x, y=alt.Y("value:Q", title=f"best {fv['metric']}", scale=alt.Scale(zero=False)),
            tooltip=["n_captions", alt.Tooltip("value:Q", format=".3f")]))
    if len(b) and b.iloc[0]["value"] is not None and not pd.isna(b.iloc[0]["value"]):
        v = float(b.iloc[0]["value"])
        lo, hi = b.iloc[0]["ci_low"], b.iloc[0]["ci_high"]
        xs = sweep["n_captions"].tolist() or [1]
        span = pd.DataFrame({"n_captions": [min(xs), max(xs)], "value": [v, v],
                             "low": [lo if lo is not None and not pd.isna(lo) else v] * 2,
                             "high": [hi if hi is not None and not pd.isna(hi) else v] * 2})
        layers.append(alt.Chart(span).mark_area(opacity=0.12, color="firebrick").encode(x=x, y="low:Q", y2="high:Q"))
        layers.append(alt.Chart(span).mark_line(strokeDash=[6, 4], color="firebrick").encode(
            x=x, y="value:Q", tooltip=[alt.Tooltip("value:Q", title="long caption", format=".3f")]))
    out = alt.layer(*layers).properties(width=420, height=300) if layers else alt.Chart(pd.DataFrame()).mark_point()
    return out.properties(title=title) if title else out


def frame_budgets(fv: dict) -> list[int]:
    """The n_f values with a baseline, largest first (the page's default is the richest input)."""
    if not len(fv["baselines"]):
        return []
    return sorted({int(n) for n in fv["baselines"]["n_frames"] if not pd.isna(n)}, reverse=True)
