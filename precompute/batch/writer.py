"""Writing datasets, models, runs and embeddings into the store, one transaction per batch."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os

import numpy as np
import pyarrow as pa

from analysis.storage.schema import create_all, embedding_writer_settings, ensure_embedding_table, fetch_one
from analysis.storage.store import StoreError, connect, transaction

from .. import __version__
from ..inputs.manifest import Manifest
from ..adapters.model_info import ModelInfo


#: key of each item's video fingerprint in the items table's metadata JSON
CONTENT_KEY = "_video_content"


def _stored_metadata(item) -> dict:
    """An item's metadata JSON as stored: the manifest's extra fields plus its video fingerprint."""
    return {**item.metadata, CONTENT_KEY: item.content} if item.content else dict(item.metadata)


def now():
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


def run_id_for(config: dict) -> str:
    """Hash of everything that changes a run's numbers (sorted JSON of its identity fields)."""
    return "r" + hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:15]


#: config keys that were never part of a run's identity, for stores written before ``not_identity``
EXTRA_KEYS = ("batch_size", "code_version", "device", "notes", "not_identity")


def identity_of(config: dict) -> dict:
    """A run's identity (what :func:`run_id_for` hashes) from its stored config: the config without
    the extras it lists under ``not_identity`` (older stores: the fixed :data:`EXTRA_KEYS`)."""
    extras = set(config.get("not_identity", ())) | set(EXTRA_KEYS)
    return {k: v for k, v in config.items() if k not in extras}


def insert_arrow(con, target: str, table: pa.Table, select: str, params=None) -> None:
    """``INSERT INTO target SELECT <select> FROM`` an Arrow table (``params`` fill ``?`` in ``select``)."""
    con.register("_arrow_rows", table)
    try:
        con.execute(f"INSERT INTO {target} SELECT {select} FROM _arrow_rows", params or [])
    finally:
        con.unregister("_arrow_rows")


def embedding_rows(run_id: str, layers, idx, vectors: np.ndarray) -> pa.Table:
    """The embeddings-table rows of one run: ``layers``/``idx`` ``(n,)``, ``vectors`` ``(n, dim)``."""
    block = np.ascontiguousarray(vectors, dtype="<f4")
    # the FixedSizeList wraps the numpy buffer without a copy
    return pa.table({
        "run_id": pa.array([run_id] * len(block)),
        "layer": pa.array(np.asarray(layers, dtype=np.int16)),
        "idx": pa.array(np.asarray(idx, dtype=np.int32)),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(block.reshape(-1)), block.shape[1]),
    })


