"""Session fixtures and the test tiers.

Tiers: ``python -m pytest -m "not slow"`` is the fast tier for contributors; plain ``python -m pytest``
(CI) runs everything. A test is ``slow`` when it carries the mark itself (its module's ``pytestmark``
or a decorator: model builds, Ray, other processes), when it is a ``browser`` test, or when it uses,
directly or through another fixture, one of :data:`tests.helpers.HEAVY_FIXTURES` (marked here at
collection, so a new test on the demo store joins the slow tier without anyone remembering to mark it).
"""

import os
import sys

import numpy as np
import pytest

# Cache bytecode even where the environment says not to (this workplace sets PYTHONDONTWRITEBYTECODE=1):
# without it every xdist worker and every CLI subprocess the tests start compiles the package and
# rewrites the test modules' asserts again (about 10 s of a collection's 22 s on 2 cores). The
# caches land in __pycache__/ folders, which git ignores.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

from tests.helpers import slow_reason


#: the modules that take longest (seconds of a slow-tier run on 2 cores), started first: pytest-xdist
#: hands tests out in collection order, and a long module collected last leaves one worker running it
#: alone at the end while the other idles (longest-first scheduling)
LONGEST_FIRST = (
    "tests/precompute/test_ray.py",
    "tests/precompute/test_store_cli.py",
    "tests/precompute/test_packaged_efficientnet.py",
    "tests/dashboard/test_browser_links_and_layout.py",
    "tests/precompute/test_hub_revision.py",
    "tests/analysis/test_analyze_store.py",
    "tests/precompute/test_offline_weights.py",
    "tests/test_paraphrase_groups.py",
    "tests/test_demo.py",
    "tests/test_demo_any_folder.py",
    "tests/dashboard/test_browser_requests_stay_local.py",
    "tests/test_processes.py",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("slow") is None and (why := slow_reason(item)):
            item.add_marker(pytest.mark.slow(reason=why))
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    # a stable sort: every worker collects the same order, and each module's tests stay together
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def shared_once(tmp_path_factory, name: str, build):
    """``build(root)`` run once per test run for the pytest-xdist workers of the run together: the first
    worker to ask builds under a file lock in a folder they share, the others wait and reuse it.
    Returns the folder. What is built there is read-only for its users: copy it before changing it."""
    import os

    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / f"shared-{name}"
    done = root / "built"
    with FileLock(str(root) + ".lock"):
        if not done.exists():
            root.mkdir(parents=True, exist_ok=True)
            build(root)
            done.touch()
    return root


@pytest.fixture(scope="session")
def demo_like(tmp_path_factory):
    """The demo's shape analysed (:func:`tests.stores.write_demo_like_store`: the demo's models, datasets,
    budgets, variants and fabricated downstream rows, synthetic vectors), built once per test run and
    shared by the pytest-xdist workers of the run (:func:`shared_once`); read it only: copy it before
    changing it. The real demo is built once, by :func:`small_demo`."""
    from tests.stores import write_demo_like_store

    def build(root):
        assert write_demo_like_store(root) == root / "demo_like.duckdb"

    return shared_once(tmp_path_factory, "demo-like", build) / "demo_like.duckdb"


@pytest.fixture(scope="session")
def named_layers_store(tmp_path_factory):
    """:func:`tests.stores.write_named_layers_store` (named layers, a dual encoder's shared space, maps),
    built once per run for every worker (:func:`shared_once`: five modules read it); copy it before
    changing it."""
    from tests.stores import write_named_layers_store

    return shared_once(tmp_path_factory, "named-layers", lambda root: write_named_layers_store(
        root / "named.duckdb")) / "named.duckdb"


@pytest.fixture(scope="session")
def nuance_store(tmp_path_factory):
    """:func:`tests.stores.write_nuance_store` (planted temporal and same-space structure, analysed),
    built once per run for every worker (:func:`shared_once`); copy it before changing it."""
    from tests.stores import write_nuance_store

    return shared_once(tmp_path_factory, "nuance", lambda root: write_nuance_store(root / "n.duckdb")) / "n.duckdb"


@pytest.fixture(scope="session")
def predictor_stores(tmp_path_factory):
    """The predictor store (tests/stores.py) analysed: ``bare`` without per-layer downstream results,
    ``full`` with a planted task and a fabricated one; copy them before changing them."""
    import shutil

    from analysis.storage.downstream_import import import_downstream
    from analysis.studies import analyze_store
    from tests.stores import SHARE, write_downstream_csv, write_predictor_store

    def build(root):
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

    root = shared_once(tmp_path_factory, "predictors", build)  # once per run for every worker
    return {"bare": root / "bare.duckdb", "full": root / "full.duckdb"}


@pytest.fixture(scope="session")
def dashboard_store(tmp_path_factory):
    """The small analysed store named like the demo's (tests/stores.py: write_dashboard_store), built
    once per run for every worker (:func:`shared_once`); copy it before changing it."""
    from tests.stores import write_dashboard_store

    return shared_once(tmp_path_factory, "dashboard", lambda root: write_dashboard_store(
        root / "dashboard.duckdb")) / "dashboard.duckdb"


@pytest.fixture(scope="session")
def map_tools_store(tmp_path_factory):
    """:func:`tests.stores.write_map_tools_store` (the map tools' dataset, analysed with its default
    embedding maps), built once per run for every worker (:func:`shared_once`: eight modules read it,
    AppTest and browser pages alike); read it only: copy it before changing it."""
    from tests.stores import write_map_tools_store

    return shared_once(tmp_path_factory, "map-tools", lambda root: write_map_tools_store(
        root / "tools.duckdb")) / "tools.duckdb"


@pytest.fixture(scope="session")
def sides_store(tmp_path_factory):
    """Tiny class-token models, a dual encoder's two towers and BERT, analysed (:func:`tests.stores.write_sides_store`)."""
    from tests.stores import write_sides_store

    # once per run for every worker (four model builds and five precomputes); read only
    return shared_once(tmp_path_factory, "sides", lambda root: write_sides_store(root)) / "s.duckdb"


@pytest.fixture(scope="session")
def small_demo(tmp_path_factory):
    """``layerscope demo --small --no-dashboard --quiet`` run as a new user runs it, in a subprocess
    from an empty folder outside the checkout (:func:`tests.helpers.run_small_demo`), once per run for
    every worker (:func:`shared_once`): tests/test_demo.py checks the store it wrote and reruns it there,
    tests/test_demo_any_folder.py what it wrote where. Returns the folder; ``result.json`` in its
    parent holds the exit status, the end of stderr and the files written into the checkout."""
    from tests.helpers import run_small_demo

    return shared_once(tmp_path_factory, "small-demo", lambda root: run_small_demo(root / "empty")) / "empty"
