"""The Overview's layer verdicts, per dataset and model, and the rule they follow."""

from __future__ import annotations

from analysis.storage import results as R
from analysis.methods.layer_selection import PRACTICAL_MARGIN, verdict_sentence
from analysis.methods.verdict import Verdict
from analysis.studies.verdicts import STUDY
from analysis.views.store_info import has_table, model_labels


#: how a verdict line is decided, said under the verdicts on the Overview and in the report
VERDICT_RULE = (
    "Per model: the layer that alignment with trained reference models picks (the most alignment curves; layer "
    "0, degenerate and named layers never count; alignment with a random-init control, or no better than "
    "shuffled pairings, never votes; the line names the null its deciding alignment passed: between-group "
    "shuffles of whole sources when the manifest groups items). Single-space signals (RankMe, uniformity) "
    "support or dissent but never decide: alone they never say \"use layer N\". Its value with a 95% interval, "
    "and its gain over the last layer and over the model's own default output, each a paired bootstrap "
    "difference on the same item resamples with its 95% interval. \"Use layer N\" only when both intervals "
    "exclude zero and both gains reach the practical margin of {margin:.0%}; otherwise a tie. A difference whose "
    "interval includes zero never picks between the last layer and the default output; a pick below the default "
    "output beyond its interval is never recommended over it. Every signal that picks another layer is named in "
    "the line. Random-init models are controls: shown, never recommended.").format(margin=PRACTICAL_MARGIN)


def missing_text(dataset: str) -> str:
    """What the Overview says for a dataset without stored verdicts (not analysed yet): the command
    that computes them."""
    return (f"{dataset}: no layer verdict stored yet: run `layerscope analyze` (it decides each model's layer "
            "from the per-layer results).")


def verdicts(con, dataset) -> list[dict]:
    """Per model of ``dataset``, the layer to use, as the verdicts study stored it
    (:mod:`analysis.studies.verdicts`: :func:`analysis.methods.layer_selection.layer_verdict` on the
    layer-choice curves, their item resamples and the grids' best-cell intervals and nulls), with a
    sentence in the model's label and the query parameters of the heatmap and curves views that show
    the evidence (the curves view opened at the side's own curve: ``models=clip [text]`` for a caption
    side). Nothing is decided here; ``[]`` when the store holds no verdict for the dataset
    (:func:`missing_text` says what to run).

    Returns ``[{"model" (the side's key: ``clip``, ``clip [text]``), "base" (the model's own name), "label",
    "verdict": Verdict, "sentence", "n_boot", "heatmap": {param: value} | None, "curves": {param: value}}]``
    sorted by model."""
    if not has_table(con, "result_studies"):
        return []
    labels = model_labels(con)
    out = []
    for s in R.read_studies(con, current=True, study=STUDY, dataset=dataset):
        p = s["payload"]
        label = labels.get(p["base"], p["base"]) + (f" [{p['side']}]" if p["side"] else "")
        v = Verdict.from_dict(p["verdict"])
        # the Curves page keys a side's curve by the side's key (clip, clip [text]), the key the verdict is
        # stored under and the one its query names; a store analysed by an earlier LayerScope named the
        # model there, which that page reads as its vision side alone: the key is taken from the verdict,
        # so both read alike
        curves = {**p["curves"], "models": p["model"]}
        out.append({"model": p["model"], "base": p["base"], "label": label, "verdict": v, "n_boot": p["n_boot"],
                    "sentence": verdict_sentence(label, v, n_boot=p["n_boot"]), "heatmap": p["heatmap"],
                    "curves": curves})
    return sorted(out, key=lambda r: r["model"])


#: each verdict status in words: the report's marks and the Markdown summary carry them, so a tie and a
#: recommendation never look alike without colour or an icon font
VERDICT_WORDS = {"recommend": "recommended", "last": "last layer", "default": "default output", "tie": "tie",
                 "untested": "untested", "unsupported": "no alignment support", "chance": "at chance",
                 "control": "control", "none": "no verdict"}

#: how each verdict status is marked on screen: a Streamlit badge with a Material icon (shipped with
#: the app: no emoji font needed) and a word, so a tie and a recommendation never look alike
VERDICT_BADGES = {
    "recommend": ":green-badge[:material/check_circle: recommended]",
    "last": ":green-badge[:material/check: last layer]",
    "default": ":blue-badge[:material/undo: default output]",
    "tie": ":gray-badge[:material/drag_handle: tie]",
    "untested": ":gray-badge[:material/help: untested]",
    "unsupported": ":gray-badge[:material/block: no alignment support]",
    "chance": ":orange-badge[:material/casino: at chance]",
    "control": ":violet-badge[:material/science: control]",
    "none": ":red-badge[:material/warning: no verdict]",
}
