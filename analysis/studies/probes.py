"""Probes study: labelled probes per layer, per run and per manifest field named with ``--labels``
(``result_studies``, study ``probes``, one row per run and field, subject ``"<model key>|<field>"``,
the model key as the layer-choice study names it: ``clip``, ``clip [text]``).

Labels come from the items' manifest fields (:func:`item_labels`; nested fields by dotted name,
``scene.shape``) and are checked before the analysis saves any setting (:func:`check_labels`). Every
probed run of the dataset (``--probe-budgets``: the runs the verdicts and the
predictor table read, or every run) is probed at every layer (:mod:`analysis.methods.probes`): k-NN
accuracy from the k-NN lists the grids already prepared (``Engine.states(run, "mutual_knn")``: no
second search), k-means NMI and ARI, and, with ``--probes linear``, a linear probe. A degenerate layer
(collapsed, rank 1, < 2 distinct rows) and a k-NN layer whose lists are decided by ties have no value
(NaN, the reason in ``notes``).

Payload: ``{"run_id", "model", "key", "modality", "n_frames", "n_captions", "field", "classes",
"counts", "n", "chance", "k", "n_boot", "seed", "level", "layer_names", "degenerate_layers",
"scores": {score: {"probe", "label", "values" (L,), "ci_low", "ci_high" (L,), "diff_low", "diff_high"
(L × L: the paired interval of layer a minus layer b on the same item resamples), "notes": {layer:
why no value}, "folds" (linear only), "null" (k-NN and k-means: the best layer's shuffled-label null
``{"p", "q95", "n_perm"}``, :func:`analysis.methods.probes.label_null`; None without shuffles)}}}``. Values are measured, never imported: the downstream
views keep them apart from ``downstream_results`` (``source`` ``measured``).
"""

from __future__ import annotations

import json

import numpy as np

from analysis.bootstrap import resample_indices
from analysis.methods.layer_selection import named_layers
from analysis.methods.probes import (
    PROBE_SCORES, LabelError, cluster_scores, contingency, interval_matrix, kmeans_clusters, knn_predictions,
    label_codes, linear_folds, linear_probe, null_summary, percentile, resampled_cluster_scores, resampled_means,
    shuffle_maxima, shuffled_cluster_scores,
)
from analysis.storage import results as R
from analysis.studies.context import Context, DatasetRuns

LEVEL = 0.95
_ABSENT = object()


def field_value(metadata: dict | None, field: str):
    """The value of ``field`` in one item's metadata: a top-level key as written, else a dotted path
    into nested mappings (``scene.shape``); :data:`_ABSENT` when the item has no such field."""
    md = metadata or {}
    if field in md:
        return md[field]
    value = md
    for part in field.split("."):
        if not isinstance(value, dict) or part not in value:
            return _ABSENT
        value = value[part]
    return value


def item_labels(con, dataset: str, field: str) -> tuple[list, list[str]] | None:
    """``(values, item ids)`` of ``field`` over the dataset's items in row order (a missing value is
    None), or None when no item has the field."""
    rows = con.execute("SELECT item_id, metadata FROM items WHERE dataset = ? ORDER BY idx", [dataset]).fetchall()
    values, ids, found = [], [], False
    for item_id, md in rows:
        v = field_value(json.loads(md) if isinstance(md, str) else md, field)
        found |= v is not _ABSENT
        values.append(None if v is _ABSENT else v)
        ids.append(item_id)
    return (values, ids) if found else None


def check_labels(con, datasets, fields, *, require_all: bool = True) -> dict[str, dict[str, tuple[np.ndarray, list[str]]]]:
    """``{dataset: {field: (codes, classes)}}`` of every field present in each dataset; raises
    :class:`analysis.methods.probes.LabelError` (one line, naming the dataset and the field) for a
    field that is partly missing or not a usable class label, or (``require_all``) that none of
    ``datasets`` has."""
    out, seen = {}, set()
    for ds in datasets:
        for field in fields:
            got = item_labels(con, ds, field)
            if got is None:
                continue
            seen.add(field)
            try:
                out.setdefault(ds, {})[field] = label_codes(got[0], field, got[1])
            except LabelError as exc:
                raise LabelError(f"dataset {ds!r}: {exc}") from None
    unknown = [f for f in fields if f not in seen]
    if unknown and require_all:
        raise LabelError(f"--labels {unknown[0]}: no item of dataset(s) {', '.join(map(repr, datasets))} has this "
                         "field (nested fields by dotted name, e.g. scene.shape)")
    return out


