"""Merge stores written by sharded precompute jobs (``--shard I/N``) into one store.

Each shard store holds runs whose identity carries ``shard: "I/N"``. Merging copies datasets,
items and models (refusing conflicts), then, for every group of shard runs that differ only in
their shard, and once all N shards are done, writes one full run (the id an unsharded run would
have) with every row in place and the shards' notes (short videos, fewer captions, ...) joined.
Unsharded runs are copied as they are. Nothing in the target is overwritten: a run already done
there is skipped.

Crash safety: every step is one transaction (a source's datasets, items and models; each full
run), so a process killed at any point leaves each step wholly in or wholly out, and a rerun
finishes the job. A dataset whose items are short in the target (a store merged by an older
LayerScope that was killed mid-copy) is repaired from the source.
"""

from __future__ import annotations

import json
import shlex
from collections import defaultdict

from pathlib import Path

from analysis.storage.results import rows
from analysis.storage.schema import create_all, embedding_table, embedding_writer_settings, ensure_embedding_table
from analysis.storage.store import StoreError, connect, run_tags, transaction

from .manage import has_paper_names
from ..batch.writer import identity_of, insert_arrow, run_id_for


def merge_stores(target, sources, *, log=print) -> dict:
    """Merge ``sources`` into ``target``; returns ``{"runs_merged", "runs_copied", "runs_skipped", "incomplete"}``.

    Raises:
        StoreError: a source is the target, is missing or damaged, holds a model whose name cannot be
            one (``"alpha [text]"`` reads as a side; refused before the target is touched), or conflicts
            with the target (dataset with other items, model name used for another model). Steps committed before
            the conflict stay (each is whole); nothing is half-written.
    """
    sources = [str(s) for s in sources]
    _refuse_self_merge(target, sources)
    for src in sources:  # every source opens (exists, is a store, right version) before the target is touched
        s = connect(src, read_only=True)
        try:
            _refuse_bad_model_names(s, src)
        finally:
            s.close()
    con = connect(target, read_only=False)
    summary = {"runs_merged": 0, "runs_copied": 0, "runs_skipped": 0, "incomplete": []}
    try:
        create_all(con, str(target))
        embedding_writer_settings(con)
        groups = defaultdict(dict)  # full run id -> {shard index: (source path, run row)}
        for src in sources:
            s = connect(src, read_only=True)
            try:
                _copy_meta(con, s, src, log)
                for run in rows(s, "SELECT * FROM runs WHERE status = 'done'"):
                    ident = json.loads(run["config"])
                    shard = ident.get("shard")
                    base = identity_of(ident)
                    base["shard"] = None
                    full_id = run_id_for(base)
                    if shard is None:
                        full_id = run["run_id"]
                        i, n = 0, 1
                    else:
                        i, n = (int(x) for x in shard.split("/"))
                    groups[full_id][i] = (src, run, n, base)
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


def _refuse_self_merge(target, sources):
    t = Path(target).resolve()
    for src in sources:
        p = Path(src)
        if p.resolve() == t or (p.exists() and t.exists() and p.samefile(t)):
            raise StoreError(f"source {src} is the target store {target}: a store cannot be merged into itself; "
                             "pass another --store")


def _refuse_bad_model_names(s, src):
    """A source's model whose name cannot be a model name (:func:`analysis.storage.names.name_problem`):
    refused before the target is touched, naming it and the rename that lets it merge. A store written
    before names were checked may hold one; merged, ``"alpha [text]"`` would be read as a side of a model
    ``alpha``."""
    from analysis.storage.names import name_problem

    for (name,) in s.execute("SELECT model FROM models ORDER BY model").fetchall():
        why = name_problem(name)
        if why:
            old = shlex.quote(name) if name.isprintable() else "OLD"
            raise StoreError(f"{src}: model {name!r} cannot be merged: {why}. Rename it there first "
                             f"(`layerscope runs rename --store {shlex.quote(str(src))} {old} NEW`), then merge "
                             "again; nothing was merged")


