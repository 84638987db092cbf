"""Reading the DuckDB store: connections, listings and embeddings as numpy arrays.

Writers live in ``precompute.batch.writer`` (embeddings) and the analysis studies (result tables);
every table is defined in :mod:`analysis.storage.schema`.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import time
from pathlib import Path

import duckdb
import numpy as np

from analysis.storage.schema import SchemaError, check_version, embedding_table, fetch_one, stored_version


class StoreError(ValueError):
    """A store-level problem (missing file, locked, unknown model, run not done) with a clear message."""


class StoreBusy(StoreError):
    """The store's file lock is held by another process (a writer, or readers when we want to write)."""


#: bytes 8..12 of every DuckDB database file (after an 8-byte checksum)
DUCKDB_MAGIC = b"DUCK"

#: seconds a connect waits, retrying with backoff, for a lock another process holds briefly (a
#: dashboard reading a few result tables holds a read lock for milliseconds). Override with
#: $LAYERSCOPE_LOCK_WAIT_S.
LOCK_WAIT_S = 5.0


def lock_wait() -> float:
    """$LAYERSCOPE_LOCK_WAIT_S, else :data:`LOCK_WAIT_S`; a value that is not a number of seconds
    (0 or more) is a StoreError naming the variable."""
    raw = os.environ.get("LAYERSCOPE_LOCK_WAIT_S")
    if raw is None:
        return LOCK_WAIT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value >= 0 or value == float("inf"):
        raise StoreError(f"LAYERSCOPE_LOCK_WAIT_S={raw!r} is not a number of seconds; set it to 0 or more "
                         f"(default {LOCK_WAIT_S:g}) or unset it")
    return value


def check_store_path(path, *, must_exist: bool) -> Path:
    """Refuse a path that cannot be a store before DuckDB sees it; returns it as a Path.

    DuckDB opens an existing CSV/JSON/Parquet file as an in-memory database (writes vanish) and a
    directory or a damaged file with a multi-line error, so: a directory, or an existing non-empty
    file without DuckDB's header, is refused naming the file; a missing file is refused when
    ``must_exist`` (read-only opens). An empty file is refused too (DuckDB would call it invalid).
    """
    p = Path(path)
    if p.is_dir():
        raise StoreError(f"store {p} is a directory, not a DuckDB file; pass a file such as {p / 'store.duckdb'}")
    if not p.exists():
        if must_exist:
            raise StoreError(f"store {p} does not exist; create it with `layerscope precompute` or `layerscope demo`")
        return p
    try:
        with p.open("rb") as fh:
            head = fh.read(64)
    except OSError as exc:
        raise StoreError(f"store {p} cannot be read ({exc.strerror or exc}); check its permissions") from None
    if not head:  # DuckDB refuses an empty file too, calling it invalid
        raise StoreError(f"store {p} is an empty file, not a LayerScope store; delete it or pass another --store")
    if head[8:12] != DUCKDB_MAGIC:
        kind = ("a text file, " if _looks_like_text(head) else "") + "not a DuckDB database"
        raise StoreError(f"store {p} exists but is {kind} (no DuckDB header); nothing was read or written. "
                         "Pass a new or existing .duckdb file as --store")
    return p


def _looks_like_text(head: bytes) -> bool:
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return b"\0" not in head


def _lock_holder(message: str) -> str:
    """``"python3.11 -m precompute.cli analyze ... (PID 123)"`` from DuckDB's lock error, as far as known."""
    m = re.search(r"held in (.*?) \(PID (\d+)\)", message)
    if not m:
        return "another process"
    exe, pid = m.group(1), m.group(2)
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
        exe = (cmd if len(cmd) <= 400 else cmd[:200] + " ... " + cmd[-150:]) or exe
    except OSError:
        pass
    return f"{exe} (PID {pid})"


