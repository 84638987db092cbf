"""Issue #33, "Done when": every page's default view in a real browser (Debian's chromium) on the
demo-shaped store (``demo_like``), with every Vega-Lite chart read from the SVG Vega drew
(:func:`tests.browser_helpers.page_sections`), asserting what a reader needs:

(a) a chart that colours one layer's marks by a field shows a visible colour legend, inside the main
    column, with whole labels (no "…");
(b) no tick value nor scale end lies outside the quantity's range (relative depth, fractions and
    accuracies in [0, 1], correlations in [-1, 1], a metric's bounds from
    :data:`analysis.registry.BOUNDS`); and the axes can be read: a quantitative axis shows at least two
    tick values (a collapsed plot shows none), a categorical one names every category, no label is cut;
(c) every interval the page claims (a caption, axis or legend naming error bars, intervals, CIs or
    bands; not "no interval ...") is drawn: an interval mark (rule, area or outline whose item carries a
    low/high field) with a non-zero extent in that chart or, for a caption, in its section's charts; a
    "band" needs an area, and a section that promises error bars or bands draws a chart.

And the sweep: every page's default view at 1400 and 390 px, on that store and on a text-only one
(:func:`text_only_like`), raises no exception, logs no console error, asks no other host for anything,
and draws no chart wider than the window or the column, nor narrower than its own texts.

Screenshots of each default view (the window grown to the page's height) land in
$LAYERSCOPE_SCREENSHOTS as ``default-<page>.png`` (``sweep-<store>-<page>-<width>.png`` for the sweep).
"""

import json
import re
import urllib.parse

import numpy as np
import pytest

from tests.browser_helpers import chart_fit_problems, page_sections, shoot, wait_charts_drawn, wait_done

pytestmark = pytest.mark.browser

# the ``server`` fixture (on ``served_store``): tests/dashboard/conftest.py


