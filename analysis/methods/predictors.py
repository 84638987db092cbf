"""Which label-free per-layer signal predicts per-layer downstream performance (LayerScope's
predictor table), and how good a layer each signal picks. Pure numpy/scipy.

Two correlations per (task, signal), both Spearman's ρ (rank correlation, ties averaged;
Spearman 1904), signed as computed on the raw values (a lower-is-better task shows ρ < 0 for a
signal that goes with better results, as the paper reports it):

- **across layers**: ρ over one model's layers, for each model with at least 3 usable layers, then
  the mean over those models (``rho_layers``): "within a model, does the signal order the layers
  as the task does?"
- **pooled**: ρ over every (model, layer) point together (``rho_pooled``): "across models and
  layers, does a higher signal go with a better result?" (the paper's models × layers view).

Intervals are percentile bootstraps that resample layers with replacement *within each model*
(the models are the ones the user evaluated; the layers are the sample), the same resample for
both statistics; resamples where a statistic is undefined (a constant side) are skipped, and the
count kept is returned.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

#: fewest layers of one model for an across-layer ρ (two points always give ±1)
MIN_LAYERS = 3
#: why a model's across-layer ρ is undefined (:func:`undefined_rho`): fewer than :data:`MIN_LAYERS`
#: usable layers, or a side with one value over them all (ranks that order nothing)
UNDEFINED_REASONS = ("too_few_layers", "constant_signal", "constant_result", "constant_both")


def _ranks(a: np.ndarray) -> np.ndarray:
    """Average ranks along the last axis (ties share their mean rank, as Spearman's ρ needs)."""
    return stats.rankdata(a, axis=-1)


def _pearson_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson r of each row pair of ``x``, ``y`` ``(B, n)``; NaN where a row is constant."""
    xc = x - x.mean(axis=-1, keepdims=True)
    yc = y - y.mean(axis=-1, keepdims=True)
    sxx = (xc * xc).sum(axis=-1)
    syy = (yc * yc).sum(axis=-1)
    den = np.sqrt(sxx * syy)
    # ranks are small integers or halves: a constant row has exactly zero spread
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (xc * yc).sum(axis=-1) / den
    return np.where(den > 0, np.clip(r, -1.0, 1.0), np.nan)


def spearman_rows(x, y) -> np.ndarray:
    """Spearman's ρ of each row pair of ``x``, ``y`` ``(B, n)`` (or one pair ``(n,)``: a ``()``
    array); NaN where a row has fewer than 2 points or a constant side. Range [-1, 1]."""
    x = np.atleast_2d(np.asarray(x, dtype=float))
    y = np.atleast_2d(np.asarray(y, dtype=float))
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same shape, got {x.shape} and {y.shape}")
    if x.shape[-1] < 2:
        return np.full(x.shape[0], np.nan)
    return _pearson_rows(_ranks(x), _ranks(y))


def spearman(x, y) -> float:
    """Spearman's ρ of two 1-D sequences (NaN when fewer than 2 points or a side is constant)."""
    return float(spearman_rows(np.asarray(x, dtype=float)[None], np.asarray(y, dtype=float)[None])[0])


@dataclass
class Series:
    """One model's usable layers for one (task, signal): ``layers`` ``(n,)`` ints, the signal
    ``x`` ``(n,)`` and the task result ``y`` ``(n,)`` at those layers."""

    model: str
    layers: np.ndarray
    x: np.ndarray
    y: np.ndarray


