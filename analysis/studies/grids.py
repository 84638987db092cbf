"""Grids study: every vision×text pair of done runs at every (n_f, n_c), every vision×vision pair at
each shared n_f, every text×text pair of different models at each shared n_c, for each pairwise
metric; the best cell and a bootstrap interval for it. Each row carries its ``pair_kind``.

Rows go to ``result_grids``. The pair loop is ``metric → block of partner runs → run``: each run's
layers are prepared once per metric (once per block when the partners do not fit the engine's
memory budget), never once per pair. With ``jobs > 1`` the stale pairs are scored in worker processes
(one task per run against all its partners, so each worker prepares a partner once).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from analysis.storage import results as R
from analysis.bootstrap import bootstrap_ci, derived_lists_k
from analysis.metrics.degenerate import lost_distinctions
from analysis.grid import NoBestCell, best_cell
from analysis.registry import get_metric
from analysis.studies.context import MAX_BOOT, Context, DatasetRuns
from analysis.studies.engine import prepared_by
from analysis.studies.parallel import run_tasks
from analysis.null import selection_null, unshufflable


def same_budget_pairs(runs: list, budget: str) -> list[tuple[dict, dict]]:
    """``(run_a, run_b)`` for every two different models of ``runs`` at each ``budget`` value
    (``n_frames`` or ``n_captions``) both hold; ``model_a < model_b`` by name, budgets ascending.

    Why equal budgets: a same-modality grid compares two encoders of the same input, so both must see
    the same input. Two text runs at different n_c embed different strings (one caption against ten
    concatenated), and two vision runs at different n_f different frames; their alignment would mix
    the models' difference with the input's. The budget sweep itself is the scaling study's, on
    vision×text pairs."""
    by_model: dict = defaultdict(dict)
    for r in runs:
        by_model[r["model"]][r[budget]] = r
    models = sorted(by_model)
    return [(by_model[ma][n], by_model[mb][n]) for i, ma in enumerate(models) for mb in models[i + 1:]
            for n in sorted(set(by_model[ma]) & set(by_model[mb]))]


def pair_list(d: DatasetRuns, metrics, blocks=None) -> list[tuple]:
    """``(kind, run_a, run_b, metric)`` for every grid the dataset gets, in scoring order.

    Kinds: ``vision_text`` (every vision run × every text run), ``vision_vision`` and ``text_text``
    (two different models at an equal budget, :func:`same_budget_pairs`). A model with both sides (a
    dual encoder's text tower, an MLLM's caption side) takes part in ``text_text`` through its text
    runs, under its own model name.

    Order: metrics that share a preparation (the k-NN metrics share one state per run), then block
    of text runs, then vision run, then text run in the block, then metric of the group (CKNNA
    first), so each vision run is prepared once per block and each text run once per preparation
    while a block's states stay in the engine's memory budget, and the grid mutual k-NN takes from
    CKNNA's counts (:meth:`Engine.grid`) is asked for by the very next task, while the engine's
    bounded memo still holds it. ``blocks(text_runs)`` splits the text runs (one block when None)."""
    out = []
    groups = blocks(d.text) if blocks else [d.text]
    by_prep: dict = {}
    for metric in sorted(metrics, key=lambda m: m != "cknna"):
        by_prep.setdefault(prepared_by(get_metric(metric), metric), []).append(metric)
    same_kind = ([("vision_vision", a, b) for a, b in same_budget_pairs(d.vision, "n_frames")]
                 + [("text_text", a, b) for a, b in same_budget_pairs(d.text, "n_captions")])
    for shared in by_prep.values():
        for group in groups:
            for a in d.vision:
                for b in group:
                    out.extend(("vision_text", a, b, metric) for metric in shared)
        for kind, a, b in same_kind:
            out.extend((kind, a, b, metric) for metric in shared)
    return out


def null_of_pair(s, a, b, metric, largest: set) -> tuple[int, str | None]:
    """``(shuffles, why none)`` of one grid's null: the metric's (:meth:`Settings.null_for`), at each
    model pair's largest setting only unless ``null_budgets`` is ``all``. The verdicts and the
    heatmap's default view read the largest settings; the null costs about as much as the bootstrap,
    so every budget would multiply that cost by the number of budget pairs."""
    n, why = s.null_for(metric)
    if n and s.null_budgets != "all" and not (a["run_id"] in largest and b["run_id"] in largest):
        return 0, ("no shuffled-pairing null at this budget: each model pair's largest setting carries it "
                   "(what verdicts read); --null-budgets all gives every budget one")
    return n, why


def result_keys(ctx: Context, a, b, metric, groups=None, n_null: int = 0) -> tuple[str, str]:
    """``(result id, input key)`` of a grid; the id names the runs, metric and parameters only."""
    s = ctx.settings
    params = s.params_for(metric)
    rid = ctx.rid("grid", a["run_id"], b["run_id"], metric, params)
    # the null's shuffles (their count, and the groups they respect) are inputs of the stored row too
    null = (n_null, None if groups is None else R.key(*groups)) if n_null else ()
    ikey = R.key(a["run_id"], a["finished"], b["run_id"], b["finished"], s.n_boot, s.seed, *null)
    return rid, ikey


def item_groups(ctx: Context, dataset: str) -> np.ndarray | None:
    """``(N,)`` group label of each item from the manifest's ``group`` field (kept in the items'
    metadata: several clips of one source video share one), for grouped null shuffles; None when
    no item shares its group with another (every shuffle is then plain)."""
    from analysis.null import has_groups

    rows = ctx.con.execute("SELECT idx, json_extract_string(metadata, '$.group') FROM items WHERE dataset = ? "
                           "ORDER BY idx", [dataset]).fetchall()
    if not rows or all(g is None for _, g in rows):
        return None
    # an item without a group is a group of its own (shuffled among the other lone items)
    labels = np.array([f"g:{g}" if g is not None else f"item:{i}" for i, g in rows])
    return labels if has_groups(labels) else None


def score_pair(engine, run_a: str, run_b: str, metric: str, params: dict, n_boot: int, seed: int,
               n_null: int = 0, null_skipped: str | None = None, groups=None) -> dict:
    """The grid, its best cell, the best cell's bootstrap interval, its shuffled-pairing null and the
    degenerate-input flags.

    Cells on a degenerate layer of either run (collapsed, rank 1: neighbours and kernels are
    undefined there) are flagged and never best; a flat grid has no best cell. Then ``best_*``
    are None and ``flags["best"]`` says why; ``flags["interval"]`` says why an interval is missing;
    ``flags["best_caveat"]`` names a best layer that keeps few of the distinctions its run's other
    layers make (:func:`analysis.metrics.degenerate.lost_distinctions`). With ``n_null`` shuffles, ``flags["null"]``
    is the best cell's selection-aware null ``{"p", "q95", "n_perm", "grouped", "kind"}``
    (:func:`analysis.null.selection_null`: the grid maximum under random item pairings, the same
    degenerate cells excluded; with ``groups`` whole groups are shuffled as blocks, and
    ``flags["null_within"]`` holds the within-group null beside it), or ``flags["null_skipped"]``
    says why there is none (:func:`analysis.null.unshufflable`).
    """
    grid = engine.grid(run_a, run_b, metric, **params)
    spec = get_metric(metric)
    # k-NN metrics: layers whose neighbour lists are decided by ties have NaN cells too
    deg_a = {**engine.degenerate_layers(run_a), **engine.tie_decided_layers(run_a, metric, **params)}
    deg_b = {**engine.degenerate_layers(run_b), **engine.tie_decided_layers(run_b, metric, **params)}
    flags = {}
    if deg_a:
        flags["degenerate_a"] = deg_a
    if deg_b:
        flags["degenerate_b"] = deg_b
    invalid = np.zeros(grid.shape, dtype=bool)
    invalid[list(deg_a), :] = True
    invalid[:, list(deg_b)] = True
    if params.get("knn", "exact") != "exact":  # approximate lists: their measured recall travels with the grid
        from analysis.metrics.knn import knn_summary

        flags["knn"] = knn_summary(list(engine.states(run_a, metric, **params))
                                   + list(engine.states(run_b, metric, **params)))
    out = {"grid": grid, "best_a": None, "best_b": None, "best_value": None, "ci_low": None, "ci_high": None}
    try:
        la, lb, value = best_cell(grid, higher_is_better=spec.higher_is_better is not False, invalid=invalid)
    except NoBestCell as exc:
        flags["best"] = str(exc)
        out["flags"] = flags
        return out
    out.update(best_a=la, best_b=lb, best_value=value)
    # a best cell on a layer that merged most of the items the run's other layers tell apart is
    # defined (CKA) but measures a handful of points: said next to the cell
    caveats = [note for run, layer in ((run_a, la), (run_b, lb))
               if (note := lost_distinctions(engine.status(run), layer))]
    if caveats:
        flags["best_caveat"] = "; ".join(caveats)
    if null_skipped:
        flags["null_skipped"] = null_skipped
    elif n_null >= 1:
        # the states the grid was scored from, relabelled per shuffle: no search or Gram is rebuilt
        sa, sb = engine.states(run_a, metric, **params), engine.states(run_b, metric, **params)
        skip = unshufflable(sa[0]) or unshufflable(sb[0])
        if skip:
            flags["null_skipped"] = skip
        else:
            kw = dict(invalid=invalid, higher_is_better=spec.higher_is_better is not False, n_perm=n_null,
                      seed=seed, groups=groups)
            # the test verdicts read: plain without groups, whole groups as blocks with them; the
            # within-group null beside it answers another question (alignment within sources)
            flags["null"] = selection_null(spec.kernel, sa, sb, value, kind="between", **kw)
            if flags["null"]["grouped"]:
                flags["null_within"] = selection_null(spec.kernel, sa, sb, value, kind="within", **kw)
    if n_boot >= 2:
        k = derived_lists_k(metric, params)  # exact k-NN metrics: the engine keeps each layer's lists
        spaces = None if k is None else tuple(engine.resample_space(r, layer, k, n_boot)
                                              for r, layer in ((run_a, la), (run_b, lb)))
        ci = bootstrap_ci(metric, engine.emb(run_a)[la], engine.emb(run_b)[lb], n_boot=n_boot, seed=seed,
                          estimate=value, spaces=spaces, **params)  # the cell is the one-pair value, bit for bit
        out["samples"] = ci.samples  # kept in memory for the scaling intervals, never stored
        if np.isfinite(ci.low) and np.isfinite(ci.high):
            out.update(ci_low=ci.low, ci_high=ci.high)
        if ci.reason:
            flags["interval"] = ci.reason
    out["flags"] = flags
    return out


def run(ctx: Context, d: DatasetRuns) -> list[tuple]:
    """Compute stale grids; returns every ``(run_a, run_b, metric)`` vision×text pair (for scaling)."""
    if not d.vision or not d.text:
        ctx.note(f"dataset {d.name!r}: no vision×text pair of done runs (vision: {len(d.vision)}, "
                 f"text: {len(d.text)}); scaling and temporal alignment need both"
                 + ("; text×text grids are scored" if len({r["model"] for r in d.text}) > 1 else ""))
    s = ctx.settings
    pairs = pair_list(d, s.metrics, ctx.engine.blocks if s.jobs == 1 else None)
    groups = item_groups(ctx, d.name) if s.n_null else None
    largest = {r["run_id"] for r in d.largest_settings().values()}
    stale = []
    for kind, a, b, metric in pairs:
        null = null_of_pair(s, a, b, metric, largest)
        rid, ikey = result_keys(ctx, a, b, metric, groups, null[0])
        if ctx.fresh("grids", "result_grids", rid, ikey):
            stale.append((kind, a, b, metric, rid, ikey, null))
    tasks = [(a["run_id"], b["run_id"], metric, s.params_for(metric), s.n_boot, s.seed, *null, groups)
             for _, a, b, metric, _, _, null in stale]
    if tasks:
        ctx.log(f"grids {d.name}: {len(tasks)} of {len(pairs)} to compute")

    for (kind, a, b, metric, rid, ikey, _), res in zip(stale, run_tasks(ctx, "grid", tasks, unit=score_pair, label=f"grids {d.name}")):
        if res.get("samples") is not None and kind == "vision_text":
            # the scaling intervals use the first MAX_BOOT resamples of vision×text best cells: a
            # copy of those (not a view that keeps all n_boot alive) for each of the analysis's pairs
            ctx.boot_samples[rid] = np.array(res["samples"][:MAX_BOOT])
        ctx.put_grid(result_id=rid, dataset=d.name, pair_kind=kind, model_a=a["model"], model_b=b["model"],
                   run_a=a["run_id"], run_b=b["run_id"], n_frames=a["n_frames"],
                   n_captions=b["n_captions"] if kind != "vision_vision" else None,
                   n_frames_b=b["n_frames"] if kind == "vision_vision" else None, metric=metric,
                   params=s.params_for(metric), grid=res["grid"], best_a=res["best_a"], best_b=res["best_b"],
                   best_value=res["best_value"], ci_low=res["ci_low"], ci_high=res["ci_high"],
                   n_boot=s.n_boot if s.n_boot >= 2 else 0, flags=res["flags"], input_key=ikey)
    return [(a, b, metric) for kind, a, b, metric in pairs if kind == "vision_text"]


def stored_grid(ctx: Context, a: dict, b: dict, metric: str, **params) -> np.ndarray:
    """The grid of runs ``a`` × ``b``: from the engine's memo, else the result table (rows this
    analysis wrote from memory, the others read once per dataset), else computed.

    A stored grid of ``b`` × ``a`` serves transposed for mutual k-NN, whose cells are integer
    neighbour counts over ``k·N`` and so exactly symmetric. The array may be shared (read-only)."""
    params = params or ctx.settings.params_for(metric)
    g = ctx.engine.memoised_grid(a["run_id"], b["run_id"], metric, **params)
    if g is not None:
        return g
    for x, y, flip in ((a, b, False), (b, a, True)):
        if flip and metric != "mutual_knn":
            break
        row = ctx.result_row("result_grids", x["dataset"],
                             ctx.rid("grid", x["run_id"], y["run_id"], metric, params))
        if row is not None:
            g = row["grid"]
            return g.T.copy() if flip else g
    return ctx.engine.grid(a["run_id"], b["run_id"], metric, **params)


@dataclass(frozen=True)
class BestCell:
    """A pair's best cell as the grid study defines it (:func:`score_pair`): ``value`` None when the
    grid has none, ``reason`` then says why; ``bad_rows`` / ``bad_cols``: the layers of ``a`` / ``b``
    whose cells never count (degenerate, or k-NN lists decided by ties), with the reason per layer."""

    grid: np.ndarray
    value: float | None
    reason: str | None
    bad_rows: dict
    bad_cols: dict

    def row_best(self) -> np.ndarray:
        """``(La,)`` each layer of ``a``'s best value over ``b``'s valid layers (``max_j grid[l, j]``);
        NaN on a bad row of ``a`` and where no valid cell of the row is finite."""
        g = np.array(self.grid, dtype=float)
        g[:, [int(j) for j in self.bad_cols if int(j) < g.shape[1]]] = np.nan
        g[[int(i) for i in self.bad_rows if int(i) < g.shape[0]], :] = np.nan
        filled = np.where(np.isfinite(g), g, -np.inf).max(axis=1)
        return np.where(np.isfinite(filled), filled, np.nan)


def stored_best(ctx: Context, a: dict, b: dict, metric: str) -> BestCell:
    """The best cell of runs ``a`` × ``b`` (rows: ``a``) the grid study stored, its flags read the
    right way round (a mutual k-NN row of ``b`` × ``a`` serves transposed); a pair the grid study does
    not score (e.g. two vision runs at different n_f) is scored here by the same rule."""
    params = ctx.settings.params_for(metric)
    for x, y, flip in ((a, b, False), (b, a, True)):
        if flip and metric != "mutual_knn":  # only mutual k-NN cells are exactly symmetric
            break
        row = ctx.result_row("result_grids", x["dataset"], ctx.rid("grid", x["run_id"], y["run_id"], metric, params))
        if row is None:
            continue
        flags = row.get("flags") or {}
        rows_, cols = flags.get("degenerate_a") or {}, flags.get("degenerate_b") or {}
        grid = row["grid"].T if flip else row["grid"]
        if flip:
            rows_, cols = cols, rows_
        value = None if row["best_value"] is None else float(row["best_value"])
        return BestCell(grid, value, flags.get("best") if value is None else None, dict(rows_), dict(cols))
    res = score_pair(ctx.engine, a["run_id"], b["run_id"], metric, params, 0, ctx.settings.seed)
    flags = res["flags"]
    return BestCell(res["grid"], res["best_value"], flags.get("best"), dict(flags.get("degenerate_a") or {}),
                    dict(flags.get("degenerate_b") or {}))
