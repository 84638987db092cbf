"""A model's sides, named explicitly: every run belongs to one side, and every label names it.

A dual encoder (CLIP, SigLIP, X-CLIP) or an MLLM embeds both the videos (or images) and the captions:
it has two runs per setting, one per side. The studies' run choices (:class:`analysis.studies.context.
DatasetRuns`) key such a model's vision side by its name and its caption side by ``"<model> [text]"``;
everything a person reads names both sides: ``clip [image]``, ``clip [video]``, ``clip [text]``. A
model with one side keeps its plain name.

A *reference* ("alignment with <reference>") is a text side unless the user names another side:
``clip`` and ``clip [text]`` are the caption tower of ``clip``; ``clip [image]`` its image tower.
Pure functions over run dicts (``model``, ``modality``, ``run_id``); no store access.
"""

from __future__ import annotations

import re

VISION = ("video", "image")
_TAGGED = re.compile(r"^(?P<model>.+?) \[(?P<side>text|image|video)\]$")


def split_side(name: str) -> tuple[str, str | None]:
    """``"clip [text]"`` -> ``("clip", "text")``; a plain name -> ``(name, None)``.

    >>> split_side("clip [image]"), split_side("bert")
    (('clip', 'image'), ('bert', None))
    """
    m = _TAGGED.match(name)
    return (m["model"], m["side"]) if m else (name, None)


def two_sided(chosen: dict) -> set[str]:
    """Models with both a vision and a text run among ``chosen`` (``{key: run}``)."""
    vision = {r["model"] for r in chosen.values() if r["modality"] in VISION}
    text = {r["model"] for r in chosen.values() if r["modality"] == "text"}
    return vision & text


def side_label(run: dict, chosen: dict) -> str:
    """What a person reads for a run: ``"<model> [<modality>]"`` when the model has two sides among
    ``chosen``, else the model's name.

    >>> runs = {"clip": {"model": "clip", "modality": "image"}, "clip [text]": {"model": "clip", "modality": "text"},
    ...         "bert": {"model": "bert", "modality": "text"}}
    >>> [side_label(r, runs) for r in runs.values()]
    ['clip [image]', 'clip [text]', 'bert']
    """
    return f"{run['model']} [{run['modality']}]" if run["model"] in two_sided(chosen) else run["model"]


def resolve_reference(name: str, chosen: dict) -> str:
    """The key of ``chosen`` that a reference names: a text side unless another side is asked for.

    ``"clip"`` or ``"clip [text]"``: clip's caption run; ``"clip [image]"`` / ``"clip [video]"``: its
    vision run; a one-sided model's plain name: its run (a vision model named alone is a vision
    reference: the user asked for it). Raises ``ValueError`` naming the reference and the sides the
    dataset has when none matches.
    """
    model, side = split_side(name)
    runs = {k: r for k, r in chosen.items() if r["model"] == model}
    if not runs:
        raise ValueError(f"reference {name!r}: no done run of model {model!r} here")
    if side is None:
        side = "text" if any(r["modality"] == "text" for r in runs.values()) else None
    for key, r in runs.items():
        if side is None or r["modality"] == side:
            return key
    have = sorted(side_label(r, chosen) for r in runs.values())
    raise ValueError(f"reference {name!r}: model {model!r} has no {side} side here (it has: {', '.join(have)})")


def default_references(chosen: dict) -> list[str]:
    """Every text side among ``chosen`` (the keys), the references when the user names none."""
    return sorted(k for k, r in chosen.items() if r["modality"] == "text")


def pair_kind(run_a: dict, run_b: dict) -> str:
    """``vision_text``, ``vision_vision`` or ``text_text`` (a text side first is swapped: a pair
    is named vision first, as the grids store it)."""
    a = "text" if run_a["modality"] == "text" else "vision"
    b = "text" if run_b["modality"] == "text" else "vision"
    return "_".join(sorted((a, b), key=lambda s: s != "vision"))


