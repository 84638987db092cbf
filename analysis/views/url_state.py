"""Validating selections that arrive as URL text (``st.query_params``): plain functions, no Streamlit.

Every dashboard control keeps its value in the URL so a copied link reopens the same view. A link can
be old, hand-edited or hostile, so each value is checked against what the store offers; anything else
falls back to the default with a one-line message naming the parameter and what was available.
:func:`analysis.views.choices.choose` does this for a single choice; this module adds lists, integers, flags
and the per-model layers of the Neighbours page.
"""

from __future__ import annotations

from analysis.views.choices import Choice, choose

__all__ = ["Choice", "choose", "choose_flag", "choose_int", "choose_many", "largest", "layers_for_models", "preferred"]


def _shown(values, limit: int = 12) -> str:
    values = list(values)
    return ", ".join(map(str, values[:limit])) + (" ..." if len(values) > limit else "")


def choose_many(requested: list[str] | None, options, name: str, default=()) -> Choice:
    """The requested values that are among ``options``, in the link's order (the order can mean
    something: the Neighbours page lays models out left to right); compared as text.

    ``requested`` is ``None`` when the URL does not name the parameter (→ ``default``), ``[""]`` or ``[]``
    when the link chose nothing (→ ``[]``). Unknown values are dropped with a message; when all are
    unknown the default is shown instead of an empty view."""
    options = list(options)
    fallback = [o for o in options if o in list(default)]
    if requested is None:
        return Choice(fallback)
    wanted = [str(r) for r in requested if str(r) != ""]
    if not wanted:
        return Choice([])
    by_text = {str(o): o for o in options}
    known = [by_text[w] for w in dict.fromkeys(wanted) if w in by_text]
    unknown = [w[:60] for w in dict.fromkeys(wanted) if w not in by_text]
    if not unknown:
        return Choice(known)
    value = known or fallback
    return Choice(value, f"unknown {name} {', '.join(map(repr, unknown))} in the link; showing "
                         f"{', '.join(map(str, value)) or 'none'} instead. Available: {_shown(options)}")


def choose_int(requested, lo: int, hi: int, name: str, default: int) -> Choice:
    """An integer in ``[lo, hi]`` from URL text; anything else gives ``default`` (clipped into range)."""
    fallback = min(max(int(default), lo), hi)
    if requested is None or requested == "":
        return Choice(fallback)
    try:
        value = int(str(requested).strip())
    except ValueError:
        value = None
    if value is not None and lo <= value <= hi:
        return Choice(value)
    return Choice(fallback, f"{name} {str(requested)[:60]!r} in the link is not a whole number from {lo} to {hi}; "
                            f"showing {fallback} instead")


def choose_flag(requested, name: str, default: bool) -> Choice:
    """A switch from URL text: ``1/true/yes/on`` or ``0/false/no/off``; anything else gives ``default``."""
    if requested is None or requested == "":
        return Choice(bool(default))
    text = str(requested).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return Choice(True)
    if text in ("0", "false", "no", "off"):
        return Choice(False)
    return Choice(bool(default), f"{name} {str(requested)[:60]!r} in the link is not on/off (1 or 0); "
                                 f"showing {'on' if default else 'off'} instead")


def layers_for_models(models: list[str] | None, layers: list[str] | None) -> dict[str, str]:
    """The Neighbours page's per-model layers from the URL's two aligned lists ``?models=a&models=b``
    and ``?layers=3&layers=5`` (so a link names models and layers in one order): ``{model: layer text}``.
    Extra entries of either list are ignored; each layer is validated later against its model's depth."""
    return {str(m): str(v) for m, v in zip(models or [], layers or [])}


def largest(options):
    """The largest of ``options`` (budgets such as n_f or n_c), or ``None`` when there are none."""
    options = [o for o in options if o is not None]
    return max(options) if options else None


def preferred(options, prefixes) -> object:
    """The first option (in ``options`` order) that starts with the earliest possible of ``prefixes``
    (a default that means something, not the alphabetically first); the first option when none does."""
    options = list(options)
    for prefix in prefixes:
        for o in options:
            if str(o).startswith(prefix):
                return o
    return options[0] if options else None


def stale_params(present, owned, others=(), carried=()) -> list[str]:
    """The URL parameters a page should drop after a full run: those ``present`` in the URL that another
    page owns (``others``: the parameters the session's other pages read or wrote), that this page did
    not read or write (``owned``) and that do not follow the user across pages (``carried``), in URL
    order. Back landing on the Overview with the Neighbours page's ``item=`` then drops it; a parameter
    no page has claimed is left alone (nothing of a link is dropped on a guess)."""
    drop = set(others) - set(owned) - set(carried)
    return [p for p in dict.fromkeys(present) if p in drop]
