"""One model's layer verdict as a typed result: what :func:`analysis.methods.layer_selection.layer_verdict`
decides, what the verdicts study stores and what the Overview, the report and the probe checks read.

A field renamed here fails where it is read (an ``AttributeError``, a ``TypeError`` in
:meth:`Verdict.from_dict`) instead of silently dropping a key that a reader copies by name.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class Verdict:
    """The layer to use for one model, with the evidence for it (every status's rule:
    :data:`analysis.methods.layer_selection.STATUSES`). Gains are relative, signed so that + means
    the pick is better; a comparison (``vs_last``, ``vs_default``) is a
    :func:`analysis.methods.layer_selection.paired_gain` dict, or a point-only one without an
    interval, or None."""

    status: str  #: one of STATUSES: recommend, last, default, tie, untested, unsupported, chance, control, none
    reason: str  #: why this status, in words (said in the line)
    last_layer: int | None  #: the last numbered layer; named layers (``default``, ``joint``) follow it
    default_layer: int | None  #: the model's own ``default`` output when stored, else None
    picks: dict  #: voting curve -> the layer it picks (layer 0, degenerate and named layers never)
    undefined: list  #: curves with no defined value at any layer they could pick
    n_metrics: int  #: how many curves vote
    layer: int | None  #: the candidate layer whatever the status (what a probe is compared with)
    n_agree: int  #: how many voters pick the candidate
    agreeing: list  #: the voters that pick the candidate, sorted
    lead: str | None  #: the deciding curve the line reports (smallest testable gain, so it never overstates)
    value: float | None  #: the lead curve at the candidate
    last_value: float | None  #: the lead curve at the last layer (None: undefined there)
    default_value: float | None  #: the lead curve at the default output (None: none, or undefined)
    interval: list | None  #: ``[low, high]``, the 95% interval of ``value`` (a grid's best-cell CI or resamples)
    gain_vs_last: float | None  #: the lead curve's relative gain over the last layer (0 when the pick is last)
    gain_vs_default: float | None  #: the lead curve's relative gain over the default output
    gains_vs_last: dict  #: agreeing curve -> its relative gain over the last layer (None: undefined)
    vs_last: dict | None  #: the lead curve's paired comparison with the last layer
    vs_default: dict | None  #: the lead curve's paired comparison with the default output
    controls: list  #: curves of alignment with random-init models: shown, never voting
    chance: dict  #: alignment curve -> its null, for those no better than chance (never voting)
    margin: float  #: the practical margin both gains must reach for "use layer N"
    n_boot: int | None  #: item resamples behind the lead's paired comparisons (None: none stored)
    control: bool  #: the model itself has random-init weights: a control, never a recommendation
    decided_by: str | None  #: ``alignment`` or ``single-space`` (None: nothing decided)
    dissent: list  #: every voter that picks another layer: ``{metric, layer, alignment, vs, gain, beyond_interval}``
    copies: dict  #: alignment curve with an identical copy of the model -> why (never voting)
    null: dict | None  #: the shuffled-pairing null the lead curve passed (None: none stored)
    tie_with: str | None = None  #: a tie's other side: ``the last layer`` or ``the default output``

    def to_dict(self) -> dict:
        """Every field by name (nested comparisons stay dicts): what the verdicts study stores."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Verdict":
        """The verdict :meth:`to_dict` wrote; a missing or unknown field is a ValueError naming it."""
        names = {f.name for f in dataclasses.fields(cls)}
        required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
        unknown, missing = sorted(set(data) - names), sorted(required - set(data))
        if unknown or missing:
            raise ValueError(f"a stored verdict with unknown field(s) {unknown} and missing field(s) {missing}: "
                             "it was written by another version; run `layerscope analyze` to recompute it")
        return cls(**data)
