"""The predictors page's data: signal × task tables and their matrix."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.methods.predictors import MIN_LAYERS
from analysis.views.layers import layer_label
from analysis.views.nuance import collapse_notes
from analysis.views.section import Section
from analysis.views.store_info import study


def _by_name(layer, names: dict):
    """A named layer (``default``, ``joint``) as its name; a numbered one stays its index (a number)."""
    if layer is None:
        return None
    label = layer_label(layer, names)
    return label if not label.isdigit() else layer


def _ci_text(ci) -> str:
    return "" if not ci or ci[0] is None else f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def _coverage_text(s: dict) -> str:
    """How many models a signal's ρ stands on, ``"1 model only"`` marked."""
    n = s["n_models_covered"]
    return "1 model only" if n == 1 else f"{n} models"


_LAYER_COLUMNS = ("picked layer", "truly best layer", "last layer", "default layer")


def _layers_as_text(df: pd.DataFrame) -> pd.DataFrame:
    """Layer columns holding a named layer become text throughout (``"3"``, ``"default"``, ``""`` for
    none): one type per column, as Arrow and the table widgets need; columns of indices only stay numbers."""
    for c in _LAYER_COLUMNS:
        if c in df and any(isinstance(v, str) for v in df[c]):
            df[c] = ["" if v is None or (isinstance(v, float) and not np.isfinite(v)) else str(v) for v in df[c]]
    return df


def predictor_task_label(t: dict) -> str:
    """``task · metric [setting]``, marked ``(fabricated)`` when its numbers are made up (the demo)."""
    label = f"{t['task']} · {t['metric']}" + (f" [{t['setting']}]" if t.get("setting") else "")
    return label + (" (fabricated)" if t.get("fabricated") and "fabricated" not in label.lower() else "")


#: each model's reason for an undefined ρ (:func:`analysis.methods.predictors.undefined_rho`), as a
#: sentence says it of one model (``IS_CONSTANT``) and of a list of models (``UNDEFINED_WHY``)
IS_CONSTANT = {"constant_signal": "the signal is constant", "constant_result": "the result is constant",
               "constant_both": "the signal and the result are both constant"}
UNDEFINED_WHY = {"too_few_layers": f"fewer than {MIN_LAYERS} usable layers",
                 "constant_signal": "the signal constant over the usable layers",
                 "constant_result": "the result constant over the usable layers",
                 "constant_both": "the signal and the result both constant over the usable layers"}


def unmeasured_reason(s: dict) -> str:
    """Why no model gives signal row ``s`` (a payload signal with ``n_models_covered == 0``) a ρ, from
    what the row stores: ``n_points`` usable (model, layer) points over ``n_models`` models, the
    ``excluded`` layers by reason, the models that had a usable layer (``per_model_rho``'s keys) and
    why each one's ρ is undefined (``rho_undefined``).
    Spearman's ρ needs at least :data:`~analysis.methods.predictors.MIN_LAYERS` points with neither side
    constant, so: no usable point; fewer than that many in all; one model with enough points (then a side
    is constant there, the only way ρ of >= 2 points is undefined); or several models, each short or
    constant, each named with its reason. A row stored by an earlier LayerScope lists the models without
    their reasons (``models_too_few_layers``): it says "short or constant" of them all."""
    n, n_models = int(s.get("n_points") or 0), int(s.get("n_models") or 0)
    exc = {k: int(v) for k, v in (s.get("excluded") or {}).items() if v}
    with_results = n + sum(exc.values())
    models = sorted(s.get("per_model_rho") or {})
    reasons = s.get("rho_undefined") or {}
    known = bool(models) and all(reasons.get(m) in UNDEFINED_WHY for m in models)
    if n == 0:
        why = ", ".join(f"{v} {k}" for k, v in sorted(exc.items()))
        return "none of the layers with results has a usable value of it" + (f" ({why})" if why else "")
    if n < MIN_LAYERS:
        whose = f"{models[0]}'s" if len(models) == 1 else "the"
        return (f"a value at only {n} of {whose} {with_results} layers with results"
                + (f" ({', '.join(models)})" if len(models) > 1 else "") + f"; a ρ needs at least {MIN_LAYERS}")
    if n_models == 1:
        said = IS_CONSTANT.get(reasons[models[0]]) if known else None
        return f"on {models[0]}'s {n} usable layers {said or 'the signal or the result is constant'}, so ρ is undefined"
    if known:
        groups: dict = {}
        for m in models:
            groups.setdefault(reasons[m], []).append(m)
        return "ρ is undefined on each of " + _and(f"{', '.join(ms)} ({UNDEFINED_WHY[w]})" for w, ms in
                                                   sorted(groups.items(), key=lambda g: models.index(g[1][0])))
    return (f"ρ is undefined on each of {', '.join(models)} (fewer than {MIN_LAYERS} usable layers, "
            "or a side constant over them)")


