"""The ``layerscope`` command line: one entry point, one subcommand per job.

Heavy imports (torch, transformers, streamlit) happen inside the subcommand that needs them, so
``layerscope metrics`` or ``layerscope runs`` start instantly.
"""

from __future__ import annotations

import argparse
import sys

EPILOG = """examples:
  layerscope metrics
  layerscope precompute --store data/my.duckdb --manifest videos.jsonl --dataset mine \\
      --model MCG-NJU/videomae-base --frames 1,2,4,8,16
  layerscope precompute --store data/my.duckdb --manifest videos.jsonl --dataset mine \\
      --model ./my-text-model --captions 1,2,4,8,10
  layerscope runs --store data/my.duckdb
  layerscope analyze --store data/my.duckdb
  layerscope dashboard --store data/my.duckdb
  layerscope report --store data/my.duckdb --out report.html
  layerscope demo
"""


def cmd_metrics(args) -> int:
    from analysis.registry import KINDS, REGISTRY

    rows = []
    for spec in REGISTRY.values():
        direction = {True: "higher", False: "lower", None: "-"}[spec.higher_is_better]
        lo, hi = spec.bounds
        bounds = f"[{'-inf' if lo is None else format(lo, 'g')}, {'inf' if hi is None else format(hi, 'g')}]"
        params = ", ".join(f"{k}={v!r}" for k, v in spec.params.items()) or "-"
        rows.append((spec.name, spec.kind, direction, bounds, params, spec.summary))
    if args.json:
        import json

        keys = ("name", "kind", "better", "bounds", "params", "summary")
        print(json.dumps([dict(zip(keys, r)) for r in rows], indent=2))
        return 0
    header = ("metric", "kind", "better", "bounds", "parameters", "what it measures")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(5)]
    line = "  ".join(h.ljust(w) for h, w in zip(header[:5], widths)) + "  " + header[5]
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r[:5], widths)) + "  " + r[5])
    print()
    for kind, meaning in KINDS.items():
        print(f"{kind}: {meaning}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="layerscope",
        description="Label-free, layer-wise comparison of video, image and text encoders.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser("metrics", help="list the metric registry")
    p.add_argument("--json", action="store_true", help="print the registry as JSON")
    p.set_defaults(func=cmd_metrics)
    for register in _REGISTRARS:
        register(sub)
    _register_sweep(sub)
    return parser


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return sorted(set(values))


def _count(minimum: int):
    """argparse type: an integer >= minimum (``--bootstrap -5`` is refused, 0 means off)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value
    parse.__name__ = "integer"
    return parse


def cmd_precompute(args) -> int:
    from .manifest import load_manifest
    from .runner import run_precompute

    manifest = load_manifest(args.manifest)
    options = dict(
        store=args.store, manifest=manifest, dataset=args.dataset, models=args.model, names=args.name,
        modality=args.modality, frames=args.frames, captions=args.captions,
        variants=[args.variant] if args.variant else ["original"], batch_size=args.batch_size,
        device=args.device, dtype=args.dtype, image_mode=args.image_mode, shard=args.shard,
        allow_fewer_captions=args.allow_fewer_captions, trust_remote_code=args.trust_remote_code,
        caption_order=args.caption_order, caption_seed=args.caption_seed, prompt_template=args.prompt_template,
        blocks=args.blocks, random_init=args.random_init, named_layers=args.named_layers, progress=not args.quiet,
    )
    if args.gpus_per_model is not None and not args.ray:
        raise UserError("--gpus-per-model only applies with --ray")
    if args.ray:  # the same runs on a Ray cluster (precompute/ray_backend.py)
        from .ray_backend import RaySession, ray_job

        with RaySession(args.ray) as session:
            summary = run_precompute(**options, job_cls=ray_job(session, gpus_per_model=args.gpus_per_model))
    else:
        summary = run_precompute(**options)
    print(
        f"precompute: {summary.runs_computed} run(s) computed, {summary.runs_done_before} already done, "
        f"{summary.items_embedded} item embeddings in {summary.seconds:.1f} s -> {args.store}"
    )
    return 0


def cmd_runs(args) -> int:
    from analysis.store import list_runs

    runs = list_runs(args.store)
    if not runs:
        print(f"{args.store}: no runs yet. Start with `layerscope precompute ...` or `layerscope demo`.")
        return 0
    header = ("dataset", "model", "modality", "n_f", "n_c", "variant", "status", "items", "layers", "dim", "run_id")
    rows = [(r["dataset"], r["model"], r["modality"], r["n_frames"] or "-", r["n_captions"] or "-", r["variant"],
             r["status"], f"{r['n_done']}/{r['n_items']}", r["n_layers"], r["dim"], r["run_id"]) for r in runs]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for row in [header, *rows]:
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)))
    done = sum(r["status"] == "done" for r in runs)
    print(f"\n{len(runs)} run(s), {done} done, {len(runs) - done} unfinished (rerun the same precompute command to resume)")
    return 0


def _add_ray_flags(p) -> None:
    p.add_argument("--ray", metavar="local|auto|ADDRESS",
                   help="run on Ray: local starts Ray on this machine, auto joins this machine's cluster, "
                        "ADDRESS (HOST:6379 or ray://HOST:10001) joins that one (needs pip install -e '.[ray]')")
    p.add_argument("--gpus-per-model", type=float, default=None,
                   help="with --ray: GPUs each model actor requests (default 1 where the cluster has GPUs, else 0)")


def _register_precompute(sub):
    p = sub.add_parser("precompute", help="embed a dataset with models, every layer, into a DuckDB store",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    p.add_argument("--store", required=True, help="DuckDB file (created if missing)")
    p.add_argument("--manifest", required=True, help="JSONL or CSV manifest: id, video, captions[, negatives]")
    p.add_argument("--dataset", required=True, help="name of the dataset in the store")
    p.add_argument("--model", required=True, action="append",
                   help="hub id or local folder, timm:NAME or open_clip:ARCH/PRETRAINED (repeat for several "
                        "models; `layerscope models` lists what each loader takes)")
    p.add_argument("--name", action="append", help="store name for each --model (default: hub id or folder name)")
    p.add_argument("--modality", choices=["video", "image", "text", "mllm"],
                   help="override what a model is used as (e.g. a CLIP model as text)")
    p.add_argument("--frames", type=_int_list, default=[1, 2, 4, 8, 16], help="n_f values (default 1,2,4,8,16)")
    p.add_argument("--captions", type=_int_list, default=[1, 2, 4, 8, 10], help="n_c values (default 1,2,4,8,10)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda (default auto: GPU when there is one)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--batch-size", type=int, default=8, help="items per forward batch and per committed transaction")
    p.add_argument("--shard", help="I/N: only the I-th of N contiguous item shards (for parallel jobs)")
    p.add_argument("--variant", choices=["original", "reversed"], help="reversed: time-reversed videos")
    p.add_argument("--image-mode", choices=["frames", "first"], default="frames",
                   help="image models: average the sampled frames (default) or use the first frame only")
    p.add_argument("--allow-fewer-captions", action="store_true",
                   help="items with fewer than n_c captions use all they have (recorded) instead of an error")
    p.add_argument("--caption-order", choices=["first", "random"], default="first",
                   help="which n_c captions: the first n_c (default) or a seeded random subset per item "
                        "(another order is another run)")
    p.add_argument("--caption-seed", type=int, default=0,
                   help="seed of --caption-order random (recorded in each caption run's config; default 0)")
    p.add_argument("--prompt-template", choices=["auto", "none"], default="auto",
                   help="MLLMs: wrap the one-word prompt in the model's chat template when it has one (auto, "
                        "default) or use the bare prompt (none); the prompt used is recorded in each run")
    p.add_argument("--trust-remote-code", action="store_true", help="allow model code from the hub (off by default); "
                   "models of a type transformers does not know (VideoMAEv2) run through hooks on their blocks")
    p.add_argument("--blocks", metavar="PATH", help="dotted path of the model's block list (e.g. encoder.layer): "
                   "extract through forward hooks on it instead of hidden_states (found automatically for "
                   "remote-code, timm and open_clip models)")
    p.add_argument("--random-init", action="store_true", help="build each model with seeded random weights "
                   "(the standard control; labelled random_init in the store, '-random-init' in the default name)")
    p.add_argument("--named-layers", action=argparse.BooleanOptionalAction, default=True,
                   help="transformers models: also store the model's default output (`default`) and, for "
                   "CLIP/SigLIP/X-CLIP, the projected joint embedding (`joint`) after the numbered layers (on by "
                   "default; --no-named-layers stores the hidden states only, the run ids of stores made before "
                   "named layers; remote-code, --blocks, timm and open_clip models always store them)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    _add_ray_flags(p)
    p.set_defaults(func=cmd_precompute)
    r = sub.add_parser("runs", help="list the runs a store holds")
    r.add_argument("--store", required=True)
    r.set_defaults(func=cmd_runs)


def cmd_models(args) -> int:
    from .loaders import catalog

    rows = catalog()
    if args.json:
        import json

        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        print(f"{r['loader']}\n  model:    {r['form']}\n  families: {r['families']}\n  pooling:  {r['pooling']}"
              f"\n  layers:   {r['layers']}\n")
    print("Named layers are stored after the numbered ones; each run's config JSON names them "
          "(layer_names) and gives the true width of any narrower one (layer_dims; zero-padded in the store).")
    return 0


def _register_models(sub):
    p = sub.add_parser("models", help="what each model loader supports and how it pools")
    p.add_argument("--json", action="store_true", help="machine-readable list")
    p.set_defaults(func=cmd_models)


def cmd_demo(args) -> int:

    from .demo import run_demo

    summary = run_demo(store=args.store, small=args.small, dashboard=not args.no_dashboard,
                       data_dir=args.data_dir, progress=not args.quiet)
    print(f"demo: {summary['runs_computed']} run(s) computed, {summary['runs_reused']} reused, "
          f"{summary['seconds']:.0f} s -> {summary['store']}")
    return 0


def _register_demo(sub):
    p = sub.add_parser("demo", help="generate synthetic videos, embed them with offline models, analyse, explore")
    p.add_argument("--store", default="data/demo.duckdb", help="store to fill (default data/demo.duckdb)")
    p.add_argument("--data-dir", default="data", help="where generated videos and demo models go (default data/)")
    p.add_argument("--small", action="store_true", help="fewer items and settings (about a minute)")
    p.add_argument("--no-dashboard", action="store_true", help="do not open the dashboard at the end")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_demo)


def cmd_analyze(args) -> int:
    import time

    from analysis.registry import route_metrics
    from analysis.studies import analyze_store, default_jobs

    t0 = time.perf_counter()
    grid_metrics, notes = route_metrics(args.metric)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    out = analyze_store(args.store, k=args.k, metrics=grid_metrics or None, references=args.reference, n_boot=args.bootstrap,
                        datasets=args.dataset, clamp=args.clamp, reorder_k=args.reorder_k,
                        downstream_setting=args.downstream_setting, maps=args.maps, knn=args.knn, n_null=args.null_perms, jobs=default_jobs() if args.jobs is None else args.jobs, progress=not args.quiet,
                        log=lambda m: print(m, file=sys.stderr, flush=True))
    print(summary_lines(out, args.store, time.perf_counter() - t0))
    return 0


def summary_lines(out: dict, store, seconds: float) -> str:
    """What analyze computed and what it reused, per study, then the totals."""
    lines = []
    for study in sorted(set(out["computed_by_study"]) | set(out["reused_by_study"])):
        lines.append(f"  {study:<13} {out['computed_by_study'].get(study, 0):>6} computed "
                     f"{out['reused_by_study'].get(study, 0):>6} reused")
    s = out["settings"]
    lines.append(f"  layer stacks prepared: {out['preparations']} ({out['layer_preparations']} layers), "
                 f"grids scored: {out['grids_scored']}")
    lines.append(f"analyze: {out['computed']} result(s) computed, {out['skipped']} unchanged and skipped, "
                 f"{len(out['notes'])} note(s), {seconds:.1f} s -> {store}  "
                 f"[k={s['k']}, metrics={','.join(s['metrics'])}, bootstrap={s['n_boot']}, seed={s['seed']}, "
                 f"clamp={s['clamp']}, reorder k={s['reorder_k']}, downstream={s['downstream_setting']}, maps={s.get('maps')}, knn={s.get('knn')}, "
                 f"null perms={s.get('n_null')}]")
    return "\n".join(lines)


def cmd_downstream(args) -> int:
    from analysis.downstream_import import import_downstream

    n = import_downstream(args.store, args.csv)
    print(f"downstream: {n} result(s) imported into {args.store}; run `layerscope analyze` to correlate them")
    return 0


def _register_analyze(sub):
    p = sub.add_parser("analyze", help="grids, scaling laws, model map, downstream, temporal probes, layer choice")
    p.add_argument("--store", required=True)
    p.add_argument("--k", type=_count(1), help="neighbours for k-NN metrics (default: the store's last setting, "
                   "else 10)")
    p.add_argument("--metric", action="append", help="any registry metric (repeatable; `layerscope metrics` lists "
                   "them): pairwise ones choose the grids' metrics (default: the store's last setting, else "
                   "mutual_knn, cka, cknna); single, same-space and unpaired ones are always computed where their "
                   "data exists, and a note says where")
    p.add_argument("--reference", action="append", help="reference model(s) for downstream scores "
                   "(default: every text model)")
    p.add_argument("--bootstrap", type=_count(0), help="bootstrap resamples for intervals (0: none; default: the "
                   "store's last setting, else 200)")
    p.add_argument("--null-perms", type=_count(0), help="shuffled item pairings behind each best cell's "
                   "selection-aware null: p-value and 95th percentile of the grid maximum under random pairings "
                   "(0: none; default: the store's last setting, else 200)")
    p.add_argument("--clamp", choices=("off", "platonic", "feature"), help="outlier clamp before every metric: "
                   "platonic-rep's one threshold over the whole stack (q=0.95), per feature, or off (default: the "
                   "store's last setting, else off)")
    p.add_argument("--reorder-k", type=_count(1), help="k of the reorder (VideoComp) probe (default 5, the paper's)")
    p.add_argument("--downstream-setting", choices=("paper", "largest"), help="runs correlated with downstream "
                   "results: paper = one caption and each model's standard frame count (default); largest = "
                   "the largest budgets")
    p.add_argument("--knn", choices=("exact", "ann"), help="neighbour search of the k-NN metrics: exact (default) "
                   "or ann (faiss, `pip install 'layerscope[ann]'`, for very large N; each grid records its "
                   "measured neighbour recall)")
    p.add_argument("--maps", type=_count(0), help="embedding maps (UMAP) computed per dataset without being asked "
                   "for (0: none; default: the store's last setting, else 24); `layerscope map` adds others")
    p.add_argument("--jobs", type=_count(1), default=None, help="worker processes (default: all cores)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--dataset", action="append", help="only these datasets")
    p.set_defaults(func=cmd_analyze)
    d = sub.add_parser("downstream", help="downstream results for correlation")
    dsub = d.add_subparsers(dest="action", required=True)
    imp = dsub.add_parser("import", help="import a CSV: model, task, metric, value, higher_is_better "
                          "[, layer, setting]", description="Columns model, task, metric, value, higher_is_better; "
                          "optional layer (an index, or default / joint as the model's runs name them; empty: the "
                          "whole model) and setting (how the task was run; empty: none). Per-layer rows feed the "
                          "predictor table of `layerscope analyze` (study 'predictors').")
    imp.add_argument("csv")
    imp.add_argument("--store", required=True)
    imp.set_defaults(func=cmd_downstream)


def cmd_dashboard(args) -> int:
    import os

    from .dashboard import launch

    from analysis.store import read_store
    from analysis.views import is_layerscope_store

    if not 1 <= args.port <= 65535:
        raise UserError(f"--port {args.port} is not a TCP port (1..65535)")
    if not os.path.exists(args.store):
        raise UserError(f"store {args.store} does not exist; create it with `layerscope demo` or "
                        "`layerscope precompute`")
    read_store(args.store, is_layerscope_store)  # a damaged or foreign file is refused here, in one line
    return launch(args.store, port=args.port, address=args.address)


def _register_dashboard(sub):
    p = sub.add_parser("dashboard", help="open the Streamlit dashboard on a store (localhost)")
    p.add_argument("--store", default="data/demo.duckdb")
    p.add_argument("--port", type=int, default=8501)
    p.add_argument("--address", default="127.0.0.1", help="bind address (default localhost only)")
    p.set_defaults(func=cmd_dashboard)


def report_outputs(store, out) -> dict:
    """The files ``layerscope report --out OUT`` writes: ``{"html": OUT, "json": OUT.json, "md": OUT.md}``.

    Raises UserError for an OUT that is a directory, is the store, or makes two outputs the same
    file (``--out x.json`` would overwrite the HTML with the JSON): nothing is written then.
    """
    from pathlib import Path

    raw, out = str(out), Path(out)
    if out.is_dir() or raw.endswith(("/", "\\")):
        raise UserError(f"--out {out} is a directory; pass a file such as {out / 'report.html'}")
    files = {"html": out, "json": out.with_suffix(".json"), "md": out.with_suffix(".md")}
    if len({f.resolve() for f in files.values()}) < 3:
        raise UserError(f"--out {out} would write the HTML, JSON and Markdown reports over each other; "
                        f"pass an .html name such as {out.with_suffix('.html')}")
    store = Path(store).resolve()
    for kind, f in files.items():
        if f.resolve() == store or (f.exists() and store.exists() and f.samefile(store)):
            raise UserError(f"--out {out} would overwrite the store {store} with the {kind} report; "
                            "pass another --out")
        if f.is_dir():
            raise UserError(f"the {kind} report {f} is a directory; pass another --out")
        if f.exists() and _is_duckdb_file(f):
            raise UserError(f"--out {out} would overwrite the DuckDB database {f} with the {kind} report; "
                            "pass another --out")
    return files


def _is_duckdb_file(path) -> bool:
    from analysis.store import DUCKDB_MAGIC

    try:
        with open(path, "rb") as fh:
            return fh.read(12)[8:12] == DUCKDB_MAGIC
    except OSError:
        return False


def write_atomic(path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``: a reader or a
    crash sees the old file or the new one, never half of one."""
    import os
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def cmd_report(args) -> int:
    import shlex

    from analysis.report import build_report, render_html, render_markdown, to_json
    from analysis.store import connect

    files = report_outputs(args.store, args.out)
    out = files["html"]
    cmd = "layerscope report " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if sys.argv[1:2] == ["report"] \
        else f"layerscope report --store {shlex.quote(args.store)} --out {shlex.quote(str(out))}"
    con = connect(args.store, read_only=True)
    try:
        report = build_report(con, store=args.store, models=args.models, references=args.reference,
                              datasets=args.dataset, command=cmd)
    finally:
        con.close()
    texts = {"html": render_html(report), "json": to_json(report), "md": render_markdown(report)}
    out.parent.mkdir(parents=True, exist_ok=True)
    for kind, path in files.items():
        write_atomic(path, texts[kind])
    print(f"report: {out} (+ {files['json'].name}, {files['md'].name})")
    return 0


def _register_report(sub):
    p = sub.add_parser("report", help="a self-contained layer-selection report (HTML + JSON + Markdown)")
    p.add_argument("--store", required=True)
    p.add_argument("--out", default="report.html")
    p.add_argument("--models", nargs="+", help="models to report on (default: all)")
    p.add_argument("--reference", nargs="+", help="reference models for alignment (default: the text models)")
    p.add_argument("--dataset", nargs="+", help="datasets (default: all)")
    p.set_defaults(func=cmd_report)


def cmd_merge(args) -> int:
    from .merge import merge_stores

    out = merge_stores(args.store, args.sources, log=lambda m: print(m, file=sys.stderr))
    print(f"merge: {out['runs_merged']} sharded run(s) merged, {out['runs_copied']} copied, "
          f"{out['runs_skipped']} already in {args.store}, {len(out['incomplete'])} incomplete")
    return 0


def _register_merge(sub):
    p = sub.add_parser("merge", help="merge stores written by --shard I/N jobs into one store")
    p.add_argument("sources", nargs="+", help="shard stores")
    p.add_argument("--store", required=True, help="target store (created if missing)")
    p.set_defaults(func=cmd_merge)


def cmd_migrate(args) -> int:
    from .migrate import migrate_store

    migrate_store(args.store)
    return 0


def _register_migrate(sub):
    p = sub.add_parser("migrate", help="upgrade a store written by an older LayerScope in place")
    p.add_argument("--store", required=True, help="the store to upgrade (one transaction: all or nothing)")
    p.set_defaults(func=cmd_migrate)


def cmd_sweep_plan(args) -> int:
    from .sweep import load_sweep, plan_sweep

    plan = plan_sweep(load_sweep(args.sweep), args.store)
    print("\n".join(plan.lines()))
    return 0


def cmd_sweep_run(args) -> int:
    from .sweep import load_sweep, run_sweep

    sweep = load_sweep(args.sweep)
    out = run_sweep(sweep, args.store, ray=args.ray, gpus_per_model=args.gpus_per_model, progress=not args.quiet)
    print(f"sweep: {out['runs_computed']} run(s) computed, {out['runs_done_before']} already done, "
          f"{out['pairs_skipped']} dataset×model pair(s) complete and not loaded, {out['items_embedded']} item "
          f"embeddings -> {args.store}")
    if out["analysis"] is not None:
        print(summary_lines(out["analysis"], args.store, out["seconds"]))
    return 0


SWEEP_EPILOG = """examples:
  layerscope sweep plan study.toml --store data/study.duckdb
  layerscope sweep run study.toml --store data/study.duckdb
  layerscope sweep run study.toml --store data/study.duckdb --ray local
  layerscope sweep run study.toml --store data/study.duckdb --ray auto --gpus-per-model 1
the sweep file's format: README "Sweeps", or python -c "import precompute.sweep as s; print(s.__doc__)"
"""


def _register_sweep(sub):
    p = sub.add_parser("sweep", help="a whole study from a TOML sweep file: plan it, or run it (precompute + analyze)",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=SWEEP_EPILOG)
    ssub = p.add_subparsers(dest="action", required=True)
    pl = ssub.add_parser("plan", help="validate the sweep file and list what would run, what is done, and its size")
    pl.add_argument("sweep", help="TOML sweep file (format: precompute/sweep.py, README 'Sweeps')")
    pl.add_argument("--store", required=True, help="DuckDB store (need not exist yet)")
    pl.set_defaults(func=cmd_sweep_plan)
    r = ssub.add_parser("run", help="precompute every missing run of the sweep, then analyze; reruns skip what is done")
    r.add_argument("sweep", help="TOML sweep file")
    r.add_argument("--store", required=True, help="DuckDB store (created if missing)")
    r.add_argument("--quiet", action="store_true", help="no progress bars")
    _add_ray_flags(r)
    r.set_defaults(func=cmd_sweep_run)


def cmd_map(args) -> int:
    from analysis.studies.embedding_map import request_map

    out = request_map(args.store, dataset=args.dataset, model=args.model, layer=args.layer, side=args.side,
                      text_layer=args.text_layer, log=lambda m: print(m, file=sys.stderr, flush=True))
    state = "computed" if out["computed"] else "already stored and current"
    print(f"map: {out['subject']} {state}"
          + (f"; no picture: {out['reason']}" if out["reason"] else "; refresh the dashboard's Embedding map page"))
    return 0


def _register_map(sub):
    p = sub.add_parser("map", help="an embedding map (UMAP) of another layer, for the dashboard's Embedding map page",
                       epilog="examples:\n  layerscope map --store data/demo.duckdb --dataset moving_shapes "
                              "--model vit-tiny --layer 2\n  layerscope map --store S --dataset D --model clip "
                              "--layer joint --side both",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--model", required=True, help="model name as stored (its largest setting is mapped)")
    p.add_argument("--layer", required=True, help="layer number, or a named layer (default, joint)")
    p.add_argument("--side", default="auto", choices=("auto", "video", "text", "both"),
                   help="which run of a model with both sides; both: one map of the two sides (shared space)")
    p.add_argument("--text-layer", help="the text side's layer with --side both (default: --layer)")
    p.set_defaults(func=cmd_map)


#: functions adding further subcommands to the parser
_REGISTRARS: list = [_register_precompute, _register_models, _register_demo, _register_analyze, _register_dashboard,
                     _register_report, _register_merge, _register_migrate]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted; finished batches are kept and a rerun resumes", file=sys.stderr)
        return 130
    # every input problem (manifest, model, store, video, analysis) is a ValueError subclass that
    # names the thing at fault: one line, no traceback
    except (UserError, ValueError) as exc:
        print(f"layerscope {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:  # a damaged store read mid-query, a full disk at commit, ...
        if not _is_store_failure(exc):
            raise
        from analysis.store import store_error

        print(f"layerscope {args.command}: error: {_one_line(store_error(getattr(args, 'store', '?'), exc))}",
              file=sys.stderr)
        return 2


def _one_line(exc) -> str:
    """The message on one line (a validation error listing several problems keeps its lines)."""
    text = str(exc)
    return text if isinstance(exc, ValueError) and "problem(s)" in text else " ".join(text.split())


def _is_store_failure(exc) -> bool:
    """DuckDB errors and OS errors (disk full, permissions) are about the store or a file: one line."""
    return isinstance(exc, OSError) or type(exc).__module__.split(".")[0] in ("duckdb", "_duckdb")


class UserError(Exception):
    """A problem with the user's input: printed as one clear line, no traceback."""


_REGISTRARS.append(_register_map)


if __name__ == "__main__":
    sys.exit(main())
