"""The papers' published numbers (``analysis/data/papers.csv``, package data: a wheel carries it) and the user's mapping of store
names to the papers' names (the ``paper_names`` table).

A published number is shown *beside* a user's value where model, dataset and setting match; it is
never written into a result table nor mixed into a fit. The CSV holds only numbers the papers state,
each with its section; lines starting with ``#`` are comments.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from analysis.storage.results import now, rows
from analysis.storage.store import transaction

#: the CSV shipped with LayerScope: package data of ``analysis`` (pyproject's package-data), so an
#: installed wheel has it as well as a checkout
PUBLISHED_CSV = Path(__file__).resolve().parents[1] / "data" / "papers.csv"
COLUMNS = ("paper", "model", "dataset", "setting", "metric", "value", "source")
#: what ``paper_names.kind`` may be
KINDS = ("model", "dataset")
#: a published row about every model of a figure (a fitted line, a correlation), not one model
ANY_MODEL = "*"


@dataclass(frozen=True)
class Published:
    """One number a paper states: ``paper`` (DR | TARA), the paper's ``model`` and ``dataset`` names,
    ``setting`` (``text=NAME`` for the text encoder it was measured against; free text otherwise),
    ``metric``, ``value`` and ``source`` (section / table / figure), ``line`` in the CSV."""
    paper: str
    model: str
    dataset: str
    setting: str
    metric: str
    value: float
    source: str
    line: int


def load_published(path: str | Path | None = None) -> list[Published]:
    """Every number of the published CSV (default :data:`PUBLISHED_CSV`), validated: the header is
    :data:`COLUMNS`; every row has a paper, model, dataset, metric, source and a finite number.
    A bad row raises ``ValueError("FILE:LINE: what is wrong")``."""
    path = Path(path or PUBLISHED_CSV)
    if not path.is_file():
        raise ValueError(f"{path}: no published table here (it ships as package data of `analysis`; "
                         "reinstall LayerScope, or pass the path of a papers.csv)")
    with open(path, newline="", encoding="utf-8") as fh:
        lines = [(i, text) for i, text in enumerate(fh, start=1) if text.strip() and not text.lstrip().startswith("#")]
    if not lines:
        raise ValueError(f"{path}: empty; expected the header {','.join(COLUMNS)}")
    out = []
    reader = csv.reader([text for _, text in lines])
    header = next(reader)
    if tuple(h.strip() for h in header) != COLUMNS:
        raise ValueError(f"{path}:{lines[0][0]}: header {','.join(header)!r}; expected {','.join(COLUMNS)}")
    for (line, _), cells in zip(lines[1:], reader):
        if len(cells) != len(COLUMNS):
            raise ValueError(f"{path}:{line}: {len(cells)} fields; expected {len(COLUMNS)} ({','.join(COLUMNS)})")
        row = dict(zip(COLUMNS, (c.strip() for c in cells)))
        missing = [c for c in COLUMNS if c != "setting" and not row[c]]
        if missing:
            raise ValueError(f"{path}:{line}: empty {', '.join(missing)}")
        try:
            value = float(row["value"])
        except ValueError:
            raise ValueError(f"{path}:{line}: value {row['value']!r} is not a number") from None
        if not math.isfinite(value):
            raise ValueError(f"{path}:{line}: value {row['value']!r} is not finite")
        out.append(Published(**{**row, "value": value}, line=line))
    return out


def paper_names(con) -> dict[str, dict[str, str]]:
    """``{"model": {store name: paper name}, "dataset": {...}}``; empty maps on a store without the
    table (written before it existed, opened read-only)."""
    out = {k: {} for k in KINDS}
    have = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if "paper_names" not in have:
        return out
    for r in rows(con, "SELECT kind, name, paper_name FROM paper_names ORDER BY kind, name"):
        out.setdefault(r["kind"], {})[r["name"]] = r["paper_name"]
    return out


def _stored(con, kind: str) -> list[str]:
    table, col = ("models", "model") if kind == "model" else ("datasets", "dataset")
    return [r[0] for r in con.execute(f"SELECT {col} FROM {table} ORDER BY {col}").fetchall()]


def known_paper_names(published: list[Published], kind: str) -> list[str]:
    """The paper names of ``kind`` the published table uses (models: the figure-wide ``*`` left out;
    the ``text=`` settings count as models)."""
    if kind == "dataset":
        return sorted({p.dataset for p in published})
    names = {p.model for p in published if p.model != ANY_MODEL}
    names |= {p.setting[len("text="):] for p in published if p.setting.startswith("text=")}
    return sorted(names)


def set_paper_name(con, kind: str, name: str, paper_name: str | None, *, published=None) -> None:
    """Map the store's ``name`` (a model or a dataset) to ``paper_name``; ``None`` or ``""`` removes
    the mapping. The name must be in the store and the paper name in the published table (a
    misspelt one would silently match nothing)."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: expected one of {', '.join(KINDS)}")
    stored = _stored(con, kind)
    if name not in stored:
        raise ValueError(f"no {kind} {name!r} in the store; {kind}s: {', '.join(stored) or 'none'}")
    if paper_name:
        known = known_paper_names(published if published is not None else load_published(), kind)
        if paper_name not in known:
            raise ValueError(f"{paper_name!r} is not a {kind} of the published table; {kind}s: {', '.join(known)}")
    with transaction(con):
        con.execute("DELETE FROM paper_names WHERE kind = ? AND name = ?", [kind, name])
        if paper_name:
            con.execute("INSERT INTO paper_names VALUES (?, ?, ?, ?)", [kind, name, paper_name, now()])


def matching(published: list[Published], names: dict, *, model: str | None, dataset: str,
             text_model: str | None = None, metrics=None) -> list[Published]:
    """The published rows that speak of the store's ``model`` (None: figure-wide rows, model ``*``) on
    ``dataset``, measured against ``text_model`` where the row names its text encoder (``text=``).
    Only mapped names match: a store name never matches a paper name by accident of spelling."""
    paper_dataset = names.get("dataset", {}).get(dataset)
    if paper_dataset is None:
        return []
    if model is None:
        paper_model = ANY_MODEL
    else:
        paper_model = names.get("model", {}).get(model)
        if paper_model is None:
            return []
    paper_text = names.get("model", {}).get(text_model) if text_model else None
    out = []
    for p in published:
        if p.model != paper_model or p.dataset != paper_dataset or (metrics and p.metric not in metrics):
            continue
        if p.setting.startswith("text=") and p.setting[len("text="):] != paper_text:
            continue
        out.append(p)
    return out
