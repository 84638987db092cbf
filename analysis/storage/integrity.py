"""Read a whole store once before a command writes to it: damaged blocks and non-finite vectors.

DuckDB checks a block's checksum only when a query reads that block, so a command that writes
first (settings, a version stamp) and reads later would change a damaged store before refusing
it. :func:`scan_store` reads every column of every table, so a damaged block fails here, before
anything is written; the same pass counts, per run, the items holding NaN or ±inf in any layer,
which ``analyze`` leaves out (one bad run must not stop the analysis of the others).
"""

from __future__ import annotations

from analysis.storage.schema import embedding_tables


def _read_all(con, table: str) -> None:
    # hash() of the whole row reads every column of every row (count(*) alone reads none)
    con.execute(f'SELECT count(*), bit_xor(hash(t)) FROM "{table}" t').fetchall()


#: keys per lookup: DuckDB answers ``key IN (...)`` from the index up to ``index_scan_max_count``
#: (2048) keys, and reads a table's rows, not its index, beyond that
INDEX_BATCH = 2048


def _single_keys(con) -> dict[str, str]:
    """``{table: column}`` of the tables whose primary key is one column."""
    rows = con.execute("SELECT table_name, constraint_column_names FROM duckdb_constraints() "
                       "WHERE constraint_type = 'PRIMARY KEY'").fetchall()
    return {t: cols[0] for t, cols in rows if len(cols) == 1}


def _read_index(con, table: str, column: str) -> None:
    """Look every key up through the table's primary-key index: the index lives in blocks of its
    own, which a scan of the rows never reads (and a later ``WHERE key = ?`` or insert would)."""
    keys = [r[0] for r in con.execute(f'SELECT "{column}" FROM "{table}"').fetchall()]
    for a in range(0, len(keys), INDEX_BATCH):
        part = keys[a:a + INDEX_BATCH]
        con.execute(f'SELECT count(*) FROM "{table}" WHERE "{column}" IN ({", ".join("?" * len(part))})',
                    part).fetchall()


def _non_finite_items(con, table: str) -> dict[str, int]:
    """``{run_id: items}``: distinct items with a NaN or ±inf in any layer's vector of ``table``,
    reading every column of the table once (so its blocks are checked too). ``list_sum`` of a FLOAT
    vector is a double: NaN or inf when an entry is, and no finite float32 vector overflows it."""
    rows = con.execute(f'SELECT run_id, count(DISTINCT idx) FILTER (WHERE NOT isfinite(list_sum(vec))), '
                       f'bit_xor(hash(layer)) FROM "{table}" GROUP BY run_id').fetchall()
    return {run_id: int(n) for run_id, n, _ in rows if n}


def scan_store(con) -> dict[str, int]:
    """Read every table of an open store; return ``{run_id: items with NaN/inf}`` (only runs with any).

    Raises whatever DuckDB raises on a damaged block (the caller turns it into the store's one-line
    error). Cost: one pass over the stored data, vectors included (about 1.5x reading the vectors
    into numpy: 0.3 s for 13 x 2000 x 768 floats), and one index lookup per key of
    each table with a one-column primary key. Not read: the indexes of the two tables keyed by two
    columns (``items``, ``downstream_results``), which ``analyze`` reads by scans, not by key.
    """
    tables = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables "
                                        "WHERE table_schema = 'main' AND table_type = 'BASE TABLE'").fetchall()]
    vector_tables = set(embedding_tables(con).values())
    keyed = _single_keys(con)
    bad: dict[str, int] = {}
    for table in tables:
        if table in vector_tables:  # one pass over the vectors reads the whole table
            for run_id, n in _non_finite_items(con, table).items():
                bad[run_id] = bad.get(run_id, 0) + n
        else:
            _read_all(con, table)
        if table in keyed:
            _read_index(con, table, keyed[table])
    return bad
