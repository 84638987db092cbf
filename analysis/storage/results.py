"""Reading and writing the small result tables that ``layerscope analyze`` caches.

Every writer is idempotent: a result is keyed by ``result_id`` (inputs and parameters) and carries
an ``input_key`` (the inputs' finish times); an unchanged key is skipped, a changed one replaced.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json

import numpy as np

from analysis.storage.schema import TABLES, fetch_one
from analysis.storage.store import transaction

COLUMNS = {name: {c for c, _, _ in cols} for name, cols, _ in TABLES}
RESULT_TABLES = ("result_grids", "result_profiles", "result_studies")
#: each result table's columns in schema order, with the Arrow type of each: a batch of rows is
#: inserted as one Arrow table (measured: 258 grid rows in ~10 ms, where ``executemany`` binds row
#: by row in ~120 ms and one transaction per row took ~4.5 ms a row)
_ARROW_TYPES = {"VARCHAR": "string", "JSON": "string", "INTEGER": "int64", "DOUBLE": "float64",
                "DOUBLE[]": "list", "TIMESTAMP": "timestamp"}
_ORDERED = {name: [(c, _ARROW_TYPES[t.split()[0]]) for c, t, _ in cols] for name, cols, _ in TABLES
            if name in RESULT_TABLES}


def key(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def now():
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


def is_current(con, table: str, result_id: str, input_key: str) -> bool:
    """One result's freshness straight from the store (``analyze`` uses :func:`input_keys` once per
    table instead)."""
    row = fetch_one(con, f"SELECT input_key FROM {table} WHERE result_id = ?", [result_id])
    return row is not None and row[0] == input_key


def input_keys(con, table: str) -> dict[str, str]:
    """``{result_id: input_key}`` of every row of a result table, in one query."""
    if table not in RESULT_TABLES:
        raise ValueError(f"{table!r} is not a result table; result tables: {', '.join(RESULT_TABLES)}")
    return dict(con.execute(f"SELECT result_id, input_key FROM {table}").fetchall())


def _arrow_table(table: str, rows: list[dict]):
    """The rows as an Arrow table with the result table's columns (absent fields NULL)."""
    import pyarrow as pa

    types = {"list": pa.list_(pa.float64()), "timestamp": pa.timestamp("us"), "string": pa.string(),
             "int64": pa.int64(), "float64": pa.float64()}
    return pa.table({c: pa.array([r.get(c) for r in rows], type=types[t]) for c, t in _ORDERED[table]})


def replace_rows(con, batch: dict[str, list[dict]]) -> None:
    """Write whole result rows, all tables in one transaction: per table one DELETE of the ids and
    one INSERT of the rows (from an Arrow table). All or nothing: a failure rolls every row back, so
    the store never holds part of a batch or part of a row. Rows of one id keep the last; a row
    without ``computed`` is stamped now.

    ``batch``: ``{table: [row dict keyed by column name]}`` (columns checked against the schema)."""
    batch = {t: list({r["result_id"]: r for r in rows}.values()) for t, rows in batch.items() if rows}
    for table, rows in batch.items():
        if table not in RESULT_TABLES:
            raise ValueError(f"{table!r} is not a result table; result tables: {', '.join(RESULT_TABLES)}")
        unknown = set().union(*rows) - COLUMNS[table]
        if unknown:
            raise ValueError(f"{table} has no column(s) {sorted(unknown)}")
    stamp = now()
    # converted before the transaction: a value of the wrong type fails here, before any write
    data = {t: _arrow_table(t, [r if "computed" in r else {**r, "computed": stamp} for r in rows])
            for t, rows in batch.items()}
    if not batch:
        return
    with transaction(con):
        for table, rows in batch.items():
            con.execute(f"DELETE FROM {table} WHERE result_id IN (SELECT unnest(?::VARCHAR[]))",
                        [[r["result_id"] for r in rows]])
            name = f"_pending_{table}"
            con.register(name, data[table])
            try:
                cols = ", ".join(c for c, _ in _ORDERED[table])
                con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {name}")
            finally:
                con.unregister(name)