def store_error(path, exc: BaseException) -> StoreError:
    """Any failure opening, reading or writing a store as one line naming the file and what to do.

    Used by :func:`connect` and by the CLI for failures that surface later (a damaged block read
    mid-query, a full disk at commit).
    """
    if isinstance(exc, StoreError):
        return exc
    text = " ".join(str(exc).split())  # DuckDB messages may span lines
    low = text.lower()
    where = f"store {path}"
    if "lock" in low and ("conflicting" in low or "could not set lock" in low):
        return StoreBusy(f"{where} is in use by another process: {_lock_holder(text)}. DuckDB allows one writer "
                         "or several readers at a time; wait for it to finish or stop it, or write to another "
                         "store and `layerscope merge` it")
    if "no space left" in low or "disk full" in low or "disk is full" in low:
        return StoreError(f"{where}: the disk is full ({text}); free space and rerun (committed work is kept)")
    if any(w in low for w in ("permission denied", "read-only file system", "operation not permitted",
                              "cannot open file") ) and "valid duckdb" not in low:
        return StoreError(f"{where} cannot be opened for writing ({text}); make it and its folder writable "
                          "or pass another --store")
    if isinstance(exc, OSError):
        return StoreError(f"{where}: {exc.strerror or text}")
    if isinstance(exc, duckdb.Error):
        return StoreError(f"{where} is damaged or unreadable ({text}); restore it from a copy or rebuild it "
                          "with `layerscope precompute`")
    return StoreError(f"{where}: {text}")


