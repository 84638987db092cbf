import duckdb
import pytest


@pytest.fixture(scope="session")
def one_model_store(tmp_path_factory):
    """A store with a single image model and one setting: every page must explain what is missing."""
    from precompute.synthetic import tiny_models
    from precompute.cli import main
    from tests.precompute.helpers import make_dataset

    root = tmp_path_factory.mktemp("one")
    manifest = make_dataset(root / "d", n=12, captions=1)
    tiny_models.build_vit(root / "vit")
    store = root / "one.duckdb"
    assert main(["precompute", "--store", str(store), "--manifest", str(manifest), "--dataset", "d",
                 "--model", str(root / "vit"), "--frames", "2", "--quiet"]) == 0
    assert main(["analyze", "--store", str(store), "--k", "3", "--bootstrap", "0"]) == 0
    return store


@pytest.fixture(scope="session")
def empty_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("empty") / "empty.duckdb"
    duckdb.connect(str(path)).close()
    return path


@pytest.fixture(scope="module")
def served_store(demo_like):
    """The store the module's ``server`` serves: the demo-shaped store unless the module overrides
    this fixture (the issue #33 modules serve :func:`tests.stores.write_named_layers_store`)."""
    return demo_like


@pytest.fixture(scope="module")
def server(served_store):
    """The dashboard on ``served_store`` in a streamlit subprocess (tests/browser_helpers.py); its URL."""
    from tests.browser_helpers import dashboard

    with dashboard(served_store) as url:
        yield url


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Headless Debian chromium under selenium at 1400 × 1000, with its own profile."""
    from tests.helpers import chromium_driver

    driver = chromium_driver(tmp_path_factory.mktemp("chrome-profile"))
    yield driver
    driver.quit()
