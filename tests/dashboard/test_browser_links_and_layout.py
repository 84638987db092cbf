"""Issue #33 in a real browser (Debian's chromium) on a small synthetic store with named layers and a
dual encoder (:func:`tests.stores.write_named_layers_store`): no anchor element reaches a page from a
URL parameter (Markdown links, ``javascript:`` URLs, GFM autolink literals), and the default views of
the pages this issue changed draw their charts inside the column at desktop and phone widths.
Screenshots land in test-artifacts/screenshots/ (``issue33-*.png``)."""

import urllib.parse

import pytest

from tests.browser_helpers import shoot, wait_done

pytestmark = pytest.mark.browser

#: parameter values that must stay text: Markdown links, javascript: URLs and GFM autolink literals
LINKS = ["[click](https://evil.example/a)", "[a](javascript:alert(1))", "<javascript:alert(2)>",
         "www.evil.example/b", "https://evil.example/c", "x@evil.example"]


@pytest.fixture(scope="module")
def served_store(tmp_path_factory):
    """The ``server`` fixture (tests/dashboard/conftest.py) serves the named-layers store here."""
    from tests.stores import write_named_layers_store

    store = tmp_path_factory.mktemp("named_browser") / "named.duckdb"
    write_named_layers_store(store)
    return store


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
    shoot(browser, f"issue33-hostile-{page}")


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
        shoot(browser, f"issue33-{page or 'overview'}-{width}")
    finally:
        browser.set_window_size(1400, 1000)
