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
