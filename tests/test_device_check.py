"""The device-check script a GPU session runs: it must work before a GPU is lent (here on CPU)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

#: builds a tiny VideoMAE and BERT and precomputes with them in a subprocess
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]


def test_device_check_runs_and_bfloat16_stays_close_to_float32():
    r = subprocess.run([sys.executable, "bench/device_check.py", "--device", "cpu", "--no-base", "--videos", "4"],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = re.findall(r"^(\S+)\s+cpu\s+bfloat16\s+[\d.]+ items/s\s+cosine vs CPU float32: min ([\d.]+), median ([\d.]+)$",
                      r.stdout, flags=re.M)
    assert {name for name, _, _ in rows} == {"tiny-videomae", "tiny-bert"}, r.stdout
    for _, low, median in rows:  # bfloat16 keeps ~3 significant digits: vectors stay nearly parallel
        assert 0.99 < float(low) <= float(median) <= 1.0
        assert float(low) < 1.0  # and the run really computed in bfloat16 (float32 would match exactly)