def _copy_meta(con, s, src, log):
    """Datasets with their items, and models, of one source: one transaction."""
    with transaction(con):
        for ds in rows(s, "SELECT * FROM datasets"):
            name = ds["dataset"]
            have = rows(con, "SELECT manifest_sha FROM datasets WHERE dataset = ?", [name])
            if have and have[0]["manifest_sha"] != ds["manifest_sha"]:
                raise StoreError(f"{src}: dataset {name!r} differs from the target's (other manifest); "
                                 "nothing was merged from it")
            n_src = rows(s, "SELECT count(*) AS n FROM items WHERE dataset = ?", [name])[0]["n"]
            n_have = rows(con, "SELECT count(*) AS n FROM items WHERE dataset = ?", [name])[0]["n"]
            if have and n_have == n_src:
                continue
            if have:  # left short by a merge killed mid-copy (before merges were transactional)
                log(f"note: dataset {name!r} had {n_have} of {n_src} items in the target; copying them again")
                con.execute("DELETE FROM items WHERE dataset = ?", [name])
            else:
                con.execute("INSERT INTO datasets (dataset, manifest, manifest_sha, n_items, created) "
                            "VALUES (?, ?, ?, ?, ?)",
                            [name, ds["manifest"], ds["manifest_sha"], ds["n_items"], ds["created"]])
            items = s.sql("SELECT dataset, idx, item_id, video, captions, negatives, metadata::VARCHAR AS metadata "
                          "FROM items WHERE dataset = $d", params={"d": name}).to_arrow_table()
            insert_arrow(con, "items", items, "dataset, idx, item_id, video, captions, negatives, metadata::JSON")
        for m in rows(s, "SELECT * FROM models"):
            have = rows(con, "SELECT source, revision FROM models WHERE model = ?", [m["model"]])
            if have and (have[0]["source"], have[0]["revision"]) != (m["source"], m["revision"]):
                raise StoreError(f"{src}: model name {m['model']!r} is used in the target for another model")
            if not have:
                cols = list(m)
                con.execute(f"INSERT INTO models ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                            [m[c] for c in cols])
        _copy_paper_names(con, s, src)


def _copy_paper_names(con, s, src):
    """The source's mapping of its model and dataset names to the papers' (``layerscope papers map``),
    inside :func:`_copy_meta`'s transaction, with the time each was set. A name mapped alike in both
    stores is kept; mapped to another paper name in the target, it is a conflict (which one the user
    meant cannot be told), raised naming the model or dataset."""
    if not has_paper_names(s):  # a store written before the table existed maps nothing
        return
    for m in rows(s, 'SELECT kind, name, paper_name, "set" FROM paper_names ORDER BY kind, name'):
        have = rows(con, "SELECT paper_name FROM paper_names WHERE kind = ? AND name = ?", [m["kind"], m["name"]])
        if have and have[0]["paper_name"] != m["paper_name"]:
            raise StoreError(f"{src}: {m['kind']} {m['name']!r} is mapped to the paper's {m['paper_name']!r} there "
                             f"but to {have[0]['paper_name']!r} in the target; nothing was merged from {src}. "
                             "Map it alike in both (`layerscope papers map`), then merge again")
        if not have:
            con.execute("INSERT INTO paper_names VALUES (?, ?, ?, ?)",
                        [m["kind"], m["name"], m["paper_name"], m["set"]])


def merged_notes(configs) -> dict:
    """The shards' notes joined: ``{kind: {item_id: note}}`` from every shard's run config."""
    out: dict = {}
    for cfg in configs:
        for kind, entries in (cfg.get("notes") or {}).items():
            if isinstance(entries, dict):
                out.setdefault(kind, {}).update(entries)
            else:
                out[kind] = entries
    return out


def _write_full_run(con, full_id, parts):
    """One full run from its shards (or one unsharded run), in one transaction; a non-done run of the
    same id in the target (an interrupted precompute) is replaced, as it would compute the same rows."""
    first_run = parts[0][1]
    n_items = sum(p[1]["n_items"] for p in parts)
    # the first shard's extras (layer widths, block path, batch size, ...) kept beside the identity
    first_cfg = json.loads(first_run["config"])
    extras = {k: first_cfg[k] for k in first_cfg.get("not_identity", ()) if k in first_cfg}
    config = dict({**extras, **parts[0][3]}, merged_from=[f"{p[0]}:{p[1]['run_id']}" for p in parts])
    if extras:
        config["not_identity"] = sorted([*extras, "merged_from"])
    notes = merged_notes(json.loads(p[1]["config"]) for p in parts)
    if notes:
        config["notes"] = notes
    target = ensure_embedding_table(con, first_run["dim"])
    with transaction(con):
        con.execute("DELETE FROM runs WHERE run_id = ?", [full_id])  # only a non-done one can be here
        con.execute(f"DELETE FROM {target} WHERE run_id = ?", [full_id])
        row = dict(first_run, run_id=full_id, n_items=n_items, n_done=n_items, status="done",
                   config=json.dumps(config))
        cols = list(row)
        con.execute(f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                    [row[c] for c in cols])
        for src, run, _, _ in parts:
            s = connect(src, read_only=True)
            try:
                table = s.sql(f"SELECT layer, idx, vec FROM {embedding_table(run['dim'])} WHERE run_id = $r",
                              params={"r": run["run_id"]}).to_arrow_table()
                tags = run_tags(s).get(run["run_id"], [])
            finally:
                s.close()
            insert_arrow(con, target, table, "?, layer, idx, vec", [full_id])
            for tag in tags:  # a merged run carries the tags of each of its shards
                con.execute("INSERT INTO run_tags VALUES (?, ?, now()) ON CONFLICT DO NOTHING", [full_id, tag])
