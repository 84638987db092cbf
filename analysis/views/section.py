"""One page's section, as the page renders it and the report embeds it: ``section(con, dataset, **choices)``
of a page's view module returns a :class:`Section`, so the numbers, the charts, the notes under them and
the reason for an empty section are decided once, where the view reads the store."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Section:
    #: the section's numbers as the report stores them (JSON-able); None when the section is omitted
    data: Any
    #: ``(title, chart)`` pairs: Altair charts the page draws and the report embeds as Vega-Lite specs
    charts: tuple = ()
    #: sentences read under the charts (the page as captions or warnings, the report as notes)
    notes: tuple = ()
    #: why the section is empty, naming the command that would fill it; None when it has data
    omitted: str | None = None


def section_models(con, models=None) -> list[str]:
    """The models a section covers: ``models`` as given, or (None or empty) every model of the store in
    the Overview's order (by modality, then name), as the report chooses by default."""
    if models:
        return list(models)
    return [m for (m,) in con.execute("SELECT model FROM models ORDER BY modality, model").fetchall()]


def section_references(con, dataset, references=None) -> list[str]:
    """The text references a section measures alignment against: ``references`` (None or empty: every
    text model, by name), keeping only models with a finished run on ``dataset`` (a reference with no
    embeddings there has no grid to show)."""
    rows = con.execute("SELECT DISTINCT model, modality FROM runs WHERE dataset = ? AND status = 'done'",
                       [dataset]).fetchall()
    done = {m for m, _ in rows}
    return [r for r in (references or sorted(m for m, kind in rows if kind == "text")) if r in done]
