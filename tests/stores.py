"""Small stores written directly through the store writer (no models, no videos): fast fixtures for
store-integrity, CLI-error and concurrency tests."""

from __future__ import annotations

import numpy as np

from precompute.manifest import Item, Manifest
from precompute.model_info import ModelInfo
from precompute.writer import StoreWriter, run_id_for

#: model name -> (modality, n_layers, dim)
MODELS = {"vis": ("video", 3, 8), "txt": ("text", 2, 6)}


def model_info(name: str) -> ModelInfo:
    modality, n_layers, dim = MODELS[name]
    return ModelInfo(source=f"/models/{name}", model_type="toy", modality=modality, pooling="mean",
                     n_layers=n_layers, dim=dim, params=1000, native_frames=None, revision=f"rev-{name}",
                     random_init=True, config={"name": name})


def manifest(n: int, *, dataset_path: str = "/data/m.jsonl", item_prefix: str = "item",
             caption: str = "caption") -> Manifest:
    return Manifest(dataset_path, [Item(idx=i, item_id=f"{item_prefix}{i}", video=f"/data/v{i}.mkv",
                                        captions=[f"{caption} {i}", f"other {i}"], negatives=[f"neg {i}"],
                                        metadata={"i": i}) for i in range(n)])


def vectors(model: str, n: int, seed: int = 0) -> np.ndarray:
    """``(L, n, d)`` float32 deterministic vectors of one model's run."""
    _, n_layers, dim = MODELS[model]
    return np.random.default_rng([seed, len(model)]).normal(size=(n_layers, n, dim)).astype(np.float32)


def write_store(path, *, n: int = 12, models=("vis", "txt"), dataset: str = "toy", shard: tuple[int, int] | None = None,
                notes: dict | None = None, batch: int = 4, seed: int = 0, names: dict | None = None,
                item_prefix: str = "item", caption: str = "caption"):
    """A store holding ``dataset`` (n items) and one done run per model (or the shard ``(i, N)`` of it,
    covering items ``i*n//N .. (i+1)*n//N - 1``). ``notes`` ({kind: {item_id: note}}) go into the
    run configs of the items the run covers. ``names`` maps a model of :data:`MODELS` to the name
    stored (default: the same); item ids are ``item_prefix + i``, captions start with ``caption``.
    Returns ``{stored name: run_id}``."""
    man = manifest(n, item_prefix=item_prefix, caption=caption)
    position = {it.item_id: it.idx for it in man.items}
    lo, hi = (0, n) if shard is None else (shard[0] * n // shard[1], (shard[0] + 1) * n // shard[1])
    w = StoreWriter(path)
    ids = {}
    try:
        w.put_dataset(dataset, man)
        for base in models:
            info = model_info(base)
            m = (names or {}).get(base, base)
            w.put_model(m, info)
            ident = {"model": m, "dataset": dataset, "modality": info.modality, "variant": "original",
                     "n_frames": 2 if info.modality == "video" else None,
                     "n_captions": 1 if info.modality == "text" else None,
                     "shard": None if shard is None else f"{shard[0]}/{shard[1]}"}
            run_id = run_id_for(ident)
            ids[m] = run_id
            w.start_run(run_id, model=m, dataset=dataset, modality=info.modality, n_frames=ident["n_frames"],
                        n_captions=ident["n_captions"], variant="original", image_mode="frames", pooling="mean",
                        dtype="float32", device="cpu", n_items=hi - lo, n_layers=info.n_layers, dim=info.dim,
                        config={**ident, "batch_size": batch})
            X = vectors(base, n, seed)
            for a in range(lo, hi, batch):
                b = min(hi, a + batch)
                mine = {kind: {k: v for k, v in entries.items() if a <= position[k] < b}
                        for kind, entries in (notes or {}).items()}
                mine = {k: v for k, v in mine.items() if v}
                w.write_batch(run_id, a, X[:, a:b], n_done=b - lo, n_items=hi - lo, notes=mine or None)
    finally:
        w.close()
    return ids


def _same_nan(value):
    """NaN as a marker, so results compare exactly (nan != nan)."""
    if isinstance(value, float) and value != value:
        return "NaN"
    if isinstance(value, (list, tuple)):
        return type(value)(_same_nan(v) for v in value)
    return value


def result_tables(store) -> dict:
    """Every analysis result row without its timestamp, in a fixed order: ``{table: rows}``."""
    import duckdb

    con = duckdb.connect(str(store), read_only=True)
    try:
        return {t: _same_nan(con.execute(f"SELECT * EXCLUDE (computed) FROM {t} ORDER BY result_id").fetchall())
                for t in ("result_grids", "result_profiles", "result_studies")}
    finally:
        con.close()
