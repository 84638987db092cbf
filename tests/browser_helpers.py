"""Helpers for the real-browser tests (not tests, not fixtures): the dashboard in a streamlit
subprocess, waiting for a page to finish, screenshots, and reading the charts a page drew.

The fixtures that use them (``server``, ``browser``) live in tests/dashboard/conftest.py; test modules
import from here, never from another ``test_*.py``. Chromium itself comes from
:func:`tests.helpers.chromium_driver`.
"""

import os
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: where every browser test leaves its screenshots (CI keeps them as artifacts; gitignored)
SCREENSHOTS = Path(os.environ.get("LAYERSCOPE_SCREENSHOTS") or REPO / "test-artifacts" / "screenshots")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def dashboard(store, timeout=60):
    """``layerscope dashboard`` on ``store`` (the command users run) on a free port; yields its URL once
    ``/_stcore/health`` answers ``ok``, fails with the server's output when it does not within ``timeout``."""
    from precompute.dashboard import command

    port = free_port()
    proc = subprocess.Popen(command(store, port=port), cwd=REPO, env={**os.environ, "LAYERSCOPE_STORE": str(store)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + timeout
    try:
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
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=20)


def settle_page(browser, most: float = 1.5, step: float = 0.1) -> None:
    """Until the page stops changing: the drawn charts (count, and canvases with a size) and the
    page's height the same over three polls ``step`` apart, at most ``most`` seconds. Charts paint
    after the script ends; a fixed wait of ``most`` cost every page its whole length."""
    last, same = None, 0
    end = time.monotonic() + most
    while time.monotonic() < end:
        state = browser.execute_script(
            "const c = document.querySelectorAll('.vega-embed canvas, .vega-embed svg');"
            "return [c.length, Array.from(c).filter(e => (e.width || e.clientWidth) > 0).length,"
            " document.body.scrollHeight];")
        same = same + 1 if state == last else 0
        if same >= 2:
            return
        last = state
        time.sleep(step)


def wait_done(browser, title: str, charts: bool = False, timeout=90, settle=1.5):
    """Until the page shows ``title`` in a heading, Streamlit has finished running the script (no
    skeleton, no Running/Stop status) and, with ``charts``, a chart is drawn; then until the page
    stops changing (:func:`settle_page`, at most ``settle`` seconds). Fails on any exception the
    page shows."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def ready(b):
        heads = " ".join(h.text for h in b.find_elements(By.CSS_SELECTOR, "h1"))
        status = " ".join(r.text for r in b.find_elements(By.CSS_SELECTOR, "[data-testid='stStatusWidget']"))
        drawn = not charts or b.find_elements(By.CSS_SELECTOR, ".vega-embed canvas, .vega-embed svg")
        return (title in heads and not b.find_elements(By.CSS_SELECTOR, "[data-testid='stSkeleton']")
                and "Running" not in status and "Stop" not in status and drawn)

    # a rerun replaces elements while they are read: a stale one is read again on the next poll
    WebDriverWait(browser, timeout, ignored_exceptions=[StaleElementReferenceException]).until(ready)
    settle_page(browser, settle)  # charts paint after the script ends
    errors = browser.find_elements(By.CSS_SELECTOR, "[data-testid='stException']")
    assert not errors, errors[0].text


def wait_charts_drawn(browser, timeout=60):
    """Until every vega-embed on the page holds its drawn SVG or canvas."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, timeout).until(lambda b: b.execute_script(
        "const e = document.querySelectorAll('.vega-embed');"
        "return [...e].every(x => x.querySelector('svg.marks, canvas'));"))


def shoot(browser, name: str) -> Path:
    """A screenshot of the window to ``$LAYERSCOPE_SCREENSHOTS/{name}.png``."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    assert browser.save_screenshot(str(path))
    return path


def url_params(browser) -> dict:
    """The current URL's query as ``parse_qs`` gives it (name -> list of values)."""
    return urllib.parse.parse_qs(urllib.parse.urlparse(browser.current_url).query)


