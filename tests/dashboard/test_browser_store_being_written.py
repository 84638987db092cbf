"""The pages stay usable while another process writes the store, in a real browser (Debian's
chromium): a session opened after the writer started (nothing read before to fall back on) draws
every chart from what the store held when it was last saved, and says once, as a note, that the store
is being written. Before, a second session's Heatmap showed no chart, only the writer's advice
("stop it, or write to another store and `layerscope merge` it"), twice, while an analysis ran for
minutes to hours."""

import shutil
import subprocess
import sys

import pytest

from tests.browser_helpers import page_sections, wait_done

pytestmark = pytest.mark.browser

#: a writer as ``layerscope analyze`` is one: it commits, then holds the store until it is killed
HOLDER = ("import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); c.execute('CREATE TABLE _job_rows (x INT)'); "
          "print('writing', flush=True); time.sleep(600)")


@pytest.fixture(scope="module")
def served_store(demo_like, tmp_path_factory):
    """A copy of the demo-shaped store that another process holds open for writing while the module's
    ``server`` (tests/dashboard/conftest.py) serves it."""
    store = tmp_path_factory.mktemp("held") / "held.duckdb"
    shutil.copy(demo_like, store)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(store)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "writing"
        yield store
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("page,title", [("heatmap", "Layer × layer heatmap"), ("", "LayerScope"),
                                        ("curves", "Layer curves")])
def test_a_page_opened_while_a_job_writes_draws_the_saved_results_with_one_note(server, browser, page, title):
    from selenium.webdriver.common.by import By

    browser.set_window_size(1400, 1000)
    browser.get(f"{server}/{page}")
    wait_done(browser, title, charts=True)
    charts = [c for s in page_sections(browser) for c in s["charts"]]
    assert charts, "no chart drawn"
    body = browser.find_element(By.CSS_SELECTOR, "[data-testid='stMain']").text
    assert body.count("being written by another process") == 1, body
    assert "layerscope merge" not in body and "stop it" not in body
