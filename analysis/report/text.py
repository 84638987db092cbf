"""The report's shared words and table rows: what its HTML and Markdown both write (numbers
formatted, a best cell's null in words, the scaling and reorder tables, the sections' explanations
and the notes each prints under its charts)."""

from __future__ import annotations

import numpy as np

from analysis.null import beyond_chance, null_label
from analysis.views.section import place_notes
from analysis.views.temporal import temporal_view

#: the report's sections, in its order (the summary first)
SECTIONS = ("summary", "heatmaps", "layer_curves", "scaling", "model_map", "downstream", "probes", "predictors",
            "temporal", "paper_figures")



def section_notes(d: dict, name: str) -> list[str]:
    """The sentences the report prints under section ``name`` of one dataset's part ``d``: the notes its
    page reads under the charts (``d["notes"][name]``, each distinct one once), less any the summary
    of ``d`` already prints (RankMe's bound can be said there and under the curves alike), so no
    sentence is printed twice. ``[]`` when the section has none."""
    said = set((d["sections"].get("summary") or {}).get("notes", []))
    return [n for n in d.get("notes", {}).get(name, []) if n not in said]


def placed_notes(d: dict, name: str) -> tuple[list[list[str]], list[tuple[list[str], list[str]]], list[str]]:
    """Where the report prints each of :func:`section_notes` of section ``name`` (the rule of
    :func:`analysis.views.section.place_notes`, on the section's ``d["chart_notes"]``): ``(under,
    shared, wide)``, ``under`` one list of sentences per chart of the section (in ``d["charts"]``'s
    order) printed directly under it, ``shared`` ``(chart titles, sentences)`` read under several of
    the charts (not all), printed after them naming them, and ``wide`` the section-wide sentences.
    A section without ``chart_notes`` has every sentence in ``wide``."""
    notes = section_notes(d, name)
    per_chart = d.get("chart_notes", {}).get(name) or [{"chart": t, "notes": []} for s, t, _ in d.get("charts", [])
                                                        if s == name]
    kept = set(notes)
    placed = place_notes([[n for n in c["notes"] if n in kept] for c in per_chart], notes)
    titles = [c["chart"] for c in per_chart]
    return ([list(u) for u in placed.under], [([titles[i] for i in charts], list(said)) for charts, said in placed.shared],
            list(placed.wide))


def fmt(v, digits=3):
    """A number as the report's tables write it: ``digits`` decimals for a float, – for none or NaN."""
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "–"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def null_cell(null: dict | None, within: dict | None = None) -> str:
    """A best cell's shuffled-pairing null in a table cell: verdict, p, the null's 95th percentile and
    the shuffles by kind; with item groups the within-group null follows, named apart (it asks whether
    the pairing holds within sources, not whether the sources align)."""
    if not null:
        return "—"
    verdict = "beyond chance" if beyond_chance(null) else "not beyond chance"
    out = f"{verdict}: p = {fmt(null['p'])}, {fmt(null['q95'])} ({null['n_perm']} {null_label(null)})"
    if within:
        out += (f"; within sources: p = {fmt(within['p'])} ({within['n_perm']} within-group shuffles, "
                f"{'beyond' if beyond_chance(within) else 'not beyond'} chance)")
    return out


def alignment_heading(summary: dict) -> str:
    """The best-alignment column's heading, naming the metric(s) its values are."""
    metrics = sorted({a["metric"] for m in summary.get("models", []) for a in m["alignment"].values()})
    return f"best alignment ({', '.join(metrics)})" if metrics else "best alignment"


#: the saturating law's parameters as the report's tables head them
SCALING_COLUMNS = (("s_inf", "S∞"), ("c_f", "C_f"), ("c_c", "C_c"), ("alpha", "α"), ("beta", "β"))


