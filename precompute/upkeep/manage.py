"""Removing runs, renaming models and tagging runs in a store: each one transaction, refused whole on
bad input.

Result tables are caches of what ``analyze`` computed from the runs: results that read a removed
run, and the study results of its dataset, are dropped with it (the next ``analyze`` recomputes
what is left); a renamed model's results are dropped the same way, since their payloads name it.
Embeddings of other runs, downstream results and datasets are never touched, except that removing
a whole model (``--model``) also removes the downstream results imported for it.

A dashboard reading the store holds it only for a moment per view: these commands wait for it as
every writer does (``LAYERSCOPE_LOCK_WAIT_S``) and the dashboard shows the new state on refresh.
"""

from __future__ import annotations

import json

from analysis.storage.schema import embedding_table
from analysis.storage.store import StoreError, check_store_path, connect, transaction

from ..batch.writer import identity_of, run_id_for

RESULT_TABLES = ("result_grids", "result_profiles", "result_studies")


def _drop_results(con, *, runs=(), datasets=(), models=()) -> int:
    """Delete result rows that read ``runs`` or belong to ``datasets`` / name ``models``; the count."""
    n = 0
    runs, datasets, models = list(runs), list(datasets), list(models)
    clauses = {
        "result_grids": ("run_a IN (SELECT unnest($r)) OR run_b IN (SELECT unnest($r)) OR "
                         "model_a IN (SELECT unnest($m)) OR model_b IN (SELECT unnest($m))"),
        "result_profiles": "run_id IN (SELECT unnest($r)) OR model IN (SELECT unnest($m))",
        "result_studies": "dataset IN (SELECT unnest($d))",
    }
    for table, where in clauses.items():
        params = {k: v for k, v in {"r": runs, "m": models, "d": datasets}.items() if f"${k}" in where}
        params = {k: v or [""] for k, v in params.items()}  # an empty list has no element type
        n += con.execute(f"SELECT count(*) FROM {table} WHERE {where}", params).fetchone()[0]
        con.execute(f"DELETE FROM {table} WHERE {where}", params)
    return n


def has_paper_names(con) -> bool:
    return bool(con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'paper_names'")
                .fetchone()[0])


def _open(store):
    check_store_path(store, must_exist=True)  # a typo in --store is not a new, empty store
    return connect(store, read_only=False)


def remove_runs(store, run_ids=(), *, model: str | None = None) -> dict:
    """Remove runs (their embeddings and run rows) by id, or every run of ``model`` and the model
    itself. Unknown ids or an unknown model: StoreError naming them, nothing removed.

    Returns ``{"runs": [removed run ids], "vectors", "results", "downstream", "model"}``.
    """
    if not run_ids and model is None:
        raise StoreError("name the runs to remove (run ids, see `layerscope runs`) or --model")
    run_ids = list(dict.fromkeys(run_ids))  # an id named twice is one run
    con = _open(store)
    try:
        if model is not None:
            if not con.execute("SELECT 1 FROM models WHERE model = ?", [model]).fetchall():
                known = sorted(r[0] for r in con.execute("SELECT model FROM models").fetchall())
                raise StoreError(f"store {store} has no model {model!r}; models: {', '.join(known) or 'none'}")
            run_ids = [r[0] for r in con.execute("SELECT run_id FROM runs WHERE model = ?", [model]).fetchall()]
        rows = con.execute("SELECT run_id, dim, dataset FROM runs WHERE run_id IN (SELECT unnest(?))",
                           [list(run_ids) or [""]]).fetchall()
        unknown = sorted(set(run_ids) - {r[0] for r in rows})
        if unknown:
            raise StoreError(f"store {store} has no run(s) {', '.join(unknown)}; `layerscope runs --store "
                             f"{store}` lists them (nothing was removed)")
        out = {"runs": sorted(run_ids), "vectors": 0, "results": 0, "downstream": 0, "model": model}
        tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        with transaction(con):
            for run_id, dim, _ in rows:
                table = embedding_table(dim) if dim else None
                if table in tables:
                    out["vectors"] += con.execute(f"SELECT count(*) FROM {table} WHERE run_id = ?",
                                                  [run_id]).fetchone()[0]
                    con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])
                con.execute("DELETE FROM runs WHERE run_id = ?", [run_id])
                if "run_tags" in tables:
                    con.execute("DELETE FROM run_tags WHERE run_id = ?", [run_id])
            out["results"] = _drop_results(con, runs=run_ids, datasets={r[2] for r in rows},
                                           models=[model] if model else [])
            if model is not None:
                out["downstream"] = con.execute("SELECT count(*) FROM downstream_results WHERE model = ?",
                                                [model]).fetchone()[0]
                con.execute("DELETE FROM downstream_results WHERE model = ?", [model])
                con.execute("DELETE FROM models WHERE model = ?", [model])
                if has_paper_names(con):
                    con.execute("DELETE FROM paper_names WHERE kind = 'model' AND name = ?", [model])
        return out
    finally:
        con.close()


def _check_tags(tags) -> list[str]:
    """The tags as given, refused whole when one is empty or holds a space or a comma (it would not
    survive ``runs --tag`` or the listing's comma-separated column)."""
    from analysis.storage.names import MAX_TAG

    long = [t for t in tags if len(t) > MAX_TAG]
    if long:
        raise StoreError(f"a tag of {len(long[0]):,} characters ({long[0][:20]!r}…) is too long: at most {MAX_TAG}")
    bad = [t for t in tags if not t or any(c.isspace() or c == "," or not c.isprintable() for c in t)]
    if bad or not tags:
        raise StoreError(f"tag(s) {bad!r} are not tags: a tag is a non-empty word without spaces or commas "
                         "(e.g. baseline, v2-data)" if bad else "name at least one tag")
    return sorted(set(tags))


