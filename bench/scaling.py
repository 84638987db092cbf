"""Benchmark and golden check of the scaling study's per-subject fits (``fit_subject``).

Two uses:

- timing (default): ``python bench/scaling.py`` times ``fit_subject`` (bootstrap off) on subjects shaped
  like ``bench/analyze.py``'s (a 3×3 grid of n_f, n_c in {1, 2, 4}; mutual k-NN, CKA, CKNNA) and prints
  milliseconds per subject (wall and CPU time, each the best of ``--repeat`` passes; on a shared
  machine compare runs of the old and new code made back to back).
- golden comparison: ``--save FILE`` runs the current code over many random subjects (grids 3×3, 2×4,
  1×5, 4×4, 7×5 ..., degenerate points, duplicate points, flat scores, straight lines, noise,
  lower-is-better metrics with bounds, scores at the metric's bound) and pickles every payload plus
  bootstrap intervals of item-resample-like score samples; ``--compare FILE`` reruns them and reports
  every number that differs (relative tolerance ``--rtol``, default 1e-9) and every string, status
  or key that differs. Not a test: it compares the code with its own earlier output, to show a
  speed-up changed nothing.
"""

from __future__ import annotations

import argparse
import math
import pickle
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GRIDS = {
    "3x3": ((1, 2, 4), (1, 2, 4)),
    "2x4": ((1, 4), (1, 2, 4, 8)),
    "4x2": ((1, 2, 4, 8), (1, 8)),
    "1x5": ((4,), (1, 2, 4, 8, 16)),
    "5x1": ((1, 2, 4, 8, 16), (2,)),
    "3x4": ((1, 2, 4), (1, 2, 4, 8)),
    "4x4": ((1, 2, 4, 8), (1, 2, 4, 8)),
    "7x5": ((1, 2, 4, 8, 16, 32, 48), (1, 2, 4, 8, 10)),
}
METRICS = ("mutual_knn", "cka", "cknna", "svcca", "median_rank", "modality_gap", "alignment", "mmd", "lid",
           "uniformity", "rankme")
KINDS = ("law", "law", "law", "law_exact", "line", "flat", "noise", "at_bound", "log_linear", "joint", "tiny_noise")


def _scores(kind, nf, nc, rng, sign, bounds):
    lo, hi = bounds
    if kind in ("law", "law_exact", "at_bound", "tiny_noise"):
        c_f, c_c = rng.uniform(0.01, 0.3, 2)
        a, b = rng.uniform(0.05, 2.5, 2)
        rise = c_f * nf ** -a + c_c * nc ** -b
        noise = {"law": rng.choice([1e-3, 1e-2]), "law_exact": 0.0, "at_bound": 1e-3, "tiny_noise": 1e-6}[kind]
    elif kind == "line":
        rise = -rng.uniform(0.01, 0.1) * np.log(nf) - rng.uniform(0.01, 0.1) * np.log(nc)
        noise = rng.choice([0.0, 1e-3])
    elif kind == "log_linear":
        rise = -0.04 * np.log(nf) - 0.03 * np.log(nc)
        noise = 2e-3
    elif kind == "joint":
        rise = rng.uniform(0.05, 0.3) * (nf * nc) ** -rng.uniform(0.2, 1.5)
        noise = 1e-3
    elif kind == "flat":
        rise, noise = np.zeros_like(nf), 0.0
    else:  # noise
        rise, noise = np.zeros_like(nf), 1e-2
    if lo is None and hi is None:
        base = 0.5
    elif hi is None:
        base = lo + 1.0
    elif lo is None:
        base = hi - 1.0
    else:
        base = (lo + hi) / 2
    if kind == "at_bound" and (hi if sign > 0 else lo) is not None:
        base = hi if sign > 0 else lo  # the limit on the metric's bound: the largest budgets reach it
    y = base - sign * rise + noise * rng.normal(size=nf.shape)
    if lo is not None or hi is not None:
        y = np.clip(y, -np.inf if lo is None else lo, np.inf if hi is None else hi)
    return y


