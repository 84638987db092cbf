"""Embedding-map study (``result_studies``, study ``embedding_map``): UMAP maps of chosen layers, one
row per map, so the dashboard draws clusters and the modality gap without computing anything; each
two-sided map also by PCA and t-SNE (TARA's pictures of the gap; ``payload["method"]``, subject
suffix `` · pca`` / `` · tsne``; t-SNE unasked only up to
:data:`TSNE_DEFAULT_ITEMS` items).

Which maps ``analyze`` computes (:func:`default_maps`), per dataset, each model at its largest
setting (:meth:`DatasetRuns.largest_settings`):

- **shared space first**: a model with a video and a text run (an MLLM, or a dual encoder
  precomputed as both) gets one two-sided map, at the layer both sides name ``joint`` when they do
  (a dual encoder's towers meet only there), else, when both sides have the same layers and width
  (an MLLM's one language model), at the last numbered layer and at the video side's recommended one;
- per run: the **last numbered layer**, the **layer-choice recommendation** (the layer most label-free
  curves pick, :mod:`.layer_choice`, which runs before), and every **named layer** of the run's
  ``layer_names`` (``default``, ``joint``);
- at most ``--maps`` (:data:`~.context.DEFAULT_MAPS`) per dataset (a note lists what was left out), each over at most
  :data:`MAX_POINTS` items (a seeded sample beyond, the same for every map of the dataset);
- plus every map a user asked for before (:func:`request_map`, ``layerscope map``), kept current.

Cost: about a second per map of a few hundred points once umap-learn is compiled; the first map
of a process pays ``import umap`` (a few seconds), and the first on a machine numba's compilation
(10-35 s on a busy 2-core machine; later processes load it from numba's disk cache, see
:mod:`analysis.methods.embedding_map`). A second ``analyze`` with unchanged runs reuses every map and never
imports umap.

Other layers: the dashboard holds no write connection and a first UMAP can take half a minute, so
the page does not compute; it prints the command (``layerscope map --store S --dataset D --model M
--layer L``) that calls :func:`request_map`, and the map appears on the next refresh.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from analysis.storage import results as R
from analysis.methods.embedding_map import (
    METHODS,
    MIN_DIST,
    N_NEIGHBORS,
    MapUndefined,
    map_coords,
    sample_items,
    two_sided_coords,
)
from analysis.studies.context import VISION, Context, DatasetRuns

STUDY = "embedding_map"
#: items per map; beyond, a seeded sample (the exact k-NN graph is O(N^2) and a picture of more
#: points than pixels shows no more)
MAX_POINTS = 3000
#: t-SNE maps ``analyze`` computes unasked only up to this many items (TARA draws N = 1000 pairs):
#: Barnes-Hut t-SNE took ~50 s for 1000 points on a busy 2-core machine, and grows as N log N;
#: larger datasets get a note and ``layerscope map --method tsne`` computes one on request
TSNE_DEFAULT_ITEMS = 1000


@dataclass(frozen=True)
class MapSpec:
    """One map to compute: one run at one layer, or two runs (video side first) at one layer each."""

    model: str
    run_ids: tuple
    layers: tuple
    sides: tuple  # "video" / "image" / "text" per run
    why: str  # why this map: "last numbered layer", "recommended by layer choice", ...
    method: str = "umap"  # analysis.methods.embedding_map.METHODS

    @property
    def subject(self) -> str:
        """The map's name in ``result_studies.subject``: ``"model · video L3 + text L3"``, with
        `` · pca`` / `` · tsne`` after it for a map by another method than UMAP."""
        name = f"{self.model} · " + " + ".join(f"{s} L{la}" for s, la in zip(self.sides, self.layers))
        return name if self.method == "umap" else f"{name} · {self.method}"


def layer_names(run: dict) -> dict[int, str]:
    """``{layer index: name}`` from the run's config (``layer_names``; named layers come after the
    numbered ones), ``{}`` when it names none."""
    cfg = run.get("config") or {}
    if isinstance(cfg, str):
        cfg = json.loads(cfg)
    return {int(i): str(n) for i, n in (cfg.get("layer_names") or {}).items()}


def layer_width(run: dict, layer: int) -> int:
    """The true width of one layer: a named layer narrower than the run (a dual encoder's projected
    ``joint`` output) is stored zero-padded, with its width in the config's ``layer_dims``."""
    cfg = run.get("config") or {}
    if isinstance(cfg, str):
        cfg = json.loads(cfg)
    return int((cfg.get("layer_dims") or {}).get(str(layer), run["dim"]))


def last_numbered(run: dict) -> int:
    """The last layer before any named one (the encoder's own last block)."""
    names = layer_names(run)
    return (min(names) - 1) if names else int(run["n_layers"]) - 1


def _side(run: dict) -> str:
    return run["modality"]


