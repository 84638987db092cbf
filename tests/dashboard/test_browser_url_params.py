"""Issue #33, state across pages, in a real browser (Debian's chromium): a page opened with another
page's parameters keeps only its own and the carried ``dataset`` (app.py's prune_params runs after every
page in the browser; AppTest runs app.py only for the entry page); Back then lands on URLs that name
only what each page shows."""

import urllib.parse

import pytest

from tests.browser_helpers import wait_done

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def served_store(tmp_path_factory):
    """The ``server`` fixture (tests/dashboard/conftest.py) serves the named-layers store here."""
    from tests.stores import write_named_layers_store

    store = tmp_path_factory.mktemp("params_browser") / "named.duckdb"
    write_named_layers_store(store)
    return store


def settled_params(browser, title: str) -> dict:
    """The URL's parameters once the page shows ``title`` and its script has finished."""
    wait_done(browser, title)  # it waits 1.5 s after the script's end: the last URL update follows it
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(browser.current_url).query))


def params_within(browser, expected: dict, timeout: float) -> dict:
    """The URL's parameters once they equal ``expected``, or as they are after ``timeout`` seconds."""
    import time

    end = time.monotonic() + timeout
    while True:
        params = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(browser.current_url).query))
        if params == expected or time.monotonic() > end:
            return params
        time.sleep(0.25)


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
    settled_params(browser, "LayerScope")
    # the Overview drops them when its run ends, and the URL update follows the run: on a busy machine
    # later than the page settles, so the URL is polled (it never changes when nothing drops them)
    params = params_within(browser, {"dataset": "pairs"}, timeout=30)
    assert params == {"dataset": "pairs"}, params


@pytest.mark.parametrize("page, title, own", [
    ("curves", "Layer curves", {"metric": "rankme"}),
    ("neighbours", "Neighbours", {"item": "pair003"}),
])
def test_a_page_keeps_its_own_parameters_and_unclaimed_ones(server, browser, page, title, own):
    browser.get(f"{server}/{page}?" + urllib.parse.urlencode({"dataset": "pairs", **own, "utm_source": "x"}))
    params = settled_params(browser, title)
    assert params == {**params, "dataset": "pairs", **own, "utm_source": "x"}, params
