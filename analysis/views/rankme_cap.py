"""When RankMe's bound binds: RankMe ``exp(H(σ/Σσ))`` of an ``(N, d)`` layer has at most ``min(N, d)``
non-zero singular values, so its value is at most ``min(N, d)`` (Garrido et al. 2023, RankMe). With
fewer items than dimensions the bound is the dataset's size, not the model's. Used by the Curves view
and by the Overview's section, whose one sentence the Overview page and the report both show."""

from __future__ import annotations

import math

#: RankMe above this share of its bound min(N, d) is said to be held down by the bound
RANKME_CAP_SHARE = 0.8


def rankme_capped(value, n_items: int, dim: int | None, share: float = RANKME_CAP_SHARE) -> bool:
    """True when a RankMe ``value`` of an ``(n_items, dim)`` layer is held down by the item count:
    ``n_items < dim`` and ``value > share · n_items``. An undefined value or dimension is never capped."""
    if value is None or dim is None or not math.isfinite(float(value)):
        return False
    return int(n_items) < int(dim) and float(value) > share * int(n_items)


def rankme_cap_text(capped: list[tuple[str, float]], n_items: int, share: float = RANKME_CAP_SHARE) -> str:
    """One sentence naming the ``(label, value)`` pairs whose RankMe is within ``1 − share`` of the bound
    ``N = n_items``; ``""`` when none."""
    if not capped:
        return ""
    names = ", ".join(f"{label} ({value:.1f})" for label, value in capped)
    return (f"RankMe is at most min(N, d), here N = {n_items} items: {names} come within {1 - share:.0%} of that "
            "bound, so these values are limited by the number of items, not by the model; compare their layers "
            "with care, or embed more items to lift the bound.")


def capped_picks(choices: dict, sides: dict, n_items: int) -> list[tuple[str, float]]:
    """The ``(label, value)`` of each model side whose RankMe pick is held down by the bound: the layer its
    RankMe curve picks (the layer-choice payload's ``picks["rankme"]``: the best layer among ``1..last``
    outside the degenerate ones, :func:`analysis.methods.layer_selection.recommend_layers`) has a value
    above :data:`RANKME_CAP_SHARE` of ``N = n_items`` with ``N < d``. A verdict whose lead is RankMe
    reports that same layer and value (its RankMe vote is the same argmax over the same layers), so one
    rule covers every place a RankMe value is read as a pick: the summary's per-metric picks and the
    verdict lines.

    Args:
        choices: side key (``clip``, ``clip [text]``) -> its layer-choice payload (``picks``).
        sides: side key -> ``(label, d)``, the side's label and its vectors' width, in the order the
            sentence names them; a side not in ``sides`` is not named.
    Returns:
        ``[(label, RankMe at the pick)]``, in the order of ``sides``."""
    out = []
    for key, (label, dim) in sides.items():
        pick = ((choices.get(key) or {}).get("picks") or {}).get("rankme")
        if pick and rankme_capped(pick.get("value"), n_items, dim):
            out.append((label, float(pick["value"])))
    return out


def capped_curves(data, n_items: int, dims: dict, labels: dict) -> list[tuple[str, float]]:
    """The ``(label, highest value)`` of each curve whose RankMe (rows ``model, run_id, value`` of one
    metric, :func:`analysis.views.curves.profiles_long`) reaches within the bound's margin at any layer:
    its highest value above :data:`RANKME_CAP_SHARE` of ``N = n_items`` with ``N < d``, ``d`` the width of
    the curve's own run (``dims``: ``{run_id: runs.dim}``), not its model's ``models.dim``, which a side
    whose vectors have another width (a dual encoder's caption tower, a projection) does not share. A run
    whose width is unknown is not named. Returns ``[(label, value)]`` in the order of the models."""
    out = []
    for (model, run_id), values in data.groupby(["model", "run_id"])["value"]:
        top = values.max()
        if rankme_capped(top, n_items, dims.get(run_id)):
            out.append((labels.get(model, model), float(top)))
    return out
