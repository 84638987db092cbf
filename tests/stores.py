"""Small stores written directly through the store writer (no models, no videos), built in well under a
second: a two-model store for store-integrity, CLI-error and concurrency tests; the same_space study's
``nuance`` store and the predictor tests' store, both with planted answers."""

from __future__ import annotations

import numpy as np

from analysis.studies import analyze_store
from precompute.inputs.manifest import Item, Manifest
from precompute.adapters.model_info import ModelInfo
from precompute.synthetic.store import write_run
from precompute.batch.writer import StoreWriter, run_id_for

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


def put_analysis_version(con, version=None) -> None:
    """Leave hand-written result rows as ``analyze`` leaves its own: every row of the result tables
    listed as its dataset's current analysis (:func:`analysis.storage.results.record_current`), and
    ``version`` (default: this :data:`analysis.studies.ANALYSIS_VERSION`) recorded as the analysis that
    wrote them; ``version=False`` deletes that record. Without the list the readers see no row; without
    the version they refuse every row as another version's."""
    from analysis.storage import results as R
    from analysis.studies import ANALYSIS_VERSION

    touched = {t: {rid for (rid,) in con.execute(f"SELECT result_id FROM {t}").fetchall()} for t in R.RESULT_TABLES}
    datasets = {d for t in R.RESULT_TABLES for (d,) in con.execute(f"SELECT DISTINCT dataset FROM {t}").fetchall()}
    R.record_current(con, touched, datasets)
    con.execute("DELETE FROM meta WHERE key = 'analysis_version'")
    if version is not False:
        con.execute("INSERT INTO meta VALUES ('analysis_version', ?)",
                    [str(ANALYSIS_VERSION if version is None else version)])



def copy_with_analysis_version(store, dest, version=None):
    """A copy of ``store`` at ``dest`` whose results are recorded as written by ``version``
    (:func:`put_analysis_version`; False: no record). Returns ``dest``."""
    import shutil

    import duckdb

    shutil.copy(store, dest)
    con = duckdb.connect(str(dest))
    try:
        put_analysis_version(con, version)
    finally:
        con.close()
    return dest

def _same_nan(value):
    """NaN as a marker, so results compare exactly (nan != nan)."""
    if isinstance(value, float) and value != value:
        return "NaN"
    if isinstance(value, (list, tuple)):
        return type(value)(_same_nan(v) for v in value)
    return value


def read_store(store, fn, *args, **kwargs):
    """``fn(con, *args, **kwargs)`` on a read-only connection to ``store``, closed after."""
    import duckdb

    con = duckdb.connect(str(store), read_only=True)
    try:
        return fn(con, *args, **kwargs)
    finally:
        con.close()


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
    put_analysis_version(con)

NUANCE_ITEMS, NUANCE_DIM = 40, 8
#: even items have a negated (true) caption as their negative; odd items a temporal opposite
NUANCE_NEGATED = set(range(0, NUANCE_ITEMS, 2))


def write_verdicts(con, dataset: str) -> None:
    """The verdict rows ``analyze`` stores, for layer-choice rows a test wrote by hand: the verdicts
    study's own :func:`analysis.studies.verdicts.decide` on each, with the grids its ``sources`` name."""
    from analysis.storage import results as R
    from analysis.studies.verdicts import STUDY, decide

    models = dict(con.execute("SELECT model, random_init FROM models").fetchall())
    random = {m for m, ri in models.items() if ri}
    runs = {r["run_id"]: r for r in R.rows(con, "SELECT * FROM runs")}
    for s in R.read_studies(con, study="layer_choice", dataset=dataset):
        p, key = s["payload"], s["subject"]
        run = runs[p["setting"]["run_id"]]
        found = {}
        for name, rid in (p.get("sources") or {}).items():
            (g,) = R.read_grids(con, result_id=rid)
            found[name] = (g, g["run_a"] == run["run_id"])
        R.put_study(con, result_id=f"verdict-{key}", study=STUDY, dataset=dataset, subject=key, params={},
                    payload=decide(dataset, key, p, run, found, random, models), input_key="hand")
    put_analysis_version(con)  # as analyze leaves it: hand-written rows are this version's


def _nuance_arrays():
    N, D = NUANCE_ITEMS, NUANCE_DIM
    rng = np.random.default_rng(7)
    V = rng.normal(size=(3, N, D))
    V[0] = V[0, :1]  # layer 0 of the video side collapsed (one point)
    T = rng.normal(size=(3, N, D))
    T[2] = V[2] + 0.05 * rng.normal(size=(N, D))  # layer 2: captions sit by their videos
    neg = rng.normal(size=(3, N, D))
    neg[2] = np.where(np.isin(np.arange(N), list(NUANCE_NEGATED))[:, None],
                      V[2] + 0.05 * rng.normal(size=(N, D)), -T[2])
    back = V + 3.0 * rng.normal(size=V.shape)
    back[1] = V[1]  # layer 1: reversal changes nothing
    joint_v = rng.normal(size=(N, 6))
    clip_v = np.zeros((4, N, 10))
    clip_v[:3] = rng.normal(size=(3, N, 10))
    clip_v[3, :, :6] = joint_v
    clip_t = np.zeros((3, N, 8))
    clip_t[:2] = rng.normal(size=(2, N, 8))
    clip_t[2, :, :6] = joint_v + 0.3 * rng.normal(size=(N, 6))
    out = {"V": V, "T": T, "neg": neg, "back": back, "clip_v": clip_v, "clip_t": clip_t}
    return {k: v.astype(np.float32) for k, v in out.items()}


