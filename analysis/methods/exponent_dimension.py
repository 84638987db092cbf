"""DR's frame exponent read as a dimension: α = 2/d_v.

DR's Appendix B derives the frame term from manifold approximation: the estimation error of a
d-dimensional manifold from n samples falls as n^(−2/d), so the fitted α gives the dimension of the
video manifold as the encoder perceives it, d_v = 2/α (≈1.1 for DINOv2-G's α = 1.76, ≈2.7 for
VideoMAEv2-H's α = 0.75). Reference: ``../shared/papers/video-text-alignment-test-time-scaling.txt``
(§"Test-Time Scaling Law Model", "Power-law error decay").
"""

from __future__ import annotations

import math


def _positive(v) -> bool:
    return v is not None and math.isfinite(float(v)) and float(v) > 0


def dimension_from_exponent(alpha, low=None, high=None, *, undetermined: str | None = None) -> dict:
    """d_v = 2/α with α's interval mapped through the decreasing map x ↦ 2/x, so its ends swap:
    [low, high] of α gives [2/high, 2/low] of d_v.

    ``alpha``: the fitted frame exponent (α > 0); ``low``/``high``: its interval (either may be None);
    ``undetermined``: why the data do not determine α (then every cell is blank with that reason).
    Returns ``{value, low, high, note}``: floats or None; ``note`` says why a cell is blank (α not
    determined, α ≤ 0, an interval reaching α ≤ 0 has no upper end for d_v).

    >>> dimension_from_exponent(0.5, 0.25, 1.0)
    {'value': 4.0, 'low': 2.0, 'high': 8.0, 'note': ''}
    """
    if undetermined:
        return {"value": None, "low": None, "high": None, "note": f"not determined: {undetermined}"}
    if not _positive(alpha):
        return {"value": None, "low": None, "high": None,
                "note": f"α = {alpha} is not positive: d_v = 2/α needs α > 0"}
    out = {"value": 2.0 / float(alpha), "low": None, "high": None, "note": ""}
    if low is None and high is None:
        return out
    out["low"] = 2.0 / float(high) if _positive(high) else None
    if _positive(low):
        out["high"] = 2.0 / float(low)
    else:
        out["note"] = "α's interval reaches 0: d_v has no upper end"
    return out
