"""The Overview's section: per dataset, the layer verdicts (the Overview's answer and the report's
opening) and the summary under them (each model's recommended layers, its best alignment with each
reference, the per-metric picks in words). Nothing is recomputed: the verdicts are the stored ones
(:mod:`analysis.views.verdicts`), the picks the stored layer choices, the alignments the stored grids."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from analysis.methods.layer_selection import describe_pick
from analysis.storage import results as R
from analysis.views.stored_choices import layer_choices
from analysis.views.heatmap import best_grid
from analysis.views.null import grid_null, grid_null_within
from analysis.views.rankme_cap import capped_picks, rankme_cap_text
from analysis.views.section import Section
from analysis.views.store_info import has_table, model_labels, overview
from analysis.views.verdicts import verdicts

#: the fields of a stored verdict (:class:`analysis.methods.verdict.Verdict`) the report copies
_VERDICT_KEYS = ("status", "layer", "last_layer", "default_layer", "n_agree", "n_metrics", "agreeing", "lead",
                 "value", "last_value", "default_value", "interval", "gain_vs_last", "gain_vs_default", "reason",
                 # the paired bootstrap gains (diff, interval, relative gain and its interval), the margin they
                 # must pass, and what did not vote (random-init controls, alignment no better than chance)
                 "vs_last", "vs_default", "margin", "controls", "chance", "control",
                 # the null the deciding alignment passed, and every signal that picks another layer
                 "null", "dissent")


@dataclass(frozen=True)
class _Scope:
    """What the summary of one dataset is read from."""
    con: Any
    ds: str                #: the dataset
    chosen: list           #: the models asked for (all by default)
    refs: list             #: the text references their alignment is measured against
    labels: dict           #: model → label ("(random init)" included)
    n_items: int           #: the dataset's item count
    grids: list            #: the dataset's current grids (:func:`analysis.storage.results.read_grids`)


def section(con, dataset: str, *, models=None, references=None) -> Section:
    """The Overview of ``dataset`` as the report stores it.

    Args:
        models: the models to show (None: every model of the store, in the store's order).
        references: the text models alignment is measured against (None: the dataset's text models);
            only those with a finished run on ``dataset`` count.
    Returns:
        a :class:`Section` whose ``data`` is ``{"verdicts": [one dict per verdict of a chosen model:
        the model, its label, the sentence, the verdict's fields and the heatmap/curves query
        parameters], "summary": {"models", "sentences", "notes"}}`` (None for a store without runs),
        no charts, and as ``notes`` the one sentence on RankMe's bound where it binds (:func:`rankme_cap_notes`),
        which the Overview page and the report both show as it is."""
    ov = overview(con)
    if ov.get("empty"):
        return Section(data=None)
    chosen = list(models or ov["models"]["model"])
    runs = ov["runs"][(ov["runs"]["dataset"] == dataset) & (ov["runs"]["status"] == "done")]
    run_models = set(runs["model"])
    text_models = sorted(runs[runs["modality"] == "text"]["model"].unique())
    refs = [r for r in (text_models if references is None else references) if r in run_models]
    grids = R.read_grids(con, current=True, dataset=dataset) if has_table(con, "result_grids") else []
    n_items = int(ov["datasets"].set_index("dataset").loc[dataset, "n_items"])
    scope = _Scope(con, dataset, chosen, refs, model_labels(con), n_items, grids)
    summary = _summary(scope, run_models)
    return Section(data={"verdicts": verdict_rows(con, dataset, chosen), "summary": summary},
                   notes=tuple(summary["notes"]))


def verdict_rows(con, ds, chosen) -> list[dict]:
    """The per-model verdicts of ``ds`` (:func:`analysis.views.verdicts.verdicts`) of the models in
    ``chosen``, flat: ``model, label, sentence, n_boot``, the verdict's fields, and the query parameters
    of the heatmap and curves views that show the evidence (``heatmap_query``, ``curves_query``)."""
    out = []
    for v in verdicts(con, ds):
        if v["base"] not in chosen:
            continue
        out.append({"model": v["model"], "label": v["label"], "sentence": v["sentence"], "n_boot": v["n_boot"],
                    **{k: getattr(v["verdict"], k) for k in _VERDICT_KEYS}, "heatmap_query": v["heatmap"],
                    "curves_query": v["curves"]})
    return out


def _summary(scope: _Scope, run_models: set) -> dict:
    """Per model: the recommended layers, the best alignment with each reference, the final layer's
    best; the per-metric picks in words; RankMe's bound where it binds."""
    choices = layer_choices(scope.con, scope.ds)
    rows, sentences = [], []
    for m in scope.chosen:
        if m not in run_models:
            continue
        entry = {"model": m, "label": scope.labels.get(m, m), "recommended": {}, "alignment": {}}
        c = choices.get(m)
        if c:
            entry["n_layers"] = c["n_layers"]
            for metric, p in c["picks"].items():
                entry["recommended"][metric] = {k: p.get(k) for k in ("layer", "value", "final_value", "from_final",
                                                                  "final_shortfall")}
            entry["agreement"] = c["agreement"]
        for ref in scope.refs:
            g = best_grid(scope.grids, m, ref) if ref != m else None
            if g is None:
                continue
            entry["alignment"][ref] = _alignment_entry(g, m)
            # the reference is its text side: a dual encoder's curve is "alignment with <ref> [text]"
            name = next((n for n in (f"alignment with {ref} [text]", f"alignment with {ref}") if c and n in c["picks"]),
                        None)
            if name:
                sentences.append(_pick_sentence(scope.labels.get(m, m), c, name, name))
        if c and "rankme" in c["picks"]:
            sentences.append(_pick_sentence(scope.labels.get(m, m), c, "rankme", "RankMe"))
        rows.append(entry)
    return {"models": rows, "sentences": sentences, "notes": rankme_cap_notes(scope, choices)}


def _pick_sentence(label: str, c: dict, key: str, what: str) -> str:
    """One per-metric pick in words (:func:`describe_pick`), with its resamples."""
    return describe_pick(label, c["picks"][key], c["last_layer"] + 1, what,
                         samples=(c.get("resamples") or {}).get(key))


def _alignment_entry(g: dict, m: str) -> dict:
    """Model ``m``'s best alignment in grid ``g`` (either side), its interval, its layers, the final
    layer's best, and the shuffled-pairing nulls."""
    a_is_m = g["model_a"] == m
    final_row = g["grid"][-1] if a_is_m else g["grid"][:, -1]
    finite = final_row[np.isfinite(final_row)]
    return {"metric": g["metric"], "value": g["best_value"], "ci": [g["ci_low"], g["ci_high"]],
            "layer": g["best_a"] if a_is_m else g["best_b"], "ref_layer": g["best_b"] if a_is_m else g["best_a"],
            "final_layer_value": float(finite.max()) if len(finite) else None, "n_frames": g["n_frames"],
            "n_captions": g["n_captions"], "result_id": g["result_id"],
            "note": (g.get("flags") or {}).get("best") or "",
            # the best cell against the grid maximum under shuffled pairings (None: not computed)
            "null": grid_null(g),
            # with item groups: the within-group null beside it (fine-grained alignment within sources)
            "null_within": grid_null_within(g)}


def rankme_cap_notes(scope: _Scope, choices: dict) -> list[str]:
    """The one sentence on RankMe's bound, for the page and the report alike (:mod:`analysis.views.rankme_cap`):
    every side of a chosen model whose RankMe pick (``choices``: the dataset's layer-choice payloads by
    side key) is above :data:`~analysis.views.rankme_cap.RANKME_CAP_SHARE` of ``N`` with ``N < d``
    compares layers by how well they fill ``N`` dimensions, whether the summary reads it as a per-metric
    pick or a verdict leads with it. A side is its run (model, modality, vector width ``d``), labelled as
    its verdict line is: ``<model label> [<modality>]`` for a caption side. Returns ``[]`` or one sentence
    naming them, in the order of the chosen models."""
    runs = {r[0]: r[1:] for r in scope.con.execute(
        "SELECT run_id, model, modality, dim FROM runs WHERE dataset = ?", [scope.ds]).fetchall()}
    by_model: dict = {}
    for key, p in sorted(choices.items()):
        run = runs.get(p["setting"]["run_id"])
        if run is None:
            continue
        base, modality, dim = run
        label = scope.labels.get(base, base) + (f" [{modality}]" if key != base else "")
        by_model.setdefault(base, {})[key] = (label, dim)
    sides = {k: v for m in scope.chosen for k, v in by_model.get(m, {}).items()}
    text = rankme_cap_text(capped_picks(choices, sides, scope.n_items), scope.n_items)
    return [text] if text else []
