"""Merge stores written by sharded precompute jobs (``--shard I/N``) into one store.

Each shard store holds runs whose identity carries ``shard: "I/N"``. Merging copies datasets,
items and models (refusing conflicts), then, for every group of shard runs that differ only in
their shard, and once all N shards are done, writes one full run (the id an unsharded run would
have) with every row in place. Unsharded runs are copied as they are. Nothing in the target is
overwritten: a run already done there is skipped.
"""

from __future__ import annotations

import json
from collections import defaultdict

import duckdb

from analysis.results import rows
from analysis.schema import create_all, embedding_table, embedding_writer_settings, ensure_embedding_table
from analysis.store import StoreError, connect

from .writer import insert_arrow, run_id_for


def merge_stores(target, sources, *, log=print) -> dict:
    con = connect(target, read_only=False)
    summary = {"runs_merged": 0, "runs_copied": 0, "runs_skipped": 0, "incomplete": []}
    try:
        create_all(con, str(target))
        embedding_writer_settings(con)
        groups = defaultdict(dict)  # full run id -> {shard index: (source path, run row)}
        for src in sources:
            s = connect(src, read_only=True)
            try:
                _copy_meta(con, s, src)
                for run in rows(s, "SELECT * FROM runs WHERE status = 'done'"):
                    ident = json.loads(run["config"])
                    shard = ident.get("shard")
                    base = {k: v for k, v in ident.items()
                            if k not in ("batch_size", "code_version", "device", "notes")}
                    base["shard"] = None
                    full_id = run_id_for(base)
                    if shard is None:
                        full_id = run["run_id"]
                        i, n = 0, 1
                    else:
                        i, n = (int(x) for x in shard.split("/"))
                    groups[full_id][i] = (str(src), run, n, base)
            finally:
                s.close()
        for full_id, parts in groups.items():
            n = next(iter(parts.values()))[2]
            if rows(con, "SELECT run_id FROM runs WHERE run_id = ? AND status = 'done'", [full_id]):
                summary["runs_skipped"] += 1
                continue
            if len(parts) != n:
                summary["incomplete"].append(f"{full_id}: {len(parts)}/{n} shards done")
                continue
            _write_full_run(con, full_id, [parts[i] for i in range(n)])
            summary["runs_merged" if n > 1 else "runs_copied"] += 1
        for msg in summary["incomplete"]:
            log(f"note: not merged yet, {msg}")
        return summary
    finally:
        con.close()


def _copy_meta(con, s, src):
    for ds in rows(s, "SELECT * FROM datasets"):
        have = rows(con, "SELECT manifest_sha FROM datasets WHERE dataset = ?", [ds["dataset"]])
        if have and have[0]["manifest_sha"] != ds["manifest_sha"]:
            raise StoreError(f"{src}: dataset {ds['dataset']!r} differs from the target's (other manifest); "
                             "nothing was merged from it")
        if not have:
            con.execute("INSERT INTO datasets SELECT * FROM (SELECT ? AS dataset, ? AS manifest, ? AS manifest_sha, "
                        "? AS n_items, ? AS created)", [ds["dataset"], ds["manifest"], ds["manifest_sha"],
                                                          ds["n_items"], ds["created"]])
            for it in rows(s, "SELECT * FROM items WHERE dataset = ?", [ds["dataset"]]):
                con.execute("INSERT INTO items VALUES (?, ?, ?, ?, ?, ?, ?)",
                            [it["dataset"], it["idx"], it["item_id"], it["video"], it["captions"], it["negatives"],
                             it["metadata"]])
    for m in rows(s, "SELECT * FROM models"):
        have = rows(con, "SELECT source, revision FROM models WHERE model = ?", [m["model"]])
        if have and (have[0]["source"], have[0]["revision"]) != (m["source"], m["revision"]):
            raise StoreError(f"{src}: model name {m['model']!r} is used in the target for another model")
        if not have:
            cols = list(m)
            con.execute(f"INSERT INTO models ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                        [m[c] for c in cols])


def _write_full_run(con, full_id, parts):
    first_run = parts[0][1]
    n_items = sum(p[1]["n_items"] for p in parts)
    config = dict(parts[0][3], merged_from=[f"{p[0]}:{p[1]['run_id']}" for p in parts])
    target = ensure_embedding_table(con, first_run["dim"])
    con.execute("BEGIN")
    try:
        row = dict(first_run, run_id=full_id, n_items=n_items, n_done=n_items, status="done",
                   config=json.dumps(config))
        cols = list(row)
        con.execute(f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                    [row[c] for c in cols])
        for src, run, _, _ in parts:
            s = duckdb.connect(src, read_only=True)
            try:
                table = s.sql(f"SELECT layer, idx, vec FROM {embedding_table(run['dim'])} WHERE run_id = $r",
                              params={"r": run["run_id"]}).to_arrow_table()
            finally:
                s.close()
            insert_arrow(con, target, table, "?, layer, idx, vec", [full_id])
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
