"""A localhost tool asks no other host for anything: every dashboard page, loaded in a real browser,
sends its requests (documents, scripts, the websocket, the favicon) to the dashboard's own host only.
Chrome's performance log sees every request the browser makes, the favicon included (a request the
page's own scripts cannot see). Regression test for issue #46: the favicon, a Material icon, was
fetched from fonts.gstatic.com on every page."""

import json
import urllib.parse

import pytest

from tests.browser_helpers import wait_done

pytestmark = pytest.mark.browser

#: (URL path, title): every page of app.py's navigation
PAGES = [("", "LayerScope"), ("heatmap", "Layer × layer heatmap"), ("curves", "Layer curves"),
         ("scaling", "Test-time scaling"), ("model_map", "Model map"), ("embedding_map", "Embedding map"),
         ("downstream", "Downstream correlation"), ("predictors", "Layer predictors"),
         ("temporal", "Temporal probes"), ("neighbours", "Neighbours"), ("paper_figures", "Paper figures")]


@pytest.fixture(scope="module")
def served_store(dashboard_store):
    return dashboard_store


@pytest.fixture(scope="module")
def logging_browser(tmp_path_factory):
    """Headless chromium that keeps its performance log (every network event)."""
    from tests.helpers import chromium_driver

    driver = chromium_driver(tmp_path_factory.mktemp("chrome-profile"), log_requests=True)
    yield driver
    driver.quit()


def _requested_urls(browser) -> list[str]:
    """URLs of the network requests the browser sent since the log was last read (http, https and
    websockets; data: and the browser's own chrome:// resources are not requests to a host)."""
    urls = []
    for entry in browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] in ("Network.requestWillBeSent", "Network.webSocketCreated"):
            url = message["params"].get("request", {}).get("url") or message["params"].get("url", "")
            if urllib.parse.urlparse(url).scheme in ("http", "https", "ws", "wss"):
                urls.append(url)
    return urls


def test_the_app_lists_every_page_this_test_visits():
    from tests.helpers import APP

    source = open(APP).read()
    listed = {line.split('"pages" / "')[1].split('.py"')[0] for line in source.splitlines() if '"pages" / "' in line
              and ".py" in line}
    assert listed == {page or "overview" for page, _ in PAGES}


def test_no_page_asks_another_host_for_anything(server, logging_browser):
    host = urllib.parse.urlparse(server).hostname
    _requested_urls(logging_browser)  # drop what the browser did before
    seen = {}
    for page, title in PAGES:
        logging_browser.get(f"{server}/{page}")
        wait_done(logging_browser, title)
        urls = _requested_urls(logging_browser)
        assert any(urllib.parse.urlparse(u).hostname == host for u in urls), f"{page}: no request was logged"
        seen[page or "overview"] = [u for u in urls if urllib.parse.urlparse(u).hostname != host]
    assert seen == {page or "overview": [] for page, _ in PAGES}
