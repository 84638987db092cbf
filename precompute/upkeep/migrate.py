"""Upgrade a store written by an older LayerScope schema in place (``layerscope migrate``).

Version 2 kept embeddings as one float32 BLOB per (run, layer, batch) in a table ``embeddings``;
version 3 keeps one ``FLOAT[dim]`` row per (run, layer, item) in ``embeddings_<dim>`` (see
:mod:`analysis.storage.schema`); version 4 adds ``flags`` columns to the result tables; version 5 gives
``downstream_results`` a ``setting`` and a ``layer`` (per-layer results) in its primary key, so the
table is rebuilt and every older row becomes a whole-model row (setting '', layer -1). The whole
upgrade is one transaction: it completes, or the store is left exactly as it was. Result tables
are kept: their numbers do not depend on the storage layout.
"""

from __future__ import annotations

import json

import numpy as np

from analysis.storage.schema import (
    MIGRATABLE,
    MODEL_LEVEL,
    SCHEMA_VERSION,
    SchemaError,
    add_missing_columns,
    create_all,
    embedding_writer_settings,
    ensure_embedding_table,
    table_ddl,
)
from analysis.storage.store import connect, schema_version, transaction

from ..batch.writer import embedding_rows, insert_arrow


def migrate_store(path, *, log=print) -> dict:
    """Upgrade ``path`` to :data:`analysis.storage.schema.SCHEMA_VERSION`; returns ``{"from", "to", "runs", "vectors"}``.

    Raises:
        SchemaError: the store is of a version this code cannot upgrade (or newer than it).
        StoreError: the store is missing or in use.
    """
    con = connect(path, read_only=True, check_schema=False)  # fails clearly when missing or damaged
    try:  # decided read-only: a current store needs no write access (it may be on read-only media)
        version = schema_version(con, path)
    finally:
        con.close()
    if version is None:
        raise SchemaError(f"{path} is not a LayerScope store (no schema version); nothing to migrate")
    if version == SCHEMA_VERSION:
        log(f"{path} is already at schema version {SCHEMA_VERSION}; nothing to do")
        return {"from": version, "to": version, "runs": 0, "vectors": 0}
    if version not in MIGRATABLE:
        raise SchemaError(f"{path} has schema version {version}; this LayerScope upgrades versions "
                          f"{', '.join(map(str, MIGRATABLE))} to {SCHEMA_VERSION}. Nothing was changed.")
    con = connect(path, read_only=False, check_schema=False)
    try:
        if schema_version(con, path) != version:
            raise SchemaError(f"{path} changed while it was being opened; run `layerscope migrate` again")
        runs = con.execute("SELECT run_id, dim FROM runs ORDER BY run_id").fetchall()
        embedding_writer_settings(con)
        with transaction(con):
            n_vectors = 0
            if version == 2:
                n_vectors = sum(_copy_run_v2(con, run_id, dim, log=lambda m: log(f"{path}: {m}"))
                                for run_id, dim in runs)
                for run_id, reason in _unfinish_incomplete_runs(con):
                    log(f"{path}: run {run_id}: {reason}")
                con.execute("DROP TABLE embeddings")
            if version <= 4:
                _rebuild_downstream_v5(con)
            add_missing_columns(con)
            con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION)])
            create_all(con, str(path), comment_all=True)  # tables new since that version; comments on all
        log(f"{path}: schema {version} -> {SCHEMA_VERSION}, {len(runs)} run(s), {n_vectors} vectors moved")
        return {"from": version, "to": SCHEMA_VERSION, "runs": len(runs), "vectors": n_vectors}
    finally:
        con.close()


