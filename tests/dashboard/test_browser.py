"""A real browser: Debian's chromium loads the dashboard on the demo-shaped store
(tests/stores.py: write_demo_like_store, every page has data) and draws its charts.

CI installs chromium and chromium-driver with apt (see .ci/run). A screenshot of every page lands in
$LAYERSCOPE_SCREENSHOTS (default: test-artifacts/screenshots/, gitignored), which CI keeps as artifacts.
"""

import urllib.parse

import pytest

from tests.browser_helpers import settle_page, shoot, url_params, wait_done

pytestmark = pytest.mark.browser

# the ``server`` (on the ``demo_like`` store) and ``browser`` fixtures: tests/dashboard/conftest.py


@pytest.mark.parametrize("page,query,text", [
    ("heatmap", "?dataset=moving_shapes&a=vit-tiny&b=llama-tiny&metric=cknna&nf=2&nc=4&la=1&lb=3",
     "cknna at layers (1, 3)"),
    ("curves", "?dataset=moving_shapes", "Each metric's pick"),
])
def test_page_draws_its_vega_lite_charts(server, browser, page, query, text):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{server}/{page}{query}")
    # the loading skeleton has no vega-embed: wait for a drawn chart (canvas or svg inside vega-embed)
    WebDriverWait(browser, 90).until(
        EC.presence_of_element_located((By.CSS_SELECTOR, ".vega-embed canvas, .vega-embed svg")))
    settle_page(browser, 1.0)  # let the chart finish its first paint before the screenshot
    drawn = browser.find_elements(By.CSS_SELECTOR, ".vega-embed canvas, .vega-embed svg")
    assert drawn
    errors = browser.find_elements(By.CSS_SELECTOR, "[data-testid='stException']")
    assert not errors, errors[0].text
    # a shared deep link opens with the app's navigation and sidebar, and the linked selections
    assert "Layer heatmap" in browser.find_element(By.CSS_SELECTOR, "[data-testid='stSidebarNav']").text
    assert "Store:" in browser.find_element(By.CSS_SELECTOR, "[data-testid='stSidebar']").text
    assert text in browser.find_element(By.TAG_NAME, "body").text
    shoot(browser, f"dashboard-{page}-deep-link")


# (URL path, title, query, whether the demo store gives the page a chart)
PAGES = [("", "LayerScope", "", False), ("heatmap", "Layer × layer heatmap", "?dataset=moving_shapes", True),
         ("curves", "Layer curves", "?dataset=moving_shapes", True),
         ("scaling", "Test-time scaling", "?dataset=moving_shapes", True),
         ("model_map", "Model map", "?dataset=moving_shapes", True), ("downstream", "Downstream correlation", "", False),
         ("temporal", "Temporal probes", "?dataset=test_of_time", True),
         ("neighbours", "Neighbours", "?dataset=moving_shapes", False),
         ("predictors", "Layer predictors", "?dataset=moving_shapes", True),
         ("embedding_map", "Embedding map", "?dataset=moving_shapes", True)]


@pytest.mark.parametrize("page,title,query,charts", PAGES, ids=[p[0] or "overview" for p in PAGES])
def test_screenshot_of_every_page(server, browser, page, title, query, charts):
    browser.get(f"{server}/{page}{query}")
    wait_done(browser, title, charts=charts)
    path = shoot(browser, f"page-{page or 'overview'}")
    assert path.stat().st_size > 10_000  # a drawn page, not a blank one


def test_clicking_a_heatmap_cell_then_neighbours_opens_the_same_layers(server, browser):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    # start away from the centre cell: layers (0, 0)
    browser.get(f"{server}/heatmap?dataset=moving_shapes&a=vit-tiny&b=llama-tiny&metric=mutual_knn&la=0&lb=0")
    wait_done(browser, "Layer × layer heatmap", charts=True)
    chart = WebDriverWait(browser, 90).until(
        EC.presence_of_element_located((By.CSS_SELECTOR, ".vega-embed canvas, .vega-embed svg")))
    settle_page(browser, 1.0)
    ActionChains(browser).move_to_element(chart).click().perform()  # the middle of the grid, a real click
    WebDriverWait(browser, 60).until(lambda b: url_params(b).get("la", ["0"]) + url_params(b).get("lb", ["0"])
                                     != ["0", "0"])
    wait_done(browser, "Layer × layer heatmap", charts=True)
    la, lb = url_params(browser)["la"][0], url_params(browser)["lb"][0]
    assert f"mutual_knn at layers ({la}, {lb})" in browser.find_element(By.TAG_NAME, "body").text
    shoot(browser, "heatmap-cell-clicked")
    button = browser.find_element(By.XPATH, f"//button[contains(., 'Neighbours at layers ({la}, {lb})')]")
    button.click()
    WebDriverWait(browser, 60).until(lambda b: urllib.parse.urlparse(b.current_url).path.endswith("/neighbours"))
    wait_done(browser, "Neighbours")
    q = url_params(browser)
    assert q["models"] == ["vit-tiny", "llama-tiny"] and q["layers"] == [la, lb]
    body = browser.find_element(By.TAG_NAME, "body").text
    assert f"(layer {la}, n_f=" in body and f"(layer {lb}, n_c=" in body  # each column at its carried layer
    shoot(browser, "neighbours-from-heatmap")
