"""Benchmark: scoring prepared layer states against each other (``score_block``), the work
``analyze`` repeats for every pair of runs, and CKNNA's per-layer extras (neighbour cosines).

For each shape (9×9 layers at N = 512, d = 128: ``bench/analyze.py``'s sweep; 24×24 at N = 1024,
d = 768: ``bench/grid.py``'s) it prepares both stacks once, then times ``score_block`` for
mutual k-NN, CKNNA and linear CKA (best of 3; CKNNA's and CKA's self terms are cached after the
first call, as in ``analyze``), and the CKNNA cosines of every layer.

``--compare PATH`` runs the same script against another checkout (e.g. a ``git worktree`` of an
older commit) in a subprocess and prints both, interleaved per shape, so the two are measured
under the same load.

Usage: python bench/pair_scoring.py [--compare /path/to/old/checkout]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

SHAPES = ((9, 512, 128), (24, 1024, 768))


def stack(layers, n, d, seed):
    import numpy as np

    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, 32))
    return np.stack([Z @ rng.normal(size=(32, d)) + 0.5 * rng.normal(size=(n, d))
                     for _ in range(layers)]).astype(np.float32)


def measure(layers, n, d) -> dict:
    import numpy as np

    from analysis.grid import prepare_layers
    from analysis.registry import get_metric

    A, B = stack(layers, n, d, 1), stack(layers, n, d, 2)
    out = {}
    for metric in ("mutual_knn", "cknna", "cka"):
        spec = get_metric(metric)
        params = spec.resolve(**({"k": 10} if "k" in spec.params else {}))
        sa, sb = prepare_layers(spec, A, params), prepare_layers(spec, B, params)
        if metric == "cknna":
            t0 = time.perf_counter()
            for s in sa + sb:
                s.sim  # noqa: B018 (the lazily computed float64 cosines)
            out["cknna cosines"] = time.perf_counter() - t0
        spec.kernel.score_block(sa, sb, **params)  # self terms cached, as in analyze
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            g = spec.kernel.score_block(sa, sb, **params)
            best = min(best, time.perf_counter() - t0)
        out[metric] = best
        out[metric + " checksum"] = float(np.nansum(g))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", help="another checkout to measure the same way")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: "layers,n,d", prints JSON
    args = ap.parse_args(argv)
    if args.one:
        sys.path.insert(0, os.getcwd())
        print(json.dumps(measure(*map(int, args.one.split(",")))))
        return

    def run(root, shape):
        env = dict(os.environ, PYTHONPATH=str(root))
        res = subprocess.run([sys.executable, __file__, "--one", ",".join(map(str, shape))], cwd=root, env=env,
                             capture_output=True, text=True, check=True)
        return json.loads(res.stdout.strip().splitlines()[-1])

    here = Path(__file__).resolve().parents[1]
    for shape in SHAPES:
        new = run(here, shape)
        old = run(Path(args.compare).resolve(), shape) if args.compare else None
        print(f"{shape[0]}x{shape[0]} layers, N={shape[1]}, d={shape[2]}:")
        for key in ("mutual_knn", "cknna", "cka", "cknna cosines"):
            line = f"  {key:>14}: {new[key]:.4f} s"
            if old:
                same = key.endswith("cosines") or abs(old[key + " checksum"] - new[key + " checksum"]) <= 1e-9 * max(
                    1.0, abs(old[key + " checksum"]))
                line += f"   compared: {old[key]:.4f} s  ({old[key] / new[key]:.1f}x){'' if same else '  VALUES DIFFER'}"
            print(line)


if __name__ == "__main__":
    main()