class StoreWriter:
    """The single read-write connection of a precompute process."""

    def __init__(self, path):
        self.path = str(path)
        self.con = connect(self.path, read_only=False)
        create_all(self.con, self.path)
        embedding_writer_settings(self.con)
        self._tables: dict[int, str] = {}  # embeddings tables known to exist, by width

    def _table(self, dim: int) -> str:
        if dim not in self._tables:
            self._tables[dim] = ensure_embedding_table(self.con, dim)
        return self._tables[dim]

    def close(self):
        self.con.close()

    # ---- datasets and items --------------------------------------------------------
    def put_dataset(self, name: str, manifest: Manifest) -> None:
        """Store the dataset and its items, or check that the stored one is the same.

        Same means the same ids, video names, captions and negatives (``manifest_sha``) and, item by
        item, the same video content (:func:`~precompute.inputs.manifest.video_fingerprint`, kept in each
        item's metadata JSON under ``_video_content``; items stored before it was recorded are not
        checked). A difference is a :class:`StoreError` naming the items; nothing is written.
        """
        row = fetch_one(self.con, "SELECT manifest_sha, manifest FROM datasets WHERE dataset = ?", [name])
        if row is not None:
            if row[0] != manifest.sha:
                raise StoreError(
                    f"dataset {name!r} is already in {self.path} from {row[1]} with different items or captions; "
                    "its stored runs would no longer match. Use another --dataset name (nothing was changed)."
                )
            self._check_contents(name, manifest, row[1])
            return
        with transaction(self.con):
            self.con.execute("INSERT INTO datasets VALUES (?, ?, ?, ?, ?)",
                             [name, manifest.path, manifest.sha, len(manifest.items), now()])
            table = pa.table({
                "dataset": [name] * len(manifest.items),
                "idx": pa.array([it.idx for it in manifest.items], pa.int32()),
                "item_id": [it.item_id for it in manifest.items],
                "video": [it.video for it in manifest.items],
                "captions": pa.array([it.captions for it in manifest.items], pa.list_(pa.string())),
                "negatives": pa.array([it.negatives for it in manifest.items], pa.list_(pa.string())),
                "metadata": [json.dumps(_stored_metadata(it)) for it in manifest.items],
            })
            insert_arrow(self.con, "items", table, "dataset, idx, item_id, video, captions, negatives, metadata::JSON")

    def _check_contents(self, name: str, manifest: Manifest, stored_from: str) -> None:
        stored = dict(self.con.execute(
            "SELECT item_id, json_extract_string(metadata, '$.\"" + CONTENT_KEY + "\"') FROM items WHERE dataset = ?",
            [name]).fetchall())
        changed = [it.item_id for it in manifest.items
                   if stored.get(it.item_id) is not None and it.content is not None
                   and stored[it.item_id] != it.content]
        if changed:
            listed = ", ".join(repr(i) for i in changed[:10]) + (" ..." if len(changed) > 10 else "")
            raise StoreError(
                f"dataset {name!r} is already in {self.path} (from {stored_from}) with other video content for "
                f"{len(changed)} item(s): {listed}; the same file names now hold different videos, so its stored "
                "runs would not match. Use another --dataset name (nothing was changed)."
            )

    # ---- models ------------------------------------------------------------------
    def moved_from(self, name: str, info: ModelInfo) -> str | None:
        """The source model ``name`` was stored from, when ``info`` is the same weights from another
        folder: both sources local paths and the revisions equal (a local revision is a hash of the
        folder's config and weight files, :func:`precompute.adapters.hf.local_revision`, so it does not
        depend on where the folder is). None otherwise. The runs keep the stored source in their
        identity, so the moved folder resumes them rather than starting a second copy."""
        row = fetch_one(self.con, "SELECT source, revision FROM models WHERE model = ?", [name])
        if row is None or row[0] == info.source or row[1] != info.revision or not info.revision:
            return None
        if not (os.path.isabs(str(row[0])) and os.path.isabs(str(info.source))):
            return None  # hub ids: another id is another model, whatever its commit
        return str(row[0])

    def stored_without_commit(self, name: str, info: ModelInfo) -> bool:
        """True when model ``name`` is stored from the same hub source with revision ``unknown`` (what
        transformers 5, which stopped setting ``config._commit_hash``, left before
        :func:`precompute.adapters.hf.hub_commit`), while ``info`` now knows the commit."""
        row = fetch_one(self.con, "SELECT source, revision FROM models WHERE model = ?", [name])
        return row is not None and row[0] == info.source and row[1] == "unknown" and info.revision != "unknown"

    def put_model(self, name: str, info: ModelInfo) -> None:
        row = fetch_one(self.con, "SELECT source, revision FROM models WHERE model = ?", [name])
        if row is not None:
            if (row[0], row[1]) != (info.source, info.revision):
                raise StoreError(
                    f"model name {name!r} is already used in {self.path} for {row[0]} (revision {row[1]}); "
                    f"pass --name to store {info.source} (revision {info.revision}) under another name"
                )
            return
        self.con.execute(
            "INSERT INTO models VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [name, info.source, info.revision, info.model_type, info.modality, info.n_layers, info.dim,
             info.params, info.native_frames, info.pooling, info.random_init, json.dumps(info.config)],
        )

    # ---- runs --------------------------------------------------------------------
    def get_run(self, run_id: str) -> dict | None:
        cur = self.con.execute("SELECT * FROM runs WHERE run_id = ?", [run_id])
        rows = cur.fetchall()
        return dict(zip([d[0] for d in cur.description], rows[0])) if rows else None

    def start_run(self, run_id: str, *, model, dataset, modality, n_frames, n_captions, variant, image_mode,
                  pooling, dtype, device, n_items, n_layers, dim, config: dict) -> dict:
        """Create the run (status running) or return the existing one; stray rows past n_done are removed.

        A run of 0 items (a shard past the last item) is created done: there is nothing to wait for.
        """
        existing = self.get_run(run_id)
        if existing is None:
            if n_items == 0:
                self._table(dim)  # its (empty) embeddings table exists, as merge reads every run's
            started = now()
            self.con.execute(
                "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?)",
                [run_id, model, dataset, modality, n_frames, n_captions, variant, image_mode, pooling, dtype,
                 device, "done" if n_items == 0 else "running", n_items, n_layers, dim, json.dumps(config),
                 __version__, started, started if n_items == 0 else None],
            )
            return self.get_run(run_id)
        if existing["status"] != "done" and existing["n_items"] == 0:
            # an empty shard left "running 0/0" by an older LayerScope: there is nothing to wait for
            self._table(existing["dim"])
            self.con.execute("UPDATE runs SET status = 'done', finished = ? WHERE run_id = ?", [now(), run_id])
            return self.get_run(run_id)
        if existing["status"] != "done":
            # batches commit atomically, so nothing past n_done should exist; be defensive anyway.
            # The run's first n_done items by position are kept: a run's items need not be
            # consecutive (a negative run holds only the items that have a negative)
            table = self._table(existing["dim"])
            self.con.execute(
                f"DELETE FROM {table} WHERE run_id = $r AND idx NOT IN "
                f"(SELECT DISTINCT idx FROM {table} WHERE run_id = $r ORDER BY idx LIMIT $done)",
                {"r": run_id, "done": existing["n_done"]})
        return existing

    def write_batch(self, run_id: str, first_idx: int, vectors: np.ndarray, *, n_done: int, n_items: int,
                    notes: dict | None = None, idx=None) -> None:
        """Append ``vectors`` ``(L, B, d)`` of items ``first_idx .. first_idx+B-1`` in one transaction
        (or of the manifest positions ``idx`` ``(B,)``, increasing, for a run of scattered items).

        ``n_done``: the run's items written once this batch is in (``n_items`` of them make it done);
        it differs from ``first_idx + B`` for a shard, whose first item is past 0.
        """
        L, B, d = vectors.shape
        if not 0 < n_done <= n_items:
            raise ValueError(f"run {run_id}: n_done={n_done} outside 1..{n_items}")
        idx = np.arange(first_idx, first_idx + B) if idx is None else np.asarray(idx)
        if idx.shape != (B,):
            raise ValueError(f"run {run_id}: {len(idx)} item positions for a batch of {B} vectors")
        table = embedding_rows(run_id, np.repeat(np.arange(L), B), np.tile(idx, L), vectors.reshape(L * B, d))
        target = self._table(d)
        with transaction(self.con):
            insert_arrow(self.con, target, table, "run_id, layer, idx, vec")
            if notes:
                self.con.execute("UPDATE runs SET config = json_merge_patch(config, ?) WHERE run_id = ?",
                                 [json.dumps({"notes": notes}), run_id])
            if n_done >= n_items:
                self.con.execute("UPDATE runs SET n_done = ?, status = 'done', finished = ? WHERE run_id = ?",
                                 [n_done, now(), run_id])
            else:
                self.con.execute("UPDATE runs SET n_done = ? WHERE run_id = ?", [n_done, run_id])