def _compact(signals) -> str:
    """Signal names with one ``with <partner> (<space>)`` tail written once: ``map_t2v, mmd with clip [text]
    (joint)``; names without such a tail (``rankme``) as they are; in the order given."""
    tails: dict = {}
    for sig in signals:
        head, sep, tail = sig.partition(" with ")
        tails.setdefault(tail if sep else None, []).append(head if sep else sig)
    return ", ".join(", ".join(heads) if tail is None else f"{', '.join(heads)} with {tail}"
                     for tail, heads in tails.items())


def unmeasured_sentences(unmeasured: list[dict], tasks: list[str]) -> list[str]:
    """Sentences naming the signals no model measures (rows of :func:`predictors_tables`' ``unmeasured``)
    and why, grouped by reason: one for the whole table when every task of ``tasks`` leaves out the same
    signals for the same reasons, else one per set of tasks that leave out the same ones (in task order)."""
    by_task: dict = {}
    for r in unmeasured:
        by_task.setdefault(r["task"], {}).setdefault(r["reason"], []).append(r["signal"])
    same: dict = {}  # what is left out, as text -> the tasks that leave it out
    for task in tasks:
        if task in by_task:
            text = "; ".join(f"{_compact(sigs)} ({why})" for why, sigs in by_task[task].items())
            same.setdefault(text, []).append(task)
    if len(same) == 1 and len(next(iter(same.values()))) == len(tasks):
        return [f"Not measured on any model, so not in the table: {next(iter(same))}."]
    return [f"Not measured on any model in {_and(ts)}, so not in {'its' if len(ts) == 1 else 'their'} rows: {text}."
            for text, ts in same.items()]