def scaling_rows(fits) -> list[dict]:
    """One table row per scaling subject (HTML and Markdown alike), its ``pair`` named as the panels
    name it (``"A × B · metric"``): DR's saturating law's parameters
    (None where the data do not determine them, the reason under ``not determined``), its own R²,
    and the held-out-best form with *its* R² when that is another form."""
    rows = []
    for f in fits:
        # the pair as the panels' captions name it (a dual encoder's sides); an entry without it, by its models
        models, metric = f["subject"].rsplit("|", 1)
        pair = f"{f.get('pair') or models.replace('|', ' × ')} · {metric}"
        fit = f.get("fit")
        if not fit:
            rows.append({"pair": pair, **{h: None for _, h in SCALING_COLUMNS}, "d_v = 2/α": None, "R² (saturating)": None,
                         "held-out best (R²)": "", "DR Table 1 (published)": "", "fit": "", "not determined": "",
                         "note": f.get("error")})
            continue
        other = next((c for c in f.get("curves", []) if c["form"] != "saturating"), None)
        best = (f"{other['form']} ({fmt(other['r2'])})" if other else "saturating") if f.get("curves") else ""
        why = fit.get("undetermined") or {}
        table = {r["parameter"]: r for r in f.get("parameter_table", [])}
        dv = table.get("d_v = 2/α") or {}
        published = "; ".join(f"{h} {table[k]['paper']}" for k, h in (*SCALING_COLUMNS, ("d_v = 2/α", "d_v"), ("R²", "R²"))
                              if (table.get(k) or {}).get("paper"))
        rows.append({"pair": pair, **{h: fit["params"].get(k) for k, h in SCALING_COLUMNS},
                     "d_v = 2/α": dv.get("value") or None,
                     "R² (saturating)": fit["r2"], "held-out best (R²)": best,
                     "DR Table 1 (published)": published, "fit": f.get("status") or "",
                     "not determined": "; ".join(f"{h}: {why[k]}" for k, h in SCALING_COLUMNS if k in why),
                     "note": ("" if why else (f.get("reason") or "")) + "; ".join(f.get("notes") or [])})
    return rows


def reorder_report_rows(entries) -> list[dict]:
    """The reorder probe as report table rows: pair, layers, each value with its 95% interval, chance."""
    df = temporal_view({"reorder": entries})["reorder"]

    def ci(r, v):
        lo, hi = r[f"{v}_low"], r[f"{v}_high"]
        return "—" if lo is None or not np.isfinite(lo) else f"[{fmt(lo)}, {fmt(hi)}]"

    return [{"pair": r["pair"], "layers": r["layers"], "k": r["k"], "positive": r["positive"],
             "positive 95% CI": ci(r, "positive"), "negative": r["negative"], "negative 95% CI": ci(r, "negative"),
             "drop": r["drop"], "drop 95% CI": ci(r, "drop"), "chance k/(N−1)": r["chance"],
             "resamples scored": r["resamples"], "note": r["note"]}
            for r in df.to_dict(orient="records")]


# ---------------------------------------------------------------- the sections' explanations
PROBES_TEXT = ("Measured on this dataset: each manifest field named with `analyze --labels` is a task, probed at "
               "every layer (k-NN accuracy leave-one-out, k-means NMI and ARI, a linear probe when asked) with 95% "
               "intervals over item resamples. Each model's label-free pick (the layer its verdict advises) is set "
               "against the probe's best layer on the verdict's run; differences are paired on the same resamples.")


#: how the predictor table is ordered (by coverage: a signal is only as good as the models it stands on), said wherever it is shown
RANKING_TEXT = ("Ranked by the number of models a signal's ρ stands on, then whether its interval excludes 0, "
                "then |ρ|: a signal seen in one model only (\"1 model only\") ranks below every signal seen in "
                "more. No single signal is a universal selector; the table shows which signal predicts which task.")


def fabricated_text(pred) -> str:
    return ("FABRICATED numbers: the downstream results of " + ", ".join(pred["fabricated"]) + " were made up by "
            "`layerscope demo` to exercise this section; they measure nothing.") if pred["fabricated"] else ""