def _modal_layer(rows: list[dict]) -> int | None:
    if not rows:
        return None
    # a model whose curves are all undefined has a layer-choice row with no agreement
    return (rows[0]["payload"].get("agreement") or {}).get("modal_layer")


def default_maps(d: DatasetRuns, recommended: dict) -> tuple[list[MapSpec], list[str]]:
    """The maps ``analyze`` computes for one dataset, in priority order, and notes on pairs that
    share no space. ``recommended``: ``{largest_settings key: layer}`` from the layer-choice study."""
    chosen = d.largest_settings()
    specs, notes = [], []
    for key in sorted(chosen):
        run = chosen[key]
        text = chosen.get(f"{key} [text]")
        if run["modality"] not in VISION or text is None:
            continue
        vn, tn = layer_names(run), layer_names(text)
        vj = [i for i, n in vn.items() if n == "joint"]
        tj = [i for i, n in tn.items() if n == "joint"]
        pair = (run["run_id"], text["run_id"])
        sides = (_side(run), "text")
        if vj and tj:
            specs.append(MapSpec(key, pair, (vj[0], tj[0]), sides, "shared space: both towers' joint layer"))
        elif int(run["dim"]) == int(text["dim"]) and int(run["n_layers"]) == int(text["n_layers"]) and not (vn or tn):
            last = last_numbered(run)
            specs.append(MapSpec(key, pair, (last, last), sides, "shared space: last layer of both sides"))
            rec = recommended.get(key)
            if rec is not None and rec != last:
                specs.append(MapSpec(key, pair, (rec, rec), sides,
                                     "shared space: the video side's recommended layer on both sides"))
        else:
            notes.append(f"{key}: its video and text runs share no layer (widths {run['dim']} and {text['dim']}, "
                         f"{run['n_layers']} and {text['n_layers']} layers, no layer named 'joint' on both): "
                         "no two-sided map")
    for key in sorted(chosen):
        run = chosen[key]
        model = run["model"]
        last = last_numbered(run)
        specs.append(MapSpec(model, (run["run_id"],), (last,), (_side(run),), "last numbered layer"))
        rec = recommended.get(key)
        if rec is not None and rec != last:
            specs.append(MapSpec(model, (run["run_id"],), (int(rec),), (_side(run),), "recommended by layer choice"))
        for i, name in sorted(layer_names(run).items()):
            specs.append(MapSpec(model, (run["run_id"],), (i,), (_side(run),), f"named layer '{name}'"))
    # the modality gap as TARA pictures it (PCA, t-SNE) beside UMAP, for every two-sided map; last, so
    # the --maps cap drops them first
    methods = [m for m in METHODS if m != "umap" and (m != "tsne" or d.n_items <= TSNE_DEFAULT_ITEMS)]
    pairs = [s for s in specs if len(s.run_ids) == 2]
    specs += [MapSpec(s.model, s.run_ids, s.layers, s.sides, s.why, method) for s in pairs for method in methods]
    if pairs and "tsne" not in methods:
        notes.append(f"{d.n_items} items, more than {TSNE_DEFAULT_ITEMS}: two-sided maps by UMAP and PCA only; "
                     "ask for a t-SNE one with `layerscope map ... --side both --method tsne`")
    seen, out = set(), []
    for s in specs:
        if (s.run_ids, s.layers, s.method) not in seen:
            seen.add((s.run_ids, s.layers, s.method))
            out.append(s)
    return out, notes


def _result_id(ctx: Context, dataset: str, spec: MapSpec) -> str:
    key = [STUDY, dataset, list(spec.run_ids), list(spec.layers), ctx.settings.seed, MAX_POINTS, N_NEIGHBORS, MIN_DIST]
    # UMAP, the default method, is keyed without its name; another method adds its name to the key
    return ctx.rid(*key) if spec.method == "umap" else ctx.rid(*key, spec.method)


