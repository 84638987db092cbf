"""The Embedding map's click and drag in a real browser (Debian's chromium) on the tools store
(tests/stores.py ``write_map_tools_store``): a click on a point names it in the link (``focus``), and a
box dragged afterwards adds ``box`` to the link while the clicked item stays. Vega-Lite ends a drag with
a click on the chart's background, which empties the click selection; the page must not take that for
a deselection. Screenshots land in test-artifacts/screenshots/ (``map-selection-*.png``)."""

import time
import urllib.parse

import pytest

from tests.browser_helpers import page_sections, shoot, url_params, wait_done

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def served_store(map_tools_store):
    """The ``server`` fixture (tests/dashboard/conftest.py) serves the tools store here."""
    return map_tools_store


def wait_param(browser, name, present=True, timeout=30):
    """Until the URL has (or lacks) ``name``; its values then."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        params = url_params(browser)
        if (name in params) == present:
            return params.get(name)
        time.sleep(0.2)
    pytest.fail(f"the URL {'never got' if present else 'kept'} {name!r}: {browser.current_url}")


def in_view(browser) -> dict:
    """The map (the first SVG chart) scrolled into the window, as drawn (positions in the window)."""
    browser.execute_script("document.querySelector('.vega-embed').scrollIntoView({block: 'start'})")
    time.sleep(0.3)
    return next(c for s in page_sections(browser) for c in s["charts"] if c["svg"])


def test_a_box_dragged_after_a_click_keeps_the_clicked_item(server, browser):
    from selenium.webdriver.common.action_chains import ActionChains

    query = urllib.parse.urlencode({"dataset": "tools", "map": "vid · video L3", "frames": "0"})
    browser.get(f"{server}/embedding_map?{query}")
    wait_done(browser, "Embedding map", charts=True)
    chart = in_view(browser)
    points = [m for m in chart["marks"] if m["kind"] == "symbol" and m["box"][2] > 0]
    assert len(points) >= 30
    x, y, w, h = points[0]["box"]
    actions = ActionChains(browser)
    actions.w3c_actions.pointer_action.move_to_location(int(x + w / 2), int(y + h / 2)).click()
    actions.perform()
    (focus,) = wait_param(browser, "focus")
    wait_done(browser, "Embedding map", charts=True)
    # a drag across the points' extent, inside the plot (where Vega-Lite's brush listens)
    boxes = [m["box"] for m in in_view(browser)["marks"] if m["kind"] == "symbol" and m["box"][2] > 0]
    x0, y0 = min(b[0] for b in boxes), min(b[1] for b in boxes)
    x1, y1 = max(b[0] + b[2] for b in boxes), max(b[1] + b[3] for b in boxes)
    drag = ActionChains(browser)
    pointer = drag.w3c_actions.pointer_action
    pointer.move_to_location(int(x0 + 0.1 * (x1 - x0)), int(y0 + 0.1 * (y1 - y0))).pointer_down()
    for f in (0.3, 0.5, 0.7):
        pointer.move_to_location(int(x0 + f * (x1 - x0)), int(y0 + f * (y1 - y0)))
    pointer.pointer_up()
    drag.perform()
    wait_param(browser, "box")
    wait_done(browser, "Embedding map", charts=True)
    shoot(browser, "map-selection-drag-after-click")
    assert url_params(browser).get("focus") == [focus]


def test_the_linked_map_and_the_item_table_draw_beside_and_under_the_map(server, browser):
    from selenium.webdriver.common.by import By

    query = urllib.parse.urlencode({"dataset": "tools", "map": "vid · video L3", "frames": "0", "linked": "1",
                                    "focus": "clip04", "box": "-1e9,1e9,-1e9,1e9", "ff": "shade",
                                    "fv": "red"}, safe="")
    query += "&fv=blue"
    browser.get(f"{server}/embedding_map?{query}")
    wait_done(browser, "Embedding map", charts=True)
    charts = [c for s in page_sections(browser) for c in s["charts"] if c["svg"]]
    assert len(charts) == 2
    (left, right) = charts[0]["box"], charts[1]["box"]
    assert left[0] + left[2] <= right[0] + 1 and abs(left[1] - right[1]) < 80  # side by side
    body = browser.find_element(By.TAG_NAME, "body").text
    assert "Alignment on this selection" in body and "Alignment on the filtered items" in body
    assert "Items: where the layers disagree" in body
    # clip04 (green) is hidden by the filter and still inspected; the link's ±1e9 box leaves the points spread
    assert "unknown item" not in body and "Nearest 5 items to clip04" in body
    xs = [m["box"][0] for m in charts[0]["marks"] if m["kind"] == "symbol" and m["box"][2] > 0]
    assert max(xs) - min(xs) > left[2] / 2
    shoot(browser, "map-selection-linked")