def undefined_rho(x, y) -> str | None:
    """Why Spearman's ρ of one model's usable layers is undefined, or None when it is defined.

    ``x`` (the signal) and ``y`` (the task result) ``(n,)``, finite. ρ needs at least
    :data:`MIN_LAYERS` points (``"too_few_layers"``) and neither side constant: a side with one
    value has one tied rank and no spread, so the rank correlation is 0/0 (``"constant_signal"``,
    ``"constant_result"``, ``"constant_both"``). Those are the only ways it is undefined.

    >>> undefined_rho([1, 2], [3, 4]), undefined_rho([5, 5, 5], [1, 2, 3]), undefined_rho([1, 2, 3], [3, 1, 2])
    ('too_few_layers', 'constant_signal', None)
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < MIN_LAYERS:
        return "too_few_layers"
    flat_x, flat_y = bool(np.all(x == x[0])), bool(np.all(y == y[0]))
    if flat_x or flat_y:
        return "constant_both" if flat_x and flat_y else "constant_signal" if flat_x else "constant_result"
    return None


def _interval(samples, level):
    v = np.asarray(samples, dtype=float)
    v = v[np.isfinite(v)]
    if len(v) < 2:
        return [None, None]
    a = (1 - level) / 2
    return [float(np.quantile(v, a)), float(np.quantile(v, 1 - a))]


def predictor_correlation(series: list[Series], *, n_boot: int = 200, level: float = 0.95, seed: int = 0) -> dict:
    """Across-layer and pooled Spearman ρ between a signal and a task over ``series`` (one per model).

    Returns ``{"rho_layers", "rho_layers_ci", "per_model_rho" {model: ρ or None}, "rho_undefined"
    {model: why its ρ is None, :func:`undefined_rho`}, "n_models_layers" (models with >= MIN_LAYERS
    layers and a defined ρ), "rho_pooled", "rho_pooled_ci", "n_points", "n_models", "n_boot_layers",
    "n_boot_pooled" (resamples kept)}``; ρ is None where undefined and intervals are ``[None, None]``
    with ``n_boot = 0`` or too few defined resamples.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    series = [s for s in series if len(s.layers)]
    per_model, why = {}, {}
    for s in series:
        why[s.model] = undefined_rho(s.x, s.y)
        per_model[s.model] = float("nan") if why[s.model] else spearman(s.x, s.y)
    defined = [m for m, r in per_model.items() if np.isfinite(r)]
    rho_layers = float(np.mean([per_model[m] for m in defined])) if defined else float("nan")
    if series:
        X = np.concatenate([s.x for s in series])
        Y = np.concatenate([s.y for s in series])
        rho_pooled = spearman(X, Y) if len(X) >= MIN_LAYERS else float("nan")
    else:
        X = Y = np.empty(0)
        rho_pooled = float("nan")
    layers_boot, pooled_boot = [], []
    if n_boot > 0 and series:
        rng = np.random.default_rng(seed)
        # one (n_boot, n_m) index matrix per model, shared by both statistics
        idx = [rng.integers(0, len(s.layers), size=(n_boot, len(s.layers))) for s in series]
        per = []
        for s, ix in zip(series, idx):
            if s.model in defined:
                per.append(spearman_rows(s.x[ix], s.y[ix]))
        if per:
            P = np.stack(per)  # (models, n_boot)
            with np.errstate(invalid="ignore"):
                ok = np.isfinite(P).all(axis=0)  # a resample counts when every model's ρ is defined
            layers_boot = P[:, ok].mean(axis=0)
        if np.isfinite(rho_pooled):
            offsets = np.cumsum([0] + [len(s.layers) for s in series[:-1]])
            pooled_ix = np.concatenate([ix + off for ix, off in zip(idx, offsets)], axis=1)
            pooled_boot = spearman_rows(X[pooled_ix], Y[pooled_ix])
    kept = lambda v: int(np.isfinite(np.asarray(v, dtype=float)).sum())
    none = lambda v: float(v) if np.isfinite(v) else None
    return {"rho_layers": none(rho_layers), "rho_layers_ci": _interval(layers_boot, level),
            "per_model_rho": {m: none(r) for m, r in per_model.items()},
            "rho_undefined": {m: w for m, w in why.items() if w}, "n_models_layers": len(defined),
            "rho_pooled": none(rho_pooled), "rho_pooled_ci": _interval(pooled_boot, level),
            "n_points": len(X), "n_models": len(series),
            "n_boot_layers": kept(layers_boot), "n_boot_pooled": kept(pooled_boot)}


def _oriented(a, b, higher_is_better: bool):
    """``a - b`` signed so that positive means ``a`` is the better result; None when either is."""
    if a is None or b is None:
        return None
    return float(a - b) if higher_is_better else float(b - a)


def best_layer(layers, values, *, higher_is_better: bool) -> int:
    """The layer of the best value (max, or min for lower-is-better); ties go to the deepest layer
    (a choice should leave the last layers only for a strictly better one)."""
    layers = np.asarray(layers)
    v = np.asarray(values, dtype=float)
    if len(v) == 0 or not np.isfinite(v).any():
        raise ValueError("no finite value to pick a layer from")
    v = np.where(np.isfinite(v), v, -np.inf if higher_is_better else np.inf)
    target = v.max() if higher_is_better else v.min()
    return int(layers[np.flatnonzero(v == target)].max())


