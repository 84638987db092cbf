"""The analysis commands of ``layerscope``: metrics, analyze, downstream import, report, map.

Each command parses its flags, calls one function of the package that does the work, and prints. The
``layerscope`` entry point (``precompute/cli.py``) builds its parser from the ``register_*`` functions here
and its own.
The argument types and ``UserError`` are shared by every command.
"""

from __future__ import annotations

import argparse
import sys


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


def int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return sorted(set(values))


def count(minimum: int):
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


def field_list(text: str) -> tuple[str, ...]:
    """``--labels``: comma-separated manifest fields; ``none`` (or nothing) clears them."""
    fields = tuple(f.strip() for f in text.split(",") if f.strip())
    return () if fields in ((), ("none",)) else fields


def probe_list(text: str) -> tuple[str, ...]:
    """``--probes``: comma-separated probe names (:data:`analysis.methods.probes.PROBES`)."""
    from analysis.methods.probes import PROBES

    names = tuple(p.strip() for p in text.split(",") if p.strip())
    unknown = [p for p in names if p not in PROBES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown probe {(unknown or [text])[0]!r}; probes: {', '.join(PROBES)}")
    return names


def cmd_analyze(args) -> int:
    import time

    from analysis.registry import route_metrics
    from analysis.studies import AnalyzeOptions, analyze_store, default_jobs

    t0 = time.perf_counter()
    grid_metrics, notes = route_metrics(args.metric)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    options = AnalyzeOptions(k=args.k, metrics=grid_metrics or None, references=args.reference, n_boot=args.bootstrap,
                             clamp=args.clamp, reorder_k=args.reorder_k, downstream_setting=args.downstream_setting,
                             maps=args.maps, knn=args.knn, n_null=args.null_perms, null_metrics=args.null_metric, null_budgets=args.null_budgets,
                             labels=args.labels, probes=args.probes, probe_budgets=args.probe_budgets,
                             datasets=args.dataset,
                             jobs=default_jobs() if args.jobs is None else args.jobs)
    out = analyze_store(args.store, options, progress=not args.quiet,
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
                 f"null perms={s.get('n_null')} on {','.join(s.get('null_metrics') or ()) or 'none'}]")
    return "\n".join(lines)


def cmd_downstream(args) -> int:
    from analysis.storage.downstream_import import import_downstream

    n = import_downstream(args.store, args.csv)
    print(f"downstream: {n} result(s) imported into {args.store}; run `layerscope analyze` to correlate them")
    return 0


def cmd_downstream_export(args) -> int:
    from pathlib import Path

    from analysis.storage.downstream_export import export_csv, export_rows
    from analysis.storage.store import connect
    from analysis.views.store_info import stale_results

    store = Path(args.store)
    if args.out != "-":
        out = Path(args.out)
        if out.resolve() == store.resolve() or (out.exists() and out.samefile(store)):
            raise UserError(f"--out {args.out} is the store itself; name a CSV file")
        if out.is_dir():
            raise UserError(f"--out {args.out} is a folder; name a CSV file")
    con = connect(store, read_only=True)
    try:
        stale = stale_results(con, args.store)
        if stale:  # the measured rows come from probe payloads, whose shape follows the analysis version
            raise UserError(stale)
        text, n = export_csv(con), len(export_rows(con))
    finally:
        con.close()
    if args.out == "-":
        sys.stdout.write(text)
    else:
        write_atomic(Path(args.out), text)
        print(f"downstream export: {n} row(s) -> {args.out}", file=sys.stderr)
    return 0


def register_analyze(sub):
    p = sub.add_parser("analyze", help="grids, scaling laws, model map, downstream, temporal probes, layer choice")
    p.add_argument("--store", required=True)
    p.add_argument("--k", type=count(1), help="neighbours for k-NN metrics (default: the store's last setting, "
                   "else 10)")
    p.add_argument("--metric", action="append", help="any registry metric (repeatable; `layerscope metrics` lists "
                   "them): pairwise ones choose the grids' metrics (default: the store's last setting, else "
                   "mutual_knn, cka, cknna); single, same-space and unpaired ones are always computed where their "
                   "data exists, and a note says where")
    p.add_argument("--reference", action="append", help="reference model(s) for downstream scores, a text "
                   "side unless another is named: 'clip' or 'clip [text]' is clip's text tower, 'clip [image]' its "
                   "image tower (default: every text side)")
    p.add_argument("--bootstrap", type=count(0), help="bootstrap resamples for intervals (0: none; default: the "
                   "store's last setting, else 200)")
    p.add_argument("--null-perms", type=count(0), help="shuffled item pairings behind each best cell's "
                   "selection-aware null: p-value and 95th percentile of the grid maximum under random pairings "
                   "(0: none; default: the store's last setting, else 200)")
    p.add_argument("--null-metric", action="append", help="grid metric whose best cells carry the shuffled "
                   "null (repeatable; default: the store's last setting, else mutual_knn, the one verdicts read; "
                   "each shuffle rescores the whole grid, which costs little for mutual_knn, ~1 grid for cka)")
    p.add_argument("--null-budgets", choices=("largest", "all"), help="which grids carry the shuffled null: each "
                   "model pair's largest setting (what verdicts read) or every budget (default: the store's last "
                   "setting, else largest)")
    p.add_argument("--clamp", choices=("off", "platonic", "feature"), help="outlier clamp before every metric: "
                   "platonic-rep's one threshold over the whole stack (q=0.95), per feature, or off (default: the "
                   "store's last setting, else off)")
    p.add_argument("--reorder-k", type=count(1), help="k of the reorder (VideoComp) probe (default 5, the paper's)")
    p.add_argument("--downstream-setting", choices=("paper", "largest"), help="runs correlated with downstream "
                   "results: paper = one caption and each model's standard frame count (default); largest = "
                   "the largest budgets")
    p.add_argument("--knn", choices=("exact", "ann"), help="neighbour search of the k-NN metrics: exact (default) "
                   "or ann (faiss, `pip install 'layerscope[ann]'`, for very large N; each grid records its "
                   "measured neighbour recall)")
    p.add_argument("--maps", type=count(0), help="embedding maps (UMAP) computed per dataset without being asked "
                   "for (0: none; default: the store's last setting, else 24); `layerscope map` adds others")
    p.add_argument("--labels", type=field_list, metavar="FIELD[,FIELD...]",
                   help="manifest fields to probe every layer with (k-NN accuracy, k-means NMI/ARI; nested fields by "
                        "dotted name, e.g. scene.shape); 'none' clears them (default: the store's last setting)")
    p.add_argument("--probes", type=probe_list, metavar="PROBE[,PROBE...]",
                   help="labelled probes run on --labels: knn, kmeans, linear (a logistic regression per fold and "
                        "layer: slower) (default: the store's last setting, else knn,kmeans)")
    p.add_argument("--probe-budgets", choices=("largest", "all"), help="runs probed: the runs the verdicts and "
                   "the predictor table read (each model's largest and --downstream-setting runs) or every budget "
                   "(default: the store's last setting, else largest)")
    p.add_argument("--jobs", type=count(1), default=None, help="worker processes (default: all cores)")
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
    exp = dsub.add_parser("export", help="write every downstream value, imported and measured (probes), as CSV",
                          description="The import columns plus ci_low, ci_high (the probes' 95%% item-resampling "
                          "interval) and source (measured, or the CSV a row was imported from); `downstream "
                          "import` reads the file back.")
    exp.add_argument("--store", required=True)
    exp.add_argument("--out", required=True, help="CSV file to write ('-': standard output)")
    exp.set_defaults(func=cmd_downstream_export)


def report_outputs(store, out) -> dict:
    """The files ``layerscope report --out OUT`` writes: ``{"html": OUT, "json": OUT.json, "md": OUT.md}``
    for an ``OUT`` ending in ``.html`` or ``.htm``; any other ``OUT`` gets ``.html`` added (``--out
    report`` writes ``report.html``, which a browser opens, and ``report.json``, ``report.md``).

    Raises UserError for an OUT that is a directory, the store or another DuckDB database, or ends in
    ``.json`` or ``.md`` (the HTML would be written over by the JSON or the Markdown), or whose three
    files would overwrite a database: nothing is written then.
    """
    from pathlib import Path

    raw, out = str(out), Path(out)
    if out.is_dir() or raw.endswith(("/", "\\")):
        raise UserError(f"--out {out} is a directory; pass a file such as {out / 'report.html'}")
    if out.suffix.lower() in (".json", ".md"):
        raise UserError(f"--out {out} would write the HTML, JSON and Markdown reports over each other; "
                        f"pass an .html name such as {out.with_suffix('.html')}")
    store = Path(store).resolve()
    # a name that is a database (the store itself, or another) is a mistyped --out or --store, not a
    # report's name: refused rather than answered with a report beside it
    if out.resolve() == store or (out.exists() and _is_duckdb_file(out)):
        raise UserError(f"--out {out} is a DuckDB database{' (the store)' if out.resolve() == store else ''}, "
                        "not a report's name; pass an .html name such as report.html")
    html = out if out.suffix.lower() in (".html", ".htm") else out.with_name(out.name + ".html")
    files = {"html": html, "json": html.with_suffix(".json"), "md": html.with_suffix(".md")}
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
    from analysis.storage.store import DUCKDB_MAGIC

    try:
        with open(path, "rb") as fh:
            return fh.read(12)[8:12] == DUCKDB_MAGIC
    except OSError:
        return False


def current_umask() -> int:
    """The process's umask, read without changing it where the kernel tells it (``/proc/self/status``
    on Linux 4.7+); elsewhere set and restored at once (``os.umask`` can only be read by setting it)."""
    import os

    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``: a reader or a
    crash sees the old file or the new one, never half of one."""
    import os
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp makes the file 0600 (private); a report is for colleagues, so it gets the mode a
        # plain open() would give it under the user's umask (0644 under umask 022)
        os.fchmod(fd, 0o666 & ~current_umask())
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
    from analysis.storage.store import connect

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
    if report["unfinished"]:
        print(f"note: {report['unfinished']}", file=sys.stderr)
    return 0


def register_report(sub):
    p = sub.add_parser("report", help="a self-contained layer-selection report (HTML + JSON + Markdown)")
    p.add_argument("--store", required=True, help="the DuckDB store to report on (read only)")
    p.add_argument("--out", default="report.html",
                   help="the HTML report (default report.html; .html is added to a name without it); the JSON and "
                        "Markdown reports go beside it with the same name")
    p.add_argument("--models", nargs="+", help="models to report on (default: all)")
    p.add_argument("--reference", nargs="+", help="reference models for alignment (default: the text models)")
    p.add_argument("--dataset", nargs="+", help="datasets (default: all)")
    p.set_defaults(func=cmd_report)


def cmd_map(args) -> int:
    from analysis.studies.embedding_map import request_map

    out = request_map(args.store, dataset=args.dataset, model=args.model, layer=args.layer, side=args.side,
                      text_layer=args.text_layer, method=args.method, log=lambda m: print(m, file=sys.stderr, flush=True))
    state = "computed" if out["computed"] else "already stored and current"
    print(f"map: {out['subject']} {state}"
          + (f"; no picture: {out['reason']}" if out["reason"] else "; refresh the dashboard's Embedding map page"))
    return 0


def register_map(sub):
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
    p.add_argument("--method", default="umap", choices=("umap", "pca", "tsne"),
                   help="umap (default), pca (first two principal components) or tsne (seeded t-SNE): TARA draws "
                        "the modality gap by PCA and t-SNE")
    p.set_defaults(func=cmd_map)


class UserError(Exception):
    """A problem with the user's input: printed as one clear line, no traceback."""


def register_metrics(sub):
    p = sub.add_parser("metrics", help="list the metric registry")
    p.add_argument("--json", action="store_true", help="print the registry as JSON")
    p.set_defaults(func=cmd_metrics)