def random_subjects(n: int, seed: int = 0) -> list[tuple]:
    """``n`` random ``(metric, points)`` subjects for ``fit_subject`` (see the module docstring)."""
    from analysis.registry import BOUNDS, get_metric

    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        metric = METRICS[i % len(METRICS)]
        kind = KINDS[(i // len(METRICS)) % len(KINDS)] if i < 4 * len(METRICS) * len(KINDS) else rng.choice(KINDS)
        grid = list(GRIDS)[int(rng.integers(len(GRIDS)))] if i % 3 else "3x3"
        fs, cs = GRIDS[grid]
        nf, nc = (a.ravel().astype(float) for a in np.meshgrid(fs, cs, indexing="ij"))
        sign = 1.0 if get_metric(metric).higher_is_better is not False else -1.0
        bounds = BOUNDS.get(metric) or (None, None)
        y = _scores(kind, nf, nc, rng, sign, bounds)
        pts = [[float(f), float(c), float(s), int(rng.integers(9)), int(rng.integers(9)), "ra", "rb"]
               for f, c, s in zip(nf, nc, y)]
        u = rng.uniform()
        if u < 0.15:  # a degenerate point (no best cell)
            pts[int(rng.integers(len(pts)))][2] = None
        elif u < 0.2:  # two degenerate points
            for j in rng.choice(len(pts), 2, replace=False):
                pts[j][2] = None
        elif u < 0.25:  # a duplicated grid point (a repeated run)
            j = int(rng.integers(len(pts)))
            pts.append(list(pts[j]))
            pts[-1][2] = pts[j][2] + float(rng.normal(0, 1e-3))
        out.append((metric, [tuple(p) for p in pts]))
    return out


def bench_subjects(n_video=3, n_text=2, seed=0) -> list[tuple]:
    """Subjects shaped like ``bench/analyze.py``'s: one per (video model, text model, metric), 3×3 grid."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_video * n_text):
        for metric in ("mutual_knn", "cka", "cknna"):
            s_inf, c_f, c_c = rng.uniform(0.3, 0.8), rng.uniform(0.02, 0.2), rng.uniform(0.02, 0.2)
            a, b = rng.uniform(0.2, 1.5, 2)
            pts = [(f, c, float(s_inf - c_f * f ** -a - c_c * c ** -b + rng.normal(0, 5e-3)), 3, 4, "ra", "rb")
                   for f in (1, 2, 4) for c in (1, 2, 4)]
            out.append((metric, pts))
    return out


def _payloads(subjects) -> list:
    from analysis.registry import BOUNDS, get_metric
    from analysis.methods.scaling import bootstrap_params
    from analysis.studies.scaling import fit_subject

    out = []
    rng = np.random.default_rng(123)
    for i, (metric, pts) in enumerate(subjects):
        p = fit_subject(None, "ra", metric, {}, list(pts), 0, 0)
        if i % 4 == 0 and "fit" in p:  # parameter intervals from noisy copies of the scores (refit_many)
            ok = ~np.array(p["degenerate"])
            y = np.array(p["scores"])[ok]
            samples = y + rng.normal(0, 3e-3, (20, len(y)))
            try:
                iv = bootstrap_params(samples, np.array(p["n_frames"])[ok], np.array(p["n_captions"])[ok],
                                      scores=y, bounds=BOUNDS.get(metric),
                                      higher_is_better=get_metric(metric).higher_is_better is not False)
                p = {**p, "golden_intervals": iv.as_dict()}
            except ValueError as exc:
                p = {**p, "golden_intervals_error": str(exc)}
        out.append(p)
    return out


def _diff(a, b, path, rtol, out):
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            out.append((path, f"keys {sorted(set(a) ^ set(b))}", math.inf))
        for k in set(a) & set(b):
            _diff(a[k], b[k], f"{path}.{k}", rtol, out)
    elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            out.append((path, f"lengths {len(a)} != {len(b)}", math.inf))
        for i, (x, y) in enumerate(zip(a, b)):
            _diff(x, y, f"{path}[{i}]", rtol, out)
    elif isinstance(a, (float, np.floating)) and isinstance(b, (float, np.floating)) and not isinstance(a, bool):
        x, y = float(a), float(b)
        if math.isnan(x) and math.isnan(y) or x == y:
            return
        rel = abs(x - y) / max(abs(x), abs(y), 1e-300)
        if not (rel <= rtol):
            out.append((path, f"{x!r} != {y!r}", rel))
        else:
            out.append((path, "within rtol", rel))
    elif a != b or type(a) is not type(b):
        out.append((path, f"{a!r} != {b!r}", math.inf))


def compare(file, rtol) -> int:
    with open(file, "rb") as fh:
        saved = pickle.load(fh)
    now = _payloads(saved["subjects"])
    issues, close = [], []
    for i, (a, b) in enumerate(zip(saved["payloads"], now)):
        out = []
        _diff(a, b, f"#{i}", rtol, out)
        issues += [d for d in out if d[1] != "within rtol"]
        close += [d for d in out if d[1] == "within rtol"]
    n_num = len(close)
    worst = max((d[2] for d in close), default=0.0)
    print(f"{len(now)} subjects: {len(issues)} differences beyond rtol={rtol:g}; {n_num} numbers differ within it "
          f"(largest relative difference {worst:.3g}); all others bitwise equal")
    for path, what, rel in issues[:40]:
        print(f"  {path}: {what} (rel {rel:.3g})")
    return 1 if issues else 0


def timing(repeat: int, n_text: int) -> None:
    from analysis.studies.scaling import fit_subject

    subjects = bench_subjects(n_text=n_text)
    for m, p in subjects[:3]:  # warm-up
        fit_subject(None, "ra", m, {}, p, 0, 0)
    best, best_cpu = math.inf, math.inf
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        for m, p in subjects:
            fit_subject(None, "ra", m, {}, p, 0, 0)
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    print(f"fit_subject, {len(subjects)} subjects (3×3 grid, bootstrap off): {best / len(subjects) * 1e3:.2f} ms "
          f"per subject ({best_cpu / len(subjects) * 1e3:.2f} ms CPU; best of {repeat})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--save", help="pickle the payloads of random subjects to this file")
    ap.add_argument("--compare", help="rerun the subjects saved in this file and report differences")
    ap.add_argument("--subjects", type=int, default=400)
    ap.add_argument("--rtol", type=float, default=1e-9)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--text", type=int, default=2, help="text models in the timing (subjects = 3 × text × 3)")
    args = ap.parse_args(argv)
    if args.save:
        subjects = random_subjects(args.subjects)
        with open(args.save, "wb") as fh:
            pickle.dump({"subjects": subjects, "payloads": _payloads(subjects)}, fh)
        print(f"saved {len(subjects)} payloads to {args.save}")
    elif args.compare:
        sys.exit(compare(args.compare, args.rtol))
    else:
        timing(args.repeat, args.text)


if __name__ == "__main__":
    main()