def _copy_run_v2(con, run_id: str, dim: int, *, log=print) -> int:
    """Rewrite one run's version-2 BLOB blocks as version-3 rows; returns the vectors written.

    Version 3 holds one row per (run, layer, item), which ``analyze`` checks: an item that two blocks
    hold (a block stored twice) is written once when both hold the same bits (said in a note), and
    refused, changing nothing, when they differ (which one is right cannot be known)."""
    blocks = con.sql("SELECT layer, first_idx, n_items, vectors FROM embeddings WHERE run_id = $r",
                     params={"r": run_id}).fetchall()
    if not blocks:
        return 0
    target = ensure_embedding_table(con, dim)
    layers, idx, vecs = [], [], []
    for layer, first, n, blob in blocks:
        block = np.frombuffer(blob, dtype="<f4")
        if block.size != n * dim:
            raise SchemaError(f"run {run_id}: a version-2 block of layer {layer} at item {first} holds "
                              f"{block.size} floats, expected {n} x {dim}; nothing was changed")
        layers.append(np.full(n, layer, np.int16))
        idx.append(np.arange(first, first + n, dtype=np.int32))
        vecs.append(block)
    L, I, V = np.concatenate(layers), np.concatenate(idx), np.concatenate(vecs).reshape(-1, dim)
    key = L.astype(np.int64) * (int(I.max()) + 1) + I
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    repeat = np.flatnonzero(first[inverse] != np.arange(len(key)))
    if len(repeat):
        bits = V.view(np.uint32)
        differ = [j for j in repeat if not np.array_equal(bits[j], bits[first[inverse[j]]])]
        if differ:
            j = differ[0]
            raise SchemaError(f"run {run_id}: item {I[j]} of layer {L[j]} is stored twice by version-2 blocks with "
                              f"different vectors ({len(differ)} such item vector(s)); which is right cannot be "
                              "known, so nothing was changed")
        keep = np.sort(first)
        L, I, V = L[keep], I[keep], V[keep]
        log(f"run {run_id}: {len(repeat)} item vector(s) stored twice with the same values (a repeated "
            "version-2 block) kept once")
    table = embedding_rows(run_id, L, I, V)
    insert_arrow(con, target, table, "run_id, layer, idx, vec")
    return len(table)


def _complete_prefix(present: list[set[int]]) -> tuple[int, list[int]]:
    """``(n, missing)`` for one run's stored item positions per layer: ``n`` items, in position
    order, are stored in every layer before the first one some layer lacks; ``missing``: positions
    some layer lacks (among those any layer holds, or gaps in the positions' sequence, which a
    version-2 writer, writing batches of consecutive items, never left)."""
    union = sorted(set().union(*present)) if present else []
    whole = set.intersection(*present) if present else set()
    n = 0
    for i, pos in enumerate(union):
        if pos not in whole or (i and pos != union[i - 1] + 1):
            break
        n += 1
    missing = [p for p in union if p not in whole]
    return n, missing


def _unfinish_incomplete_runs(con) -> list[tuple[str, str]]:
    """Version-2 runs marked done whose blocks do not cover every item of every layer (a block lost
    from the store): marked ``running`` with ``n_done`` at their first missing item, so that ``runs``
    calls them interrupted and rerunning their precompute command recomputes the rest (it keeps the
    first ``n_done`` items by position and drops the others). The reason goes into the run's config
    (``incomplete``). Returns ``[(run_id, reason)]``."""
    out = []
    runs = con.execute("SELECT run_id, n_items, n_layers FROM runs WHERE status = 'done'").fetchall()
    for run_id, n_items, n_layers in runs:
        present = [set() for _ in range(n_layers)]
        for layer, first, n in con.execute("SELECT layer, first_idx, n_items FROM embeddings WHERE run_id = ?",
                                           [run_id]).fetchall():
            if 0 <= layer < n_layers:
                present[layer].update(range(first, first + n))
        n_done, missing = _complete_prefix(present)
        if n_done >= n_items and not missing:
            continue
        lacking = [layer for layer, have in enumerate(present) if len(have) < n_items]
        reason = (f"version-2 blocks missing (layers {lacking}, {n_items - min(map(len, present), default=0)} "
                  f"of {n_items} items at most); {n_done} whole item(s) kept, marked unfinished: rerun its "
                  "precompute command to compute the rest")
        con.execute("UPDATE runs SET status = 'running', n_done = ?, finished = NULL, "
                    "config = json_merge_patch(config, ?) WHERE run_id = ?",
                    [n_done, json.dumps({"incomplete": reason}), run_id])
        out.append((run_id, reason))
    return out


def _rebuild_downstream_v5(con) -> int:
    """Version 5's ``downstream_results`` (new key columns ``setting``, ``layer``): a primary key
    cannot be altered in place, so the table is copied into the new layout and swapped in, its
    rows as whole-model results. Returns the rows copied."""
    have = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if "downstream_results" not in have:
        return 0  # created whole by create_all
    con.execute(table_ddl("downstream_results", "downstream_results_v5"))
    con.execute("INSERT INTO downstream_results_v5 (model, task, metric, setting, layer, layer_name, value, "
                "higher_is_better, source, imported) SELECT model, task, metric, '', ?, NULL, value, "
                "higher_is_better, source, imported FROM downstream_results", [MODEL_LEVEL])
    n = con.execute("SELECT count(*) FROM downstream_results_v5").fetchall()[0][0]
    con.execute("DROP TABLE downstream_results")
    con.execute("ALTER TABLE downstream_results_v5 RENAME TO downstream_results")
    return int(n)