def text_only_like(root):
    """A text-only store (items without a video) as a sentence-embedding user builds one: MiniLM-shaped
    ``minilm`` (7 layers), its identical copy ``minilm-copy`` and a two-layer ``bert1``, each at caption
    budgets 1 and 2, 40 items sharing a latent, analysed with small settings. Returns its path."""
    from tests.stores import write_text_store

    rng = np.random.default_rng(44)
    latent = rng.normal(size=(40, 6))
    runs = {}
    for model, layers, dim in (("minilm", 7, 16), ("bert1", 2, 12)):
        maps = rng.normal(size=(layers, 6, dim))
        for n_c in (1, 2):
            noise = 1.0 / n_c + np.abs(np.arange(layers) - layers // 2)[:, None, None] * 0.3
            runs[(model, n_c)] = (np.einsum("nk,lkd->lnd", latent, maps)
                                  + noise * rng.normal(size=(layers, 40, dim))).astype(np.float32)
            if model == "minilm":
                runs[("minilm-copy", n_c)] = runs[(model, n_c)]
    path = root / "text_only.duckdb"
    write_text_store(path, runs, analyze={"k": 5, "n_boot": 10, "n_null": 10, "jobs": 1})
    return path


@pytest.fixture(scope="module", params=["demo_like", "text_only"])
def served_store(request, tmp_path_factory):
    """The module's tests run on the demo-shaped store, then on the text-only one."""
    if request.param == "demo_like":
        return request.getfixturevalue("demo_like")
    from tests.conftest import shared_once

    return shared_once(tmp_path_factory, "text-only-like", text_only_like) / "text_only.duckdb"


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Headless chromium at 1400 × 1000 that keeps its console and its network log."""
    from tests.helpers import chromium_driver

    driver = chromium_driver(tmp_path_factory.mktemp("chrome-profile"), log_requests=True, log_console=True)
    yield driver
    driver.quit()

#: (URL path, the page's title, the fewest charts its default view draws on the demo-shaped store);
#: Neighbours shows images and tables, Downstream has no whole-model results in that store
PAGES = [("", "LayerScope", 1), ("heatmap", "Layer × layer heatmap", 1), ("curves", "Layer curves", 1),
         ("scaling", "Test-time scaling", 2), ("model_map", "Model map", 2), ("embedding_map", "Embedding map", 1),
         ("neighbours", "Neighbours", 0), ("temporal", "Temporal probes", 2), ("downstream", "Downstream correlation", 0),
         ("predictors", "Layer predictors", 2), ("paper_figures", "Paper figures", 1)]

_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(e[+-]?\d+)?%?$", re.I)


def number(text: str) -> float | None:
    """A tick label's value ("−0.25", "+11%", "1,000", "7e-18") or None for a category."""
    t = text.strip().replace("\u2212", "-").replace(",", "")
    if not _NUMBER.match(t):
        return None
    return float(t[:-1]) / 100 if t.endswith("%") else float(t)


def _bounds_of_metric(text: str):
    from analysis.registry import BOUNDS

    for name, (lo, hi) in BOUNDS.items():
        if re.search(rf"(?<![\w@]){re.escape(name)}(?![\w@])", text):
            return (-float("inf") if lo is None else lo, float("inf") if hi is None else hi)
    return None


def natural_range(axis_title: str, chart_title: str = "") -> tuple[float, float] | None:
    """The range of the quantity an axis shows, read from its title (None when the title names no
    bounded quantity: gains in %, MDS coordinates, budgets, downstream scores)."""
    t = axis_title.lower()
    if "relative depth" in t:
        return (0.0, 1.0)
    if re.search(r"spearman|pearson|correlation|\u03c1", t):
        return (-1.0, 1.0)
    if re.search(r"accuracy|recall@|fraction|share of", t):
        return (0.0, 1.0)
    if t.startswith("alignment with"):  # the curves' alignment: a row maximum of mutual k-NN
        return (0.0, 1.0)
    if t.startswith("best alignment"):  # the best cell of the metric the chart's title names
        return _bounds_of_metric(chart_title) or (-1.0, 1.0)
    return _bounds_of_metric(axis_title)


# (c): what claims an interval, what takes it back, and what an interval mark carries
_CLAIM = re.compile(r"interval|\bCIs?\b|error bars?|\bbands?\b", re.I)
_DENY = re.compile(r"\bno\b|\bnot\b|\bnone\b|without|undefined|\black", re.I)
#: an interval given in numbers is drawn as text ("95% interval 0.026–0.056", "95% CI -3.26 to -3.19")
_STATED = re.compile(r"(interval|\bCI)\b[^;]*?[-+\u2212]?\d[\d.]*%?\s*(\u2013|-|to|,)\s*[-+\u2212]?\d")
_INTERVAL_ITEM = re.compile(r"(\blow|\bhigh|_low|_high|\blower|\bupper)\w*\s*:\s*[-\u2212]?\d|"
                            r"within the best cell's 95% interval", re.I)


def claims(texts) -> list[str]:
    """The sentences (or clauses) of ``texts`` that say an interval is drawn."""
    out = []
    for text in texts:
        for s in re.split(r"(?<=[.;:!?])\s+|\n", text):
            if _CLAIM.search(s) and not _DENY.search(s) and not _STATED.search(s):
                out.append(s.strip())
    return out


def interval_items(chart) -> list[dict]:
    """The chart's drawn interval items: rules, areas and outlines that carry a low/high field, with a
    non-zero extent on screen (a rule's length, an area's width and height)."""
    out = []
    for m in chart["marks"]:
        if m["kind"] not in ("rule", "area", "rect") or not _INTERVAL_ITEM.search(m["aria"]):
            continue
        w, h = m["box"][2], m["box"][3]
        if (m["kind"] == "rule" and max(w, h) > 3) or (m["kind"] != "rule" and w > 1 and h > 1):
            out.append(m)
    return out


def chart_name(chart) -> str:
    return " / ".join(chart["title"]) or " / ".join(a["title"] for a in chart["axes"] if a["title"]) or "untitled"


def legend_problems(chart) -> list[str]:
    """(a): a layer whose items differ in colour needs a visible colour legend inside the column."""
    problems = []
    colours: dict[str, set] = {}
    for m in chart["marks"]:
        if m["kind"] == "text" or "brush" in m["name"]:  # labels' contrast colours; the selection box
            continue
        c = m["fill"] if m["fill"] not in (None, "none", "transparent") else m["stroke"]
        if c not in (None, "none", "transparent"):
            colours.setdefault(m["name"], set()).add(c)
    coloured = sorted(name for name, cs in colours.items() if len(cs) > 1)
    keys = [lg for lg in chart["legends"] if "color" in lg["aria"]]
    if coloured and not any(lg["shown"] for lg in keys):
        problems.append(f"{coloured} colour items by a field but no colour legend is visible")
    mx, _, mw, _ = chart["main"]
    right = min(mx + mw, chart["viewport"][0])
    for lg in chart["legends"]:
        x, _, w, _ = lg["box"]
        if x < mx - 1 or x + w > right + 1:
            problems.append(f"legend {lg['title'] or lg['aria'][:40]!r} at x {x:.0f}–{x + w:.0f} leaves the column "
                            f"({mx:.0f}–{right:.0f})")
        cut = [label for label in lg["labels"] if label.endswith("\u2026")]
        if cut:
            problems.append(f"legend {lg['title']!r} cuts its labels: {cut}")
    return problems


def axis_problems(chart) -> list[str]:
    """(b): quantitative axes show values, and none outside the quantity's range."""
    problems = []
    title = " ".join(chart["title"])
    for a in chart["axes"]:
        name = a["title"] or a["aria"][:30]
        cut = [label for label in a["labels"] if label.endswith("\u2026")]
        if cut:
            problems.append(f"axis {name!r} cuts its labels: {cut}")
        scale = re.search(r"for an? (\w+) scale", a["aria"])
        if not scale:
            continue
        if scale.group(1) == "discrete":  # every category named: a hidden label leaves its marks unnamed
            n = re.search(r"with (\d+) values?", a["aria"])
            if n and len(a["labels"]) < int(n.group(1)):
                problems.append(f"axis {name!r} names {len(a['labels'])} of its {n.group(1)} categories "
                                "(labels overlap: the plot is too small for them)")
            continue
        values = [v for v in map(number, a["labels"]) if v is not None]
        if len(values) < 2:
            problems.append(f"axis {name!r} shows {len(values)} tick value(s) ({a['labels']}): the plot collapsed")
        ends = re.search(r"values from (\S+) to (\S+)$", a["aria"])
        ends = [v for v in map(number, ends.groups()) if v is not None] if ends else []
        rng = natural_range(a["title"], title)
        if rng is None:
            continue
        lo, hi = rng
        tol = 1e-9 + 1e-6 * (hi - lo if hi - lo < float("inf") else 1)
        out = [v for v in values + ends if v < lo - tol or v > hi + tol]
        if out:
            problems.append(f"axis {name!r} shows {out}, outside [{lo}, {hi}]")
    return problems


def interval_problems(section) -> list[str]:
    """(c): a chart's own claims (title, axes, legends) are drawn in it; the section's captions are
    drawn in one of its charts; a band is an area."""
    problems = []
    for chart in section["charts"]:
        own = chart["title"] + [a["title"] for a in chart["axes"]] + [lg["title"] for lg in chart["legends"]]
        said = claims(own)
        drawn = interval_items(chart)
        if said and not drawn:
            problems.append(f"chart {chart_name(chart)!r} says {said} but draws no interval")
        if any(_has_band(s) for s in said) and not any(m["kind"] == "area" for m in drawn):
            problems.append(f"chart {chart_name(chart)!r} says {said} but draws no band")
    said = claims(section["texts"])
    drawing = [s for s in said if re.search(r"error bars?|\bbands?\b|shaded", s, re.I)]
    if drawing and not section["charts"]:  # a table states intervals in text; error bars need a chart
        problems.append(f"section {section['heading']!r} says {drawing} but draws no chart")
    if said and section["charts"]:
        drawn = [m for c in section["charts"] for m in interval_items(c)]
        if not drawn:
            problems.append(f"section {section['heading']!r} says {said} but its charts draw no interval")
        if any(_has_band(s) for s in said) and not any(m["kind"] == "area" for m in drawn):
            problems.append(f"section {section['heading']!r} says {said} but its charts draw no band")
    return problems


def _has_band(sentence: str) -> bool:
    return re.search(r"\bbands?\b", sentence, re.I) is not None


def full_page_shot(browser, name: str):
    """The window grown to the main column's scroll height (Streamlit scrolls inside it), then shot."""
    height = browser.execute_script(
        "return Math.max(...[...document.querySelectorAll(\"[data-testid='stMain'], "
        "[data-testid='stAppViewContainer']\")].map(e => e.scrollHeight), 1000);")
    width = browser.get_window_size()["width"]
    browser.set_window_size(width, min(int(height) + 150, 8000))
    try:
        wait_charts_drawn(browser)
        shoot(browser, name)
    finally:
        browser.set_window_size(width, 1000)


@pytest.mark.parametrize("page,title,fewest", PAGES, ids=[p[0] or "overview" for p in PAGES])
def test_every_default_view_has_its_legends_axes_and_intervals(server, served_store, browser, page, title, fewest):
    """At 1400 px: every chart's legends, axes and the intervals its section speaks of; and, on the
    same page load, what the 390 px sweep below checks (fit, console, other hosts) at this width."""
    if "text_only" in str(served_store):
        fewest = 0  # a store without videos leaves the vision pages' charts out, saying why
    browser.set_window_size(1400, 1000)
    open_page(browser, server, page)
    wait_done(browser, title, charts=fewest > 0)
    wait_charts_drawn(browser)
    fit = window_problems(browser, server, served_store, page, 1400)
    assert not fit, "\n".join(fit)
    sections = page_sections(browser)
    charts = [c for s in sections for c in s["charts"]]
    full_page_shot(browser, f"default-{page or 'overview'}")
    assert len(charts) >= fewest, f"{len(charts)} chart(s) drawn, expected at least {fewest}"
    problems = []
    for chart in charts:
        if not chart["svg"]:  # Streamlit draws a chart with > 2,000 rows per datum on canvas: unreadable here
            problems.append(f"chart {len(problems)} is drawn on canvas: give it usermeta.embedOptions.renderer 'svg'")
            continue
        name = chart_name(chart)
        problems += [f"{name}: {p}" for p in legend_problems(chart) + axis_problems(chart)]
    for section in sections:
        problems += interval_problems(section)
    assert not problems, "\n".join(problems)


#: Streamlit's frontend, opened on a page's own URL (``/heatmap``), looks for its server under that path
#: first (``/heatmap/_stcore/health``, ``host-config``) and then at the root: the first two answer 404 on
#: every deep link of every Streamlit app, logged by the browser, not by the page
BASE_PATH_PROBE = re.compile(r"/_stcore/(health|host-config) - Failed to load resource: .* 404")


def open_page(browser, server, page) -> None:
    """Open ``server``'s ``page`` with the console and network logs holding only what it logs. The tab
    leaves the page before first: the browser outlives each store's server in this module, and a page
    of a server already stopped keeps polling its health endpoint (connection refused, logged at any
    moment) until the tab leaves it."""
    browser.get("about:blank")
    browser.get_log("browser"), other_hosts(browser, server)  # drop what came before
    browser.get(f"{server}/{page}")


def other_hosts(browser, server) -> list[str]:
    """The URLs of the requests the browser sent to another host since the log was last read."""
    host = urllib.parse.urlparse(server).hostname
    out = []
    for entry in browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] in ("Network.requestWillBeSent", "Network.webSocketCreated"):
            url = message["params"].get("request", {}).get("url") or message["params"].get("url", "")
            u = urllib.parse.urlparse(url)
            if u.scheme in ("http", "https", "ws", "wss") and u.hostname != host:
                out.append(url)
    return out