def layer_comparison(results: dict[int, float], *, higher_is_better: bool, last_layer: int | None,
                     default_layer: int | None) -> dict:
    """The truly best layer of one model on one task vs its last numbered layer and its ``default``.

    ``results``: layer -> task result. Gaps are in the task's metric, signed so that positive means
    the best layer beats the other (``best_vs_last``, ``best_vs_default``; None when that layer has
    no result). Returns ``{"best_layer", "best_value", "last_layer", "last_value", "default_layer",
    "default_value", "best_vs_last", "best_vs_default"}``.
    """
    layers = sorted(results)
    best = best_layer(layers, [results[l] for l in layers], higher_is_better=higher_is_better)
    last_value = results.get(last_layer) if last_layer is not None else None
    default_value = results.get(default_layer) if default_layer is not None else None
    return {"best_layer": best, "best_value": results[best], "last_layer": last_layer, "last_value": last_value,
            "default_layer": default_layer, "default_value": default_value,
            "best_vs_last": _oriented(results[best], last_value, higher_is_better),
            "best_vs_default": _oriented(results[best], default_value, higher_is_better)}


def signal_pick(series: Series, results: dict[int, float], *, signal_higher_is_better: bool,
                task_higher_is_better: bool, last_layer: int | None, default_layer: int | None) -> dict:
    """The layer a signal picks (its best value among the usable layers of ``series``) and what that
    costs on the task, in the task's metric: ``shortfall`` (truly best minus pick, >= 0: 0 when the
    signal found the best layer), ``vs_last`` and ``vs_default`` (pick minus that layer, positive:
    the pick is better). ``results``: every layer's task result (the truly best may be a layer the
    signal cannot score)."""
    pick = best_layer(series.layers, series.x, higher_is_better=signal_higher_is_better)
    cmp = layer_comparison(results, higher_is_better=task_higher_is_better, last_layer=last_layer,
                           default_layer=default_layer)
    value = results[pick]
    return {"model": series.model, "pick_layer": pick, "pick_value": value,
            "signal_value": float(series.x[list(series.layers).index(pick)]),
            "best_layer": cmp["best_layer"], "best_value": cmp["best_value"],
            "found_best": value == cmp["best_value"],
            "shortfall": _oriented(cmp["best_value"], value, task_higher_is_better),
            "vs_last": _oriented(value, cmp["last_value"], task_higher_is_better),
            "vs_default": _oriented(value, cmp["default_value"], task_higher_is_better),
            "last_layer": last_layer, "default_layer": default_layer}


def headline(row: dict) -> tuple[float | None, list, int]:
    """``(ρ, its interval, models it stands on)`` of one signal row: the across-layer ρ over the
    ``n_models_layers`` models that have one, else the pooled ρ over ``n_models``."""
    if row.get("rho_layers") is not None:
        return row["rho_layers"], row.get("rho_layers_ci") or [None, None], int(row.get("n_models_layers") or 0)
    return row.get("rho_pooled"), row.get("rho_pooled_ci") or [None, None], int(row.get("n_models") or 0)


def excludes_zero(ci) -> bool:
    """Whether an interval ``[low, high]`` lies wholly on one side of 0 (False when undefined)."""
    if not ci or ci[0] is None or ci[1] is None:
        return False
    return bool(ci[0] > 0 or ci[1] < 0)


def rank_rows(rows: list[dict]) -> list[dict]:
    """Rows of one task ordered by coverage, since a signal is only as good as the models it stands
    on: first by how many models the signal's ρ stands on (:func:`headline`: more first), then whether its interval
    excludes 0, then by ``|rho_layers|`` (within-model ordering of layers, what choosing a layer
    needs) and ``|rho_pooled|``; undefined ρ last. A signal seen in one model only ranks below every
    signal seen in more, however strong its ρ: one model's layers say nothing about other models.

    Sets ``rank`` (1 = first), ``n_models_covered``, ``ci_excludes_zero`` and ``one_model`` (True
    when the ρ stands on a single model) on each row."""
    for r in rows:
        rho, ci, n = headline(r)
        r["n_models_covered"] = n if rho is not None else 0
        r["ci_excludes_zero"] = rho is not None and excludes_zero(ci)
        r["one_model"] = rho is not None and n == 1

    def key(r):
        a = r.get("rho_layers")
        b = r.get("rho_pooled")
        undefined = a is None and b is None
        return (undefined, -r["n_models_covered"], not r["ci_excludes_zero"],
                a is None, -abs(a) if a is not None else 0.0, b is None, -abs(b) if b is not None else 0.0,
                r.get("signal", ""))
    out = sorted(rows, key=key)
    for i, r in enumerate(out, 1):
        r["rank"] = i
    return out
