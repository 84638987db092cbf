"""``layerscope import-embeddings``: vectors the user already has, stored as runs.

Researchers with embeddings from their own pipeline (``sentence-transformers`` ``encode()``, a feature
cache) bring them per layer; everything downstream (analyze, dashboard, report, merge, ``runs``) then
treats them as the runs of a model named ``--name``.

Accepted files (a layer's name is its file stem or its array's key):

- ``.npy`` files, one ``(N, d)`` array per layer, or one file with an ``(L, N, d)`` array;
- one ``.npz`` or ``.safetensors`` file with one ``(N, d)`` array per layer, or a single ``(L, N, d)`` array;
- ``.parquet``: an id column (``--ids-column``, default ``id``) and one column per layer, each row a vector.

Layers named ``default`` or ``joint`` are the model's named layers (stored after the numbered ones, as
precompute stores them); the others are numbered in natural order of their names (``layer_2`` before
``layer_10``; one stacked array: its first axis). Rows are matched to the manifest's item ids by an
ids list (``--ids``: a text file with one id per line, a ``.npy``/``.json`` list, or an ``ids`` array in the
``.npz``; Parquet's id column), or taken in the manifest's order with ``--manifest-order`` when the
count matches. Vectors must be float32 or float64 (stored as float32), finite, and every layer
``(N, d)`` with the same ``N`` and ``d``. Any problem is one ``ValueError`` line naming the file and
array; it is raised before the store is opened, so nothing is stored.

Each import is one run; its identity holds a SHA-256 of the vectors in manifest order (``content_sha``),
so importing the same vectors again finds the run done, and other vectors for the same model, dataset
and budget are refused rather than stored beside it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: layer names stored after the numbered layers, as precompute's named layers
NAMED_LAYERS = ("default", "joint")
#: float types accepted as they are (float32 stored as is, float64 rounded to float32)
FLOATS = (np.float32, np.float64)
SUFFIXES = (".npy", ".npz", ".safetensors", ".parquet")


@dataclass(frozen=True)
class ImportedLayers:
    """What the files held, checked and in manifest order."""
    vectors: np.ndarray  #: ``(L, N, d)`` float32: numbered layers first, then the named ones
    layer_names: dict  #: index (as a string) -> name, for the named layers only
    content_sha: str  #: SHA-256 of ``vectors``' bytes and ``layer_names`` (what the run's identity holds)
    sources: list  #: ``"file:array"`` of each stored layer, in order


class _Refused(ValueError):
    """A file read but refused here (its message names the file): not wrapped as unreadable."""


def _natural(name: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _read_arrays(path: Path, ids_column: str) -> tuple[list[tuple[str, np.ndarray]], list | None]:
    """``([(array name, array)], ids or None)`` of one file, arrays as stored."""
    suffix = path.suffix.lower()
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    try:
        if suffix == ".npy":
            return [(path.stem, np.load(path, allow_pickle=False))], None
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as z:
                arrays = [(k, z[k]) for k in z.files]
            ids = [v for k, v in arrays if k == "ids"]
            return [(k, v) for k, v in arrays if k != "ids"], (ids[0].tolist() if ids else None)
        if suffix == ".safetensors":
            from safetensors.numpy import load_file

            return list(load_file(str(path)).items()), None
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(path)
            if ids_column not in table.column_names:
                raise _Refused(f"{path}: no id column {ids_column!r} (columns: {', '.join(table.column_names)}); "
                                 "name it with --ids-column")
            arrays = []
            for name in table.column_names:
                if name == ids_column:
                    continue
                column = table.column(name).to_pylist()
                try:
                    arrays.append((name, np.asarray(column)))
                except ValueError:
                    raise _Refused(f"{path}: column {name!r} holds vectors of different lengths") from None
            return arrays, [str(v) for v in table.column(ids_column).to_pylist()]
    except _Refused:
        raise
    except Exception as exc:  # a damaged or foreign file (numpy says so with a ValueError too)
        raise ValueError(f"{path}: cannot read it as {suffix}: {type(exc).__name__}: {' '.join(str(exc).split())}") from None
    raise ValueError(f"{path}: unknown file type {suffix or '(none)'}; give {', '.join(SUFFIXES)} files")


def _layers_of(files: list[Path], ids_column: str) -> tuple[list[tuple[str, str, np.ndarray]], list | None, str]:
    """``([(source "file:array", layer name, (N, d) array)], ids or None, where the ids came from)``."""
    layers, ids, ids_from = [], None, ""
    for path in files:
        arrays, found = _read_arrays(path, ids_column)
        if found is not None:
            ids, ids_from = found, f"{path}" + (f" column {ids_column!r}" if path.suffix == ".parquet" else " array 'ids'")
        if not arrays:
            raise ValueError(f"{path}: holds no arrays")
        for key, a in arrays:
            where = f"{path} array {key!r}"
            if a.dtype.type not in FLOATS:
                fix = ("float16 loses precision; embed in float32" if a.dtype == np.float16
                       else "give float32 or float64 vectors")
                raise ValueError(f"{where}: dtype {a.dtype}, not float32 or float64 ({fix})")
            if a.ndim == 3 and len(arrays) == 1 and len(files) == 1:
                layers += [(f"{where}[{i}]", str(i), a[i]) for i in range(a.shape[0])]
            elif a.ndim == 2:
                layers.append((where, key, a))
            else:
                raise ValueError(f"{where}: shape {a.shape}; each layer is (N, d) (or one file with one (L, N, d) array)")
    return layers, ids, ids_from


def read_layers(files, *, item_ids: list[str], ids=None, ids_column: str = "id",
                manifest_order: bool = False) -> ImportedLayers:
    """Read, check and order the layers in ``files`` for a manifest whose items are ``item_ids``.

    ``ids``: the rows' item ids (overrides ids found in the files); ``manifest_order``: rows are the
    manifest's items in order (their count must match). Raises ``ValueError`` naming the file and
    array at fault.
    """
    files = [Path(f) for f in files]
    if not files:
        raise ValueError("no embedding files given")
    layers, found_ids, ids_from = _layers_of(files, ids_column)
    names = [name for _, name, _ in layers]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"layer name(s) {', '.join(dupes)} given twice ({', '.join(s for s, n, _ in layers if n in dupes)})")
    first_src, _, first = layers[0]
    for src, _, a in layers[1:]:
        if a.shape != first.shape:
            raise ValueError(f"{src}: shape {a.shape}, but {first_src} is {first.shape}; every layer needs the same "
                             "(N, d)")
    for src, _, a in layers:
        bad = ~np.isfinite(a)
        if bad.any():
            row = int(np.argwhere(bad)[0][0])
            raise ValueError(f"{src}: {int(bad.sum())} value(s) are NaN or infinite (first in row {row})")
    n = first.shape[0]
    if ids is not None:
        found_ids, ids_from = [str(i) for i in ids], "--ids"
    if found_ids is None and not manifest_order:
        raise ValueError(f"{first_src}: no item ids for its {n} rows; give --ids FILE (one id per line), an 'ids' array "
                         "in the .npz, or --manifest-order when the rows are the manifest's items in order")
    if manifest_order and found_ids is None:
        if n != len(item_ids):
            raise ValueError(f"{first_src}: {n} rows, but the manifest has {len(item_ids)} items; --manifest-order "
                             "needs one row per item")
        order = np.arange(n)
    else:
        order = _order(found_ids, item_ids, n, ids_from, first_src)
    numbered = [x for x in layers if x[1] not in NAMED_LAYERS]
    if all(re.search(r"\d", name) for _, name, _ in numbered):
        numbered.sort(key=lambda x: _natural(x[1]))
    named = sorted((x for x in layers if x[1] in NAMED_LAYERS), key=lambda x: NAMED_LAYERS.index(x[1]))
    stacked = np.stack([a[order] for _, _, a in numbered + named]).astype(np.float32)
    layer_names = {str(len(numbered) + j): name for j, (_, name, _) in enumerate(named)}
    digest = hashlib.sha256(np.ascontiguousarray(stacked, dtype="<f4").tobytes())
    digest.update(json.dumps(layer_names, sort_keys=True).encode())
    return ImportedLayers(stacked, layer_names, digest.hexdigest(), [s for s, _, _ in numbered + named])


def _order(ids: list, item_ids: list[str], n: int, ids_from: str, src: str) -> np.ndarray:
    """Row of each manifest item (manifest order), from the rows' ``ids``; every item exactly once."""
    ids = [str(i) for i in ids]
    if len(ids) != n:
        raise ValueError(f"{ids_from}: {len(ids)} ids for the {n} rows of {src}")
    seen: dict[str, int] = {}
    dupes = []
    for row, i in enumerate(ids):
        if i in seen:
            dupes.append(i)
        seen[i] = row
    if dupes:
        raise ValueError(f"{ids_from}: id(s) given twice: {_some(dupes)}")
    unknown = [i for i in ids if i not in set(item_ids)]
    if unknown:
        raise ValueError(f"{ids_from}: {len(unknown)} id(s) not in the manifest: {_some(unknown)}")
    missing = [i for i in item_ids if i not in seen]
    if missing:
        raise ValueError(f"{ids_from}: {len(missing)} manifest item(s) have no row: {_some(missing)}; "
                         "every item needs a vector")
    return np.array([seen[i] for i in item_ids])