def side_key(model: str, modality: str, vision_models) -> str:
    """The key of a run's side, as the studies key their run choices (:class:`analysis.studies.context.
    DatasetRuns`): ``"<model> [text]"`` for the caption run of a model with a vision run among
    ``vision_models``, else the model's name.

    >>> side_key("clip", "text", {"clip"}), side_key("clip", "image", {"clip"}), side_key("bert", "text", {"clip"})
    ('clip [text]', 'clip', 'bert')
    """
    return f"{model} [text]" if modality == "text" and model in vision_models else model


def legend_title(keys) -> str:
    """The title of a legend whose entries are side keys (``clip``, ``clip [text]``, ``bert``):
    ``"side"`` when one of ``keys`` names a side (a dual encoder drawn as its towers, each a colour),
    else ``"model"`` (every entry is a whole one-sided model, or a vision side drawn alone, which
    carries its model's plain name).

    >>> legend_title(["clip", "clip [text]"]), legend_title(["bert", "vit"])
    ('side', 'model')
    """
    return "side" if any(split_side(str(k))[1] for k in keys) else "model"


def key_label(key: str, labels: dict) -> str:
    """What a person reads for a side key: the model's label (``labels``: model -> label, e.g.
    ``"clip (random init)"``) and, for a named side, the side (``"clip (random init) [text]"``), as
    the Overview and the verdicts name a caption side.

    >>> key_label("clip [text]", {"clip": "clip (random init)"}), key_label("bert", {})
    ('clip (random init) [text]', 'bert')
    """
    model, side = split_side(key)
    return labels.get(model, model) + (f" [{side}]" if side else "")


def pair_names(vision: str, text: str, runs, labels: dict) -> tuple[str, str]:
    """What a person reads for a vision × text pair of models (a scaling subject ``"<vision>|<text>|
    <metric>"`` names the vision side first, the text side second): each model's label (``labels``:
    model -> label), and its side where the model has two among ``runs`` (the dataset's runs, dicts
    with ``model`` and ``modality``; :func:`two_sided`): ``[image]`` or ``[video]`` (its vision runs'
    modality, every one of them when it has several) for the first, ``[text]`` for the second. A
    one-sided model keeps its label alone.

    >>> runs = [{"model": "clip", "modality": "image"}, {"model": "clip", "modality": "text"},
    ...         {"model": "bert", "modality": "text"}, {"model": "vmae", "modality": "video"}]
    >>> pair_names("clip", "clip", runs, {"clip": "clip (random init)"}), pair_names("vmae", "bert", runs, {})
    (('clip (random init) [image]', 'clip (random init) [text]'), ('vmae', 'bert'))
    """
    runs = list(runs)
    both = two_sided({i: r for i, r in enumerate(runs)})
    seen = sorted({r["modality"] for r in runs if r["model"] == vision and r["modality"] in VISION})
    # as :func:`key_label` names a side key, the vision side's modality read from its runs
    first = labels.get(vision, vision) + (f" [{'/'.join(seen)}]" if vision in both else "")
    return first, key_label(f"{text} [text]" if text in both else text, labels)


def run_pair_names(run_a: dict, run_b: dict, runs, labels: dict) -> tuple[str, str]:
    """What a person reads for a pair of runs (a grid's rows and columns; dicts with ``model`` and
    ``modality``), any pair kind: each run's model label (``labels``: model -> label; ``{}``: the plain
    names) with its side (``[image]``, ``[video]``, ``[text]``: the run's modality) where the model has
    two among ``runs`` (the dataset's runs; :func:`two_sided`), as :func:`side_label` and
    :func:`key_label` name one run. A dual encoder's image tower against its own text tower reads as two
    sides, never one name twice; a one-sided model keeps its label alone.

    >>> runs = [{"model": "clip", "modality": "image"}, {"model": "clip", "modality": "text"},
    ...         {"model": "bert", "modality": "text"}, {"model": "vit", "modality": "image"}]
    >>> run_pair_names(runs[0], runs[1], runs, {"clip": "clip (random init)"})
    ('clip (random init) [image]', 'clip (random init) [text]')
    >>> run_pair_names(runs[3], runs[0], runs, {}), run_pair_names(runs[2], runs[1], runs, {})
    (('vit', 'clip [image]'), ('bert', 'clip [text]'))
    """
    chosen = dict(enumerate(runs))
    first, second = (key_label(side_label(r, chosen), labels) for r in (run_a, run_b))
    return first, second
