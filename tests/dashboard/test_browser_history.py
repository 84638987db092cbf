"""The browser's history in a real browser (Debian's chromium) on the demo-shaped store: a page that
writes its widgets' state into the URL replaces the current history entry, so Back goes to the page
before, as it does on any site. Streamlit pushes an entry for every change of the query string: three
page views left 20 entries and twelve presses of Back never left the Heatmap."""

import time

import pytest

from tests.browser_helpers import wait_done

pytestmark = pytest.mark.browser

# the ``server`` (on the ``demo_like`` store) and ``browser`` fixtures: tests/dashboard/conftest.py

#: (sidebar link's URL path, the page's title) in the order a reader opens them
VISITS = [("heatmap", "Layer × layer heatmap"), ("curves", "Layer curves")]


def open_from_sidebar(browser, path: str, title: str) -> None:
    from selenium.webdriver.common.by import By

    link = next(a for a in browser.find_elements(By.CSS_SELECTOR, "[data-testid='stSidebarNavLink']")
                if a.get_attribute("href").split("?")[0].rstrip("/").endswith("/" + path))
    link.click()
    wait_done(browser, title, charts=True)


def path_of(browser) -> str:
    return browser.execute_script("return location.pathname").strip("/")


def test_back_goes_to_the_page_before_and_each_page_view_adds_one_history_entry(server, browser):
    browser.set_window_size(1400, 1000)
    browser.get(server)  # a fresh tab: its first entry is this page
    wait_done(browser, "LayerScope", charts=True)
    start = browser.execute_script("return history.length")
    for path, title in VISITS:
        open_from_sidebar(browser, path, title)
    # the curves page's widgets wrote their defaults into the URL: that is the same view, not a new one
    assert browser.execute_script("return history.length") == start + len(VISITS)
    seen = []
    for path, title in reversed([("", "LayerScope")] + VISITS[:-1]):
        browser.back()
        time.sleep(0.5)
        wait_done(browser, title, charts=True)
        seen.append(path_of(browser))
    assert seen == ["heatmap", ""], f"Back went to {seen}"
