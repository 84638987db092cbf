"""Reading and writing the small result tables that ``layerscope analyze`` caches.

Every writer is idempotent: a result is keyed by ``result_id`` (inputs and parameters) and carries
an ``input_key`` (the inputs' finish times); an unchanged key is skipped, a changed one replaced.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json

import numpy as np

from .schema import TABLES, fetch_one

COLUMNS = {name: {c for c, _, _ in cols} for name, cols, _ in TABLES}


def key(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _now():
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


def is_current(con, table: str, result_id: str, input_key: str) -> bool:
    row = fetch_one(con, f"SELECT input_key FROM {table} WHERE result_id = ?", [result_id])
    return row is not None and row[0] == input_key


def _replace(con, table: str, row: dict) -> None:
    cols = list(row) + ["computed"]
    vals = list(row.values()) + [_now()]
    con.execute("BEGIN")
    try:
        con.execute(f"DELETE FROM {table} WHERE result_id = ?", [row["result_id"]])
        con.execute(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", vals)
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise


def put_grid(con, **row) -> None:
    row["params"] = json.dumps(row["params"])
    row["flags"] = json.dumps(clean_json(row.get("flags") or {}))
    grid = np.asarray(row.pop("grid"), dtype=float)
    row.update(n_rows=grid.shape[0], n_cols=grid.shape[1], grid_values=grid.ravel().tolist())
    _replace(con, "result_grids", row)


def put_profile(con, **row) -> None:
    row["params"] = json.dumps(row["params"])
    row["flags"] = json.dumps(clean_json(row.get("flags") or {}))
    row["layer_values"] = [float(v) for v in row["layer_values"]]
    _replace(con, "result_profiles", row)


def clean_json(obj):
    """JSON-safe copy: numpy to Python, NaN/inf to None (strict JSON has no NaN)."""
    if isinstance(obj, dict):
        return {str(k): clean_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_json(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return clean_json(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        return float(obj) if np.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


def put_study(con, **row) -> None:
    row["params"] = json.dumps(clean_json(row["params"]))
    row["payload"] = json.dumps(clean_json(row["payload"]), allow_nan=False)
    _replace(con, "result_studies", row)


def rows(con, sql, args=()) -> list[dict]:
    """Query results as dicts keyed by column name (parameters bound, result drained)."""
    cur = con.execute(sql, list(args))
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def _select(con, table: str, order: str, where: dict) -> list[dict]:
    """Rows of a result table filtered by column equality (values bound as parameters; column names
    checked against the schema, so no caller can smuggle SQL through a keyword)."""
    unknown = set(where) - COLUMNS[table]
    if unknown:
        raise ValueError(f"{table} has no column(s) {sorted(unknown)}")
    clause = " AND ".join(f"{c} = ?" for c in where) or "TRUE"
    out = rows(con, f"SELECT * FROM {table} WHERE {clause} ORDER BY {order}", where.values())
    for r in out:
        r["params"] = json.loads(r["params"])
        if "flags" in r:
            r["flags"] = json.loads(r["flags"]) if r["flags"] else {}
    return out


def read_grids(con, **where) -> list[dict]:
    """Result grids (``grid`` as an ``(n_rows, n_cols)`` array) filtered by column equality."""
    out = _select(con, "result_grids", "dataset, model_a, model_b, metric, n_frames, n_captions", where)
    for r in out:
        r["grid"] = np.asarray(r.pop("grid_values"), dtype=float).reshape(r["n_rows"], r["n_cols"])
    return out


def read_profiles(con, **where) -> list[dict]:
    """Per-layer profiles (``layer_values`` as an array) filtered by column equality."""
    out = _select(con, "result_profiles", "dataset, model, metric", where)
    for r in out:
        r["layer_values"] = np.asarray(r["layer_values"], dtype=float)
    return out


def read_studies(con, **where) -> list[dict]:
    """Study results (``payload`` decoded) filtered by column equality."""
    out = _select(con, "result_studies", "study, dataset, subject", where)
    for r in out:
        r["payload"] = json.loads(r["payload"])
    return out
