"""Issue #33 in a real browser (Debian's chromium) on a small synthetic store with named layers and a
dual encoder (:func:`tests.stores.write_named_layers_store`): no anchor element reaches a page from a
URL parameter (Markdown links, ``javascript:`` URLs, GFM autolink literals), and the default views of
the pages this issue changed draw their charts inside the column at desktop and phone widths.
Screenshots land in test-artifacts/screenshots/ (``issue33-*.png``)."""

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
SCREENSHOTS = Path(os.environ.get("LAYERSCOPE_SCREENSHOTS") or REPO / "test-artifacts" / "screenshots")

pytestmark = pytest.mark.browser

#: parameter values that must stay text: Markdown links, javascript: URLs and GFM autolink literals
LINKS = ["[click](https://evil.example/a)", "[a](javascript:alert(1))", "<javascript:alert(2)>",
         "www.evil.example/b", "https://evil.example/c", "x@evil.example"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from tests.stores import write_named_layers_store

    store = tmp_path_factory.mktemp("named_browser") / "named.duckdb"
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
    driver = chromium_driver(tmp_path_factory.mktemp("chrome33"))
    yield driver
    driver.quit()


def wait_done(browser, title: str, charts: bool, timeout=90):
    """Until the page shows its title, the script has finished, and (``charts``) a chart is drawn."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def ready(b):
        heads = " ".join(h.text for h in b.find_elements(By.CSS_SELECTOR, "h1"))
        status = " ".join(r.text for r in b.find_elements(By.CSS_SELECTOR, "[data-testid='stStatusWidget']"))
        drawn = not charts or b.find_elements(By.CSS_SELECTOR, ".vega-embed canvas, .vega-embed svg")
        return (title in heads and not b.find_elements(By.CSS_SELECTOR, "[data-testid='stSkeleton']")
                and "Running" not in status and "Stop" not in status and drawn)

    WebDriverWait(browser, timeout, ignored_exceptions=[StaleElementReferenceException]).until(ready)
    time.sleep(1.5)  # charts paint after the script ends
    errors = browser.find_elements(By.CSS_SELECTOR, "[data-testid='stException']")
    assert not errors, errors[0].text


def shoot(browser, name: str):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(SCREENSHOTS / f"issue33-{name}.png"))


def foreign_anchors(browser, server: str) -> list[tuple[str, str]]:
    """Anchors in the page that point off the app (another host) or run script (``javascript:``,
    ``mailto:``, ``data:``); the app's own heading anchors carry the parameters percent-encoded and stay."""
    from selenium.webdriver.common.by import By

    home = urllib.parse.urlparse(server).netloc
    out = []
    for a in browser.find_elements(By.CSS_SELECTOR, "a[href]"):
        href = a.get_attribute("href") or ""
        u = urllib.parse.urlparse(href)
        if u.scheme.lower() not in ("http", "https") or u.netloc != home:
            out.append((href, a.text))
    return out


@pytest.mark.parametrize("page,title", [("heatmap", "Layer × layer heatmap"), ("curves", "Layer curves"),
                                        ("neighbours", "Neighbours")])
def test_no_anchor_reaches_the_page_from_a_parameter(server, browser, page, title):
    from selenium.webdriver.common.by import By

    for value in LINKS:
        query = urllib.parse.urlencode({"dataset": value, "a": value, "metric": value, "item": value})
        browser.get(f"{server}/{page}?{query}")
        wait_done(browser, title, charts=False)
        body = browser.find_element(By.TAG_NAME, "body").text
        assert "unknown dataset" in body  # the value was refused, and echoed
        assert not foreign_anchors(browser, server), (value, foreign_anchors(browser, server))
    shoot(browser, f"hostile-{page}")


def chart_fits(browser):
    """Every drawn chart lies inside the main column (a legend pushed out would widen it)."""
    from selenium.webdriver.common.by import By

    main = browser.find_element(By.CSS_SELECTOR, "[data-testid='stMain']").rect
    for el in browser.find_elements(By.CSS_SELECTOR, ".vega-embed canvas, .vega-embed svg"):
        r = el.rect
        assert r["width"] > 100 and r["height"] > 100, r  # drawn, not collapsed
        assert r["x"] >= main["x"] - 1 and r["x"] + r["width"] <= main["x"] + main["width"] + 1, (r, main)


@pytest.mark.parametrize("width", [1400, 390])
@pytest.mark.parametrize("page,title,query,drawn", [
    ("", "LayerScope", "", False),
    ("curves", "Layer curves", "?dataset=pairs&metric=rankme", True),
    ("embedding_map", "Embedding map", "?dataset=pairs&links=1&frames=0", True),
    ("predictors", "Layer predictors", "?dataset=pairs", True)])
def test_default_views_draw_inside_the_column(server, browser, page, title, query, drawn, width):
    from selenium.webdriver.common.by import By

    browser.set_window_size(width, 1000)
    try:
        browser.get(f"{server}/{page}{query}")
        wait_done(browser, title, charts=drawn)
        chart_fits(browser)
        # icons are Material symbols (a font that ships with Streamlit), not emoji
        assert browser.find_elements(By.CSS_SELECTOR, "[data-testid='stIconMaterial']")
        shoot(browser, f"{page or 'overview'}-{width}")
    finally:
        browser.set_window_size(1400, 1000)