def model_key(run: dict, d: DatasetRuns) -> str:
    """The run's model as the layer-choice study keys it: ``"<model> [text]"`` for the caption run of
    a model with a vision side too, else the model's name."""
    vision = {r["model"] for r in d.vision}
    return f"{run['model']} [text]" if run["modality"] == "text" and run["model"] in vision else run["model"]


def _score_entry(values, S, probe: str, label: str, notes: dict, **extra) -> dict:
    cis = [percentile(S[:, l], LEVEL) if np.isfinite(values[l]) else None for l in range(len(values))]
    lo, hi = interval_matrix(S, LEVEL) if len(S) >= 2 else ([], [])
    return {"probe": probe, "label": label, "values": [None if not np.isfinite(v) else float(v) for v in values],
            "ci_low": [c[0] if c else None for c in cis], "ci_high": [c[1] if c else None for c in cis],
            "diff_low": lo, "diff_high": hi, "notes": {str(l): w for l, w in sorted(notes.items())}, **extra}


def _nulls(score_layers, y, scores: list, s) -> list[dict | None]:
    """Each score's best layer against its shuffled-label null (``--null-perms`` shuffles, the same
    ones for every score; see :func:`analysis.methods.probes.label_null`): one entry per ``scores[i]``
    ``(L,)``; ``score_layers(Y (P, N)) -> (len(scores), P, L)``."""
    best = [float(np.nanmax(v)) if np.isfinite(v).any() else float("nan") for v in map(np.asarray, scores)]
    if s.n_null < 1 or not np.isfinite(best).any():
        return [None] * len(scores)
    maxima = shuffle_maxima(score_layers, y, n_perm=s.n_null, seed=s.seed)
    return [null_summary(m, b) for m, b in zip(maxima, best)]


def probe_run(ctx: Context, run: dict, y: np.ndarray, classes: list[str]) -> dict:
    """Every asked probe at every layer of ``run``: the payload's ``scores``."""
    s = ctx.settings
    E = ctx.engine.emb(run["run_id"])
    L, N = E.shape[0], E.shape[1]
    C = len(classes)
    bad = ctx.engine.degenerate_layers(run["run_id"])
    IX = resample_indices(N, s.n_boot, np.random.default_rng(s.seed)) if s.n_boot >= 2 else np.empty((0, N), int)
    labels = {name: label for _, name, label in PROBE_SCORES}
    out = {}
    if "knn" in s.probes:
        states = ctx.engine.states(run["run_id"], "mutual_knn", **s.params_for("mutual_knn"))
        correct, notes = np.full((L, N), np.nan), {}
        for l, st in enumerate(states):
            why = bad.get(l) or (st.tie_decided if st.undefined else None) or ("collapsed" if st.collapsed else None)
            if why:
                notes[l] = why
                continue
            correct[l] = knn_predictions(st.idx, st.sim, y, C) == y
        values = correct.mean(axis=1)
        ok = [l for l in range(L) if l not in notes]

        def knn_layers(Y):  # (P, N) labellings -> (1, P, L) accuracies
            acc = np.full((1, len(Y), L), np.nan)
            for l in ok:
                acc[0, :, l] = (knn_predictions(states[l].idx, states[l].sim, Y, C) == Y).mean(axis=1)
            return acc

        out["knn_accuracy"] = _score_entry(values, resampled_means(correct, IX), "knn", labels["knn_accuracy"],
                                           notes, k=s.k, null=_nulls(knn_layers, y, [values], s)[0])
    if "linear" in s.probes:
        correct, values, notes = np.full((L, N), np.nan), np.full(L, np.nan), {}
        folds = linear_folds(y)
        for l in range(L):
            if l in bad:
                notes[l] = bad[l]
                continue
            values[l], pred = linear_probe(E[l], y, folds=folds)
            correct[l] = pred == y
        out["linear_accuracy"] = _score_entry(values, resampled_means(correct, IX), "linear",
                                              labels["linear_accuracy"], notes, folds=folds)
    if "kmeans" in s.probes:
        clusters, nmi, ari, notes = [None] * L, np.full(L, np.nan), np.full(L, np.nan), {}
        for l in range(L):
            if l in bad:
                notes[l] = bad[l]
                continue
            clusters[l] = kmeans_clusters(E[l], C)
            nmi[l], ari[l] = cluster_scores(contingency(y, clusters[l], C, int(clusters[l].max()) + 1))
        S_nmi, S_ari = resampled_cluster_scores(y, clusters, IX, C)

        def cluster_layers(Y):  # (P, N) labellings -> (2, P, L): NMI and ARI from the same tables
            v = np.full((2, len(Y), L), np.nan)
            for l, c in enumerate(clusters):
                if c is not None:
                    v[0, :, l], v[1, :, l] = shuffled_cluster_scores(Y, c, C)
            return v

        null_nmi, null_ari = _nulls(cluster_layers, y, [nmi, ari], s)
        out["kmeans_nmi"] = _score_entry(nmi, S_nmi, "kmeans", labels["kmeans_nmi"], notes, null=null_nmi)
        out["kmeans_ari"] = _score_entry(ari, S_ari, "kmeans", labels["kmeans_ari"], notes, null=null_ari)
    return out


