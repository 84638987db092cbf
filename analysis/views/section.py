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
    #: the sentences read under each chart: one tuple per chart of ``charts``, in its order (empty: no
    #: sentence is tied to a chart); each is one of ``notes``, which also holds the section-wide ones
    chart_notes: tuple = ()

    def __post_init__(self):
        if self.chart_notes and len(self.chart_notes) != len(self.charts):
            raise ValueError(f"{len(self.chart_notes)} charts' notes for {len(self.charts)} charts")
        stray = {n for said in self.chart_notes for n in said} - set(self.notes)
        if stray:
            raise ValueError(f"notes under a chart but not among the section's notes: {sorted(stray)}")

    def placed_notes(self) -> "PlacedNotes":
        """Where the page and the report print each of this section's sentences (:func:`place_notes`)."""
        return place_notes(self.chart_notes or [()] * len(self.charts), self.notes)


@dataclass(frozen=True)
class PlacedNotes:
    #: ``under[i]``: the sentences printed directly under chart ``i`` (the one chart that reads them)
    under: tuple
    #: ``((chart indices, sentences), ...)``: sentences several charts read, but not every chart with
    #: notes: printed once after the charts, under a line naming those charts
    shared: tuple
    #: the section-wide sentences: tied to no chart, or read under every chart that has notes
    wide: tuple

    def one_chart(self) -> tuple:
        """A one-chart section's sentences in reading order: the chart's own, then the section-wide
        ones (with one chart, none is shared). Raises ValueError for a section of several charts."""
        if len(self.under) != 1:
            raise ValueError(f"one_chart: the section has {len(self.under)} charts, not one")
        return (*self.under[0], *self.wide)


def place_notes(chart_notes, notes) -> PlacedNotes:
    """Each distinct sentence of a section, placed once: directly under its chart when exactly one
    chart reads it; after the charts, naming them, when several (not all) of the charts with notes
    read it; with the section-wide sentences otherwise. ``chart_notes``: one list of sentences per
    chart, in the charts' order; ``notes``: every sentence of the section (the chart's ones included;
    one tied to no chart is section-wide). Order: a chart's own order; shared groups and section-wide
    sentences in the order of their first appearance in ``notes`` then ``chart_notes``.

    >>> p = place_notes([["a", "s"], ["b", "s"], ["c"]], ["a", "s", "b", "s", "c", "w"])
    >>> p.under, p.shared, p.wide
    ((('a',), ('b',), ('c',)), (((0, 1), ('s',)),), ('w',))
    >>> place_notes([["a", "s"], ["b", "s"]], ["a", "s", "b", "s"]).wide
    ('s',)
    """
    readers: dict[str, tuple] = {}
    for i, said in enumerate(chart_notes):
        for n in dict.fromkeys(said):
            readers[n] = readers.get(n, ()) + (i,)
    with_notes = sum(1 for said in chart_notes if said)
    under = tuple(tuple(n for n in dict.fromkeys(said) if len(readers[n]) == 1) for said in chart_notes)
    shared: dict[tuple, list] = {}
    wide = []
    for n in dict.fromkeys([*notes, *(n for said in chart_notes for n in said)]):
        charts = readers.get(n, ())
        if len(charts) == 1:
            continue
        if charts and len(charts) < with_notes:
            shared.setdefault(charts, []).append(n)
        else:
            wide.append(n)
    return PlacedNotes(under, tuple((c, tuple(said)) for c, said in shared.items()), tuple(wide))


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