def _and(items) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def predictors_tables(con, dataset) -> dict | None:
    """The predictors study of ``dataset`` as tables (None when it has none):

    - ``table``: one row per (task, signal): rank (coverage first: the models the ρ stands on, then
      whether its interval excludes 0, then |ρ|; :func:`analysis.methods.predictors.rank_rows`), ``coverage``
      (``"3 models"``, ``"1 model only"``), Spearman ρ across layers (mean of per-model ρ)
      and pooled over models × layers, each with its bootstrap interval, counts of models, points
      and excluded layers, the task's direction and whether a higher signal goes with better results;
    - ``picks``: per (task, signal, model) the layer the signal picks vs the truly best, last and
      ``default`` layer, gaps in the task's metric (positive: the pick is better; ``shortfall`` >= 0);
    - ``models``: per (task, model) the truly best layer vs the last numbered layer and ``default``;
    - ``curves``: per (task, model, layer) the imported result (``layer_name``: the index as text or the
      named layer's name), for a chart;

    Named layers (``default``, ``joint``) appear by name in the layer columns, numbered ones as indices.
    - ``unmeasured``: ``[{"task", "signal", "reason"}]``, the signals no model gives a ρ for in a task
      (coverage 0, :func:`unmeasured_reason`): they are in none of the tables above (``rhos`` and
      ``picks`` included: a pick among fewer than 3 usable layers is no choice), only here and in
      ``not_measured``, their sentences (:func:`unmeasured_sentences`);
    - ``tasks`` (labels in order), ``fabricated`` (labels whose numbers are made up), ``notes``, ``setting``.
    """
    payload = study(con, "predictors", dataset)
    if payload is None:
        return None
    table, picks, models, curves, rhos, unmeasured = [], [], [], [], [], []
    layout = payload.get("models") or {}
    names = {m: (layout.get(m) or {}).get("layer_names") or {} for m in layout}
    for t in payload.get("tasks", []):
        label = predictor_task_label(t)
        direction = "higher is better" if t["higher_is_better"] else "lower is better"
        for s in t["signals"]:
            if not s["n_models_covered"]:
                # a signal no model gives a ρ for has nothing to rank: named once with its reason, not a row of blanks
                unmeasured.append({"task": label, "signal": s["signal"], "reason": unmeasured_reason(s)})
                continue
            exc = s.get("excluded") or {}
            table.append({"task": label, "rank": s["rank"], "signal": s["signal"], "kind": s["kind"],
                          "coverage": _coverage_text(s), "interval excludes 0": s.get("ci_excludes_zero"),
                          "ρ across layers": s["rho_layers"], "interval (layers)": _ci_text(s["rho_layers_ci"]),
                          "models with ρ": s["n_models_layers"], "ρ pooled": s["rho_pooled"],
                          "interval (pooled)": _ci_text(s["rho_pooled_ci"]), "models": s["n_models"],
                          "layers used": s["n_points"],
                          "layers excluded": ", ".join(f"{v} {k}" for k, v in sorted(exc.items()) if v),
                          "higher signal goes with": ("" if s.get("better") is None else
                                                      "better results" if s["better"] else "worse results"),
                          "task direction": direction})
            for stat, key in (("ρ across layers", "rho_layers"), ("ρ pooled", "rho_pooled")):
                ci = s.get(f"{key}_ci") or [None, None]
                rhos.append({"task": label, "signal": s["signal"], "rank": s["rank"], "statistic": stat,
                             "rho": s.get(key), "low": ci[0], "high": ci[1], "coverage": _coverage_text(s)})
            for p in s.get("picks", []):
                nm = names.get(p["model"], {})
                picks.append({"task": label, "signal": s["signal"], "model": p["model"],
                              "picked layer": _by_name(p["pick_layer"], nm), "result there": p["pick_value"],
                              "truly best layer": _by_name(p["best_layer"], nm), "best result": p["best_value"],
                              "shortfall vs best": p["shortfall"], "last layer": p["last_layer"],
                              "pick vs last": p["vs_last"], "default layer": _by_name(p["default_layer"], nm),
                              "pick vs default": p["vs_default"], "found best": bool(p["found_best"])})
        for e in t["models"]:
            nm = names.get(e["model"], {})
            models.append({"task": label, "model": e["model"], "truly best layer": _by_name(e["best_layer"], nm),
                           "best result": e["best_value"], "last layer": e["last_layer"],
                           "last result": e["last_value"], "best vs last": e["best_vs_last"],
                           "default layer": _by_name(e["default_layer"], nm), "default result": e["default_value"],
                           "best vs default": e["best_vs_default"]})
            curves += [{"task": label, "model": e["model"], "layer": layer, "layer_name": layer_label(layer, nm),
                        "result": v} for layer, v in zip(e["layers"], e["values"])]
    tasks = [predictor_task_label(t) for t in payload.get("tasks", [])]
    return {"table": pd.DataFrame(table), "picks": _layers_as_text(pd.DataFrame(picks)),
            "models": _layers_as_text(pd.DataFrame(models)),
            "curves": pd.DataFrame(curves), "rhos": _with_zero_verdict(pd.DataFrame(rhos)), "tasks": tasks,
            "unmeasured": unmeasured, "not_measured": unmeasured_sentences(unmeasured, tasks),
            "fabricated": [predictor_task_label(t) for t in payload.get("tasks", []) if t.get("fabricated")],
            "notes": payload.get("notes", []), "setting": payload.get("setting"),
            "level": payload.get("level"), "n_boot": payload.get("n_boot")}


def _with_zero_verdict(df: pd.DataFrame) -> pd.DataFrame:
    """``interval``: whether each ρ's bootstrap interval excludes 0 (``"excludes 0"``, ``"includes 0"``,
    ``"no interval"``), for the chart's marks."""
    if not len(df):
        return df

    def verdict(lo, hi):
        if lo is None or hi is None or not (np.isfinite(lo) and np.isfinite(hi)):
            return "no interval"
        return "excludes 0" if lo > 0 or hi < 0 else "includes 0"

    return df.assign(interval=[verdict(lo, hi) for lo, hi in zip(df["low"], df["high"])])


