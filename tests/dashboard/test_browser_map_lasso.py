"""The Embedding map's lasso in a real browser (Debian's chromium) on the tools store
(tests/stores.py ``write_map_tools_store``): with ``?select=lasso`` the map is drawn by Plotly with
every point and no console error, a lasso drawn round the points with the mouse writes ``lasso``
to the link and lists the items inside it, and a click on a point afterwards (with Plotly's Pan tool)
inspects it and keeps the lasso. Screenshots land in test-artifacts/screenshots/
(``map-lasso-*.png``)."""

import re
import time
import urllib.parse

import pytest

from tests.browser_helpers import shoot, url_params, wait_done
from tests.stores import TOOLS_N

pytestmark = pytest.mark.browser

#: Streamlit probes these paths for a base URL; a 404 there is expected, not an error of the page
BASE_PATH_PROBE = re.compile(r"/_stcore/(health|host-config) - Failed to load resource: .* 404")


@pytest.fixture(scope="module")
def served_store(map_tools_store):
    """The ``server`` fixture (tests/dashboard/conftest.py) serves the tools store here."""
    return map_tools_store


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Headless chromium at 1400 × 1000 that keeps its console."""
    from tests.helpers import chromium_driver

    driver = chromium_driver(tmp_path_factory.mktemp("chrome-profile"), log_console=True)
    yield driver
    driver.quit()


def plotted_points(browser, timeout=60):
    """Until Plotly has drawn the map's points: their centres in the window, after scrolling it into view."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = browser.execute_script(
            "const p = document.querySelector('.js-plotly-plot');"
            "if (!p) return null; p.scrollIntoView({block: 'center'});"
            "return [...p.querySelectorAll('.scatterlayer .trace .points path.point')].map(e => {"
            " const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; });")
        if found and len(found) >= TOOLS_N:
            time.sleep(0.5)  # the scroll settles
            return browser.execute_script(
                "return [...document.querySelectorAll('.js-plotly-plot .scatterlayer .trace .points path.point')]"
                ".map(e => { const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; });")
        time.sleep(0.3)
    pytest.fail("Plotly never drew the map's points")


def test_the_lasso_map_draws_every_point_and_a_drawn_lasso_goes_to_the_link(server, browser):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    browser.get_log("browser")  # drop what came before
    query = urllib.parse.urlencode({"dataset": "tools", "map": "vid · video L3", "frames": "0", "select": "lasso"})
    browser.get(f"{server}/embedding_map?{query}")
    wait_done(browser, "Embedding map")
    points = plotted_points(browser)
    assert len(points) == TOOLS_N  # one trace per series, no ring drawn yet
    errors = [e["message"][:300] for e in browser.get_log("browser")
              if e["level"] == "SEVERE" and not BASE_PATH_PROBE.search(e["message"])]
    assert not errors, errors
    shoot(browser, "map-lasso-drawn")
    # a lasso round every point: a loop just inside the plot's drag area (Plotly pads its axes round
    # the points), in small steps as a hand draws
    x, y, w, h = browser.execute_script(
        "const r = document.querySelector('.js-plotly-plot .nsewdrag').getBoundingClientRect();"
        "return [r.x, r.y, r.width, r.height];")
    assert all(x < px < x + w and y < py < y + h for px, py in points)
    x0, x1, y0, y1 = x + 4, x + w - 4, y + 4, y + h - 4
    corners = [(x0, y0), (x1, y0), (x1, y1), (x0, y1), (x0, y0 + 1)]
    drag = ActionChains(browser)
    pointer = drag.w3c_actions.pointer_action
    pointer.move_to_location(int(x0), int(y0)).pointer_down()
    for (a, b), (c, d) in zip(corners, corners[1:]):
        for f in (0.25, 0.5, 0.75, 1.0):
            pointer.move_to_location(int(a + f * (c - a)), int(b + f * (d - b)))
    pointer.pointer_up()
    drag.perform()
    end = time.monotonic() + 30
    while "lasso" not in url_params(browser) and time.monotonic() < end:
        time.sleep(0.2)
    assert "lasso" in url_params(browser), browser.current_url
    wait_done(browser, "Embedding map")
    body = browser.find_element(By.TAG_NAME, "body").text
    assert f"Lasso selection — {TOOLS_N} point(s), {TOOLS_N} item(s)" in body
    shoot(browser, "map-lasso-selected")
    lasso = url_params(browser)["lasso"]
    # a click on a point with the Pan tool then inspects it (the lasso tool takes a click for a
    # deselection); the redrawn figure (its rings) keeps the lasso
    px, py = plotted_points(browser)[0]
    browser.execute_script("document.querySelector('.js-plotly-plot .modebar-btn[data-val=\"pan\"]').click()")
    click = ActionChains(browser)
    click.w3c_actions.pointer_action.move_to_location(int(px), int(py)).click()
    click.perform()
    end = time.monotonic() + 30
    while "focus" not in url_params(browser) and time.monotonic() < end:
        time.sleep(0.2)
    wait_done(browser, "Embedding map")
    assert "focus" in url_params(browser) and url_params(browser)["lasso"] == lasso, browser.current_url
    assert "Nearest 5 items to" in browser.find_element(By.TAG_NAME, "body").text
    shoot(browser, "map-lasso-then-click")