def _replace(con, table: str, row: dict) -> None:
    replace_rows(con, {table: [row]})


def grid_row(**row) -> dict:
    """A ``result_grids`` row as stored (JSON encoded, the grid flattened) from its fields."""
    row["params"] = json.dumps(row["params"])
    row["flags"] = json.dumps(clean_json(row.get("flags") or {}))
    grid = np.asarray(row.pop("grid"), dtype=float)
    row.update(n_rows=grid.shape[0], n_cols=grid.shape[1], grid_values=grid.ravel().tolist())
    return row


def profile_row(**row) -> dict:
    """A ``result_profiles`` row as stored from its fields."""
    row["params"] = json.dumps(row["params"])
    row["flags"] = json.dumps(clean_json(row.get("flags") or {}))
    row["layer_values"] = [float(v) for v in row["layer_values"]]
    return row


def study_row(**row) -> dict:
    """A ``result_studies`` row as stored (params and payload strict JSON) from its fields."""
    row["params"] = json.dumps(clean_json(row["params"]))
    row["payload"] = json.dumps(clean_json(row["payload"]), allow_nan=False)
    return row


def put_grid(con, **row) -> None:
    _replace(con, "result_grids", grid_row(**row))


def put_profile(con, **row) -> None:
    _replace(con, "result_profiles", profile_row(**row))


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
    _replace(con, "result_studies", study_row(**row))


def rows(con, sql, args=()) -> list[dict]:
    """Query results as dicts keyed by column name (parameters bound, result drained)."""
    cur = con.execute(sql, list(args))
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


_ORDER = {"result_grids": "dataset, model_a, model_b, metric, n_frames, n_captions",
          "result_profiles": "dataset, model, metric", "result_studies": "study, dataset, subject"}


def _select(con, table: str, where: dict, current: bool = False) -> list[dict]:
    """Rows of a result table filtered by column equality, decoded (:func:`decode`; values bound as
    parameters; column names checked against the schema, so no caller can smuggle SQL through a
    keyword). ``current``: only the rows of the store's current analysis (:func:`current_clause`)."""
    unknown = set(where) - COLUMNS[table]
    if unknown:
        raise ValueError(f"{table} has no column(s) {sorted(unknown)}")
    clause = " AND ".join([f"{c} = ?" for c in where] + ([current_clause(con, table)] if current else [])) or "TRUE"
    return [decode(table, r) for r in rows(con, f"SELECT * FROM {table} WHERE {clause} ORDER BY {_ORDER[table]}",
                                           where.values())]


def order_key(table: str, r: dict) -> tuple:
    """Sort key of a row in the readers' order (``ORDER BY`` the table's columns, NULLs last as
    DuckDB puts them), ties broken by ``result_id``."""
    cols = [c.strip() for c in _ORDER[table].split(",")] + ["result_id"]
    return tuple((r[c] is None, r[c]) for c in cols)


def decode(table: str, r: dict) -> dict:
    """A stored row as the readers return it: JSON columns parsed, ``grid`` an ``(n_rows, n_cols)``
    array (result_grids), ``layer_values`` an array (result_profiles), ``payload`` parsed
    (result_studies). Takes a row as read or as written (:func:`grid_row` ...); returns a new dict."""
    r = dict(r)
    r["params"] = json.loads(r["params"])
    if "flags" in r:
        r["flags"] = json.loads(r["flags"]) if r["flags"] else {}
    if table == "result_grids" and "grid_values" in r:  # (a row read without its grid has none)
        r["grid"] = np.asarray(r.pop("grid_values"), dtype=float).reshape(r["n_rows"], r["n_cols"])
    elif table == "result_profiles":
        r["layer_values"] = np.asarray(r["layer_values"], dtype=float)
    elif table == "result_studies":
        r["payload"] = json.loads(r["payload"])
    return r


def read_grids(con, *, current: bool = False, **where) -> list[dict]:
    """Result grids (``grid`` as an ``(n_rows, n_cols)`` array) filtered by column equality;
    ``current``: only the current analysis's (the dashboard and reports; :func:`current_clause`)."""
    return _select(con, "result_grids", where, current)