def write_nuance_store(path):
    """The same_space study's store with planted answers: an MLLM (both sides at every layer) and a dual
    encoder (a zero-padded joint layer on each tower) on dataset ``nuance``, analysed (k=3, mutual
    k-NN grids, 20 resamples); returns the arrays."""
    N, D = NUANCE_ITEMS, NUANCE_DIM
    P = _nuance_arrays()
    items = [Item(i, f"it{i}", f"/none/v{i}.mp4", [f"caption {i}"], [f"neg {i}"],
                  {"negatives_kind": "negated" if i in NUANCE_NEGATED else "temporal",
                   "chiral_group": f"g{i // 4}", "chiral_action": "up" if i % 4 < 2 else "down"})
             for i in range(N)]
    w = StoreWriter(path)
    try:
        w.put_dataset("nuance", Manifest("nuance.jsonl", items))
        w.put_model("mllm", ModelInfo("/m/mllm", "toy", "mllm", "last_token", 3, D, 1, None, "r1", True, {}))
        w.put_model("clip", ModelInfo("/m/clip", "toy", "video", "cls", 4, 10, 1, None, "r2", True, {}))
        runs = [("mv", "mllm", "video", 4, None, "original", P["V"], {"side": "video"}),
                ("mvr", "mllm", "video", 4, None, "reversed", P["back"], {"side": "video"}),
                ("mt", "mllm", "text", None, 1, "original", P["T"], {"side": "text"}),
                ("mn", "mllm", "text", None, 1, "negative", P["neg"], {"side": "text"}),
                ("cv", "clip", "video", 4, None, "original", P["clip_v"],
                 {"layer_names": {"3": "joint"}, "layer_dims": {"3": 6}}),
                ("ct", "clip", "text", None, 1, "original", P["clip_t"],
                 {"layer_names": {"2": "joint"}, "layer_dims": {"2": 6}})]
        for rid, model, mod, nf, nc, variant, X, cfg in runs:
            w.start_run(rid, model=model, dataset="nuance", modality=mod, n_frames=nf, n_captions=nc,
                        variant=variant, image_mode=None, pooling="mean", dtype="float32", device="cpu",
                        n_items=N, n_layers=X.shape[0], dim=X.shape[2], config=cfg)
            w.write_batch(rid, 0, X, n_done=N, n_items=N)
    finally:
        w.close()
    analyze_store(path, k=3, metrics=("mutual_knn",), n_boot=20, log=lambda m: None)
    return P


PREDICTOR_ITEMS, PREDICTOR_DIM = 64, 16
#: the planted per-layer performance: how much of the shared latent each layer holds, in an order
#: unrelated to depth (so depth alone cannot explain it)
SHARE = {"va": [0.1, 0.8, 0.4, 0.95, 0.25, 0.6], "vb": [0.6, 0.1, 0.95, 0.4, 0.8, 0.25],
         "vc": [0.25, 0.4, 0.1, 0.6, 0.95, 0.8]}


def write_predictor_store(path, *, collapse=None):
    """The predictor tests' store (dataset ``synthetic``, not analysed): three video models whose layer
    l is ``sqrt(w_l) Z + sqrt(1 - w_l) E_l`` (Z shared with the text model, E_l fresh noise, both
    isotropic N(0, I)): every layer has the same distribution, so RankMe, LID and uniformity cannot
    tell the layers apart, while alignment with the text model grows with w_l. ``collapse=(model, layer)``
    makes that layer one repeated row."""
    N, D = PREDICTOR_ITEMS, PREDICTOR_DIM
    rng = np.random.default_rng(7)
    Z = rng.normal(size=(N, D))
    Q, _ = np.linalg.qr(rng.normal(size=(D, D)))
    text = np.stack([Z @ Q + 0.05 * rng.normal(size=(N, D)) for _ in range(3)])
    write_run(path, "txt-1", text, model="txt", modality="text", n_captions=1)
    for m, share in SHARE.items():
        X = np.stack([np.sqrt(w) * Z + np.sqrt(1 - w) * rng.normal(size=(N, D)) for w in share])
        if collapse and collapse[0] == m:
            X[collapse[1]] = X[collapse[1], 0]
        write_run(path, f"{m}-1", X, model=m, modality="video", n_frames=1)


