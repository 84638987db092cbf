import numpy as np
import pytest


def planted(n=120, *, latent=4, dx=12, dy=9, noise=0.3, seed=0):
    """Two views of one latent structure: X = Z A + e, Y = Z B + e (paired rows)."""
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, latent))
    X = Z @ rng.normal(size=(latent, dx)) + noise * rng.normal(size=(n, dx))
    Y = Z @ rng.normal(size=(latent, dy)) + noise * rng.normal(size=(n, dy))
    return X, Y


def random_rotation(d, seed):
    Q, R = np.linalg.qr(np.random.default_rng(seed).normal(size=(d, d)))
    return Q * np.sign(np.diag(R))


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(scope="session")
def small_demo(tmp_path_factory):
    """The --small demo store (precomputed and analysed) built once; copy it before changing it."""
    from precompute.demo import run_demo

    root = tmp_path_factory.mktemp("demo")
    store = root / "demo.duckdb"
    run_demo(store=store, small=True, dashboard=False, data_dir=root / "data", progress=False,
             out=open(root / "demo.log", "w"))
    return store


CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic")


def chromium_driver(profile_dir, *, window="1400,1000", offline=False):
    """Debian's chromium under selenium with the flags this workplace needs; fails (not skips) when absent."""
    import os
    import shutil

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    driver_path = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    if not (os.path.exists(chromium) and os.path.exists(driver_path)):
        pytest.fail("browser tests need Debian's chromium and chromium-driver (apt-get install -y chromium "
                    "chromium-driver), or deselect them with -m 'not browser'")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in CHROMIUM_FLAGS + (f"--window-size={window}", f"--user-data-dir={profile_dir}"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_path), options=opts)
    if offline:
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": True, "latency": 0,
                                                                    "downloadThroughput": 0, "uploadThroughput": 0})
    return driver