def compute_map(ctx: Context, dataset: str, spec: MapSpec, runs_by_id: dict, *, requested: bool = False) -> bool:
    """Compute and store one map unless its stored row is current; returns whether it computed.

    A degenerate layer stores a row with ``reason`` (the page shows the sentence instead of a picture).
    """
    rid = _result_id(ctx, dataset, spec)
    runs = [runs_by_id[r] for r in spec.run_ids]
    ikey = R.key([(r["run_id"], str(r["finished"])) for r in runs])
    if not ctx.fresh(STUDY, "result_studies", rid, ikey):
        return False
    for r, layer in zip(runs, spec.layers):
        if not 0 <= layer < int(r["n_layers"]):
            raise ValueError(f"run {r['run_id']} ({r['model']}) has layers 0..{int(r['n_layers']) - 1}, not {layer}")
    n = int(runs[0]["n_items"])
    items = sample_items(n, MAX_POINTS, ctx.settings.seed)
    names = tuple(f"{r['model']} {s} layer {la}" for r, s, la in zip(runs, spec.sides, spec.layers))
    # zero padding of a narrow named layer is dropped, so two towers' joint outputs compare
    X = [ctx.engine.emb(r["run_id"])[la][items][:, :layer_width(r, la)] for r, la in zip(runs, spec.layers)]
    payload = {"kind": "pair" if len(runs) == 2 else "single", "model": spec.model,
               "models": [r["model"] for r in runs], "run_ids": list(spec.run_ids), "layers": list(spec.layers),
               "layer_names": [layer_names(r).get(la) for r, la in zip(runs, spec.layers)],
               "sides": list(spec.sides), "why": spec.why, "requested": requested, "method": spec.method,
               "settings": [{"n_frames": r["n_frames"], "n_captions": r["n_captions"]} for r in runs],
               "n_items": n, "items": items.tolist(), "sampled": bool(len(items) < n),
               "n_neighbors": N_NEIGHBORS, "min_dist": MIN_DIST, "seed": ctx.settings.seed, "reason": None}
    ctx.log(f"embedding map {dataset}: {spec.subject}")
    from analysis.metrics.base import one_blas_thread

    try:
        # one thread, BLAS and OpenMP, as the rest of the analysis, on whichever thread computes the
        # map (`layerscope map` holds nothing else); libraries loaded since the analysis took its hold
        # (scikit-learn's OpenMP pool for t-SNE's gradient) are held from here: on two threads a few
        # hundred points spend most of each of the 1000 iterations waiting; one thread gives the same
        # coordinates bit for bit, many times faster on a busy machine
        with one_blas_thread(openmp=True):
            if len(X) == 2:
                m = two_sided_coords(X[0], X[1], seed=ctx.settings.seed, names=names, method=spec.method)
            else:
                m = map_coords(X[0], method=spec.method, seed=ctx.settings.seed, name=names[0])
        payload.update(x=m.coords[:, 0].round(5).tolist(), y=m.coords[:, 1].round(5).tolist(),
                       side=None if m.side is None else m.side.tolist(), n_neighbors=m.n_neighbors,
                       n_distinct=m.n_distinct, n_duplicates=m.n_duplicates)
    except MapUndefined as exc:
        payload["reason"] = str(exc)
    except ValueError as exc:  # two sides of different widths: no shared space after all
        payload["reason"] = f"no shared space: {exc}"
    ctx.put_study(result_id=rid, study=STUDY, dataset=dataset, subject=spec.subject,
                params={"run_ids": list(spec.run_ids), "layers": list(spec.layers), "sides": list(spec.sides),
                        "model": spec.model, "why": spec.why, "requested": requested, "seed": ctx.settings.seed,
                        "method": spec.method},
                payload=payload, input_key=ikey)
    return True


def _requested(ctx: Context, d: DatasetRuns) -> list[MapSpec]:
    """Maps asked for with ``layerscope map`` whose runs are still current."""
    have = {r["run_id"] for r in d.runs}
    out = []
    for row in ctx.read_studies(study=STUDY, dataset=d.name):
        p = row["params"]
        if p["requested"] and set(p["run_ids"]) <= have:
            out.append(MapSpec(p["model"], tuple(p["run_ids"]), tuple(p["layers"]), tuple(p["sides"]), p["why"],
                               p["method"]))
    return out


def run(ctx: Context, d: DatasetRuns) -> None:
    chosen = d.largest_settings()
    by_subject: dict = {}
    for row in ctx.read_studies(study="layer_choice", dataset=d.name):  # one query, not one per model
        by_subject.setdefault(row["subject"], []).append(row)
    recommended = {k: _modal_layer(by_subject.get(k, [])) for k in chosen}
    specs, notes = default_maps(d, recommended)
    for note in notes:
        ctx.note(f"dataset {d.name!r}: {note}")
    cap = ctx.settings.maps
    if len(specs) > cap:
        left = specs[cap:]
        ctx.note(f"dataset {d.name!r}: {len(left)} embedding map(s) left out past the cap of {cap} "
                 f"({', '.join(s.subject for s in left[:4])}{' ...' if len(left) > 4 else ''}); "
                 "ask for one with `layerscope map`, or raise `analyze --maps`")
        specs = specs[:cap]
    by_id = {r["run_id"]: r for r in d.runs}
    done = {(s.run_ids, s.layers, s.method) for s in specs}
    for spec in specs:
        compute_map(ctx, d.name, spec, by_id)
    for spec in _requested(ctx, d):
        if (spec.run_ids, spec.layers, spec.method) not in done:
            compute_map(ctx, d.name, spec, by_id, requested=True)


