"""Named layers in a real browser (Debian's chromium) on the named-layers store
(:func:`tests.stores.write_named_layers_store`: dual-tiny's stored layers 4 and 5 are its ``default``
output and its ``joint`` projection): the heatmap's axis and its layer selectors name them, as every
other page does, instead of the storage indices 4 and 5 that read as two more hidden layers."""

import pytest

from tests.browser_helpers import page_sections, wait_charts_drawn, wait_done

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def served_store(named_layers_store):
    """The ``server`` fixture (tests/dashboard/conftest.py) serves the named-layers store here."""
    return named_layers_store


def test_the_heatmap_names_a_models_named_layers_on_its_axis_and_in_its_selector(server, browser):
    from selenium.webdriver.common.by import By

    browser.set_window_size(1400, 1000)
    browser.get(f"{server}/heatmap?dataset=pairs&kind=vision_text&a=dual-tiny&b=plain-txt&metric=mutual_knn&la=4&lb=2")
    wait_done(browser, "Layer × layer heatmap", charts=True)
    wait_charts_drawn(browser)
    (chart,) = [c for s in page_sections(browser) for c in s["charts"]][:1]
    rows = next(a for a in chart["axes"] if a["title"].startswith("dual-tiny"))
    assert rows["labels"] == ["joint", "default", "3", "2", "1", "0"]  # rows drawn deepest first
    columns = next(a for a in chart["axes"] if a["title"].startswith("plain-txt"))
    assert columns["labels"] == [str(i) for i in range(6)]  # plain-txt names none: indices stay
    selector = browser.find_element(By.CSS_SELECTOR, "[data-testid='stSelectbox'] input[aria-label*='layer of A']")
    shown = browser.execute_script("return arguments[0].closest(\"[data-testid='stSelectbox']\").innerText + ' ' + "
                                   "arguments[0].value + ' ' + (arguments[0].placeholder || '')", selector)
    assert "default" in shown, shown
    assert "default" in browser.find_element(By.CSS_SELECTOR, "[data-testid='stMetric']").text
