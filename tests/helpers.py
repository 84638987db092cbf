"""Helpers shared by tests (not tests, not fixtures): the slow tier's rule, seeded planted data, the
dashboard under AppTest, reports, and a headless chromium.

Test modules import from here (or from :mod:`tests.stores`, :mod:`tests.reference`), never from
another ``test_*.py`` or a ``conftest.py``.
"""

from pathlib import Path

import numpy as np
import pytest

#: the dashboard's entry point
APP = str(Path(__file__).resolve().parents[1] / "app.py")


#: fixture name -> why a test that uses it is slow
HEAVY_FIXTURES = {
    "small_demo": "runs `layerscope demo --small` in a subprocess from an empty folder (once per run: about "
                  "35 s on 2 cores)",
    "demo_like": "builds and analyses the demo-shaped synthetic store (about 12 s of CPU, half of it UMAP's "
                 "numba compilation)",
    "tiny": "builds every tiny random model (tests/precompute/conftest.py)",
    "one_model_store": "builds a tiny ViT and runs precompute and analyze through the CLI",
    "ray_local": "starts a local Ray instance",
    "server": "starts the dashboard in a streamlit subprocess",
    "sides_store": "builds four tiny models, precomputes them through the CLI and analyses the store",
    "text_only_store": "precomputes MiniLM (twice) and a tiny BERT on a text-only manifest through the CLI, "
                       "then analyses it",
}


_PAGES = "renders dashboard pages in AppTest on analysed stores (about 1 s a page)"
_ANALYSES = "analyses synthetic stores end to end (analyze_store, every study) for most of its tests"
_CLI = "runs commands end to end on stores written and analysed for it"

#: test module (path from the repository root) -> why every test in it is slow: modules whose tests
#: are integration tests over whole analysed stores or rendered pages, so one fixture name does not
#: say it. Measured: these modules held 373 s of the fast tier's 507 s of test time on 2 cores
#: (`--durations=0`); what stays fast is the metrics, methods, views' data, stores and inputs.
SLOW_MODULES = {
    **{f"tests/dashboard/{p.name}": _PAGES for p in sorted((Path(__file__).parent / "dashboard").glob("test_*.py"))},
    "tests/test_escaping.py": _PAGES,
    "tests/analysis/test_engine.py": _ANALYSES,
    "tests/analysis/test_downstream_layers.py": _ANALYSES,
    "tests/analysis/test_results_io.py": _ANALYSES,
    "tests/analysis/test_trust_studies.py": _ANALYSES,
    "tests/analysis/test_embedding_map_study.py": _ANALYSES,
    "tests/analysis/test_paper_figures_views.py": _ANALYSES,
    "tests/analysis/test_predictors.py": _ANALYSES,
    "tests/analysis/test_null_study.py": _ANALYSES,
    "tests/analysis/test_null_views.py": _ANALYSES,
    "tests/analysis/test_layer_choice_resamples.py": _ANALYSES,
    "tests/analysis/test_identical_inputs_verdict.py": _ANALYSES,
    "tests/analysis/test_bootstrap_resample_lists.py": _ANALYSES,
    "tests/analysis/test_same_space_study.py": _ANALYSES,
    "tests/test_cli_errors.py": _CLI,
    "tests/test_store_integrity.py": _CLI,
    "tests/precompute/test_manage.py": _CLI,
    "tests/precompute/test_run_tags.py": _CLI,
    "tests/precompute/test_caption_baseline.py": _CLI,
    "tests/test_stale_results_refused.py": _ANALYSES,
}


def slow_reason(item) -> str | None:
    """Why ``item`` belongs to the slow tier, or None: the first heavy fixture in its closure
    (``item.fixturenames`` holds every fixture it uses, transitively), its ``browser`` mark, or its
    module in :data:`SLOW_MODULES`."""
    for name in item.fixturenames:
        if name in HEAVY_FIXTURES:
            return f"uses {name}: {HEAVY_FIXTURES[name]}"
    if item.get_closest_marker("browser") is not None:
        return "drives a real browser"
    module = getattr(item, "nodeid", "").split("::")[0]
    if module in SLOW_MODULES:
        return f"in {module}: {SLOW_MODULES[module]}"
    return None


def planted(n=120, *, latent=4, dx=12, dy=9, noise=0.3, seed=0):
    """Two views of one latent structure: X = Z A + e, Y = Z B + e (paired rows)."""
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, latent))
    X = Z @ rng.normal(size=(latent, dx)) + noise * rng.normal(size=(n, dx))
    Y = Z @ rng.normal(size=(latent, dy)) + noise * rng.normal(size=(n, dy))
    return X, Y


