"""The state of the store's last ``layerscope analyze``, recorded as it goes: whether it finished and,
when it did not, where it stopped and which of its results the dashboard and the report show.

``analyze`` lists the rows a dataset's analysis made as that dataset's current rows
(:func:`analysis.storage.results.record_current`); the readers read those only. Each study's rows are
written whole at its end, so an analysis that stops leaves every study it finished complete and
correct (a second ``analyze`` reuses them: results are keyed by their inputs). What it lists on the
way depends on what the dataset showed before:

- a dataset with no current rows (its first analysis, or the first after a new analysis version
  cleared the caches) lists each study's rows as the study finishes, so an interrupted analysis shows
  the studies it completed;
- a dataset with an earlier analysis keeps showing that one, whole, until the new one has finished
  every study of the dataset: two analyses (perhaps under other settings) are never shown mixed.

The record is one JSON value in ``meta`` (key :data:`KEY`), written in the same transaction as the
rows it lists, so it never says more than the store holds. A process killed outright (SIGKILL, out of
memory) writes no end: its record stays ``running``, naming the study it was in.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from dataclasses import dataclass, field

from analysis.storage import results as R
from analysis.storage.schema import fetch_one
from analysis.storage.store import transaction

#: the ``meta`` key holding the record
KEY = "last_analysis"
#: ``running``: under way, or stopped without recording an end (killed, out of memory); ``finished``;
#: ``interrupted``: Ctrl-C / SIGINT; ``failed``: an error ended it
STATES = ("running", "finished", "interrupted", "failed")


def now() -> str:
    """The time in UTC as the record writes it, ``YYYY-MM-DD HH:MM:SS``."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


@dataclass(frozen=True)
class LastAnalysis:
    """One ``analyze``'s state (the record's fields; JSON in ``meta``)."""

    state: str  #: one of :data:`STATES`
    started: str  #: when it started (UTC, :func:`now`)
    datasets: tuple = ()  #: the datasets it analyses, in its order
    settings: dict = field(default_factory=dict)  #: the settings it analyses with (``Settings.stored()``)
    #: datasets whose earlier analysis stays the shown one until this one finishes them
    kept: tuple = ()
    #: per dataset begun, the studies it finished there, in order
    finished: dict = field(default_factory=dict)
    complete: tuple = ()  #: datasets it finished whole (every study, or skipped with a note)
    dataset: str | None = None  #: the dataset under way, or where it stopped
    study: str | None = None  #: the study under way, or the one it stopped in (None between datasets)
    ended: str | None = None  #: when it finished or stopped (None while running, or when it was killed)
    error: str | None = None  #: ``failed``: the error in one line

    def __post_init__(self):
        if self.state not in STATES:
            raise ValueError(f"state must be one of {', '.join(STATES)}, got {self.state!r}")

    def shown(self, dataset: str) -> str:
        """Which results of ``dataset`` the readers show: ``"complete"`` (this analysis finished it),
        ``"earlier"`` (its earlier analysis, kept), ``"partial"`` (the studies this one finished there)
        or ``"none"``."""
        if dataset in self.complete:
            return "complete"
        if dataset in self.kept:
            return "earlier"
        return "partial" if self.finished.get(dataset) else "none"

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> LastAnalysis | None:
        """The record, or None when the text is no record of this form (written by another version)."""
        try:
            got = json.loads(text)
            names = {f.name for f in dataclasses.fields(cls)}
            got = {k: v for k, v in got.items() if k in names}
            for k in ("datasets", "kept", "complete"):
                got[k] = tuple(got.get(k) or ())
            return cls(**got)
        except (ValueError, TypeError, AttributeError):
            return None


def record(con, run: LastAnalysis, *, rows: dict | None = None, datasets=(), replace: bool = False) -> None:
    """Write ``run`` as the store's last analysis and, in the same transaction, list ``rows``
    (``{result table: result ids}``) of ``datasets`` as current: added to their lists, or with
    ``replace`` replacing them (:func:`analysis.storage.results.replace_current`)."""
    with transaction(con):
        if rows is not None and datasets:
            (R.replace_current if replace else R.insert_current)(con, rows, sorted(datasets))
        con.execute("INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    [KEY, run.to_json()])


def read(con) -> LastAnalysis | None:
    """The store's last analysis, or None (never analysed, or analysed before this record existed)."""
    try:
        row = fetch_one(con, "SELECT value FROM meta WHERE key = ?", [KEY])
    except Exception:  # noqa: BLE001 - no meta table: not a store analysed by LayerScope
        return None
    return LastAnalysis.from_json(row[0]) if row else None


def listed_datasets(con) -> set[str]:
    """The datasets that have current rows (an earlier analysis listed them)."""
    return {d for (d,) in con.execute(f"SELECT DISTINCT dataset FROM {R.CURRENT_TABLE}").fetchall()}
