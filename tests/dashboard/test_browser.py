"""A real browser: Debian's chromium loads the dashboard on the demo store and draws its charts.

CI installs chromium and chromium-driver with apt (see .ci/run). Screenshots land in test-artifacts/.
"""

import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from precompute.dashboard import command
from tests.conftest import chromium_driver

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"

pytestmark = pytest.mark.browser


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(small_demo):
    port = free_port()
    env = {**os.environ, "LAYERSCOPE_STORE": str(small_demo)}
    proc = subprocess.Popen(command(small_demo, port=port), cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
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
    driver = chromium_driver(tmp_path_factory.mktemp("chrome-profile"))
    yield driver
    driver.quit()


@pytest.mark.parametrize("page,query,text", [
    ("heatmap", "?dataset=moving_shapes&a=vit-tiny&b=llama-tiny&metric=cknna&nf=2&nc=4&la=1&lb=3",
     "cknna at layers (1, 3)"),
    ("curves", "?dataset=moving_shapes", "Recommended layers"),
])
def test_page_draws_its_vega_lite_charts(server, browser, page, query, text):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{server}/{page}{query}")
    # the loading skeleton has no vega-embed: wait for a drawn chart (canvas or svg inside vega-embed)
    WebDriverWait(browser, 90).until(
        EC.presence_of_element_located((By.CSS_SELECTOR, ".vega-embed canvas, .vega-embed svg")))
    time.sleep(1.0)  # let the chart finish its first paint before the screenshot
    drawn = browser.find_elements(By.CSS_SELECTOR, ".vega-embed canvas, .vega-embed svg")
    assert drawn
    errors = browser.find_elements(By.CSS_SELECTOR, "[data-testid='stException']")
    assert not errors, errors[0].text
    # a shared deep link opens with the app's navigation and sidebar, and the linked selections
    assert "Layer heatmap" in browser.find_element(By.CSS_SELECTOR, "[data-testid='stSidebarNav']").text
    assert "Store:" in browser.find_element(By.CSS_SELECTOR, "[data-testid='stSidebar']").text
    assert text in browser.find_element(By.TAG_NAME, "body").text
    ARTIFACTS.mkdir(exist_ok=True)
    assert browser.save_screenshot(str(ARTIFACTS / f"dashboard-{page}.png"))
