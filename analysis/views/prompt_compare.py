"""TARA's EOL-prompt against plain-prompt comparison of one MLLM: two same-space models
(an MLLM's video and text sides) side by side: modality gap, retrieval and alignment from the
same-space study (with their bootstrap intervals), uniformity of each side from the profiles.

Prompts are part of a run's identity (``runs.config["prompt"]``); two prompts of one model name would
be two runs of one setting (the newer supersedes the older), so the two to compare are two model
names (``--name``): one precomputed with ``--prompt eol`` (default) and one with ``--prompt plain``
(or ``--prompt-template auto`` / ``none``), or two checkpoints. :func:`prompt_pairs` proposes the
pairs of one source and revision whose stored prompts differ (the comparison TARA makes); any two
same-space models can be picked. Nothing is recomputed here.

Reference: TARA (``../shared/papers/nuanced-video-retrieval-modality-gap.md``, §"Modality gap" and
App. Fig. 10); the EOL prompt is Jiang et al.'s E5-V "Summarize ... in one word:".
"""

from __future__ import annotations

import itertools
import json

import pandas as pd

from analysis.methods.paper_figures import side_by_side
from analysis.storage import results as R
from analysis.views.charts import lazy_altair
from analysis.views.store_info import has_table

#: what the comparison shows, with the direction that is better (TARA: a smaller gap; higher recall)
COMPARED = {"modality_gap": False, "recall@1_t2v": True, "recall@1_v2t": True, "recall@5_t2v": True,
            "map_t2v": True, "alignment": False}


def _same_space_rows(con, dataset: str) -> dict:
    """``{model: payload}`` of the same-space rows of one model on both sides (an MLLM, or a dual
    encoder's towers under one name) at its largest (n_f, n_c)."""
    if not has_table(con, "result_studies"):
        return {}
    out = {}
    for r in R.read_studies(con, current=True, study="same_space", dataset=dataset):
        a, _, b = r["subject"].partition("|")
        if a != b:
            continue
        p = r["payload"]
        key = (p.get("n_frames") or 0, p.get("n_captions") or 0)
        if a not in out or key > (out[a].get("n_frames") or 0, out[a].get("n_captions") or 0):
            out[a] = p
    return out


def _prompt(con, run_id: str):
    got = con.execute("SELECT config FROM runs WHERE run_id = ?", [run_id]).fetchall()
    cfg = json.loads(got[0][0]) if got and got[0][0] else {}
    return cfg.get("prompt")


def prompt_models(con, dataset: str) -> list[str]:
    """Models with a same-space row of their own two sides on ``dataset`` (what the pickers offer)."""
    return sorted(_same_space_rows(con, dataset))


def prompt_pairs(con, dataset: str) -> list[tuple[str, str]]:
    """Pairs of :func:`prompt_models` with one ``source`` and ``revision`` whose text runs' stored
    prompts differ: the same weights under two prompts (TARA's comparison)."""
    rows = _same_space_rows(con, dataset)
    src = {m: (s, v) for m, s, v in con.execute("SELECT model, source, revision FROM models").fetchall()}
    out = []
    for a, b in itertools.combinations(sorted(rows), 2):
        if src.get(a) and src.get(a) == src.get(b) and _prompt(con, rows[a]["run_b"]) != _prompt(con, rows[b]["run_b"]):
            out.append((a, b))
    return out


def _uniformity(con, run_id: str, layer: int):
    if not has_table(con, "result_profiles"):
        return None
    got = con.execute("SELECT layer_values FROM result_profiles WHERE run_id = ? AND metric = 'uniformity' AND "
                      + R.current_clause(con, "result_profiles") + " ORDER BY computed DESC LIMIT 1",
                      [run_id]).fetchall()
    if not got or got[0][0] is None or layer >= len(got[0][0]):
        return None
    v = got[0][0][layer]
    return None if v is None or v != v else float(v)


def _entry(p: dict, metric: str, e: int) -> tuple:
    m = (p.get("metrics") or {}).get(metric) or {}
    vals = m.get("values") or []
    value = vals[e] if e < len(vals) else None
    ci = (m.get("ci") or [None] * len(vals))[e] if m.get("ci") and e < len(m["ci"]) else None
    return value, ci


