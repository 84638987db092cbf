"""Same-space study (``result_studies``, study ``same_space``): retrieval, modality gap, alignment
and distributional distances wherever a video run and a text run share one embedding space.

Which runs share a space (:func:`shared_spaces`):

- an MLLM's two sides (runs of one model whose configs say ``side: video`` / ``side: text``): every
  layer, since both sides go through the same language model at the same width (``space: layers``);
- a dual encoder's towers (a vision run and a text run of one model name, or of two names with one
  source and revision) that both stored the named layer ``joint``: that one layer, cut
  to its true width (``layer_dims``; the store zero-pads it to the run's width) (``space: joint``).
  Their numbered layers belong to two different towers and are never compared here.

One row per (video run, text run) of such a pair, every frame and caption budget, subject
``"<video model>|<text model>"``. Payload (``downstream`` reads it for the predictor table)::

    {"run_a", "run_b",             # video-side and text-side run ids
     "n_frames", "n_captions",
     "space": "layers" | "joint",
     "layers_a": [...], "layers_b": [...],   # stored layer indices, entry e compares layers_a[e] with layers_b[e]
     "metrics": {name: {"values": [one per entry, null where undefined],
                        "higher_is_better": bool,
                        "ci": [[lo, hi] or null per entry] or null (no bootstrap / not resampled)}},
     "flags": {"reasons": {name: {entry: why undefined, or what a kept value needs said}},
               "interval": why some intervals are missing, "width": {...} for joint layers}}

Metric names: ``recall@{1,5,10}_{v2t,t2v}``, ``map_{v2t,t2v}``, ``median_rank_{v2t,t2v}``,
``modality_gap``, ``alignment`` (Wang & Isola, alpha 2), ``mmd``, ``frechet``
(:data:`analysis.methods.same_space.METRICS`). Intervals: ``n_boot`` item resamples (pairs stay
together, copies of an item are right answers for each other) for the paired metrics; MMD and
Fréchet get none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from analysis.storage import results as R
from analysis.methods.same_space import (
    METRICS,
    PAIRED,
    RANKING,
    paired_resamples,
    percentile_interval,
    score_layer,
)
from analysis.studies.context import VISION, Context, DatasetRuns

STUDY = "same_space"


def _config(run: dict) -> dict:
    c = run.get("config")
    if isinstance(c, str):
        try:
            return json.loads(c)
        except json.JSONDecodeError:
            return {}
    return c or {}


def named_layer(run: dict, name: str) -> tuple[int, int] | None:
    """``(index, true width)`` of the named layer ``name`` (``default`` / ``joint``) of a run, or None."""
    cfg = _config(run)
    for idx, n in (cfg.get("layer_names") or {}).items():
        if n == name:
            return int(idx), int((cfg.get("layer_dims") or {}).get(str(idx), run["dim"]))
    return None


@dataclass(frozen=True)
class Space:
    """A video model and a text model whose runs share one space, and how their layers match."""

    model_a: str  # video side
    model_b: str  # text side
    space: str  # "layers" | "joint"

    @property
    def subject(self) -> str:
        return f"{self.model_a}|{self.model_b}"

    def layers(self, run_a: dict, run_b: dict) -> tuple[list[int], list[int], int | None]:
        """Matched layer indices of two runs and the width to cut them to (None: as stored).
        Raises ValueError naming the runs when they cannot be matched."""
        if self.space == "layers":
            if run_a["dim"] != run_b["dim"] or run_a["n_layers"] != run_b["n_layers"]:
                raise ValueError(f"{self.model_a}: video run {run_a['run_id']} ({run_a['n_layers']} layers of "
                                 f"{run_a['dim']}) and text run {run_b['run_id']} ({run_b['n_layers']} of "
                                 f"{run_b['dim']}) do not line up layer by layer")
            n = run_a["n_layers"]
            return list(range(n)), list(range(n)), None
        ja, jb = named_layer(run_a, "joint"), named_layer(run_b, "joint")
        if ja is None or jb is None or ja[1] != jb[1]:
            raise ValueError(f"{self.subject}: joint layers of runs {run_a['run_id']} and {run_b['run_id']} "
                             f"differ in width ({ja and ja[1]} and {jb and jb[1]})")
        return [ja[0]], [jb[0]], ja[1]


def is_mllm_side(run: dict) -> bool:
    """Is ``run`` one side of an MLLM (its config names ``side: video`` or ``side: text``)?"""
    return _config(run).get("side") in ("video", "text")


def shared_spaces(ctx: Context, d: DatasetRuns, runs=None) -> tuple[list[Space], list[str]]:
    """The model pairs of ``d`` whose video and text runs share a space, and notes on models with
    both sides but no shared space (a dual encoder stored without ``--named-layers``)."""
    runs = d.originals if runs is None else runs
    vision = {}
    text = {}
    for r in runs:
        (vision if r["modality"] in VISION else text if r["modality"] == "text" else {}).setdefault(r["model"], r)
    ident = {m["model"]: (m["source"], m["revision"]) for m in
             R.rows(ctx.con, "SELECT model, source, revision FROM models")}
    spaces, notes = [], []
    for mv, rv in sorted(vision.items()):
        for mt, rt in sorted(text.items()):
            same = mv == mt or (ident.get(mv) is not None and ident.get(mv) == ident.get(mt))
            if not same:
                continue
            if is_mllm_side(rv) and is_mllm_side(rt) and mv == mt:
                spaces.append(Space(mv, mt, "layers"))
            elif is_mllm_side(rv) and is_mllm_side(rt):
                continue  # one MLLM stored under two names (two prompts, TARA's comparison): each pairs with itself
            elif named_layer(rv, "joint") and named_layer(rt, "joint"):
                spaces.append(Space(mv, mt, "joint"))
            else:
                notes.append(f"{mv}: video and text runs of one model but no shared space stored (a dual encoder "
                             "needs its joint layer: precompute both towers with --named-layers)")
    return spaces, notes


def cut(E: np.ndarray, layers: list[int], width: int | None) -> list[np.ndarray]:
    """The matched layers of a stack as float64 ``(N, w)`` arrays (zero padding cut off)."""
    return [np.asarray(E[i][:, :width] if width else E[i], dtype=np.float64) for i in layers]


def score_runs(V: list, T: list, *, n_boot: int, seed: int, status_v=None, status_t=None) -> tuple[dict, dict]:
    """``(metrics, flags)`` of the payload for matched layers ``V[e]``, ``T[e]`` (entry by entry);
    ``status_v`` / ``status_t``: their layer statuses when known (else computed)."""
    values = {m: [] for m in METRICS}
    cis = {m: [] for m in METRICS}
    reasons: dict = {}
    interval = set()
    for e, (X, Y) in enumerate(zip(V, T)):
        vals, why, groups = score_layer(X, Y, status_v=None if status_v is None else status_v[e],
                                        status_t=None if status_t is None else status_t[e])
        for m in METRICS:
            values[m].append(vals[m])
            if m in why:
                reasons.setdefault(m, {})[str(e)] = why[m]
        if n_boot < 2:
            continue
        duplicated = len(np.unique(groups)) < len(groups)
        rng = np.random.default_rng([seed, e])
        ix = rng.integers(0, len(X), (n_boot, len(X)))
        W = np.zeros((n_boot, len(X)))
        np.add.at(W, (np.repeat(np.arange(n_boot), len(X)), ix.ravel()), 1.0)
        samples = paired_resamples(X, Y, W)
        for m in PAIRED:
            if m in RANKING and duplicated:
                cis[m].append(None)
                interval.add("no interval for the ranking metrics of entries with items sharing an embedding")
                continue
            cis[m].append(percentile_interval(vals[m], samples[m], METRICS[m][1]))
    metrics = {m: {"values": values[m], "higher_is_better": METRICS[m][0],
                   "ci": (cis[m] if n_boot >= 2 and m in PAIRED else None)} for m in METRICS}
    flags = {"reasons": reasons}
    if interval:
        flags["interval"] = "; ".join(sorted(interval))
    return metrics, flags


def run(ctx: Context, d: DatasetRuns) -> None:
    spaces, notes = shared_spaces(ctx, d)
    for n in notes:
        ctx.note(f"dataset {d.name!r}: {n}")
    s = ctx.settings
    for sp in spaces:
        va = [r for r in d.vision if r["model"] == sp.model_a]
        tb = [r for r in d.text if r["model"] == sp.model_b]
        for a in va:
            for b in tb:
                rid = ctx.rid(STUDY, a["run_id"], b["run_id"], s.n_boot, s.seed)
                ikey = R.key(a["run_id"], a["finished"], b["run_id"], b["finished"], s.n_boot, s.seed)
                if not ctx.fresh(STUDY, "result_studies", rid, ikey):
                    continue
                try:
                    la, lb, width = sp.layers(a, b)
                except ValueError as exc:
                    ctx.note(str(exc))
                    continue
                A, B = ctx.engine.emb(a["run_id"]), ctx.engine.emb(b["run_id"])
                sa, sb = ctx.engine.status(a["run_id"]), ctx.engine.status(b["run_id"])
                metrics, flags = score_runs(cut(A, la, width), cut(B, lb, width), n_boot=s.n_boot, seed=s.seed,
                                            status_v=[sa[i] for i in la], status_t=[sb[i] for i in lb])
                if width:
                    flags["width"] = {"joint": width}
                payload = {"run_a": a["run_id"], "run_b": b["run_id"], "n_frames": a["n_frames"],
                           "n_captions": b["n_captions"], "space": sp.space, "layers_a": la, "layers_b": lb,
                           "metrics": metrics, "flags": flags}
                ctx.put_study(result_id=rid, study=STUDY, dataset=d.name, subject=sp.subject,
                            params={"n_boot": s.n_boot, "seed": s.seed, "space": sp.space}, payload=payload,
                            input_key=ikey)