def is_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` is the user stopping the command with Ctrl-C (SIGINT; SIGTERM raises
    :class:`analysis.signals.Terminated`): a ``KeyboardInterrupt``, or what DuckDB raises instead when
    the signal lands during a query (it cancels the query and raises ``RuntimeError("Query
    interrupted")``, or its ``InterruptException``; no KeyboardInterrupt follows)."""
    return (isinstance(exc, (KeyboardInterrupt, duckdb.InterruptException))
            or (isinstance(exc, RuntimeError) and str(exc).startswith("Query interrupted")))


@contextlib.contextmanager
def transaction(con):
    """``BEGIN`` … ``COMMIT`` around the block; on any exception, ``ROLLBACK`` and re-raise the
    original. A failed ``COMMIT`` (a full disk) has already rolled back, so the second ``ROLLBACK``
    fails too: that failure is dropped, or it would hide "No space left on device" behind "no
    transaction is active" and the store would be called damaged when it is intact."""
    con.execute("BEGIN")
    try:
        yield con
        con.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise


def connect(path, *, read_only: bool = True, check_schema: bool = True,
            wait: float | None = None) -> duckdb.DuckDBPyConnection:
    """Open a store: the one store-opening helper every command uses.

    The path is checked first (:func:`check_store_path`). A lock held by another process is waited
    for up to ``wait`` seconds (default :data:`LOCK_WAIT_S`), retrying with backoff, then refused
    as :class:`StoreBusy` naming the holder. Every other failure is a one-line :class:`StoreError`
    (:func:`store_error`). ``check_schema=False`` skips the version check (only ``layerscope
    migrate`` wants that).
    """
    p = check_store_path(path, must_exist=read_only)
    path = str(path)
    if wait is None:
        wait = lock_wait()
    if not read_only:
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"store {path}: cannot create its folder {p.parent} ({exc.strerror or exc}); "
                             "pass a --store in a folder you can write") from None
    deadline = time.monotonic() + max(0.0, wait)
    delay = 0.02
    while True:
        try:
            con = duckdb.connect(path, read_only=read_only)
            break
        except (duckdb.Error, OSError) as exc:
            err = store_error(path, exc)
            if isinstance(err, StoreBusy) and time.monotonic() + delay < deadline:
                # no lock queue in DuckDB: poll often (with jitter, so two waiters do not stay in step)
                time.sleep(delay * random.uniform(0.5, 1.0))
                delay = min(delay * 2, 0.1)
                continue
            raise err from None
    try:
        if check_schema:
            schema_version(con, path)  # a readable version first, then the comparison
            check_version(con, path)
    except SchemaError:
        con.close()
        raise
    except (duckdb.Error, OSError) as exc:
        con.close()
        raise store_error(path, exc) from None
    return con


def schema_version(con, path="store") -> int | None:
    """:func:`analysis.storage.schema.stored_version`, with a ``meta.schema_version`` that is not a number
    refused as a one-line :class:`SchemaError` naming the store (instead of int()'s message)."""
    try:
        return stored_version(con)
    except SchemaError:
        raise
    except ValueError:
        raise SchemaError(f"store {path} records a schema version that is not a number; it was not written by "
                          "LayerScope or is damaged. Nothing was changed.") from None


def store_stamp(path) -> tuple:
    """What changes when a store is written: (mtime_ns, size) of the file and of its write-ahead log.

    A reader caches by this stamp: DuckDB appends commits to ``<store>.wal`` before folding them
    into the file, so the file alone can look unchanged after a write.
    """
    out = []
    for f in (str(path), str(path) + ".wal"):
        try:
            st = os.stat(f)
            out += [st.st_mtime_ns, st.st_size]
        except OSError:
            out += [0, -1]
    return tuple(out)


def read_store(path, fn, *args, wait: float = 2.0, **kwargs):
    """``fn(con, *args, **kwargs)`` on a read-only connection opened for this call and closed after.

    For long-lived readers (the dashboard): holding a DuckDB connection keeps a file lock that
    refuses every writer process, so a reader opens, reads the small result tables, and lets go.
    Raises :class:`StoreBusy` when a writer holds the store for longer than ``wait`` seconds.
    """
    con = connect(path, read_only=True, wait=wait)
    try:
        return fn(con, *args, **kwargs)
    finally:
        con.close()


#: folder of the copies :func:`snapshot` reads a held store from (one per store, the newest kept)
SNAPSHOTS = "layerscope-snapshots"


def snapshot(path, *, tries: int = 3) -> Path:
    """A read-only copy of the store at ``path`` as it was last saved, for reading while another process
    holds it (DuckDB's lock lets one writer or many readers open the file, never both; an analysis
    holds it for its whole run).

    DuckDB changes the file itself only at a checkpoint: a writer appends its commits to
    ``<store>.wal`` first, so the file alone is a whole, consistent store (the state at the writer's
    last checkpoint; the log is left out). A copy is kept when the file's (mtime, size) is the same
    before and after copying (a checkpoint during the copy is tried again, ``tries`` times in all),
    and is reused while the file stays unchanged, so a large store is copied once per checkpoint, not
    once per read. Older copies of the same store are removed. Raises :class:`StoreBusy` when the
    file kept changing, :class:`StoreError` when it cannot be copied.
    """
    import hashlib
    import shutil
    import tempfile

    src = Path(path).resolve()
    folder = Path(tempfile.gettempdir()) / SNAPSHOTS
    stem = hashlib.sha256(str(src).encode()).hexdigest()[:16]
    for _ in range(max(1, tries)):
        try:
            before = os.stat(src)
            dst = folder / f"{stem}-{before.st_mtime_ns}-{before.st_size}.duckdb"
            if dst.exists():
                return dst
            folder.mkdir(exist_ok=True)
            tmp = dst.with_name(f"{dst.name}.{os.getpid()}.part")
            shutil.copyfile(src, tmp)
            after = os.stat(src)
        except OSError as exc:
            raise StoreError(f"store {path}: cannot copy it to read while it is written ({exc.strerror or exc})") from None
        if (after.st_mtime_ns, after.st_size) != (before.st_mtime_ns, before.st_size):
            tmp.unlink(missing_ok=True)  # a checkpoint changed the file while it was copied
            continue
        os.replace(tmp, dst)
        for old in folder.glob(f"{stem}-*.duckdb"):
            if old != dst:
                old.unlink(missing_ok=True)
        return dst
    raise StoreBusy(f"store {path} kept changing while it was copied to read; refresh in a moment")


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
        runs = [dict(zip(cols, r)) for r in cur.fetchall()]
        tags = run_tags(con)
        for r in runs:
            r["tags"] = tags.get(r["run_id"], [])
        return runs
    finally:
        if owned:
            con.close()


def run_tags(con) -> dict[str, list[str]]:
    """``{run_id: sorted tags}`` (``{}`` for a store made before run tags, which has no such table)."""
    if not con.execute("SELECT 1 FROM duckdb_tables() WHERE table_name = 'run_tags'").fetchall():
        return {}
    out: dict[str, list[str]] = {}
    for run_id, tag in con.execute("SELECT run_id, tag FROM run_tags ORDER BY run_id, tag").fetchall():
        out.setdefault(run_id, []).append(tag)
    return out


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

    A run's items are consecutive manifest positions (a shard's start past 0), except a negative run,
    which holds only the items that have a negative: its rows are read in position order. Streams Arrow batches of the FLOAT[dim] column (each a contiguous float buffer) and copies each
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
        first, last = con.sql(f"SELECT min(idx), max(idx) FROM {table} WHERE {where}", params=params).fetchall()[0]
        positions = None
        if first is not None and last - first + 1 != n_items:  # scattered items: each one's rank
            positions = np.array([r[0] for r in con.sql(
                f"SELECT DISTINCT idx FROM {table} WHERE {where} ORDER BY idx", params=params).fetchall()],
                dtype=np.int64)
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
            item = batch.column(1).to_numpy().astype(np.int64)
            rank = item - first if positions is None else np.searchsorted(positions, item)
            pos = (batch.column(0).to_numpy().astype(np.int64) - lay0) * n_items + rank
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
    return out, (np.arange(first, first + n_items) if positions is None else positions)


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