def window_problems(browser, server, served_store, page, width) -> list[str]:
    """What a drawn page gets wrong at its window's width: a chart wider than the window or cutting
    its own text, a console error, a request to another host; the window shot for the artifacts."""
    problems = chart_fit_problems(browser)
    problems += [f"console: {e['message'][:300]}" for e in browser.get_log("browser")
                 if e["level"] == "SEVERE" and not BASE_PATH_PROBE.search(e["message"])]
    problems += [f"asked another host: {u}" for u in other_hosts(browser, server)]
    store = "text-only" if "text_only" in str(served_store) else "demo"
    shoot(browser, f"sweep-{store}-{page or 'overview'}-{width}")
    return problems


# 1400 px: checked on the legends test's page load above, which opens every page at that width
@pytest.mark.parametrize("width", [390])
@pytest.mark.parametrize("page,title", [p[:2] for p in PAGES], ids=[p[0] or "overview" for p in PAGES])
def test_every_default_view_fits_the_window_with_no_error_and_no_other_host(server, served_store, browser, page,
                                                                             title, width):
    browser.set_window_size(width, 1000)
    open_page(browser, server, page)
    wait_done(browser, title)  # fails on an exception the page shows
    wait_charts_drawn(browser)
    problems = window_problems(browser, server, served_store, page, width)
    assert not problems, "\n".join(problems)
