"""``layerscope papers``: map the store's model and dataset names to the papers' names once, so the
papers' published numbers (``analysis/data/papers.csv``) are shown beside the user's.

A thin command: parse, call :mod:`analysis.storage.published`, print."""

from __future__ import annotations

import argparse
import sys

EPILOG = """examples:
  layerscope papers map --store S videomae-huge VideoMAEv2-H
  layerscope papers map --store S --dataset vatex1024 VATEX
  layerscope papers map --store S my-gemma Gemma-2-9b-it
  layerscope papers map --store S videomae-huge ''      (removes the mapping)
  layerscope papers list --store S
"""


def cmd_papers_map(args) -> int:
    from analysis.storage import published as P
    from analysis.storage.schema import create_all
    from analysis.storage.store import connect

    kind = "dataset" if args.dataset else "model"
    con = connect(args.store, read_only=False)
    try:
        create_all(con, args.store)  # a store written before the paper_names table gains it here
        P.set_paper_name(con, kind, args.name, args.paper_name or None)
        # two names shown as one paper's: each would carry the other's published numbers
        others = sorted(n for n, p in P.paper_names(con).get(kind, {}).items()
                        if args.paper_name and p == args.paper_name and n != args.name)
    finally:
        con.close()
    print(f"papers: {kind} {args.name} " + (f"shown as the papers' {args.paper_name}" if args.paper_name
                                             else "no longer mapped"))
    if others:
        print(f"note: {kind}(s) {', '.join(others)} are shown as the papers' {args.paper_name} too: the papers' "
              f"numbers appear beside each; `layerscope papers map --store {args.store} NAME ''` removes a mapping",
              file=sys.stderr)
    return 0


def cmd_papers_list(args) -> int:
    from analysis.storage import published as P
    from analysis.storage.store import connect

    con = connect(args.store, read_only=True)
    try:
        names = P.paper_names(con)
    finally:
        con.close()
    pub = P.load_published()
    for kind in P.KINDS:
        mapped = names.get(kind, {})
        print(f"{kind}s mapped: " + (", ".join(f"{k} → {v}" for k, v in mapped.items()) or "none"))
        print(f"  the papers' {kind}s: {', '.join(P.known_paper_names(pub, kind))}")
    return 0


def register_papers(sub):
    p = sub.add_parser("papers", help="map model and dataset names to the papers', to see their published numbers "
                                      "beside yours", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    psub = p.add_subparsers(dest="papers_command", metavar="ACTION", required=True)
    m = psub.add_parser("map", help="map a model (or, with --dataset, a dataset) of the store to the papers' name")
    m.add_argument("--store", required=True)
    m.add_argument("--dataset", action="store_true", help="NAME is a dataset (default: a model)")
    m.add_argument("name", metavar="NAME", help="the name in the store")
    m.add_argument("paper_name", metavar="PAPERNAME", help="the papers' name ('' removes the mapping)")
    m.set_defaults(func=cmd_papers_map)
    ls = psub.add_parser("list", help="the mappings and the names the papers use")
    ls.add_argument("--store", required=True)
    ls.set_defaults(func=cmd_papers_list)