def compare_view(con, dataset: str, model_a: str, model_b: str) -> dict:
    """``{table, layers, prompts, settings, error}`` for two same-space models at their last compared
    layer (TARA embeds with the last token's final hidden state) and largest (n_f, n_c).

    ``table``: one row per metric of :data:`COMPARED` plus ``uniformity (video)`` and ``uniformity
    (text)`` (Wang & Isola, t = 2; lower: more uniform): ``metric, A, A interval, B, B interval,
    B − A, better, intervals apart``. ``layers``: the modality gap at every compared layer of both
    (``model, layer, value, ci_low, ci_high``) for the chart. ``prompts``: each model's stored text
    prompt. ``error``: why nothing can be compared."""
    rows = _same_space_rows(con, dataset)
    out = {"table": pd.DataFrame(), "layers": pd.DataFrame(), "prompts": {}, "settings": {}, "error": None,
           "a": model_a, "b": model_b}
    missing = [m for m in (model_a, model_b) if m not in rows]
    if missing:
        out["error"] = (f"no same-space result of {', '.join(missing)} in {dataset}: the comparison needs a model "
                        "whose video and text runs share one space (an MLLM); `layerscope analyze` computes it")
        return out
    if model_a == model_b:
        out["error"] = "pick two different models (e.g. one MLLM precomputed under two prompts, two --name's)"
        return out
    pa, pb = rows[model_a], rows[model_b]
    ea, eb = len(pa["layers_a"]) - 1, len(pb["layers_a"]) - 1
    table = []
    for metric, hib in COMPARED.items():
        (va, ca), (vb, cbi) = _entry(pa, metric, ea), _entry(pb, metric, eb)
        table.append(_row(metric, va, ca, vb, cbi, hib))
    for side, key in (("video", "run_a"), ("text", "run_b")):
        va = _uniformity(con, pa[key], pa["layers_a" if side == "video" else "layers_b"][ea])
        vb = _uniformity(con, pb[key], pb["layers_a" if side == "video" else "layers_b"][eb])
        table.append(_row(f"uniformity ({side})", va, None, vb, None, False))
    out["table"] = pd.DataFrame(table)
    layers = []
    for model, p in ((model_a, pa), (model_b, pb)):
        for e, layer in enumerate(p["layers_a"]):
            v, ci = _entry(p, "modality_gap", e)
            layers.append({"model": model, "layer": layer, "value": v, "ci_low": ci[0] if ci else None,
                           "ci_high": ci[1] if ci else None})
        out["prompts"][model] = _prompt(con, p["run_b"])
        out["settings"][model] = {"n_frames": p.get("n_frames"), "n_captions": p.get("n_captions"),
                                  "layer": p["layers_a"][-1], "space": p.get("space")}
    out["layers"] = pd.DataFrame(layers)
    return out


def _row(metric, va, ca, vb, cb, higher_is_better) -> dict:
    d = side_by_side(va, vb, higher_is_better=higher_is_better, ci_a=ca, ci_b=cb)
    fmt = lambda ci: f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci and None not in ci else ""  # noqa: E731
    return {"metric": metric, "A": va, "A interval": fmt(ca), "B": vb, "B interval": fmt(cb), "B − A": d["delta"],
            "better": {"a": "A", "b": "B", "tie": "tie"}.get(d["better"], ""),
            "intervals apart": "" if d["separated"] is None else ("yes" if d["separated"] else "no")}


def compare_text(cv: dict) -> str:
    """One sentence on the modality gap of the two models (TARA's headline number)."""
    if cv.get("error"):
        return cv["error"]
    g = cv["table"].set_index("metric").loc["modality_gap"]
    if g["A"] is None or g["B"] is None or pd.isna(g["A"]) or pd.isna(g["B"]):
        return "The modality gap is undefined for one of the two models at its last layer."
    apart = {"yes": "; their intervals do not overlap", "no": "; their intervals overlap",
             "": ""}[g["intervals apart"]]
    return (f"Modality gap ||mean(x̂) − mean(ŷ)||: {cv['a']} {g['A']:.3f}, {cv['b']} {g['B']:.3f} "
            f"(B − A = {g['B − A']:+.3f}{apart}).")


def compare_chart(cv: dict, *, title=None):
    """The modality gap at every compared layer of both models, with its interval band."""
    alt = lazy_altair()
    df = cv["layers"]
    base = alt.Chart(df)
    band = base.transform_filter("datum.ci_low != null").mark_area(opacity=0.2).encode(
        x="layer:Q", y="ci_low:Q", y2="ci_high:Q", color="model:N")
    line = base.mark_line(point=True).encode(
        x=alt.X("layer:Q", title="layer"), y=alt.Y("value:Q", title="modality gap (lower: sides mix)"),
        color=alt.Color("model:N", title="model"), tooltip=["model", "layer", alt.Tooltip("value:Q", format=".3f")])
    out = alt.layer(band, line).properties(width=420, height=280)
    return out.properties(title=title) if title else out