def write_downstream_csv(path, rows):
    """``rows`` of (model, task, metric, value, higher_is_better, layer, setting) as an import CSV."""
    path.write_text("model,task,metric,value,higher_is_better,layer,setting\n"
                    + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


#: the dashboard store's catalogue, named like the demo's so links and pickers read the same:
#: model -> (modality, stored layers, dim); MiniLM's 7 layers give grids of another shape
DASHBOARD_MODELS = {"vit-tiny": ("image", 5, 16), "llama-tiny": ("text", 5, 16),
                    "all-MiniLM-L6-v2": ("text", 7, 12)}
#: dataset -> (item id prefix, items)
DASHBOARD_DATASETS = {"moving_shapes": ("shape", 24), "test_of_time": ("tot", 20)}
DASHBOARD_BUDGETS = (1, 2, 4)  # n_f of the vision model, n_c of the text models


def write_dashboard_store(path) -> None:
    """A small analysed store shaped like the demo's for the dashboard's page-mechanics tests (built in
    seconds, no model or video): :data:`DASHBOARD_MODELS` on both :data:`DASHBOARD_DATASETS`, one
    done run per budget of :data:`DASHBOARD_BUDGETS`, items ``shape0000``... with two captions each,
    analysed with the default metrics, k=5 and 5 resamples. Layer ``l`` of item ``i`` is
    ``z_i P_m + (0.5 + |depth_l| + 1/s) e`` (:func:`precompute.synthetic.store.write_sweep`'s recipe),
    so models agree more at some layers and budgets than at others."""
    w = StoreWriter(path)
    try:
        for d_i, (dataset, (prefix, n)) in enumerate(DASHBOARD_DATASETS.items()):
            items = [Item(i, f"{prefix}{i:04d}", f"/nonexistent/{prefix}{i}.mkv",
                          [f"{dataset} caption {i}", f"another caption {i}"]) for i in range(n)]
            w.put_dataset(dataset, Manifest(f"{dataset}.jsonl", items))
            latent = np.random.default_rng([d_i, 1]).normal(size=(n, 8))
            for m_i, (model, (modality, n_layers, dim)) in enumerate(DASHBOARD_MODELS.items()):
                if d_i == 0:
                    w.put_model(model, ModelInfo(f"/models/{model}", "toy", modality, "mean", n_layers, dim, 1000,
                                                 None, "r", True, {}))
                rng = np.random.default_rng([d_i, m_i])
                proj = rng.normal(size=(8, dim))
                depth = np.abs(np.linspace(-1, 1, n_layers))
                for s in DASHBOARD_BUDGETS:
                    run = f"{model}-{dataset}-{s}"
                    vision = modality != "text"
                    X = np.stack([latent @ proj + (0.5 + depth[l] + 1.0 / s) * rng.normal(size=(n, dim))
                                  for l in range(n_layers)]).astype(np.float32)
                    w.start_run(run, model=model, dataset=dataset, modality=modality,
                                n_frames=s if vision else None, n_captions=None if vision else s,
                                variant="original", image_mode="frames" if vision else None, pooling="mean",
                                dtype="float32", device="cpu", n_items=n, n_layers=n_layers, dim=dim, config={})
                    w.write_batch(run, 0, X, n_done=n, n_items=n)
    finally:
        w.close()
    analyze_store(path, k=5, n_boot=5, log=lambda m: None)


# ---------------------------------------------------------------- class-token models and a dual encoder
SIDES_K, SIDES_N = 3, 14
SIDES_VISION = ("vit", "dino", "tinyclip")


def write_sides_store(root):
    """Class-token vision models (tiny ViT, DINOv2), a dual encoder (tiny CLIP, both towers) and BERT
    precomputed on ``SIDES_N`` items, with per-model and per-layer downstream results, analysed
    (k = ``SIDES_K``, 20 resamples); returns the store's path (issue #29 items 1, 2)."""
    from analysis.storage.downstream_import import import_downstream
    from analysis.storage.store import load_embeddings
    from analysis.studies import analyze_store
    from precompute.synthetic import tiny_models
    from precompute.cli import main
    from tests.precompute.helpers import make_dataset

    N, K, VISION = SIDES_N, SIDES_K, SIDES_VISION
    manifest = make_dataset(root / "d", n=N, frames=2, captions=1)
    tiny_models.build_vit(root / "vit", seed=1)
    tiny_models.build_dinov2(root / "dino", seed=2)
    tiny_models.build_clip(root / "tinyclip", seed=3)
    tiny_models.build_bert(root / "bert", seed=4)
    path = root / "s.duckdb"
    base = ["precompute", "--store", str(path), "--manifest", str(manifest), "--dataset", "d", "--frames", "1",
            "--captions", "1", "--quiet"]
    for name in ("vit", "dino", "tinyclip", "bert"):
        assert main(base + ["--model", str(root / name)]) == 0
    assert main(base + ["--model", str(root / "tinyclip"), "--modality", "text"]) == 0  # the text tower
    layers = {m: load_embeddings(path, model=m, dataset="d", n_frames=1).shape[0] for m in VISION}
    csv = root / "results.csv"
    lines = ["model,task,metric,value,higher_is_better,layer"]
    lines += [f"{m},probe,top1,{v},true," for m, v in zip(VISION, (0.31, 0.52, 0.47))]
    lines += [f"{m},probe,top1,{0.1 + 0.05 * layer + 0.01 * i},true,{layer}"
              for i, m in enumerate(VISION) for layer in range(layers[m])]
    csv.write_text("\n".join(lines) + "\n")
    import_downstream(path, csv)
    analyze_store(path, k=K, n_boot=20, maps=0, log=lambda *_: None)
    return path


# ---------------------------------------------------------------- DR's figures (issue #31)
#: vision model -> (modality, random init, {(n_f, image_mode): {(text, n_c): best value}}); text
#: models gemma and minilm. Planted so that the figures' numbers can be worked out by hand:
#: Fig. 7 (gemma, n_f largest): x = n_c 1, y = n_c 10 for the four trained models; Figs. 11/12 at
#: n_c 1: gemma ranks vmae > vjepa > dino > clip, minilm vjepa > vmae > dino > clip (τ = 2/3, W = 0.9);
#: ``rand`` is an untrained control and its minilm cell at n_c 10 has no best cell.
PAPER_VISION = {
    "vmae": ("video", False, {(16, "frames"): {("gemma", 1): 0.25, ("gemma", 10): 0.39,
                                               ("minilm", 1): 0.20, ("minilm", 10): 0.30}}),
    "vjepa": ("video", False, {(16, "frames"): {("gemma", 1): 0.20, ("gemma", 10): 0.31,
                                                ("minilm", 1): 0.22, ("minilm", 10): 0.33}}),
    "dino": ("image", False, {(1, "first"): {("gemma", 1): 0.14},
                              (8, "frames"): {("gemma", 1): 0.18, ("gemma", 10): 0.27,
                                              ("minilm", 1): 0.15, ("minilm", 10): 0.24}}),
    "clip": ("image", False, {(1, "first"): {("gemma", 1): 0.09},
                              (8, "frames"): {("gemma", 1): 0.12, ("gemma", 10): 0.18,
                                              ("minilm", 1): 0.10, ("minilm", 10): 0.16}}),
    "rand": ("video", True, {(16, "frames"): {("gemma", 1): 0.03, ("gemma", 10): 0.05,
                                              ("minilm", 1): 0.02, ("minilm", 10): None}}),
}
#: whole-model downstream results (task k400, metric top1): the ● points dino and clip lie on
#: y = 2x + 0.14; vmae sits 0.02 and vjepa 0.01 above it, so "video − image" = 0.015
PAPER_DOWNSTREAM = {"dino": 0.50, "clip": 0.38, "vmae": 0.66, "vjepa": 0.55, "rand": 0.10}


def write_paper_store(path, dataset: str = "mine") -> None:
    """A store of result rows only (no embeddings) for the Paper figures page, its views and the
    report: :data:`PAPER_VISION` × gemma/minilm best cells of mutual k-NN, :data:`PAPER_DOWNSTREAM`,
    and a scaling study of vmae × gemma on DR's VideoMAEv2-H law (:data:`SCALING_GRIDS` ``law``)."""
    import duckdb

    from analysis.storage import results as R
    from analysis.storage.schema import MODEL_LEVEL, create_all
    from analysis.studies.scaling import fit_subject

    con = duckdb.connect(str(path))
    try:
        create_all(con)
        con.execute("INSERT INTO datasets (dataset, n_items) VALUES (?, 100)", [dataset])
        models = {m: (mod, ri) for m, (mod, ri, _) in PAPER_VISION.items()}
        models.update({"gemma": ("text", False), "minilm": ("text", False)})
        for m, (mod, ri) in models.items():
            con.execute("INSERT INTO models (model, modality, n_layers, dim, random_init) VALUES (?, ?, 13, 8, ?)",
                        [m, mod, ri])

        def run(run_id, model, modality, n_f, n_c, mode):
            con.execute("INSERT INTO runs (run_id, model, dataset, modality, n_frames, n_captions, variant, image_mode, "
                        "status, n_items, n_done) VALUES (?, ?, ?, ?, ?, ?, 'original', ?, 'done', 100, 100)",
                        [run_id, model, dataset, modality, n_f, n_c, mode])

        for t in ("gemma", "minilm"):
            for n_c in (1, 10):
                run(f"{t}-c{n_c}", t, "text", None, n_c, None)
        for v, (mod, _, settings) in PAPER_VISION.items():
            for (n_f, mode), cells in settings.items():
                run(f"{v}-f{n_f}", v, mod, n_f, None, mode)
                for (t, n_c), value in cells.items():
                    # best layers planted from the value, so a cell's text can be checked: L(100·v mod 13)
                    a, b = (None, None) if value is None else (int(round(value * 100)) % 13, 5)
                    R.put_grid(con, result_id=f"{v}-{n_f}-{t}-{n_c}", dataset=dataset, pair_kind="vision_text",
                               model_a=v, model_b=t, run_a=f"{v}-f{n_f}", run_b=f"{t}-c{n_c}", n_frames=n_f,
                               n_captions=n_c, n_frames_b=None, metric="mutual_knn", params={"k": 10},
                               grid=np.full((2, 2), value if value is not None else np.nan), best_a=a, best_b=b,
                               best_value=value, ci_low=None, ci_high=None, n_boot=0,
                               flags={} if value is not None else {"best": "every layer of rand is collapsed"},
                               input_key="x")
        for m, value in PAPER_DOWNSTREAM.items():
            con.execute("INSERT INTO downstream_results (model, task, metric, setting, layer, value, higher_is_better) "
                        "VALUES (?, 'k400', 'top1', '', ?, ?, true)", [m, MODEL_LEVEL, value])
        subject = "vmae|gemma|mutual_knn"
        R.put_study(con, result_id=subject, study="scaling", dataset=dataset, subject=subject,
                    params={"metric": "mutual_knn", "k": 10, "n_boot": 0},
                    payload=fit_subject(None, "vmae-f16", "mutual_knn", {"k": 10}, SCALING_GRIDS["v|law|mutual_knn"], 0, 0),
                    input_key="x")
        put_analysis_version(con)
    finally:
        con.close()

# ---------------------------------------------------------------- the demo's shape, analysed, in seconds
#: model -> (modality, pooling, stored layers, dim, native frames, random init); the demo's names
#: (precompute/demo.py) so pages, links and reports read the same. vit-tiny is a class-token model
#: whose layer 0 is one vector for every item (a CLS token before any attention); videomae-tiny and
#: all-MiniLM-L6-v2 count as trained, the others are random-init controls.
DEMO_LIKE_MODELS = {
    "videomae-tiny": ("video", "mean", 5, 16, 4, False),
    "vit-tiny": ("image", "cls", 5, 16, None, True),
    "llama-tiny": ("text", "mean", 5, 16, None, True),
    "all-MiniLM-L6-v2": ("text", "mean", 7, 12, None, False),
    "clip-tiny": ("image", "cls", 7, 16, None, True),
}
#: the dual encoder's two towers meet at their last layer, ``joint``, zero-padded past its width
DEMO_LIKE_DUAL = "clip-tiny"
DEMO_LIKE_JOINT_WIDTH = 8
DEMO_LIKE_LAYER_NAMES = {"layer_names": {"5": "default", "6": "joint"}, "layer_dims": {"6": DEMO_LIKE_JOINT_WIDTH}}
#: dataset -> (items, caption budgets); the demo's frame budgets for every vision model
DEMO_LIKE_DATASETS = {"moving_shapes": (32, (1, 2, 4)), "test_of_time": (24, (1, 2))}
DEMO_LIKE_FRAMES = (1, 2, 4)
#: resamples and shuffled pairings of its analysis (few: the tests check the plumbing, not the intervals)
DEMO_LIKE_BOOT = 5
DEMO_LIKE_NULL = 10


def _demo_like_layers(rng, latent, n_layers, dim, noise) -> np.ndarray:
    """``(L, N, dim)``: layer ``l`` is ``z P_l + (0.4 + |depth_l| + noise) e`` (a fresh projection per
    layer), so models agree more at middle layers and larger budgets (``noise`` shrinks with them)."""
    N = len(latent)
    depth = np.abs(np.linspace(-1, 1, n_layers))
    return np.stack([latent @ rng.normal(size=(latent.shape[1], dim))
                     + (0.4 + depth[l] + noise) * rng.normal(size=(N, dim)) for l in range(n_layers)])


def _demo_like_runs(name, d_i, dataset, latent, has_neg, captions):
    """One model's runs on one dataset: ``(variant, n_frames, n_captions, X (L, n, d), idx or None)``."""
    modality, _, n_layers, dim, _, _ = DEMO_LIKE_MODELS[name]
    m_i = list(DEMO_LIKE_MODELS).index(name)
    sides = [modality, "text"] if name == DEMO_LIKE_DUAL else [modality]
    out = []
    for side in sides:
        budgets = DEMO_LIKE_FRAMES if side != "text" else captions
        for s in budgets:
            rng = np.random.default_rng([d_i, m_i, s, side == "text"])
            X = _demo_like_layers(rng, latent, n_layers, dim, 1.0 / s)
            if name == DEMO_LIKE_DUAL:  # the joint layer: one projection for both towers, zero-padded
                joint = latent @ np.random.default_rng([d_i, m_i]).normal(size=(latent.shape[1], DEMO_LIKE_JOINT_WIDTH))
                X[-1] = 0.0
                X[-1, :, :DEMO_LIKE_JOINT_WIDTH] = joint + (0.2 + 0.5 / s) * rng.normal(size=joint.shape)
            if DEMO_LIKE_MODELS[name][1] == "cls" and side != "text":
                X[0] = X[0, :1]  # a CLS token before attention: one vector for every item
            if side == "text":
                out.append(("original", None, s, X, None))
                if s == 1:  # the manifest's negatives, only the items that have one (issue #34)
                    neg = X[:, has_neg] + 0.3 * rng.normal(size=(n_layers, int(has_neg.sum()), dim))
                    out.append(("negative", None, 1, neg, np.flatnonzero(has_neg)))
                continue
            out.append(("original", s, None, X, None))
            # an image model averages frames, so the reversed video gives the same vectors
            back = X if side == "image" else X + 0.5 * rng.normal(size=X.shape)
            out.append(("reversed", s, None, back, None))
    return [(variant, nf, nc, X.astype(np.float32), idx) for variant, nf, nc, X, idx in out]


def write_demo_like_store(root):
    """The demo's shape (:data:`DEMO_LIKE_MODELS` on :data:`DEMO_LIKE_DATASETS`, real videos of the demo's
    generators, reversed and negative runs, the dual encoder's two towers with a ``joint`` layer, the
    demo's labelled probes on the generated items' fields) with synthetic vectors instead of models,
    analysed by the real :func:`analysis.studies.analyze_store` with the default metrics and k, few
    resamples and one process. Built in seconds; returns the store's path."""
    from pathlib import Path

    from precompute.demo import DEMO_LABELS
    from precompute.inputs.manifest import load_manifest
    from precompute.synthetic.scenes import write_moving_shapes, write_test_of_time

    root = Path(root)
    data = root / "data"
    writers = {"moving_shapes": write_moving_shapes, "test_of_time": write_test_of_time}
    path = root / "demo_like.duckdb"
    w = StoreWriter(path)
    try:
        for name, (modality, pooling, n_layers, dim, native, random_init) in DEMO_LIKE_MODELS.items():
            config = DEMO_LIKE_LAYER_NAMES if name == DEMO_LIKE_DUAL else {}
            w.put_model(name, ModelInfo(f"/models/{name}", name.split("-")[0], modality, pooling, n_layers, dim,
                                        1000, native, "r", random_init, config))
        for d_i, (dataset, (n, captions)) in enumerate(DEMO_LIKE_DATASETS.items()):
            man = load_manifest(writers[dataset](data, n=n, size=32))
            w.put_dataset(dataset, man)
            latent = np.random.default_rng([d_i, 99]).normal(size=(n, 8))
            has_neg = np.array([bool(it.negatives) for it in man.items])
            for name, (_, pooling, n_layers, dim, _, _) in DEMO_LIKE_MODELS.items():
                for variant, nf, nc, X, idx in _demo_like_runs(name, d_i, dataset, latent, has_neg, captions):
                    side = "text" if nc is not None else DEMO_LIKE_MODELS[name][0]
                    run = f"{name}-{dataset}-{side}-{variant}-{nf or nc}"
                    config = DEMO_LIKE_LAYER_NAMES if name == DEMO_LIKE_DUAL else {}
                    w.start_run(run, model=name, dataset=dataset, modality=side, n_frames=nf, n_captions=nc,
                                variant=variant, image_mode="frames" if side == "image" else None,
                                pooling="mean" if side == "text" else pooling, dtype="float32", device="cpu",
                                n_items=X.shape[1], n_layers=n_layers, dim=dim, config=config)
                    w.write_batch(run, 0, X, n_done=X.shape[1], n_items=X.shape[1], idx=idx)
    finally:
        w.close()
    # the demo's fields but colour and speed: among 32 moving shapes one colour has a single item, and a
    # probe needs two per class
    labels = tuple(f for f in DEMO_LABELS if f not in ("colour", "speed"))
    analyze_store(path, n_boot=DEMO_LIKE_BOOT, n_null=DEMO_LIKE_NULL, labels=labels, jobs=1, log=lambda m: None)
    return path

# ---------------------------------------------------------------- text-only stores (issue #31)
def write_text_store(path, runs: dict, *, dataset: str = "sentences", captions=None, analyze: dict | None = None):
    """A text-only dataset (items without a video) with one done text run per ``runs`` entry
    ``{(model, n_c): (L, N, d) array}``, analysed with ``analyze`` (keyword options of
    :func:`analysis.studies.analyze_store`; no analysis when None). ``captions``: each item's caption
    list (default ``["sentence i", "other i"]``). Returns ``{(model, n_c): run_id}``."""
    n = next(iter(runs.values())).shape[1]
    caps = captions or [[f"sentence {i}", f"other {i}"] for i in range(n)]
    man = Manifest(f"/data/{dataset}.jsonl", [Item(i, f"s{i}", None, list(caps[i])) for i in range(n)])
    w = StoreWriter(path)
    ids = {}
    try:
        w.put_dataset(dataset, man)
        for (model, n_c), X in runs.items():
            if model not in {m for m, _ in ids}:
                w.put_model(model, ModelInfo(f"/models/{model}", "toy", "text", "mean", X.shape[0] - 1, X.shape[2],
                                             1000, None, f"rev-{model}", False, {}))
            run = run_id_for({"model": model, "dataset": dataset, "modality": "text", "variant": "original",
                              "n_frames": None, "n_captions": n_c})
            w.start_run(run, model=model, dataset=dataset, modality="text", n_frames=None, n_captions=n_c,
                        variant="original", image_mode=None, pooling="mean", dtype="float32", device="cpu",
                        n_items=n, n_layers=X.shape[0], dim=X.shape[2], config={})
            w.write_batch(run, 0, np.asarray(X, dtype=np.float32), n_done=n, n_items=n)
            ids[(model, n_c)] = run
    finally:
        w.close()
    if analyze is not None:
        analyze_store(path, log=lambda *_: None, **analyze)
    return ids


# ---------------------------------------------------------------- named layers and a shared space (issue #33)
#: a dual encoder's stored layers: 4 numbered, then its pooled ``default`` output and the ``joint`` projection
NAMED_LAYERS = {"4": "default", "5": "joint"}
NAMED_N, NAMED_DIM = 20, 8


def write_named_layers_store(path) -> None:
    """A dual encoder ``dual-tiny`` (an image run and a text run, layers 0-3 numbered, 4 ``default``, 5
    ``joint``) and a plain text model ``plain-txt`` on dataset ``pairs`` of :data:`NAMED_N` items with a
    ``colour`` metadata field, analysed with k=3 and 5 resamples (seconds, no model). Both towers'
    joint layers are ``z_i P + 0.3 e`` with one shared ``P``, so the joint space pairs items and the
    same-space study stores a modality gap for the two-sided map. Per-layer downstream results
    (task ``probe``) make ``default`` dual-tiny's truly best layer (0.9 against at most 0.5); whole-model
    results of the same task leave nothing missing on the Overview."""
    n, dim = NAMED_N, NAMED_DIM
    rng = np.random.default_rng(33)
    latent = rng.normal(size=(n, 4))
    shared = rng.normal(size=(4, dim))
    w = StoreWriter(path)
    try:
        items = [Item(i, f"pair{i:03d}", f"/nonexistent/pair{i}.mkv", [f"pair caption {i}"],
                      metadata={"colour": ("red", "green", "blue")[i % 3]}) for i in range(n)]
        w.put_dataset("pairs", Manifest("pairs.jsonl", items))
        for model, modality in (("dual-tiny", "image"), ("plain-txt", "text")):
            w.put_model(model, ModelInfo(f"/models/{model}", "toy", modality, "mean", 6, dim, 1000, None, "r", True, {}))
        runs = [("dual-tiny-image", "dual-tiny", "image", NAMED_LAYERS), ("dual-tiny-text", "dual-tiny", "text", NAMED_LAYERS),
                ("plain-txt", "plain-txt", "text", {})]
        for r_i, (run, model, modality, names) in enumerate(runs):
            own = np.random.default_rng([33, r_i]).normal(size=(4, dim))
            X = np.stack([latent @ (own if l < 5 else shared) + (0.3 + 0.2 * abs(l - 2)) * rng.normal(size=(n, dim))
                          for l in range(6)]).astype(np.float32)
            vision = modality != "text"
            w.start_run(run, model=model, dataset="pairs", modality=modality, n_frames=1 if vision else None,
                        n_captions=None if vision else 1, variant="original", image_mode="frames" if vision else None,
                        pooling="mean", dtype="float32", device="cpu", n_items=n, n_layers=6, dim=dim,
                        config={"layer_names": dict(names)} if names else {})
            w.write_batch(run, 0, X, n_done=n, n_items=n)
    finally:
        w.close()
    from pathlib import Path

    from analysis.storage.downstream_import import import_downstream

    rows = [("dual-tiny", "probe", "top1", v, "true", layer, "linear")
            for layer, v in (("0", 0.2), ("1", 0.3), ("2", 0.4), ("3", 0.5), ("default", 0.9), ("joint", 0.45))]
    rows += [("plain-txt", "probe", "top1", 0.1 + 0.05 * layer, "true", layer, "linear") for layer in range(6)]
    rows += [("dual-tiny", "probe", "top1", 0.6, "true", "", "linear"), ("plain-txt", "probe", "top1", 0.4, "true", "",
                                                                          "linear")]  # whole-model results too
    import_downstream(path, write_downstream_csv(Path(str(path) + ".csv"), rows))
    analyze_store(path, k=3, n_boot=5, log=lambda m: None)


# ---------------------------------------------------------------- embedding-map tools and curve overlays (issue #33)
#: items of the tools store; their captions name a colour word so a search has known answers
TOOLS_N, TOOLS_DIM = 30, 6
TOOLS_WORDS = ("Red", "green", "blue")


def tools_captions(i: int) -> str:
    """Item ``i``'s caption in :func:`write_map_tools_store` (a search test filters these itself)."""
    return f"A {TOOLS_WORDS[i % 3]} ball number {i}"


def tools_second_caption(i: int) -> str:
    """Item ``i``'s second caption in :func:`write_map_tools_store`, which no run embeds (a video map
    shows the first): long, so a map's shortened caption never holds its end."""
    return "seen " + "from far away " * 12 + f"as a wooden cube at angle {7 * i}"


def tools_metadata(i: int) -> dict:
    """Item ``i``'s metadata in :func:`write_map_tools_store`."""
    return {"shade": TOOLS_WORDS[i % 3].lower(), "speed": 0.5 + 0.25 * i, "lane": i % 3,
            "note": "[x](javascript:alert(1)) *" if i == 0 else f"n{i % 2}", "tags": [f"t{i % 4}", "toy"]}


def tools_vectors(run: str, n_layers: int) -> np.ndarray:
    """The ``(L, N, d)`` embeddings of one run of :func:`write_map_tools_store` (a test's brute-force
    neighbours read these, not the store)."""
    rng = np.random.default_rng([33, *run.encode()])
    return rng.normal(size=(n_layers, TOOLS_N, TOOLS_DIM)).astype(np.float32)


def tools_video(path, i: int) -> str:
    """Item ``i``'s video in :func:`write_map_tools_store` at ``path``: a one-image frame folder next to
    the store for even items, a missing file for odd ones (thumbnails where frames exist, a note elsewhere)."""
    from pathlib import Path

    return str(Path(path).parent / "frames" / f"clip{i}") if i % 2 == 0 else f"/nonexistent/clip{i}.mp4"


def stored_map_payload(store, subject: str, dataset: str = "tools") -> tuple[str, dict]:
    """``(result_id, payload)`` of the embedding map ``subject`` stored for ``dataset`` in ``store``."""
    import duckdb

    from analysis.storage import results as R

    con = duckdb.connect(str(store), read_only=True)
    try:
        (row,) = [r for r in R.read_studies(con, study="embedding_map", dataset=dataset) if r["subject"] == subject]
    finally:
        con.close()
    return row["result_id"], row["payload"]


def write_map_tools_store(path) -> None:
    """Dataset ``tools`` of :data:`TOOLS_N` items with two captions (:func:`tools_captions`,
    :func:`tools_second_caption`) and metadata (:func:`tools_metadata`) ``shade`` (3 levels), ``speed`` (a float,
    all values distinct), ``lane`` (an integer, 3 values: numeric), ``note`` (Markdown and a
    ``javascript:`` link, hostile text) and ``tags`` (a list), videos by :func:`tools_video`; a video model ``vid`` at two
    budgets (n_f 1 and 2) and a text model ``txt``; analysed with k=3, 5 resamples and the default
    embedding maps (seconds, no model)."""
    from pathlib import Path

    from PIL import Image

    for i in range(0, TOOLS_N, 2):
        folder = Path(tools_video(path, i))
        folder.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8), (40 * (i % 6), 120, 200)).save(folder / "000.png")
    w = StoreWriter(path)
    try:
        items = [Item(i, f"clip{i:02d}", tools_video(path, i), [tools_captions(i), tools_second_caption(i)],
                      metadata=tools_metadata(i))
                 for i in range(TOOLS_N)]
        w.put_dataset("tools", Manifest("tools.jsonl", items))
    finally:
        w.close()
    write_run(path, "vid-f1", tools_vectors("vid-f1", 4), model="vid", modality="video", n_frames=1, dataset="tools")
    write_run(path, "vid-f2", tools_vectors("vid-f2", 4), model="vid", modality="video", n_frames=2, dataset="tools")
    write_run(path, "txt-c1", tools_vectors("txt-c1", 3), model="txt", modality="text", n_captions=1, dataset="tools")
    analyze_store(path, k=3, n_boot=5, log=lambda m: None)



