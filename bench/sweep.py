"""Benchmark: ``layerscope sweep run --ray local`` against the plain path on the same sweep.

Builds a VideoMAE-geometry model with random weights (``bench/precompute.py``'s presets) and
``--videos`` H.264 videos, writes one sweep file (that model, frame budgets ``--frames``, batch
size 4, no analysis), then runs it into two fresh stores: plain, and on a local Ray instance of
``--cpus`` CPUs. Prints, for both:

- throughput: item embeddings per second between the first and the last committed batch (the
  steady state a long sweep spends its time in); the ratio plain/ray of it is the overhead, target
  <= 1.2 on 2 cores;
- the fixed costs before the first batch is committed (plain: loading the model; Ray: starting the
  Ray instance, then the model and decoding actors: processes importing torch and transformers,
  loading the model) and the whole sweep's wall time, with its ratio.

Checks that both stores hold the same vectors bitwise.
Usage: python bench/sweep.py [--preset small|base] [--videos 48] [--frames 4,8,16] [--cpus 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

# this file is bench/sweep.py: keep its folder off the path so `import precompute` finds the package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def stored_rows(store) -> list:
    import duckdb

    from analysis.storage.schema import embedding_tables

    con = duckdb.connect(str(store), read_only=True)
    try:
        return sorted(row for t in embedding_tables(con).values()
                      for row in con.execute(f"SELECT run_id, layer, idx, vec FROM {t}").fetchall())
    finally:
        con.close()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=["small", "base"], default="small")
    ap.add_argument("--videos", type=int, default=48)
    ap.add_argument("--frames", default="4,8,16", help="n_f budgets of the sweep")
    ap.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray instance")
    ap.add_argument("--size", type=int, default=128, help="video side in pixels")
    args = ap.parse_args(argv)

    from bench.precompute import PRESETS, build_model, write_videos
    from precompute.batch.ray_backend import RaySession
    from precompute.sweep import load_sweep, run_sweep

    def quiet(msg):
        return None

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = build_model(tmp / "model", PRESETS[args.preset])
        manifest = write_videos(tmp, args.videos, args.size, "shapes")
        frames = [int(x) for x in args.frames.split(",")]
        (tmp / "sweep.toml").write_text(
            f'[precompute]\nframes = {frames}\ncaptions = [1]\nbatch_size = 4\ndevice = "cpu"\n\n'
            f'[[datasets]]\nname = "bench"\nmanifest = "{manifest}"\n\n'
            f'[[models]]\nsource = "{model}"\nname = "videomae-{args.preset}"\n\n[analyze]\nenabled = false\n')
        sweep = load_sweep(tmp / "sweep.toml")
        n_items = args.videos * len(frames)

        from precompute.batch.writer import StoreWriter

        commits: list = []  # (time, items) of every committed batch, both paths (the driver writes)
        write_batch = StoreWriter.write_batch

        def timed(self, run_id, first_idx, vectors, **kw):
            write_batch(self, run_id, first_idx, vectors, **kw)
            commits.append((time.perf_counter(), vectors.shape[1]))

        StoreWriter.write_batch = timed

        def steady() -> tuple[float, float]:
            """(seconds to the first commit's end from t0, items/s from the first commit to the last)"""
            (t_first, _), (t_last, _) = commits[0], commits[-1]
            return t_first, sum(n for _, n in commits[1:]) / (t_last - t_first)

        t0 = time.perf_counter()
        out = run_sweep(sweep, tmp / "plain.duckdb", progress=False, log=quiet)
        t_plain = time.perf_counter() - t0
        assert out["items_embedded"] == n_items
        first_plain, rate_plain = steady()
        first_plain -= t0
        commits.clear()

        t0 = time.perf_counter()
        with RaySession("local", num_cpus=args.cpus) as session:
            session.connect()
            t_start = time.perf_counter() - t0
            out = run_sweep(sweep, tmp / "ray.duckdb", ray="local", progress=False, log=quiet)
            t_ray = time.perf_counter() - t0
        assert out["items_embedded"] == n_items
        first_ray, rate_ray = steady()
        first_ray -= t0
        same = stored_rows(tmp / "plain.duckdb") == stored_rows(tmp / "ray.duckdb")

    print(f"sweep ({args.preset}, {args.videos} videos x n_f {frames} = {n_items} item embeddings, batch 4, "
          f"Ray on {args.cpus} CPUs):")
    print(f"  plain        {rate_plain:6.2f} items/s steady; first batch after {first_plain:6.2f} s; "
          f"whole sweep {t_plain:6.2f} s")
    print(f"  --ray local  {rate_ray:6.2f} items/s steady; first batch after {first_ray:6.2f} s "
          f"(of which {t_start:.2f} s starting Ray); whole sweep {t_ray:6.2f} s")
    print(f"  overhead (plain/ray throughput): {rate_plain / rate_ray:.3f} (target <= 1.2); whole sweep ray/plain "
          f"{t_ray / t_plain:.3f}; stores bitwise equal: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