#: Reads what vega-embed drew, in document order, from the SVG scenegraph (Streamlit 1.x renders
#: Vega-Lite as SVG unless a chart has over 2,000 rows per datum or asks for canvas). Vega writes an
#: ``aria-label`` on each axis ("X-axis titled 't' for a linear scale with values from a to b"), legend
#: and mark item (the item's encoded fields), so this sees the scales, ticks and items the user sees.
#: The page's text (captions, notes, alerts) is kept per section (a heading starts one), with the section's charts.
_SCENE_JS = r"""
const box = el => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; };
const shown = el => { for (let e = el; e && e.tagName !== 'svg'; e = e.parentElement) {
    const o = e.getAttribute('opacity'); if (o !== null && parseFloat(o) === 0) return false; }
  const r = el.getBoundingClientRect(); return r.width > 0 || r.height > 0; };
const texts = (root, sel) => [...root.querySelectorAll(sel)].filter(shown).map(t => t.textContent);
const main = document.querySelector("[data-testid='stMain']") || document.body;
const sections = [{heading: '', texts: [], charts: []}];
const sel = "[data-testid='stHeading'], [data-testid='stCaptionContainer'], [data-testid='stMarkdownContainer'], .vega-embed";
for (const el of main.querySelectorAll(sel)) {
  const section = sections[sections.length - 1];
  if (el.getAttribute('data-testid') === 'stHeading') {
    sections.push({heading: el.innerText, texts: [], charts: []}); continue; }
  if (!el.classList.contains('vega-embed')) {
    // a caption's text once (it may hold a Markdown block), no heading twice
    if (!el.parentElement.closest("[data-testid='stHeading'], [data-testid='stCaptionContainer']"))
      section.texts.push(el.innerText);
    continue; }
  const svg = el.querySelector('svg.marks');
  const chart = {canvas: !!el.querySelector('canvas'), svg: !!svg, box: box(el), main: box(main),
                 viewport: [window.innerWidth, window.innerHeight], axes: [], legends: [], marks: [], title: []};
  section.charts.push(chart);
  if (!svg) continue;
  chart.svg_box = box(svg);
  chart.title = texts(svg, 'g.role-title text');
  for (const a of svg.querySelectorAll('g.role-axis')) {
    const aria = a.getAttribute('aria-label');
    if (!aria) continue;  // grid-only axes are aria-hidden
    chart.axes.push({aria: aria, title: texts(a, 'g.role-axis-title text').join(' '),
                     labels: texts(a, 'g.role-axis-label text'), box: box(a)});
  }
  for (const l of svg.querySelectorAll('g.role-legend')) {
    chart.legends.push({aria: l.getAttribute('aria-label') || '', title: texts(l, 'g.role-legend-title text').join(' '),
                        labels: texts(l, 'g.role-legend-label text'), box: box(l), shown: shown(l)});
  }
  for (const m of svg.querySelectorAll('g.role-mark')) {
    const cls = m.getAttribute('class') || '';
    const kind = (cls.match(/mark-(\w+)/) || [null, ''])[1];
    const name = cls.split(/\s+/).filter(c => !c.startsWith('mark-') && c !== 'role-mark').join(' ');
    for (const it of m.children) {
      chart.marks.push({kind: kind, name: name, fill: it.getAttribute('fill'), stroke: it.getAttribute('stroke'),
                        aria: it.getAttribute('aria-label') || '', box: box(it)});
    }
  }
}
return sections.filter(s => s.texts.length || s.charts.length);
"""


def page_sections(browser) -> list[dict]:
    """The main column as sections (a heading starts one): ``heading``, ``texts`` (every Markdown
    block's text: captions, notes, alerts) and ``charts``, each Vega-Lite chart as drawn: ``canvas``/``svg`` (which renderer), ``box``
    (``[x, y, w, h]`` of the embed), ``main`` (the main column's box), ``viewport``, ``title`` (lines),
    ``axes`` (``aria``, ``title``, visible tick ``labels``, ``box``), ``legends`` (``aria``, ``title``,
    ``labels``, ``box``, ``shown``), ``marks`` (one entry per drawn item: ``kind`` rule/area/line/symbol/
    rect/text/..., ``name`` (the Vega-Lite layer's mark name), ``fill``, ``stroke``, ``aria``, ``box``).
    Boxes are ``[x, y, w, h]`` in CSS pixels of the window."""
    return browser.execute_script(_SCENE_JS)


#: Every drawn chart's fit: its SVG's box, the main column's right edge (inside its padding), the
#: window's width, and the texts Vega drew (titles, axis and legend labels) that leave the SVG (cut).
_FIT_JS = r"""
const box = el => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; };
const block = document.querySelector("[data-testid='stMainBlockContainer']");
const right = block.getBoundingClientRect().right - parseFloat(getComputedStyle(block).paddingRight);
return [...document.querySelectorAll('.vega-embed svg.marks')].map(svg => {
  const s = svg.getBoundingClientRect();
  const title = [...svg.querySelectorAll('g.role-title text')].map(t => t.textContent).join(' / ');
  // a text's box holds its font's ascent and descent: 4 px of slack on each side
  const cut = [...svg.querySelectorAll('text')].filter(t => t.textContent.trim()).filter(t => {
    const r = t.getBoundingClientRect();
    return r.width > 0 && (r.left < s.left - 4 || r.right > s.right + 4 || r.top < s.top - 4 || r.bottom > s.bottom + 4);
  }).map(t => t.textContent);
  return {title: title, svg: box(svg), right: right, viewport: window.innerWidth, cut: cut};
});
"""


def chart_fit_problems(browser) -> list[str]:
    """What keeps a drawn chart from being read whole: a chart wider than the window or past the main
    column's right edge (a phone scrolls it sideways, or the column cuts it), and texts cut by their
    own chart (a chart narrower than its content: Streamlit's ``fit`` squeezed it)."""
    problems = []
    for c in browser.execute_script(_FIT_JS):
        name = c["title"] or "untitled chart"
        end = c["svg"][0] + c["svg"][2]
        if end > min(c["right"], c["viewport"]) + 1:
            problems.append(f"{name!r}: {c['svg'][2]:.0f} px wide, ends at x {end:.0f}, past the column's "
                            f"{c['right']:.0f} (window {c['viewport']} px)")
        if c["cut"]:
            problems.append(f"{name!r} cuts its texts: {c['cut'][:6]}")
    return problems