PROMPT_ITEMS, PROMPT_DIM = 32, 8
#: the planted offset of each side from the origin along one axis: "eol" mixes its sides more than "plain"
PROMPT_SHIFTS = {"eol": 0.3, "plain": 2.0}


def prompt_arrays(seed: int = 0) -> dict:
    """``{model: (V, T)}``, each ``(3, N, d)``: one MLLM's two sides under two prompts. Both sides share
    the item latent ``z``; the video side sits at ``+shift·e0``, the text side at ``−shift·e0`` (the
    planted modality gap grows with ``shift``)."""
    rng = np.random.default_rng(seed)
    N, D = PROMPT_ITEMS, PROMPT_DIM
    z = rng.normal(size=(N, D))
    e0 = np.eye(D)[0]
    out = {}
    for model, shift in PROMPT_SHIFTS.items():
        V = np.stack([z + 0.2 * rng.normal(size=(N, D)) + shift * e0 for _ in range(3)])
        T = np.stack([z + 0.2 * rng.normal(size=(N, D)) - shift * e0 for _ in range(3)])
        out[model] = (V.astype(np.float32), T.astype(np.float32))
    return out


def write_prompt_store(path, *, dataset: str = "prompts") -> dict:
    """One MLLM (one source and revision) stored under two names whose text runs carry two prompts (an
    EOL prompt and a plain one), both sides at every layer (``side`` in the config), analysed (k=3,
    20 resamples, no maps); returns :func:`prompt_arrays`."""
    P = prompt_arrays()
    N = PROMPT_ITEMS
    prompts = {"eol": "{text}: Summarize above sentence in one word: ", "plain": "{text}"}
    w = StoreWriter(path)
    try:
        w.put_dataset(dataset, Manifest(f"{dataset}.jsonl", [Item(i, f"it{i}", f"/none/v{i}.mp4", [f"c {i}"])
                                                             for i in range(N)]))
        for model, (V, T) in P.items():
            w.put_model(model, ModelInfo("/m/qwen", "toy", "mllm", "last_token", 3, PROMPT_DIM, 1, None, "r1", False, {}))
            for rid, mod, nf, nc, X, cfg in ((f"{model}-v", "video", 1, None, V, {"side": "video"}),
                                             (f"{model}-t", "text", None, 1, T,
                                              {"side": "text", "prompt": prompts[model]})):
                w.start_run(rid, model=model, dataset=dataset, modality=mod, n_frames=nf, n_captions=nc,
                            variant="original", image_mode=None, pooling="last_token", dtype="float32", device="cpu",
                            n_items=N, n_layers=3, dim=PROMPT_DIM, config=cfg)
                w.write_batch(rid, 0, X, n_done=N, n_items=N)
    finally:
        w.close()
    analyze_store(path, k=3, metrics=("mutual_knn",), n_boot=20, maps=0, n_null=0, log=lambda m: None)
    return P


