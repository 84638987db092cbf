"""Issue #33, state across pages, in a real browser (Debian's chromium): a page opened with another
page's parameters keeps only its own and the carried ``dataset`` (app.py's prune_params runs after every
page in the browser; AppTest runs app.py only for the entry page); Back then lands on URLs that name
only what each page shows."""

import os
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from precompute.dashboard import command
from tests.helpers import chromium_driver

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from tests.stores import write_named_layers_store

    store = tmp_path_factory.mktemp("params_browser") / "named.duckdb"
    write_named_layers_store(store)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(command(store, port=port), cwd=REPO, env={**os.environ, "LAYERSCOPE_STORE": str(store)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail(f"dashboard did not start: {proc.stdout.read()[-2000:]}")
    yield url
    proc.terminate()
    proc.wait(timeout=20)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = chromium_driver(tmp_path_factory.mktemp("chrome33p"))
    yield driver
    driver.quit()


def settled_params(browser, title: str, timeout=90) -> dict:
    """The URL's parameters once the page shows ``title`` and its script has finished."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def ready(b):
        heads = " ".join(h.text for h in b.find_elements(By.CSS_SELECTOR, "h1"))
        status = " ".join(r.text for r in b.find_elements(By.CSS_SELECTOR, "[data-testid='stStatusWidget']"))
        return title in heads and "Running" not in status and "Stop" not in status

    WebDriverWait(browser, timeout, ignored_exceptions=[StaleElementReferenceException]).until(ready)
    time.sleep(1.5)  # the last URL update follows the script's end
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(browser.current_url).query))


def test_back_to_the_overview_drops_the_neighbours_pages_parameters(server, browser):
    """The issue's case in one session: the Neighbours page (which owns ``item`` and ``k``), then Back to
    an Overview URL that still carries them (a history entry pushed here, then popped as Back does):
    the Overview keeps ``dataset`` and drops the Neighbours page's parameters."""
    browser.get(f"{server}/neighbours?dataset=pairs&item=pair003&k=3")
    params = settled_params(browser, "Neighbours")
    assert params.get("item") == "pair003" and params.get("k") == "3", params
    browser.execute_script("window.history.pushState({}, '', '/?dataset=pairs&item=pair003&k=3');"
                           "window.history.pushState({}, '', '/neighbours?dataset=pairs&item=pair003&k=3');"
                           "window.history.back();")
    params = settled_params(browser, "LayerScope")
    assert params == {"dataset": "pairs"}, params


@pytest.mark.parametrize("page, title, own", [
    ("curves", "Layer curves", {"metric": "rankme"}),
    ("neighbours", "Neighbours", {"item": "pair003"}),
])
def test_a_page_keeps_its_own_parameters_and_unclaimed_ones(server, browser, page, title, own):
    browser.get(f"{server}/{page}?" + urllib.parse.urlencode({"dataset": "pairs", **own, "utm_source": "x"}))
    params = settled_params(browser, title)
    assert params == {**params, "dataset": "pairs", **own, "utm_source": "x"}, params
