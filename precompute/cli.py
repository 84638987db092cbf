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
    return parser


#: functions adding further subcommands (precompute, runs, demo, ...) to the parser
_REGISTRARS: list = []


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
    except UserError as exc:
        print(f"layerscope {args.command}: error: {exc}", file=sys.stderr)
        return 2


class UserError(Exception):
    """A problem with the user's input: printed as one clear line, no traceback."""


if __name__ == "__main__":
    sys.exit(main())