LABELLED_N, LABELLED_CLASSES = 60, ("circle", "square", "triangle")


def labelled_shapes(n=LABELLED_N):
    """The ``scene.shape`` of each item of :func:`write_labelled_store`: the three classes in turn."""
    return [LABELLED_CLASSES[i % 3] for i in range(n)]


def _labelled_layers(seed: int, n=LABELLED_N, L=4, d=12, strength=(0.0, 0.3, 3.0, 0.5), shared=8.0) -> np.ndarray:
    """Layer 0 collapsed (one vector for every item); layers 1.. separate the classes by ``strength``; the
    last layer also carries, with weight ``shared``, an item-level latent every model of the store shares
    (seeded alike), so alignment between models peaks at the last layer while the classes separate best
    at layer 2: a label-free pick a labelled probe can refute."""
    rng = np.random.default_rng(seed)
    y = np.array([i % 3 for i in range(n)])
    centres = rng.normal(size=(3, d))
    latent = np.random.default_rng(99).normal(size=(n, 8))
    out = [np.tile(rng.normal(size=d), (n, 1))]
    for l in range(1, L):
        X = strength[l] * centres[y] + rng.normal(size=(n, d))
        if l == L - 1:
            X = X + shared * latent @ rng.normal(size=(8, d)) / np.sqrt(8)
        out.append(X)
    return np.stack(out).astype(np.float32)