def _some(values: list, k: int = 5) -> str:
    return ", ".join(repr(v) for v in values[:k]) + (f" and {len(values) - k} more" if len(values) > k else "")


def read_ids(path) -> list[str]:
    """Item ids from ``--ids``: one per line (``.txt``, anything else), or a ``.json`` / ``.npy`` list."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--ids {path}: no such file")
    if path.suffix == ".json":
        return [str(v) for v in json.loads(path.read_text())]
    if path.suffix == ".npy":
        return [str(v) for v in np.load(path, allow_pickle=False).tolist()]
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


def import_embeddings(store, *, manifest, dataset: str, name: str, files, modality: str, budget: int = 1,
                      variant: str = "original", ids=None, ids_column: str = "id", manifest_order: bool = False,
                      log=print) -> dict:
    """Store the layers in ``files`` as one done run of model ``name`` on ``dataset``.

    ``manifest``: a :class:`~precompute.inputs.manifest.Manifest` (its items' ids match the rows);
    ``modality``: ``text`` (``budget`` is ``n_c``, captions per item), ``video`` or ``image``
    (``budget`` is ``n_f``, frames per item). Returns ``{"run_id", "layers", "items", "stored"}``
    (``stored`` False when the same vectors were imported before).
    """
    from analysis.storage.names import check_name

    from .adapters.model_info import ModelInfo
    from .batch.runner import run_config
    from .batch.writer import StoreWriter, run_id_for

    # first, before the store is opened: a model stored as "alpha [text]" would be read as a side of "alpha"
    check_name(name, flag="--name")
    check_name(dataset, kind="dataset", flag="--dataset")
    if modality not in ("text", "video", "image"):
        raise ValueError(f"--modality {modality!r}: imported runs are text, video or image")
    if budget < 1:
        raise ValueError(f"--{'captions' if modality == 'text' else 'frames'} {budget}: a budget is at least 1")
    layers = read_layers(files, item_ids=[it.item_id for it in manifest.items], ids=ids, ids_column=ids_column,
                         manifest_order=manifest_order)
    L, N, d = layers.vectors.shape
    vision = modality != "text"
    identity = {"model": name, "source": "imported", "dataset": dataset, "manifest_sha": manifest.sha,
                "modality": modality, "content_sha": layers.content_sha, "variant": variant,
                **({"n_frames": budget, "image_mode": "frames" if modality == "image" else None} if vision
                   else {"n_captions": budget})}
    if layers.layer_names:
        identity["layer_names"] = layers.layer_names
    run_id = run_id_for(identity)
    info = ModelInfo(source="imported", model_type="imported", modality=modality, pooling="imported", n_layers=L,
                     dim=d, params=0, native_frames=None, revision="imported", random_init=False,
                     config={"loader": "imported", "layerscope": {"layer_names": layers.layer_names}})
    w = StoreWriter(store)
    try:
        _check_model(w, name, info, dataset, identity, run_id)
        existing = w.get_run(run_id)
        if existing is not None and existing["status"] == "done":
            log(f"import-embeddings: {name} on {dataset} is already stored with these vectors (run {run_id})")
            return {"run_id": run_id, "layers": L, "items": N, "stored": False}
        w.put_dataset(dataset, manifest)
        w.put_model(name, info)
        extras = {"imported_from": [str(Path(f).resolve()) for f in files], "layer_sources": layers.sources}
        w.start_run(run_id, model=name, dataset=dataset, modality=modality, n_frames=budget if vision else None,
                    n_captions=None if vision else budget, variant=variant,
                    image_mode="frames" if modality == "image" else None, pooling="imported", dtype="float32",
                    device="imported", n_items=N, n_layers=L, dim=d, config=run_config(identity, extras))
        w.write_batch(run_id, 0, layers.vectors, n_done=N, n_items=N)
    finally:
        w.close()
    log(f"import-embeddings: {name} on {dataset}: {L} layer(s) x {N} items x {d} dims stored as run {run_id}")
    return {"run_id": run_id, "layers": L, "items": N, "stored": True}


def _check_model(w, name: str, info, dataset: str, identity: dict, run_id: str) -> None:
    """Refuse (before anything is written) a name used by a computed model, or with other layers, or
    other vectors already imported for the same dataset, budget and variant."""
    from analysis.storage.schema import fetch_one

    row = fetch_one(w.con, "SELECT source, n_layers, dim, modality FROM models WHERE model = ?", [name])
    if row is None:
        return
    if row[0] != "imported":
        raise ValueError(f"--name {name}: the store's model {name!r} was computed from {row[0]}; import under another "
                         "--name")
    if (row[1], row[2], row[3]) != (info.n_layers, info.dim, info.modality):
        raise ValueError(f"--name {name}: already imported with {row[1]} layer(s) of {row[2]} dims ({row[3]}); these "
                         f"files give {info.n_layers} x {info.dim} ({info.modality}); import under another --name")
    budget_key = "n_frames" if "n_frames" in identity else "n_captions"
    others = w.con.execute(
        f"SELECT run_id FROM runs WHERE model = ? AND dataset = ? AND variant = ? AND {budget_key} = ? AND run_id <> ?",
        [name, dataset, identity["variant"], identity[budget_key], run_id]).fetchall()
    if others:
        raise ValueError(f"--name {name}: other vectors are already imported for {dataset} at {budget_key} = "
                         f"{identity[budget_key]} (run {others[0][0]}); remove them with `layerscope runs rm "
                         f"{others[0][0]}` or import under another --name")


def register(sub) -> None:
    """``layerscope import-embeddings``: a thin command over :func:`import_embeddings`."""
    import argparse

    p = sub.add_parser(
        "import-embeddings", help="store embeddings you already have (per-layer arrays) as runs of a model",
        description="Store embeddings you already have (your own pipeline, sentence-transformers encode(), a "
                    "feature cache) as one run of a model: analyze, the dashboard, report, merge and runs then "
                    "treat it as any other run. Layers named default or joint are named layers; the others are "
                    "numbered in natural order of their names. Nothing is stored when a file is at fault.",
        epilog="examples:\n  layerscope import-embeddings --store my.duckdb --manifest m.jsonl --dataset mine "
               "--name my-encoder --modality text --ids ids.txt layer_*.npy default.npy\n"
               "  layerscope import-embeddings --store my.duckdb --manifest m.jsonl --dataset mine --name vit "
               "--modality video --frames 8 --manifest-order feats.npz",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", help=f"{', '.join(SUFFIXES)} files: one (N, d) array per layer, or one (L, N, d)")
    p.add_argument("--store", required=True)
    p.add_argument("--manifest", required=True, help="the items the rows belong to (JSONL or CSV, as for precompute)")
    p.add_argument("--dataset", required=True, help="dataset name in the store")
    p.add_argument("--name", required=True, help="model name in the store")
    p.add_argument("--modality", required=True, choices=["text", "video", "image"])
    p.add_argument("--frames", type=int, help="vision: frames per item the vectors were made from (n_f, default 1)")
    p.add_argument("--captions", type=int, help="text: captions per item the vectors were made from (n_c, default 1)")
    p.add_argument("--variant", default="original", choices=["original", "reversed", "negative"])
    rows = p.add_mutually_exclusive_group()
    rows.add_argument("--ids", help="the rows' item ids: one per line, or a .json / .npy list")
    rows.add_argument("--manifest-order", action="store_true", help="the rows are the manifest's items in order")
    p.add_argument("--ids-column", default="id", help="Parquet: the column holding item ids (default id)")
    p.set_defaults(func=_cmd)


def _cmd(args) -> int:
    import sys

    from .inputs.manifest import load_manifest

    vision = args.modality != "text"
    if (args.frames if not vision else args.captions) is not None:
        raise ValueError(f"--{'captions' if vision else 'frames'} applies to "
                         f"{'text' if vision else 'video and image'} runs; this import is {args.modality}")
    manifest = load_manifest(args.manifest, check_videos=False)
    import_embeddings(args.store, manifest=manifest, dataset=args.dataset, name=args.name, files=args.files,
                      modality=args.modality, budget=(args.frames if vision else args.captions) or 1,
                      variant=args.variant, ids=read_ids(args.ids) if args.ids else None, ids_column=args.ids_column,
                      manifest_order=args.manifest_order, log=lambda m: print(m, file=sys.stderr))
    return 0