def near_ties(n=120, d=40, ties=50, gap=1e-10, seed=0):
    """Row 0 with ``ties`` neighbours at cosine 0.8 + j·gap: apart in float64, one value in float32
    (higher index = closer, so breaking float32 ties by index is wrong)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X[0] = 0.0
    X[0, 0] = 1.0
    for j in range(1, ties + 1):
        v = rng.normal(size=d)
        v[0] = 0.0
        v /= np.linalg.norm(v)
        c = 0.8 + j * gap
        X[j] = c * X[0] + np.sqrt(1 - c * c) * v
    return X


def random_rotation(d, seed):
    Q, R = np.linalg.qr(np.random.default_rng(seed).normal(size=(d, d)))
    return Q * np.sign(np.diag(R))


def quiet(_msg):
    """A ``log`` callback that drops every message."""


CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic")


def chromium_driver(profile_dir, *, window="1400,1000", offline=False, log_requests=False, log_console=False):
    """Debian's chromium under selenium with the flags this workplace needs; fails (not skips) when absent.
    ``log_requests``: keep Chrome's performance log (every network event, favicons included), read
    with ``driver.get_log("performance")``; ``log_console``: keep the page's console (errors, warnings),
    read with ``driver.get_log("browser")``."""
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
    logs = {**({"performance": "ALL"} if log_requests else {}), **({"browser": "ALL"} if log_console else {})}
    if logs:
        opts.set_capability("goog:loggingPrefs", logs)
    driver = webdriver.Chrome(service=Service(driver_path), options=opts)
    if offline:
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": True, "latency": 0,
                                                                    "downloadThroughput": 0, "uploadThroughput": 0})
    return driver


#: the analysis tests' small synthetic sweep (the ``sweep`` fixture): 2 vision and 2 text models at
#: 2 budgets each, 40 items, 4 layers of 12 dims
SHAPE = dict(frames=(1, 2), captions=(1, 2), n_items=40, n_layers=4, dim=12)


def app(store, monkeypatch, page="overview", params=None):
    """The dashboard on ``store`` driven headlessly (AppTest), opened at ``page`` with URL ``params``;
    fails on any exception the page raised."""
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("LAYERSCOPE_STORE", str(store))
    at = AppTest.from_file(APP, default_timeout=120)
    for k, v in (params or {}).items():
        at.query_params[k] = v
    at.run()
    if page != "overview":
        at.switch_page(f"pages/{page}.py")
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def charts(at):
    """The Vega-Lite charts a page drew."""
    return at.get("vega_lite_chart")


def make_report(store, tmp_path, *extra):
    """``layerscope report`` on ``store`` into ``tmp_path``: (html path, the JSON data, the HTML text)."""
    import json

    from precompute.cli import main

    out = tmp_path / "report.html"
    assert main(["report", "--store", str(store), "--out", str(out), *extra]) == 0
    return out, json.loads(out.with_suffix(".json").read_text()), out.read_text()


def error_matrix(commands, kinds, *, fast_command, fast_kind):
    """``(kind, command)`` cases of an error matrix with the ids two stacked parametrize decorators give
    (``command-kind``): the fast tier keeps every command with ``fast_kind`` and every kind with
    ``fast_command``; the other cells are marked slow (CI runs the whole matrix)."""
    return [pytest.param(kind, command, id=f"{command}-{kind}",
                         marks=() if fast_kind == kind or fast_command == command else pytest.mark.slow)
            for command in commands for kind in kinds]


def one_line_error(capsys, *needles) -> str:
    """The command's stderr, which must be one line (no traceback) holding every one of ``needles``."""
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    for n in needles:
        assert n in err, err
    return err


#: what a test run itself writes into the checkout, besides bytecode caches
_NOT_PRODUCT = {".git", ".venv", ".pytest_cache", ".hypothesis", "test-artifacts"}


def _files(root: Path) -> dict[str, int]:
    """Every file under ``root`` (less bytecode caches and test-run folders) -> its mtime in ns."""
    import os

    found = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__" and not (Path(folder) == root and d in _NOT_PRODUCT)]
        for name in files:
            path = Path(folder) / name
            try:
                found[str(path.relative_to(root))] = path.stat().st_mtime_ns
            except FileNotFoundError:
                continue
    return found


def _written(before: dict, after: dict) -> list[str]:
    """Files that appeared, and files under ``data/`` that changed (where the demo writes; a source file
    edited while the test runs is not the demo's doing)."""
    return sorted(p for p, t in after.items() if p not in before or (p.startswith("data/") and before[p] != t))


def run_small_demo(folder: Path) -> None:
    """``layerscope demo --small --no-dashboard --quiet`` (the console script beside this interpreter, what
    a user types, else the module) in the new empty ``folder``, with this checkout's packages on the
    path as an install would provide; writes ``result.json`` beside ``folder``: ``returncode``, the end
    of ``stderr``, and ``written``, the files the run left in the checkout (the ``small_demo`` fixture)."""
    import json
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    script = Path(sys.executable).with_name("layerscope")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "precompute.cli"]
    folder.mkdir()
    before = _files(root)
    done = subprocess.run([*command, "demo", "--small", "--no-dashboard", "--quiet"], cwd=folder,
                          env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True, timeout=900)
    (folder.parent / "result.json").write_text(json.dumps(
        {"returncode": done.returncode, "stderr": done.stderr[-3000:], "written": _written(before, _files(root))}))


def first_right_ranks(Q, G, labels) -> np.ndarray:
    """Brute force of a retrieval rank: query row i of ``Q`` among the rows of ``G``, its right answers
    every j with ``labels[j] == labels[i]``; 1 + the number of wrong rows whose cosine (one numpy dot
    product per pair) is at least the closest right one's (a tie ranks the wrong row first). ``(N,)``."""
    Q, G = np.asarray(Q, dtype=np.float64), np.asarray(G, dtype=np.float64)
    Qn = Q / np.linalg.norm(Q, axis=1, keepdims=True)
    Gn = G / np.linalg.norm(G, axis=1, keepdims=True)
    n = len(G)
    out = np.empty(len(Q), dtype=int)
    for i in range(len(Q)):
        s = [float(np.dot(Qn[i], Gn[j])) for j in range(n)]
        best = max(s[j] for j in range(n) if labels[j] == labels[i])
        out[i] = 1 + sum(s[j] >= best for j in range(n) if labels[j] != labels[i])
    return out