def write_labelled_store(path, *, metadata=None, n=LABELLED_N) -> dict:
    """A dataset whose items carry ``scene.shape`` (3 classes) and ``colour`` (2 classes), a video
    model and a text model; returns ``{run_id: (L, N, d) array}``."""
    metadata = metadata or [{"scene": {"shape": s}, "colour": ["red", "blue"][i % 2]} for i, s in enumerate(labelled_shapes(n))]
    items = [Item(i, f"item{i}", f"/nonexistent/v{i}.mp4", [f"a {s}"], metadata=md)
             for i, (s, md) in enumerate(zip(labelled_shapes(n), metadata))]
    runs = {"vis-4": ("vis", "video", _labelled_layers(1, n)), "txt-1": ("txt", "text", _labelled_layers(2, n, strength=(0, 1, 2, 0.3)))}
    w = StoreWriter(path)
    try:
        w.put_dataset("toy", Manifest("toy.jsonl", items))
        for run_id, (model, modality, X) in runs.items():
            L, _, d = X.shape
            w.put_model(model, ModelInfo(model, modality, modality, "mean", L, d, 1000, None, "r", False, {}))
            w.start_run(run_id, model=model, dataset="toy", modality=modality,
                        n_frames=4 if modality == "video" else None, n_captions=1 if modality == "text" else None,
                        variant="original", image_mode=None, pooling="mean", dtype="float32", device="cpu",
                        n_items=n, n_layers=L, dim=d, config={})
            w.write_batch(run_id, 0, X, n_done=n, n_items=n)
    finally:
        w.close()
    return {r: x[2] for r, x in runs.items()}


