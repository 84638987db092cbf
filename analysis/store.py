"""Reading the DuckDB store: connections, listings and embeddings as numpy arrays.

Writers live in ``precompute.writer`` (embeddings) and the analysis studies (result tables);
every table is defined in :mod:`analysis.schema`.
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import numpy as np

from .schema import SchemaError, check_version, embedding_table, fetch_one, stored_version


class StoreError(ValueError):
    """A store-level problem (missing file, locked, unknown model, run not done) with a clear message."""


def connect(path, *, read_only: bool = True, check_schema: bool = True) -> duckdb.DuckDBPyConnection:
    """Open a store. Read-only opens require the file; a lock held by a writer gives a clear error.

    ``check_schema=False`` skips the version check (only ``layerscope migrate`` wants that).
    """
    path = str(path)
    if read_only and not os.path.exists(path):
        raise StoreError(f"store {path} does not exist; create it with `layerscope precompute` or `layerscope demo`")
    if not read_only:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        con = duckdb.connect(path, read_only=read_only)
    except duckdb.IOException as exc:
        if "lock" in str(exc).lower():
            raise StoreError(
                f"store {path} is in use by another process (DuckDB allows one writer at a time). "
                f"Wait for it to finish, or write to another store and merge. ({exc})"
            ) from None
        raise
    try:
        if check_schema:
            check_version(con, path)
    except SchemaError:
        con.close()
        raise
    return con


def _as_connection(store):
    if isinstance(store, duckdb.DuckDBPyConnection):
        return store, False
    return connect(store, read_only=True), True


def list_runs(store) -> list[dict]:
    """Every run with its model, dataset, setting and status, newest first."""
    con, owned = _as_connection(store)
    try:
        if stored_version(con) is None:
            return []
        cur = con.execute(
            "SELECT run_id, model, dataset, modality, n_frames, n_captions, variant, image_mode, pooling, "
            "dtype, device, status, n_items, n_done, n_layers, dim, started, finished FROM runs "
            "ORDER BY dataset, model, modality, variant, n_frames NULLS FIRST, n_captions NULLS FIRST"
        )
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r)) for r in cur.fetchall()]
    finally:
        if owned:
            con.close()


SETTING = ("model", "dataset", "modality", "n_frames", "n_captions", "variant")


def latest_per_setting(runs: list[dict]) -> tuple[list[dict], list[dict]]:
    """Done runs with one setting (model, dataset, modality, n_f, n_c, variant) but different
    configurations (e.g. an older caption protocol, another ``--caption-order``) are versions of one
    measurement: the most recently finished is used. Returns ``(kept, superseded)``, order kept."""
    latest: dict = {}
    for r in runs:
        key = tuple(r[c] for c in SETTING)
        if key not in latest or (r["finished"] or 0) > (latest[key]["finished"] or 0):
            latest[key] = r
    kept = [r for r in runs if latest[tuple(r[c] for c in SETTING)] is r]
    return kept, [r for r in runs if latest[tuple(r[c] for c in SETTING)] is not r]


def find_run(con, *, model, dataset, n_frames=None, n_captions=None, variant=None, modality=None) -> dict:
    """The single done run matching the selection; errors say what exists instead."""
    known = [r[0] for r in con.execute("SELECT model FROM models ORDER BY model").fetchall()]
    if model not in known:
        raise StoreError(f"model {model!r} is not in the store; models: {', '.join(known) or '(none)'}")
    cond = ["model = ?", "dataset = ?"]
    args = [model, dataset]
    for col, val in (("n_frames", n_frames), ("n_captions", n_captions), ("modality", modality)):
        if val is not None:
            cond.append(f"{col} = ?")
            args.append(val)
    cond.append("variant = ?")
    args.append(variant or "original")
    cur = con.execute(
        f"SELECT run_id, status, n_frames, n_captions, modality, n_done, n_items, finished FROM runs "
        f"WHERE {' AND '.join(cond)} ORDER BY finished DESC NULLS LAST", args,
    )
    rows = [r[:7] for r in cur.fetchall()]
    if len({r[2:5] for r in rows}) == 1 and any(r[1] == "done" for r in rows):
        # versions of one setting (another caption protocol or order): the newest done one
        rows = [next(r for r in rows if r[1] == "done")]
    if not rows:
        have = con.execute(
            "SELECT DISTINCT modality, n_frames, n_captions, variant FROM runs WHERE model = ? AND dataset = ?",
            [model, dataset],
        ).fetchall()
        raise StoreError(
            f"no run of {model!r} on {dataset!r} with n_frames={n_frames}, n_captions={n_captions}, "
            f"variant={variant or 'original'}; available (modality, n_frames, n_captions, variant): {have or 'none'}"
        )
    if len(rows) > 1:
        raise StoreError(
            f"{len(rows)} runs of {model!r} on {dataset!r} match; pass n_frames / n_captions to choose one: "
            + ", ".join(f"(n_frames={r[2]}, n_captions={r[3]}, {r[4]})" for r in rows)
        )
    run_id, status, *_rest, n_done, n_items = rows[0]
    if status != "done":
        raise StoreError(
            f"run {run_id} of {model!r} is not done ({n_done}/{n_items} items); rerun the same "
            "`layerscope precompute` command to resume it"
        )
    return {"run_id": run_id}


def _run_shape(con, run_id: str) -> tuple[int, int, int]:
    row = fetch_one(con, "SELECT n_layers, n_items, dim FROM runs WHERE run_id = ?", [run_id])
    if row is None:
        raise StoreError(f"run {run_id} is not in the store")
    return row


def load_run(con, run_id: str) -> np.ndarray:
    """``(L, N, d)`` float32 embeddings of one run, items in manifest order."""
    n_layers, n_items, dim = _run_shape(con, run_id)
    return _read_vectors(con, run_id, n_layers, n_items, dim)[0]


def load_layer(con, run_id: str, layer: int, *, with_idx: bool = False):
    """``(N, d)`` embeddings of one layer of one run (the dashboard's neighbour view).

    With ``with_idx`` also the items' manifest positions ``(N,)`` (a shard's run starts past 0).
    """
    n_layers, n_items, dim = _run_shape(con, run_id)
    if not 0 <= int(layer) < n_layers:
        raise StoreError(f"run {run_id} has layers 0..{n_layers - 1}, not {layer}")
    X, idx = _read_vectors(con, run_id, n_layers, n_items, dim, layer=int(layer))
    return (X[0], idx) if with_idx else X[0]


def _read_vectors(con, run_id, n_layers, n_items, dim, layer=None) -> tuple[np.ndarray, np.ndarray]:
    """A run's rows as ``(L, N, d)`` float32 (or ``(1, N, d)`` for one layer) and the items' idx ``(N,)``.

    Streams Arrow batches of the FLOAT[dim] column (each a contiguous float buffer) and copies each
    into place by runs of consecutive items while DuckDB produces the next: one copy, and memory
    for the result plus one batch. No ORDER BY, which would make DuckDB sort the whole payload.
    """
    table = embedding_table(dim)
    where, params = "run_id = $run", {"run": run_id}
    if layer is not None:
        where += " AND layer = $layer"
        params["layer"] = int(layer)
    try:
        # the run's first item (a shard's run starts past 0): an index-free scan of one small column
        first = con.sql(f"SELECT min(idx) FROM {table} WHERE {where}", params=params).fetchall()[0][0]
        reader = con.sql(f"SELECT layer, idx, vec FROM {table} WHERE {where}",
                         params=params).to_arrow_reader(_BATCH_ROWS)
    except duckdb.CatalogException:
        raise StoreError(f"run {run_id} has no rows: the store has no {table} table") from None
    first = int(first or 0)
    n_l = n_layers if layer is None else 1
    lay0 = 0 if layer is None else int(layer)
    out = np.empty((n_l, n_items, dim), dtype=np.float32)
    flat = out.reshape(n_l * n_items, dim)
    seen = np.zeros(n_l * n_items, dtype=bool)
    bad = False
    try:
        for batch in reader:
            pos = (batch.column(0).to_numpy().astype(np.int64) - lay0) * n_items + (
                batch.column(1).to_numpy().astype(np.int64) - first)
            if len(pos) == 0:
                continue
            if pos.min() < 0 or pos.max() >= len(seen) or seen[pos].any() or len(np.unique(pos)) != len(pos):
                bad = True  # a vector outside the run's shape, or one twice
                break
            seen[pos] = True
            vec = batch.column(2)
            n = len(vec)
            values = vec.values.to_numpy()[vec.offset * dim:(vec.offset + n) * dim].reshape(n, dim)
            # rows arrive in insertion order: long runs of consecutive positions, copied slice by slice
            breaks = np.flatnonzero(np.diff(pos) != 1) + 1
            for a, b in zip(np.r_[0, breaks], np.r_[breaks, n]):
                flat[pos[a]:pos[a] + (b - a)] = values[a:b]
    finally:
        reader.close()  # release an unfinished stream now, not at the next query
    if bad or not seen.all():
        raise StoreError(f"run {run_id} is incomplete or inconsistent: {int(seen.sum())} of {len(seen)} "
                         "item-layer vectors in place")
    return out, np.arange(first, first + n_items)


#: rows per Arrow batch when reading embeddings: a few MB, copied into place while still in cache
_BATCH_ROWS = 2048


def load_embeddings(store, *, model: str, dataset: str, n_frames: int | None = None,
                    n_captions: int | None = None, variant: str | None = None) -> np.ndarray:
    """Embeddings of every layer of one done run: ``(L, N, d)`` float32, items in manifest order.

    Args:
        store: path of the DuckDB store (or an open connection).
        model: name in the store; dataset: dataset name.
        n_frames / n_captions: the test-time setting (needed when the model has several runs).
        variant: ``"original"`` (default) or ``"reversed"``.
    Raises:
        StoreError naming what exists when the selection matches no run, several runs, or a run
        that is not done.
    """
    con, owned = _as_connection(store)
    try:
        run = find_run(con, model=model, dataset=dataset, n_frames=n_frames, n_captions=n_captions,
                       variant=variant)
        return load_run(con, run["run_id"])
    finally:
        if owned:
            con.close()