def resolve_request(d: DatasetRuns, model: str, layer, *, side: str = "auto", text_layer=None,
                    method: str = "umap") -> MapSpec:
    """The map ``layerscope map`` asks for: ``model`` at its largest setting, ``layer`` a number or a
    name of the run's ``layer_names``; ``side``: ``video`` / ``text`` (one run), ``both`` (a two-sided
    map, the text side at ``text_layer``, default the same layer), ``auto`` (the model's only side,
    else its vision side); ``method``: :data:`METHODS`. Raises ``ValueError`` naming what is unknown."""
    if method not in METHODS:
        raise ValueError(f"--method must be one of {', '.join(METHODS)}, got {method!r}")
    chosen = d.largest_settings()
    models = sorted({r["model"] for r in d.originals})
    if model not in models:
        raise ValueError(f"no done run of model {model!r} on dataset {d.name!r}; models: {', '.join(models)}")
    vision = chosen.get(model) if chosen.get(model, {}).get("modality") in VISION else None
    text = chosen.get(f"{model} [text]") or (chosen.get(model) if chosen.get(model, {}).get("modality") == "text"
                                             else None)
    if side not in ("auto", "video", "text", "both"):
        raise ValueError(f"--side must be auto, video, text or both, got {side!r}")
    if text_layer is not None and side != "both":  # it names the text side of a two-sided map only
        raise ValueError(f"--text-layer goes with --side both (the text side's layer of a two-sided map), not "
                         f"--side {side}; a map of the text side alone takes --side text --layer {text_layer}")
    if side == "auto":
        side = "video" if vision is not None else "text"
    want = {"video": [vision], "text": [text], "both": [vision, text]}[side]
    if any(r is None for r in want):
        missing = {"video": "video", "text": "text", "both": "video" if vision is None else "text"}[side]
        has = "text" if text is not None else "video" if vision is not None else None
        raise ValueError(f"model {model!r} has no {missing} run on dataset {d.name!r}"
                         + (f"; it has a {has} run: pass --side {has}" if has and has != missing else ""))

    def index(run, value):
        names = {n: i for i, n in layer_names(run).items()}
        if str(value) in names:
            return names[str(value)]
        try:
            i = int(str(value))
        except ValueError:
            raise ValueError(f"layer {value!r} of {model} is neither a number nor one of its named layers "
                             f"{sorted(names) or '(none)'}") from None
        if not 0 <= i < int(run["n_layers"]):
            raise ValueError(f"{model} ({run['modality']}) has layers 0..{int(run['n_layers']) - 1}, not {i}")
        return i

    layers = [index(want[0], layer)]
    if len(want) == 2:
        layers.append(index(want[1], layer if text_layer is None else text_layer))
        widths = [layer_width(r, la) for r, la in zip(want, layers)]
        if widths[0] != widths[1]:
            raise ValueError(f"{model}'s video layer {layers[0]} and text layer {layers[1]} have widths "
                             f"{widths[0]} and {widths[1]}: no shared space to map")
    return MapSpec(model, tuple(r["run_id"] for r in want), tuple(layers), tuple(_side(r) for r in want),
                   "requested", method)


def request_map(store, *, dataset: str, model: str, layer, side: str = "auto", text_layer=None,
                method: str = "umap", log=print) -> dict:
    """Compute one map now (``layerscope map``) with the store's saved analysis settings (seed,
    clamp), and keep it: later ``analyze`` runs recompute it when its runs change. Returns
    ``{"subject", "computed", "reason"}`` (``reason``: why the layer has no map, else None)."""
    from analysis.storage.schema import create_all
    from analysis.storage.integrity import scan_store
    from analysis.storage.store import check_store_path, connect
    from analysis.studies import drop_stale_results, plan_datasets, resolve_settings
    from analysis.studies.context import Context

    check_store_path(store, must_exist=True)  # a mistyped path must not become a new, empty store
    con = connect(store, read_only=False)
    ctx = None
    try:
        non_finite = scan_store(con)  # as analyze: read everything before the first write
        create_all(con, str(store))
        drop_stale_results(con, log)  # as analyze does: stamps the version, so a later analyze keeps this map
        ctx = Context(store, con, resolve_settings(con, {}), log=log)
        plan = plan_datasets(con, [dataset], ctx, non_finite)
        d = plan[dataset]
        spec = resolve_request(d, model, layer, side=side, text_layer=text_layer, method=method)
        computed = compute_map(ctx, dataset, spec, {r["run_id"]: r for r in d.runs}, requested=True)
        (row,) = ctx.read_studies(study=STUDY, result_id=_result_id(ctx, dataset, spec))  # flushes the map
        R.add_current(ctx.con, ctx.touched)  # computed with the saved settings: part of the current analysis
        return {"subject": spec.subject, "computed": computed, "reason": row["payload"]["reason"]}
    finally:
        (ctx.con if ctx is not None else con).close()