def downgrade_to_v2(store, *, drop=None, repeat=None, change=False) -> None:
    """Rewrite a store in the version-2 layout (one float32 BLOB per run, layer and 4 items), leaving
    out the block ``drop`` and storing the block ``repeat`` twice (each ``(run_id, layer, first_idx)``;
    ``change``: the copy's first value + 1), for ``layerscope migrate``'s tests."""
    import duckdb

    con = duckdb.connect(str(store))
    con.execute("CREATE TABLE embeddings (run_id VARCHAR, layer SMALLINT, first_idx INTEGER, n_items INTEGER, "
                "vectors BLOB)")
    for run_id, dim, n_layers in con.execute("SELECT run_id, dim, n_layers FROM runs").fetchall():
        for layer in range(n_layers):
            rows = con.execute(f"SELECT idx, vec FROM embeddings_{dim} WHERE run_id = ? AND layer = ? ORDER BY idx",
                               [run_id, layer]).fetchall()
            for b in range(0, len(rows), 4):
                key = (run_id, layer, rows[b][0])
                if key == drop:
                    continue
                block = np.array([r[1] for r in rows[b:b + 4]], dtype="<f4")
                copies = [block]
                if key == repeat:
                    copy = block.copy()
                    copy[0, 0] += 1.0 if change else 0.0
                    copies.append(copy)
                for c in copies:
                    con.execute("INSERT INTO embeddings VALUES (?, ?, ?, ?, ?)",
                                [run_id, layer, rows[b][0], len(c), c.tobytes()])
        con.execute(f"DROP TABLE IF EXISTS embeddings_{dim}")
    con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    con.close()


# ---------------------------------------------------------------- shared captions and sources (item table ranks)
GROUPED_N, GROUPED_DIM = 40, 8
#: items whose captions are one text (one embedding at every layer, so right answers for each other's
#: queries in the stored recall): four without a manifest group, two with one
GROUPED_SHARED = ((0, 1, 2, 3), (10, 11))
#: the manifest's ``group`` (an item's source): 10 and 11 share a caption too, 20-23 only their source
GROUPED_SOURCES = {10: "s1", 11: "s1", 20: "s2", 21: "s2", 22: "s2", 23: "s2"}
#: text 31 is text 30 times two: one direction, not one embedding (not grouped), so each of the two items'
#: videos finds the other's caption exactly as close as its own (dyadic rows, exact in any summation order)
GROUPED_TIE = (30, 31)


