"""Shared fixtures of the analysis tests: a small two-by-two synthetic sweep."""

import pytest

from precompute.synthetic.store import write_sweep
from tests.helpers import SHAPE


@pytest.fixture
def sweep(tmp_path):
    path = tmp_path / "s.duckdb"
    write_sweep(path, video=["v1", "v2"], text=["t1", "t2"], **SHAPE)
    return path