def result_id(ctx: Context, run_id: str, field: str) -> str:
    """The result id of a run's probes on ``field`` under the analysis's settings."""
    s = ctx.settings
    return ctx.rid("probes", run_id, field, sorted(s.probes), s.k, s.knn, s.n_boot, s.seed, s.n_null)


#: ``downstream_results.setting`` of a measured row: how the numbers were made
MEASURED = "measured"


def measured_rows(ctx: Context, d: DatasetRuns, chosen: dict) -> list[dict]:
    """The probes of each chosen run (``{model key: run}``) as per-layer downstream rows (the columns
    of ``downstream_results``; ``source`` ``measured: <probe>``, ``setting`` :data:`MEASURED`), so the
    predictors study reads measured numbers as it reads imported ones. Layers without a value are left out."""
    stored = {row["result_id"]: row["payload"] for row in ctx.read_studies(study="probes", dataset=d.name)}
    out = []
    for key, r in sorted(chosen.items()):
        for field in ctx.settings.labels:
            p = stored.get(result_id(ctx, r["run_id"], field))
            if p is None:
                continue
            names = {int(i): n for i, n in (p.get("layer_names") or {}).items()}
            for score, sc in p["scores"].items():
                for layer, v in enumerate(sc["values"]):
                    if v is None:
                        continue
                    out.append({"model": key, "task": field, "metric": score, "setting": MEASURED, "layer": layer,
                                "layer_name": names.get(layer), "value": float(v), "higher_is_better": True,
                                "source": f"measured: {sc['label']}"})
    return out


def probed_runs(ctx: Context, d: DatasetRuns) -> list[dict]:
    """The runs probed (``--probe-budgets``): ``all`` original runs, or (``largest``) each model side's
    largest setting (the run its verdict reads) and its ``--downstream-setting`` run (the predictor
    table's), in the dataset's order."""
    if ctx.settings.probe_budgets == "all":
        return list(d.originals)
    keep = {r["run_id"] for r in d.largest_settings().values()}
    keep |= {r["run_id"] for r in d.downstream_settings(ctx.con, ctx.settings.downstream_setting).values()}
    return [r for r in d.originals if r["run_id"] in keep]


def run(ctx: Context, d: DatasetRuns) -> None:
    s = ctx.settings
    if not s.labels or not s.probes:
        return
    tasks = check_labels(ctx.con, [d.name], s.labels, require_all=False).get(d.name, {})  # absent fields: noted once
    for field, (y, classes) in tasks.items():
        counts = np.bincount(y, minlength=len(classes))
        for r in probed_runs(ctx, d):
            key = model_key(r, d)
            rid = result_id(ctx, r["run_id"], field)
            ikey = R.key(r["run_id"], str(r["finished"]), classes, y.tolist())
            if not ctx.fresh("probes", "result_studies", rid, ikey):
                continue
            scores = probe_run(ctx, r, y, classes)
            payload = {"run_id": r["run_id"], "model": r["model"], "key": key, "modality": r["modality"],
                       "n_frames": r["n_frames"], "n_captions": r["n_captions"], "field": field,
                       "classes": classes, "counts": counts.tolist(), "n": int(len(y)),
                       "chance": float(counts.max() / counts.sum()), "k": s.k, "n_boot": s.n_boot, "seed": s.seed,
                       "level": LEVEL,
                       "layer_names": {str(i): n for i, n in sorted(named_layers(r.get("config")).items())},
                       "degenerate_layers": {str(i): w for i, w in ctx.engine.degenerate_layers(r["run_id"]).items()},
                       "scores": scores}
            ctx.put_study(result_id=rid, study="probes", dataset=d.name, subject=f"{key}|{field}",
                          params={"k": s.k, "probes": sorted(s.probes), "n_boot": s.n_boot, "seed": s.seed,
                                  "field": field, "run_id": r["run_id"]},
                          payload=payload, input_key=ikey)
