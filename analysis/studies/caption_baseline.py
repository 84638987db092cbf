"""Caption-baseline study (``result_studies``, study ``caption_baseline``; DR Fig. 8): each text
model's run on the items' long original captions (manifest field ``long_caption``, precompute variant
``long_caption``, never part of the n_c sweep) scored against every vision run, at every frame
budget, with the same grid machinery as the caption sweep (:func:`analysis.studies.grids.score_pair`:
the layer grid, its best cell over non-degenerate layers, the best cell's bootstrap interval).

One row per (vision run, long-caption run, metric), subject ``"<vision model>|<text model>"``::

    {"run_a", "run_b", "n_frames", "metric", "params",
     "value", "ci_low", "ci_high",       # best cell and its interval (None where undefined)
     "best_a", "best_b",                 # the best cell's layers (vision, text)
     "flags": {...}}                     # as result_grids' flags: why no best cell / no interval

The dashboard draws ``value`` (with its interval) as a horizontal line over the caption-sweep curve
of the same vision run and text model (:mod:`analysis.views.caption_baseline`).
"""

from __future__ import annotations

from analysis.storage import results as R
from analysis.studies.context import Context, DatasetRuns
from analysis.studies.grids import score_pair

STUDY = "caption_baseline"
#: the variant precompute stores the long captions under (``runs.variant``)
VARIANT = "long_caption"


def long_caption_runs(d: DatasetRuns) -> list[dict]:
    """The dataset's done text runs of the long original captions."""
    return [r for r in d.runs if r["variant"] == VARIANT and r["modality"] == "text"]


def run(ctx: Context, d: DatasetRuns) -> None:
    longs = long_caption_runs(d)
    if not longs or not d.vision:
        return
    s = ctx.settings
    for b in longs:
        if int(b["n_items"]) != int(d.n_items):
            ctx.note(f"dataset {d.name!r}: the long-caption run {b['run_id']} of {b['model']} holds {b['n_items']} "
                     f"of {d.n_items} items; no caption baseline from it (rerun its precompute)")
            continue
        for a in d.vision:
            for metric in s.metrics:
                params = s.params_for(metric)
                rid = ctx.rid(STUDY, d.name, a["run_id"], b["run_id"], metric, params, s.n_boot, s.seed)
                ikey = R.key([(r["run_id"], str(r["finished"])) for r in (a, b)])
                if not ctx.fresh(STUDY, "result_studies", rid, ikey):
                    continue
                res = score_pair(ctx.engine, a["run_id"], b["run_id"], metric, params, s.n_boot, s.seed)
                payload = {"run_a": a["run_id"], "run_b": b["run_id"], "n_frames": a["n_frames"], "metric": metric,
                           "params": params, "value": res["best_value"], "ci_low": res["ci_low"],
                           "ci_high": res["ci_high"], "best_a": res["best_a"], "best_b": res["best_b"],
                           "flags": res["flags"]}
                ctx.put_study(result_id=rid, study=STUDY, dataset=d.name, subject=f"{a['model']}|{b['model']}",
                              params={"metric": metric, **params, "n_boot": s.n_boot, "seed": s.seed},
                              payload=payload, input_key=ikey)
