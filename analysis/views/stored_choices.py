"""The layer-choice study's stored payloads as the views read them, and the mutual k-NN grid behind
each alignment curve (its stored source): what the curves, their intervals and their nulls share."""

from __future__ import annotations

from analysis.storage import results as R
from analysis.views.store_info import has_table


def layer_choices(con, dataset) -> dict:
    """``{model: payload}`` of the dataset's current layer-choice study (``{}`` before any analysis):
    each payload holds the model's per-layer ``curves``, its ``picks``, ``setting`` (the run) and
    ``sources`` (each alignment curve's grid ``result_id``)."""
    if not has_table(con, "result_studies"):
        return {}
    return {s["subject"]: s["payload"]
            for s in R.read_studies(con, current=True, study="layer_choice", dataset=dataset)}


def alignment_sources(p: dict, curves, by_id: dict) -> dict:
    """``{"alignment with REF": (grid, model is A)}``: the mutual k-NN grid behind each alignment
    curve of one layer-choice payload (its stored source); ``by_id``: grids by ``result_id``."""
    run_id = p["setting"]["run_id"]
    found = {}
    for metric in curves:
        if not metric.startswith("alignment with "):
            continue
        g = by_id.get(p["sources"].get(metric))
        if g is not None:
            found[metric] = (g, g["run_a"] == run_id)
    return found


def curve_sources(con, dataset) -> list[tuple]:
    """Every alignment curve of the dataset with its source grid: ``(model, payload, metric, grid,
    model is A)`` per curve whose grid is stored."""
    choices = layer_choices(con, dataset)
    grids = (R.read_grids(con, current=True, dataset=dataset, metric="mutual_knn")
             if has_table(con, "result_grids") else [])
    by_id = {g["result_id"]: g for g in grids}
    return [(model, p, metric, g, is_a) for model, p in choices.items()
            for metric, (g, is_a) in alignment_sources(p, p["curves"], by_id).items()]
