"""When RankMe's bound binds: RankMe ``exp(H(σ/Σσ))`` of an ``(N, d)`` layer has at most ``min(N, d)``
non-zero singular values, so its value is at most ``min(N, d)`` (Garrido et al. 2023, RankMe). With
fewer items than dimensions the bound is the dataset's size, not the model's. Shared by the pages
that show RankMe (curves, the Overview's verdicts) and the report."""

from __future__ import annotations

import math

from analysis.sides import split_side

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


def capped_verdicts(found: list[dict], n_items: int, dims: dict) -> list[tuple[str, float]]:
    """The ``(label, value)`` of each verdict (:func:`analysis.views.verdicts.verdicts`) whose lead metric
    is RankMe and whose value at the pick is held down by the bound; ``dims``: model -> embedding width
    (a dual encoder's text side looks its model up: the row's ``base``)."""
    out = []
    for v in found:
        vd = v["verdict"]
        dim = dims.get(v["base"])
        if vd.lead == "rankme" and rankme_capped(vd.value, n_items, dim):
            out.append((v["label"], float(vd.value)))
    return out


def capped_curves(data, n_items: int, dims: dict, labels: dict) -> list[tuple[str, float]]:
    """The ``(label, highest value)`` of each model whose RankMe curve (rows ``model, value`` of one
    metric, :func:`analysis.views.curves.profiles_long`) reaches within the bound's margin at any layer."""
    out = []
    for model, values in data.groupby("model")["value"]:
        top = values.max()
        dim = dims.get(model, dims.get(split_side(str(model))[0]))  # a side's dims are its model's
        if rankme_capped(top, n_items, dim):
            out.append((labels.get(model, model), float(top)))
    return out