def rho_chart(rhos: pd.DataFrame, statistic: str, height_per_signal: int = 22):
    """Spearman ρ of each signal for one task with its bootstrap interval as a bar, a dashed zero line,
    and the marks whose interval excludes 0 filled (hollow: the interval includes 0, so the sign is
    not established). ``rhos``: rows of :func:`predictors_tables`' ``rhos`` for one task; x in [-1, 1]."""
    from analysis.views.charts import lazy_altair, plot_height

    alt = lazy_altair()
    d = rhos[(rhos["statistic"] == statistic) & rhos["rho"].notna()].sort_values("rank")
    order = list(d["signal"])
    y = alt.Y("signal:N", sort=order, title=None, axis=alt.Axis(labelLimit=0))
    # two title lines ending at the plot's right edge, one legend entry per row: a phone's plot, right of
    # the signals' names, is narrower than the one-line title
    x = alt.X("rho:Q", title=[f"Spearman {statistic}", "(95% interval)"], scale=alt.Scale(domain=[-1, 1]),
              axis=alt.Axis(labelAngle=0, titleLimit=0, titleAnchor="end"))
    tips = [alt.Tooltip("signal:N"), alt.Tooltip("rho:Q", format=".2f", title="ρ"),
            alt.Tooltip("low:Q", format=".2f", title="95% CI low"), alt.Tooltip("high:Q", format=".2f",
                                                                              title="95% CI high"),
            alt.Tooltip("interval:N", title="interval"), alt.Tooltip("coverage:N")]
    shape = alt.Fill("interval:N", title="interval", scale=alt.Scale(
        domain=["excludes 0", "includes 0", "no interval"], range=["#1f77b4", "white", "#bbbbbb"]),
        legend=alt.Legend(orient="bottom", labelLimit=0, columns=1))
    base = alt.Chart(d)
    zero = alt.Chart(pd.DataFrame({"rho": [0.0]})).mark_rule(strokeDash=[4, 4], color="gray").encode(x="rho:Q")
    bars = base.mark_rule(strokeWidth=2, color="#1f77b4").encode(x=alt.X("low:Q", scale=alt.Scale(domain=[-1, 1])),
                                                                 x2="high:Q", y=y, tooltip=tips)
    points = base.mark_point(size=90, filled=False, stroke="#1f77b4", strokeWidth=2, opacity=1).encode(
        x=x, y=y, fill=shape, tooltip=tips)
    # the plot's own height: each signal keeps its row (and label) whatever the legend below takes
    return plot_height(alt.layer(zero, bars, points), max(80, height_per_signal * len(order)))


def layer_results_chart(curves: pd.DataFrame, task: str, height: int = 300):
    """Each model's downstream result per layer for one task (rows of :func:`predictors_tables`'
    ``curves``): named layers (default, joint) by name after the numbered ones, labels upright."""
    from analysis.views.charts import lazy_altair, plot_height
    from analysis.views.layers import layer_order

    alt = lazy_altair()
    chart = alt.Chart(curves).mark_line(point=True).encode(
        x=alt.X("layer_name:O", title="layer", sort=layer_order(curves["layer_name"]), axis=alt.Axis(labelAngle=0)),
        y=alt.Y("result:Q", title=task, scale=alt.Scale(zero=False), axis=alt.Axis(titleLimit=0)),
        color=alt.Color("model:N", legend=alt.Legend(orient="bottom", labelLimit=0, columns=1)),  # a phone's width
        tooltip=[alt.Tooltip("model:N", title="model"), alt.Tooltip("layer_name:N", title="layer"),
                 alt.Tooltip("result:Q", format=".4g", title="result")])
    return plot_height(chart, height)


def predictor_matrix(table: pd.DataFrame, statistic: str = "ρ across layers") -> pd.DataFrame:
    """Signal × task grid of ``statistic`` with its interval as text (``"0.93 [0.80, 1.00]"``, marked
    ``(1 model only)`` when it stands on one model), rows ordered by the best rank a signal reaches
    in any task."""
    if not len(table):
        return pd.DataFrame()
    ci = "interval (layers)" if statistic == "ρ across layers" else "interval (pooled)"
    one = table["coverage"] == "1 model only" if "coverage" in table else [False] * len(table)
    cells = table.assign(cell=[("—" if v is None or not np.isfinite(v) else
                                f"{v:+.2f} {c}".strip() + (" (1 model only)" if o else ""))
                               for v, c, o in zip(table[statistic], table[ci], one)])
    grid = cells.pivot_table(index="signal", columns="task", values="cell", aggfunc="first")
    order = cells.groupby("signal")["rank"].min().sort_values(kind="stable").index
    return grid.reindex(order).reset_index()


