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


# ---------------------------------------------------------------- scaling studies (issue #29 item 7)
#: the (n_f, n_c) grid of :data:`SCALING_GRIDS`
SCALING_FRAMES, SCALING_CAPTIONS = (1, 2, 4, 8, 16), (1, 2, 4, 8)


def scaling_points(fn, seed: int = 0, noise: float = 1e-3) -> list[tuple]:
    """``fit_subject`` points ``(n_f, n_c, score, layer a, layer b, run a, run b)`` of ``fn(n_f, n_c)``
    plus seeded Gaussian noise on the grid above."""
    rng = np.random.default_rng(seed)
    return [(f, c, float(fn(f, c) + rng.normal(0, noise)), 1, 2, "ra", "rb")
            for f in SCALING_FRAMES for c in SCALING_CAPTIONS]


#: subject -> grid points. ``law``: DR's law with the paper's VideoMAEv2-H values (it wins held out);
#: ``loglinear``: straight in log n (the log-linear form wins held out; the saturating fit runs to
#: mutual k-NN's bound S∞ = 1); ``runaway``: CKNNA (no upper bound) straight in log n_f, so α sits
#: at 0 and S∞ lands far beyond any score; ``flat``: one score everywhere.
SCALING_GRIDS = {
    "v|law|mutual_knn": scaling_points(lambda f, c: 0.41 - (0.15 * f ** -0.75 + 0.13 * c ** -1.30)),
    "v|loglinear|mutual_knn": scaling_points(lambda f, c: 0.1 + 0.02 * np.log(f) + 0.015 * np.log(c)),
    "v|runaway|cknna": scaling_points(lambda f, c: 0.1 + 0.002 * np.log(f) + 0.3 - 0.1 / c),
    "v|flat|mutual_knn": scaling_points(lambda f, c: 0.2, noise=0.0),
}


def write_scaling_studies(con, dataset: str = "toy", n_items: int = 101, grids=None) -> None:
    """A store's schema, one dataset and a ``scaling`` study per subject of ``grids`` (default
    :data:`SCALING_GRIDS`), each payload made by the scaling study's own ``fit_subject`` (no
    bootstrap, so no embeddings are needed)."""
    from analysis.storage import results as R
    from analysis.storage.schema import create_all
    from analysis.studies.scaling import fit_subject

    create_all(con)
    con.execute("INSERT INTO datasets (dataset, n_items) VALUES (?, ?)", [dataset, n_items])
    # one finished run, so the dashboard treats the store as one with results
    con.execute("INSERT INTO runs (run_id, model, dataset, modality, variant, status, n_items, n_done) "
                "VALUES ('ra', 'v', ?, 'video', 'original', 'done', ?, ?)", [dataset, n_items, n_items])
    for subject, points in (grids or SCALING_GRIDS).items():
        metric = subject.split("|")[2]
        R.put_study(con, result_id=subject, study="scaling", dataset=dataset, subject=subject,
                    params={"metric": metric, "k": 10, "n_boot": 0},
                    payload=fit_subject(None, "ra", metric, {"k": 10}, points, 0, 0), input_key="x")
