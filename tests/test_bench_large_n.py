"""bench/large_n.py (issue #32) must run end to end before anyone spends hours on N = 100k: a tiny
store here, analysed, with the time, peak memory and the budget formula printed."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

#: writes a store in a subprocess and runs a whole analysis
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]


def test_large_n_bench_runs_and_prints_memory_against_the_formula():
    r = subprocess.run([sys.executable, "bench/large_n.py", "--items", "60", "--video", "1", "--text", "1",
                        "--layers", "3", "--dim", "16", "--null-perms", "0"],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert re.search(r"^analyze N=60: [\d.]+ s; computed \d+ result\(s\)", r.stdout, flags=re.M), r.stdout
    peak = float(re.search(r"^peak RSS ([\d.]+) GiB", r.stdout, flags=re.M).group(1))
    assert 0 < peak < 8
    # the formula's value for this shape, from its definition (R = 4LNd, M = 2 runs, 2 GiB cache):
    # min(M R, max(2 GiB, R)) + 2R + 4Nd + 2(24LNk + 8Ld²) + 1 GiB
    n, L, d, k, M = 60, 3, 16, 10, 2
    R = 4 * L * n * d
    expected = (min(M * R, max(2 * 2**30, R)) + 2 * R + 4 * n * d + 2 * (24 * L * n * k + 8 * L * d * d) + 2**30)
    assert f"= {expected / 2**30:.2f} GiB" in r.stdout
    assert "study grids:" in r.stdout and "study profiles:" in r.stdout
    # the large-N forms against the exact ones on a subsample (here all 60 items): printed, and close
    for name in ("CKA", "CKNNA"):
        m = re.search(rf"^check {name} on 60 sampled items .*\|diff\| (\S+) \(", r.stdout, flags=re.M)
        assert m, r.stdout
        assert float(m.group(1)) < 1e-6
