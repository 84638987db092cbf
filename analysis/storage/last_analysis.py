"""The state of each dataset's last ``layerscope analyze``, recorded as it goes: whether it finished
and, when it did not, where it stopped and which of its results the dashboard and the report show.

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

Each dataset's state is that of the last ``analyze`` that analysed it (``--dataset`` names some): an
analysis of dataset B that stopped stays on record for B until an analysis of B finishes, whatever
analyses of other datasets ran since. The record is one JSON value in ``meta`` (key :data:`KEY`),
written in the same transaction as the rows it lists, so it never says more than the store holds:
the last analysis's fields (:class:`LastAnalysis`) with, under ``"earlier"``, the earlier analyses
that are still the last of some dataset, newest first (:func:`read_all`, :func:`by_dataset`). A
record without ``"earlier"`` (written before it existed) is the last analysis alone, the state of
every dataset it analysed (and an older LayerScope, which knows no ``"earlier"``, reads the last
analysis alone, as it wrote it). A process killed outright (SIGKILL, out of memory) writes no end: its
record stays ``running``, naming the study it was in.
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
#: the key under which the record lists the earlier analyses still the last of some dataset
EARLIER = "earlier"
#: ``running``: under way, or stopped without recording an end (killed outright, out of memory);
#: ``finished``; ``interrupted``: Ctrl-C / SIGINT; ``terminated``: SIGTERM (the dashboard's Cancel,
#: ``kill``, a job scheduler); ``failed``: an error ended it
STATES = ("running", "finished", "interrupted", "terminated", "failed")


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

    def unfinished(self, dataset: str) -> bool:
        """Whether this analysis left ``dataset`` unfinished: it ended (or stopped) before finishing
        every study of it."""
        return self.state != "finished" and dataset not in self.complete

    def shown(self, dataset: str) -> str:
        """Which results of ``dataset`` the readers show: ``"complete"`` (this analysis finished it),
        ``"earlier"`` (its earlier analysis, kept), ``"partial"`` (the studies this one finished there)
        or ``"none"``."""
        if dataset in self.complete:
            return "complete"
        if dataset in self.kept:
            return "earlier"
        return "partial" if self.finished.get(dataset) else "none"

    @classmethod
    def from_value(cls, got) -> LastAnalysis | None:
        """The record from its decoded JSON, or None when it is no record of this form (fields it does
        not know, such as the record's ``"earlier"``, are left out)."""
        try:
            names = {f.name for f in dataclasses.fields(cls)}
            got = {k: v for k, v in got.items() if k in names}
            for k in ("datasets", "kept", "complete"):
                got[k] = tuple(got.get(k) or ())
            return cls(**got)
        except (ValueError, TypeError, AttributeError):
            return None


def still_last(runs, plan) -> list[LastAnalysis]:
    """Of ``runs`` (newest first), those still the last analysis of some dataset once an analysis of
    ``plan`` (datasets) has begun: what the record keeps under ``"earlier"``, newest first."""
    claimed, out = set(plan), []
    for run in runs:
        if set(run.datasets) - claimed:
            out.append(run)
        claimed |= set(run.datasets)
    return out


def record(con, run: LastAnalysis, *, earlier=(), rows: dict | None = None, datasets=(),
           replace: bool = False) -> None:
    """Write ``run`` as the store's last analysis, with ``earlier`` (:func:`still_last`) and, in the
    same transaction, list ``rows`` (``{result table: result ids}``) of ``datasets`` as current: added
    to their lists, or with ``replace`` replacing them (:func:`analysis.storage.results.replace_current`)."""
    value = {**dataclasses.asdict(run), EARLIER: [dataclasses.asdict(r) for r in earlier]}
    with transaction(con):
        if rows is not None and datasets:
            (R.replace_current if replace else R.insert_current)(con, rows, sorted(datasets))
        con.execute("INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    [KEY, json.dumps(value)])


def clear(con) -> None:
    """Forget every analysis's record (a new analysis version cleared the rows they list)."""
    con.execute("DELETE FROM meta WHERE key = ?", [KEY])


def _value(con):
    """The record's decoded JSON, or None (none recorded, or not JSON)."""
    try:
        row = fetch_one(con, "SELECT value FROM meta WHERE key = ?", [KEY])
    except Exception:  # noqa: BLE001 - no meta table: not a store analysed by LayerScope
        return None
    try:
        return json.loads(row[0]) if row else None
    except (ValueError, TypeError):
        return None


def read(con) -> LastAnalysis | None:
    """The store's last analysis, or None (never analysed, or analysed before this record existed)."""
    runs = read_all(con)
    return runs[0] if runs else None


def read_all(con) -> list[LastAnalysis]:
    """The last analysis and the earlier ones still the last of some dataset, newest first (``[]``
    when none is recorded). A record without ``"earlier"`` is the last analysis alone; an earlier
    one not of this form (another version's) is left out."""
    value = _value(con)
    last = LastAnalysis.from_value(value) if value is not None else None
    if last is None:
        return []
    earlier = value.get(EARLIER)
    got = [LastAnalysis.from_value(e) for e in (earlier if isinstance(earlier, list) else [])]
    return [last, *[r for r in got if r is not None]]


def by_dataset(runs) -> dict[str, LastAnalysis]:
    """``{dataset: the last of runs (newest first, :func:`read_all`) that analysed it}``."""
    out: dict[str, LastAnalysis] = {}
    for run in runs:
        for ds in run.datasets:
            out.setdefault(ds, run)
    return out


def listed_datasets(con) -> set[str]:
    """The datasets that have current rows (an earlier analysis listed them)."""
    return {d for (d,) in con.execute(f"SELECT DISTINCT dataset FROM {R.CURRENT_TABLE}").fetchall()}
