"""Shared fixtures of the analysis tests: a small two-by-two synthetic sweep."""

import pytest

from precompute.synthetic_store import write_sweep

#: 2 vision and 2 text models at 2 budgets each, 40 items, 4 layers of 12 dims
SHAPE = dict(frames=(1, 2), captions=(1, 2), n_items=40, n_layers=4, dim=12)


def quiet(_msg):
    pass


@pytest.fixture
def sweep(tmp_path):
    path = tmp_path / "s.duckdb"
    write_sweep(path, video=["v1", "v2"], text=["t1", "t2"], **SHAPE)
    return path
