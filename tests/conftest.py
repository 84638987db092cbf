"""Session fixtures and the test tiers.

Tiers: ``python -m pytest -m "not slow"`` is the fast tier for contributors; plain ``python -m pytest``
(CI) runs everything. A test is ``slow`` when it carries the mark itself (its module's ``pytestmark``
or a decorator: model builds, Ray, other processes), when it is a ``browser`` test, or when it uses,
directly or through another fixture, one of :data:`tests.helpers.HEAVY_FIXTURES` (marked here at
collection, so a new test on the demo store joins the slow tier without anyone remembering to mark it).
"""

import numpy as np
import pytest

from tests.helpers import slow_reason


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("slow") is None and (why := slow_reason(item)):
            item.add_marker(pytest.mark.slow(reason=why))


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(scope="session")
def demo_like(tmp_path_factory):
    """The demo's shape analysed (:func:`tests.stores.write_demo_like_store`: the demo's models, datasets,
    budgets, variants and fabricated downstream rows, synthetic vectors), built once per test run and
    shared by the pytest-xdist workers of the run (the first builds it under a file lock, the others
    wait and read it); read it only: copy it before changing it. The real demo is built by
    tests/test_demo.py alone."""
    import os

    from filelock import FileLock

    from tests.stores import write_demo_like_store

    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared-demo-like"
    store, done = root / "demo_like.duckdb", root / "built"
    with FileLock(str(root) + ".lock"):
        if not done.exists():
            root.mkdir(parents=True, exist_ok=True)
            assert write_demo_like_store(root) == store
            done.touch()
    return store


@pytest.fixture(scope="session")
def predictor_stores(tmp_path_factory):
    """The predictor store (tests/stores.py) analysed: ``bare`` without per-layer downstream results,
    ``full`` with a planted task and a fabricated one; copy them before changing them."""
    import shutil

    from analysis.storage.downstream_import import import_downstream
    from analysis.studies import analyze_store
    from tests.stores import SHARE, write_downstream_csv, write_predictor_store

    root = tmp_path_factory.mktemp("pred_page")
    bare = root / "bare.duckdb"
    write_predictor_store(bare)
    analyze_store(bare, k=5, metrics=("mutual_knn",), n_boot=20, log=lambda m: None)
    full = root / "full.duckdb"
    shutil.copy(bare, full)
    rows = []
    for m, share in SHARE.items():
        for layer, w in enumerate(share):
            rows.append((m, "probe", "top1", round(0.2 + 0.6 * w, 4), "true", layer, "linear"))
            rows.append((m, "made-up task (fabricated)", "err", round(1 - w, 4), "false", layer, "demo"))
    import_downstream(full, write_downstream_csv(root / "r.csv", rows))
    analyze_store(full, log=lambda m: None)
    return {"bare": bare, "full": full}


@pytest.fixture(scope="session")
def dashboard_store(tmp_path_factory):
    """The small analysed store named like the demo's (tests/stores.py: write_dashboard_store), built
    once in seconds; copy it before changing it."""
    from tests.stores import write_dashboard_store

    store = tmp_path_factory.mktemp("dashboard") / "dashboard.duckdb"
    write_dashboard_store(store)
    return store


@pytest.fixture(scope="session")
def sides_store(tmp_path_factory):
    """Tiny class-token models, a dual encoder's two towers and BERT, analysed (:func:`tests.stores.write_sides_store`)."""
    from tests.stores import write_sides_store

    return write_sides_store(tmp_path_factory.mktemp("sides"))