def grouped_arrays() -> tuple[np.ndarray, np.ndarray]:
    """``(V, T)``, each ``(3, N, d)`` float32, of one MLLM's two sides. Layer 2 (the last): captions sit
    near their videos, :data:`GROUPED_SHARED` items' text rows are one row, source ``s2``'s items lie
    near one point on both sides (each other's closest wrong answers), :data:`GROUPED_TIE` planted.
    Layer 1: every item joined to every other by a chain (items 2m and 2m+1 share a caption, items 2m+1
    and 2m+2 a video), one group. Layer 0: the text side collapsed (every caption one point)."""
    N, D = GROUPED_N, GROUPED_DIM
    rng = np.random.default_rng(11)
    V = rng.normal(size=(3, N, D))
    T = V + 0.9 * rng.normal(size=V.shape)
    source = [i for i, g in GROUPED_SOURCES.items() if g == "s2"]
    scene = rng.normal(size=D)  # several clips of one scene: near each other on both sides, not one embedding
    V[2, source] = scene + 0.3 * rng.normal(size=(len(source), D))
    T[2, source] = scene + 0.3 * rng.normal(size=(len(source), D))
    for shared in GROUPED_SHARED:
        T[2, list(shared)] = T[2, shared[0]]
    a, b = GROUPED_TIE
    T[2, a] = [0.5] * 4 + [0.0] * 4  # unit norm: normalising and every product below are exact
    T[2, b] = 2 * T[2, a]
    V[2, a], V[2, b] = T[2, a], [0.5, 0.5, 0.5, -0.5] + [0.0] * 4  # cosines 1 and 1, 0.5 and 0.5
    for m in range(0, N - 1, 2):
        T[1, m + 1] = T[1, m]
        if m + 2 < N:
            V[1, m + 2] = V[1, m + 1]
    T[0] = T[0, :1]
    return V.astype(np.float32), T.astype(np.float32)


def grouped_caption(i: int) -> str:
    for shared in GROUPED_SHARED:
        if i in shared:
            return f"shared caption {shared[0]}"
    return f"caption {i}"


def write_grouped_store(path, *, maps: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Dataset ``grouped``: :func:`grouped_arrays` as an MLLM ``m``'s video run ``m-v`` and text run
    ``m-t`` (``side`` in their configs, so the same_space study ranks them), captions
    :func:`grouped_caption`, the manifest's ``group`` :data:`GROUPED_SOURCES`; analysed (k=3, no
    resamples, no null, ``maps`` embedding maps). Returns ``(V, T)``."""
    V, T = grouped_arrays()
    N, D = GROUPED_N, GROUPED_DIM
    items = [Item(i, f"it{i:02d}", f"/none/v{i}.mp4", [grouped_caption(i)],
                  metadata={"group": GROUPED_SOURCES[i]} if i in GROUPED_SOURCES else {}) for i in range(N)]
    w = StoreWriter(path)
    try:
        w.put_dataset("grouped", Manifest("grouped.jsonl", items))
        w.put_model("m", ModelInfo("/m/m", "toy", "mllm", "last_token", 3, D, 1, None, "r1", True, {}))
        for rid, mod, nf, nc, X in (("m-v", "video", 4, None, V), ("m-t", "text", None, 1, T)):
            w.start_run(rid, model="m", dataset="grouped", modality=mod, n_frames=nf, n_captions=nc,
                        variant="original", image_mode=None, pooling="mean", dtype="float32", device="cpu",
                        n_items=N, n_layers=3, dim=D, config={"side": mod})
            w.write_batch(rid, 0, X, n_done=N, n_items=N)
    finally:
        w.close()
    analyze_store(path, k=3, metrics=("mutual_knn",), n_boot=0, n_null=0, maps=maps, log=lambda m: None)
    return V, T

# ---------------------------------------------------------------- an analysis that stops part-way
def current_rows(con, dataset: str | None = None) -> dict:
    """The rows the readers show (of ``dataset``, or every dataset), decoded, per table (without their
    ``computed`` stamps)."""
    from analysis.storage import results as R

    out = {}
    for table, read in (("result_grids", R.read_grids), ("result_profiles", R.read_profiles),
                        ("result_studies", R.read_studies)):
        out[table] = sorted(({k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in r.items() if k != "computed"}
                             for r in read(con, current=True) if dataset is None or r["dataset"] == dataset),
                            key=lambda r: r["result_id"])
    return out


def rows_of_studies(con, studies, dataset: str | None = None) -> dict:
    """:func:`current_rows` of an uninterrupted analysis, kept to the rows of ``studies`` (profiles and
    grids are tables of their own; every other study's rows carry its name)."""
    names = {"verdicts": "verdict"}  # (the verdicts study stores its rows as study "verdict")
    got = current_rows(con, dataset)
    return {"result_grids": got["result_grids"] if "grids" in studies else [],
            "result_profiles": got["result_profiles"] if "profiles" in studies else [],
            "result_studies": [r for r in got["result_studies"]
                               if r["study"] in {names.get(s, s) for s in studies}]}


#: ``analyze_store`` settings as cheap as a test of what analyze records can take: k = 3, no
#: resamples, maps or shuffles, one job
CHEAP_ANALYSIS = dict(k=3, n_boot=0, maps=0, n_null=0, jobs=1)


def analysed_copy(runs, path, **settings):
    """A copy of the store ``runs`` at ``path``, analysed once with ``settings`` (``analyze_store``'s
    keywords); returns ``path``."""
    import shutil

    from analysis.studies import analyze_store

    shutil.copy(runs, path)
    analyze_store(path, log=lambda _m: None, **settings)
    return path


def stopped_analysis(store, study: str, error: BaseException | type = KeyboardInterrupt, **settings) -> None:
    """``analyze_store(store, **settings)`` stopped by ``error`` raised as ``study`` starts (one of
    :data:`analysis.studies.STUDY_ORDER`'s modules: Ctrl-C by default), as a person pressing Ctrl-C
    or a failing study would stop it; the error is expected and swallowed."""
    import pytest

    from analysis import studies

    module = getattr(studies, study)
    run = module.run

    def stop(*args, **kwargs):
        raise error

    module.run = stop
    try:
        with pytest.raises(error if isinstance(error, type) else type(error)):
            analyze_store(store, log=lambda _m: None, **settings)
    finally:
        module.run = run
