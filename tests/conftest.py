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