#: why the section is empty, naming the commands that fill it
OMITTED = ("no per-layer downstream results (a `layer` column in the CSV of `layerscope downstream import`, "
           "then `layerscope analyze`)")

#: columns of the predictor table in the section's data (the page shows them all)
PREDICTOR_COLUMNS = ("task", "rank", "signal", "kind", "coverage", "interval excludes 0", "ρ across layers",
                     "interval (layers)", "models with ρ",
                     "ρ pooled", "interval (pooled)", "layers used", "layers excluded", "higher signal goes with")


def _pick_rows(picks: pd.DataFrame) -> list[dict]:
    """Per (task, signal) of :func:`predictors_tables`' ``picks``: how many models, how often its pick
    is the truly best layer, the mean shortfall against the best and the mean gap to the last layer."""
    rows = []
    if len(picks):
        for (task, signal), g in picks.groupby(["task", "signal"], sort=False):
            rows.append({"task": task, "signal": signal, "models": len(g), "picks the best": int(g["found best"].sum()),
                         "mean shortfall vs best": float(g["shortfall vs best"].mean()),
                         "mean pick vs last": (float(g["pick vs last"].dropna().mean())
                                               if g["pick vs last"].notna().any() else None)})
    return rows


def rho_charts(data: dict, *, tasks=None, statistic: str = "ρ across layers", kinds=None) -> tuple:
    """``(title, chart)`` per task of :func:`predictors_tables`' ``data`` (``tasks``: these, in order;
    None: every task): :func:`rho_chart` of the signals of ``kinds`` (None: every kind) for that task
    at ``statistic``, left out where no signal has a finite ρ."""
    table, rhos = data["table"], data["rhos"]
    if not len(table) or not len(rhos):
        return ()
    shown = table if kinds is None else table[table["kind"].isin(list(kinds))]
    charts = []
    for task in (data["tasks"] if tasks is None else tasks):
        signals = set(shown[shown["task"] == task]["signal"])
        r = rhos[(rhos["task"] == task) & rhos["signal"].isin(signals)]
        if len(r) and r[r["statistic"] == statistic]["rho"].notna().any():
            charts.append((f"signals for {task}: Spearman {statistic} with its 95% interval", rho_chart(r, statistic)))
    return tuple(charts)


def section(con, dataset, *, models=None, references=None, tasks=None, statistic: str = "ρ across layers",
            kinds=None) -> Section:
    """The Layer predictors page's section. ``data``: the predictor table of ``dataset`` (every task ×
    signal, ranked, the columns of :data:`PREDICTOR_COLUMNS`), the truly best layer per model against
    its last and ``default`` layer (``best_layers``), per (task, signal) how often its pick is the best
    layer (``picks``), the signals no model measures (``unmeasured`` rows, ``not_measured`` sentences:
    :func:`unmeasured_sentences`), and the study's ``fabricated``, ``setting``, ``level``, ``n_boot`` and ``notes``;
    None when the store has no per-layer downstream results. ``charts``: each task's signals with
    their ρ and interval (:func:`rho_charts`; the page passes its task, statistic and signal kinds, the
    report takes every task at ρ across layers). ``notes``: the study's notes, one line per reason.
    ``models`` and ``references`` are accepted for the report's loop and not used: ρ across layers
    stands on every model the study used."""
    data = predictors_tables(con, dataset)
    if data is None or not data["tasks"]:
        return Section(None, omitted=OMITTED)
    summary = {"fabricated": data["fabricated"], "setting": data["setting"], "level": data["level"],
               "n_boot": data["n_boot"], "notes": data["notes"],
               "table": [{c: r.get(c) for c in PREDICTOR_COLUMNS} for r in data["table"].to_dict(orient="records")],
               "best_layers": data["models"].to_dict(orient="records"), "picks": _pick_rows(data["picks"]),
               "unmeasured": data["unmeasured"], "not_measured": data["not_measured"]}
    return Section(summary, charts=rho_charts(data, tasks=tasks, statistic=statistic, kinds=kinds),
                   notes=tuple(collapse_notes(data["notes"])))