def _known_runs(con, store, run_ids) -> None:
    have = {r[0] for r in con.execute("SELECT run_id FROM runs WHERE run_id IN (SELECT unnest(?))",
                                      [list(run_ids) or [""]]).fetchall()}
    unknown = sorted(set(run_ids) - have)
    if unknown:
        raise StoreError(f"store {store} has no run(s) {', '.join(unknown)}; `layerscope runs --store {store}` "
                         "lists them (nothing was changed)")


def tag_runs(store, run_ids, tags, *, remove: bool = False) -> dict:
    """Add ``tags`` to each of ``run_ids`` (``remove``: take them off), in one transaction; tags a
    run already has (or lacks) are left as they are. Unknown runs or bad tags: StoreError naming
    them, nothing changed. Returns ``{"runs": n, "changed": rows added or removed}``."""
    from analysis.storage.schema import create_all

    tags = _check_tags(list(tags))
    if not run_ids:
        raise StoreError("name the run(s) to tag (run ids, see `layerscope runs`)")
    con = _open(store)
    try:
        _known_runs(con, store, run_ids)
        pairs = [(r, t) for r in sorted(set(run_ids)) for t in tags]
        with transaction(con):
            create_all(con, str(store))  # a store made before run tags gains the table
            before = con.execute("SELECT count(*) FROM run_tags").fetchone()[0]
            for run_id, tag in pairs:
                if remove:
                    con.execute("DELETE FROM run_tags WHERE run_id = ? AND tag = ?", [run_id, tag])
                else:
                    con.execute("INSERT INTO run_tags VALUES (?, ?, now()) ON CONFLICT DO NOTHING", [run_id, tag])
            after = con.execute("SELECT count(*) FROM run_tags").fetchone()[0]
        return {"runs": len(set(run_ids)), "changed": abs(after - before)}
    finally:
        con.close()


def _rekey_runs(con, old: str, new: str) -> int:
    """Give each run of ``old`` whose config reproduces its id the id of its identity under ``new``."""
    n = 0
    tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    for run_id, dim, config in con.execute("SELECT run_id, dim, config FROM runs WHERE model = ?", [old]).fetchall():
        config = json.loads(config) if isinstance(config, str) else (config or {})
        ident = identity_of(config)
        if ident.get("model") != old or run_id_for(ident) != run_id:
            continue
        new_id = run_id_for({**ident, "model": new})
        con.execute("UPDATE runs SET run_id = ?, config = ? WHERE run_id = ?",
                    [new_id, json.dumps({**config, "model": new}), run_id])
        if dim and embedding_table(dim) in tables:
            con.execute(f"UPDATE {embedding_table(dim)} SET run_id = ? WHERE run_id = ?", [new_id, run_id])
        if "run_tags" in tables:  # the run keeps its tags under its new id
            con.execute("UPDATE run_tags SET run_id = ? WHERE run_id = ?", [new_id, run_id])
        n += 1
    return n


def rename_model(store, old: str, new: str) -> dict:
    """Rename model ``old`` to ``new`` everywhere it is named (the model, its runs, its downstream
    results); its analysis results are dropped for the next ``analyze``. ``new`` must be free.

    A run's id hashes its identity, which holds the model's name: each run whose stored config gives
    back its id gets the id of the same identity under ``new`` (embeddings follow), so a later
    ``precompute --name NEW`` finds it done. Runs from before identities were stored keep their id.

    Returns ``{"runs": n, "downstream": n, "results": n, "rekeyed": n}``.
    """
    from analysis.storage.names import name_problem

    new = new.strip()
    why = name_problem(new)
    if why:
        raise StoreError(f"{new[:60]!r} is not a model name: {why}")
    con = _open(store)
    try:
        known = {r[0] for r in con.execute("SELECT model FROM models").fetchall()}
        if old not in known:
            raise StoreError(f"store {store} has no model {old!r}; models: {', '.join(sorted(known)) or 'none'}")
        if new in known:
            raise StoreError(f"store {store} already has a model {new!r}; remove it first or choose another name")
        datasets = [r[0] for r in con.execute("SELECT DISTINCT dataset FROM runs WHERE model = ?", [old]).fetchall()]
        with transaction(con):
            results = _drop_results(con, datasets=datasets, models=[old])
            n_runs = con.execute("SELECT count(*) FROM runs WHERE model = ?", [old]).fetchone()[0]
            n_down = con.execute("SELECT count(*) FROM downstream_results WHERE model = ?", [old]).fetchone()[0]
            rekeyed = _rekey_runs(con, old, new)
            # runs and results first: a model row is renamed by a new row, then the old one goes
            con.execute("UPDATE runs SET model = ? WHERE model = ?", [new, old])
            con.execute("UPDATE downstream_results SET model = ? WHERE model = ?", [new, old])
            if has_paper_names(con):  # the papers' name follows the model (a store from before the table has none)
                con.execute("UPDATE paper_names SET name = ? WHERE kind = 'model' AND name = ?", [new, old])
            con.execute("CREATE TEMP TABLE _renamed AS SELECT * FROM models WHERE model = ?", [old])
            con.execute("UPDATE _renamed SET model = ?", [new])
            con.execute("DELETE FROM models WHERE model = ?", [old])
            con.execute("INSERT INTO models SELECT * FROM _renamed")
            con.execute("DROP TABLE _renamed")
        return {"runs": n_runs, "downstream": n_down, "results": results, "rekeyed": rekeyed}
    finally:
        con.close()