def read_profiles(con, *, current: bool = False, **where) -> list[dict]:
    """Per-layer profiles (``layer_values`` as an array) filtered by column equality (``current``: as
    :func:`read_grids`)."""
    return _select(con, "result_profiles", where, current)


def read_studies(con, *, current: bool = False, **where) -> list[dict]:
    """Study results (``payload`` decoded) filtered by column equality (``current``: as
    :func:`read_grids`)."""
    return _select(con, "result_studies", where, current)


# ---------------------------------------------------------------------------- the current analysis
#: the table listing the rows of each dataset's current analysis (analysis.storage.schema)
CURRENT_TABLE = "result_current"


def record_current(con, touched: dict[str, set], datasets) -> None:
    """Make ``touched`` (``{result table: result ids}`` an analysis computed or reused) the current
    rows of ``datasets``, replacing their earlier lists in one transaction; other datasets keep
    theirs. Each id's dataset is read from its row (ids without a row are skipped)."""
    with transaction(con):
        replace_current(con, touched, datasets)


def replace_current(con, touched: dict[str, set], datasets) -> None:
    """:func:`record_current` inside the caller's transaction."""
    datasets = sorted(datasets)
    con.execute(f"DELETE FROM {CURRENT_TABLE} WHERE dataset IN (SELECT unnest(?::VARCHAR[]))", [datasets])
    insert_current(con, touched, datasets)


def add_current(con, touched: dict[str, set]) -> None:
    """Add rows to the current analysis (a map asked for with ``layerscope map``), keeping the rest."""
    with transaction(con):
        insert_current(con, touched, None)


def insert_current(con, touched: dict[str, set], datasets) -> None:
    """List ``touched``'s rows (of ``datasets`` only; None: any) as current, beside those listed
    already, inside the caller's transaction."""
    for table, ids in touched.items():
        if table not in RESULT_TABLES:
            raise ValueError(f"{table!r} is not a result table; result tables: {', '.join(RESULT_TABLES)}")
        if not ids:
            continue
        only = "" if datasets is None else " AND t.dataset IN (SELECT unnest(?::VARCHAR[]))"
        con.execute(f"INSERT INTO {CURRENT_TABLE} SELECT '{table}', t.result_id, t.dataset FROM {table} t "
                    f"WHERE t.result_id IN (SELECT unnest(?::VARCHAR[])){only} ON CONFLICT DO NOTHING",
                    [sorted(ids)] + ([datasets] if datasets is not None else []))


def clear_current(con) -> None:
    """Forget every recorded current row (the result tables were emptied)."""
    con.execute(f"DELETE FROM {CURRENT_TABLE}")


def current_clause(con, table: str, alias: str = "") -> str:
    """The one rule deciding which rows of a result table the dashboard and reports read: a SQL
    condition true for the rows of the store's current analysis (``alias``: the table's alias in the
    query), i.e. the rows listed in ``result_current``. An analysis lists a dataset's rows when it
    finishes the dataset, so two analyses are never read mixed: a dataset's earlier list stays until
    then, and a dataset without one lists each study as it finishes
    (:mod:`analysis.storage.last_analysis`, which records where an unfinished analysis stopped).
    ``FALSE`` when the store has no ``result_current`` table: every ``analyze`` of this analysis
    version creates it first, so such a store holds no row of this version (rows of another are
    refused whole by the readers' version check) and none is current.
    Only constant text is returned (the table name is checked), so callers may put it in a query."""
    if table not in RESULT_TABLES:
        raise ValueError(f"{table!r} is not a result table; result tables: {', '.join(RESULT_TABLES)}")
    if alias and not alias.isidentifier():
        raise ValueError(f"alias must be an identifier, got {alias!r}")
    if not fetch_one(con, "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [CURRENT_TABLE])[0]:
        return "FALSE"
    col = f"{alias}.result_id" if alias else "result_id"
    return f"{col} IN (SELECT result_id FROM {CURRENT_TABLE} WHERE result_table = '{table}')"
