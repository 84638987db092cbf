"""Import users' downstream results (CSV) into the store, validated row by row."""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
from pathlib import Path

from .schema import create_all
from .store import StoreError, connect

COLUMNS = ("model", "task", "metric", "value", "higher_is_better")
TRUE = {"true", "1", "yes", "y", "t"}
FALSE = {"false", "0", "no", "n", "f"}


def parse_downstream_csv(path, known_models) -> list[dict]:
    """Rows of a results CSV; raises ValueError listing every problem with its line and column."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{path} does not exist")
    problems, rows, seen = [], [], {}
    data = path.read_bytes()
    try:  # utf-8-sig: spreadsheet programs start UTF-8 CSVs with a byte-order mark
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ValueError(f"{path}: line {line} is not UTF-8 text (byte 0x{data[exc.start]:02x}); save the CSV as "
                         "UTF-8 and import again (nothing was imported)") from None
    with io.StringIO(text, newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(missing)}; expected {', '.join(COLUMNS)}")
        for no, r in enumerate(reader, 2):
            where = f"{path}:{no}"
            model = (r["model"] or "").strip()
            if model not in known_models:
                problems.append(f"{where}: column 'model': unknown model {model!r} "
                                f"(store models: {', '.join(sorted(known_models)) or 'none'})")
            task, metric = (r["task"] or "").strip(), (r["metric"] or "").strip()
            if not task:
                problems.append(f"{where}: column 'task' is empty")
            if not metric:
                problems.append(f"{where}: column 'metric' is empty")
            try:
                value = float(r["value"])
                if not math.isfinite(value):
                    raise ValueError
            except (TypeError, ValueError):
                problems.append(f"{where}: column 'value': {r['value']!r} is not a finite number")
                value = None
            hib = (r["higher_is_better"] or "").strip().lower()
            if hib not in TRUE | FALSE:
                problems.append(f"{where}: column 'higher_is_better': {r['higher_is_better']!r} is not true/false")
            k = (model, task, metric)
            if k in seen:
                problems.append(f"{where}: duplicate of line {seen[k]} (same model, task, metric)")
            seen[k] = no
            rows.append({"model": model, "task": task, "metric": metric, "value": value,
                         "higher_is_better": hib in TRUE})
    if problems:
        raise ValueError(f"{path} has {len(problems)} problem(s); nothing was imported:\n  " + "\n  ".join(problems))
    if not rows:
        raise ValueError(f"{path} has no rows")
    return rows


def import_downstream(store, path) -> int:
    """Validate, then replace rows with the same (model, task, metric) in one transaction."""
    con = connect(store, read_only=False)
    try:
        create_all(con, str(store))
        known = {r[0] for r in con.execute("SELECT model FROM models").fetchall()}
        if not known:
            raise StoreError(f"{store} has no models yet; precompute first")
        rows = parse_downstream_csv(path, known)
        now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
        con.execute("BEGIN")
        try:
            for r in rows:
                con.execute("DELETE FROM downstream_results WHERE model = ? AND task = ? AND metric = ?",
                            [r["model"], r["task"], r["metric"]])
                con.execute("INSERT INTO downstream_results VALUES (?, ?, ?, ?, ?, ?, ?)",
                            [r["model"], r["task"], r["metric"], r["value"], r["higher_is_better"],
                             str(Path(path).resolve()), now])
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
        return len(rows)
    finally:
        con.close()
