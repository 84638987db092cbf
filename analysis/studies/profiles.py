"""Profiles study: RankMe, LID (MLE) and uniformity per layer for every original run
(``result_profiles``). Per-run work only, so it spreads over processes like the grids."""

from __future__ import annotations

from .. import results as R
from .context import ANALYSIS_VERSION, Context, DatasetRuns
from .parallel import run_tasks

PROFILE_METRICS = ("rankme", "lid", "uniformity")


def params_for(metric: str, n_items: int) -> dict:
    # LID's MLE uses 20 neighbours; small datasets use as many as they have
    return {"k": min(20, n_items - 1)} if metric == "lid" else {}


def run(ctx: Context, d: DatasetRuns) -> None:
    stale = []
    for r in d.originals:
        for metric in PROFILE_METRICS:
            rid = R.key("profile", r["run_id"], metric, ANALYSIS_VERSION)
            ikey = R.key(r["run_id"], r["finished"])
            if ctx.fresh("profiles", "result_profiles", rid, ikey):
                stale.append((r, metric, rid, ikey))
    tasks = [(r["run_id"], metric, params_for(metric, r["n_items"])) for r, metric, _, _ in stale]
    for (r, metric, rid, ikey), values in zip(stale, run_tasks(ctx, "profile", tasks, label=f"profiles {d.name}")):
        R.put_profile(ctx.con, result_id=rid, dataset=d.name, model=r["model"], run_id=r["run_id"],
                      modality=r["modality"], n_frames=r["n_frames"], n_captions=r["n_captions"],
                      metric=metric, params=params_for(metric, r["n_items"]), layer_values=values, input_key=ikey)
