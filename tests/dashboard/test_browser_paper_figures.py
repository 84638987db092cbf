"""Paper figures in a real browser (Debian's chromium) on the demo-shaped store: the vision × text
matrix of DR Figs. 11/12 is drawn whole at both caption budgets, on a desktop and on a phone: every
cell a readable box with its printed value inside it, the title's lines inside the chart, and the
chart inside the window. Streamlit's theme fits a whole chart (title, axes, legend) into its
width × height, which left the matrix a 330 × 120 px box with a cut title and no visible cells."""

import pytest

from tests.browser_helpers import shoot, wait_charts_drawn, wait_done

pytestmark = pytest.mark.browser

# the ``server`` (on the ``demo_like`` store) and ``browser`` fixtures: tests/dashboard/conftest.py

#: the drawn matrix: each cell's box, each printed value's box, the title lines' boxes and the SVG's box
_MATRIX_JS = r"""
const box = el => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; };
const svg = document.querySelector('.vega-embed svg.marks');
if (!svg) return null;
const block = document.querySelector("[data-testid='stMainBlockContainer']");
const right = block.getBoundingClientRect().right - parseFloat(getComputedStyle(block).paddingRight);
return {svg: box(svg), viewport: window.innerWidth, right: right,
        cells: [...svg.querySelectorAll('g.role-mark.mark-rect path')].map(box),
        values: [...svg.querySelectorAll('g.role-mark.mark-text text')].map(t => ({text: t.textContent, box: box(t)})),
        title: [...svg.querySelectorAll('g.role-title text')].map(t => ({text: t.textContent, box: box(t)}))};
"""


def inside(inner, outer, slack=1.0) -> bool:
    x, y, w, h = inner
    ox, oy, ow, oh = outer
    return x >= ox - slack and y >= oy - slack and x + w <= ox + ow + slack and y + h <= oy + oh + slack


@pytest.mark.parametrize("width", [1400, 390])
@pytest.mark.parametrize("budget", ["smallest", "largest"])
def test_the_vision_by_text_matrix_shows_every_cell_with_its_value_and_a_whole_title(server, browser, budget, width):
    browser.set_window_size(width, 1000)
    browser.get(f"{server}/paper_figures?figure=fig11&budget={budget}")
    wait_done(browser, "Paper figures", charts=True)
    wait_charts_drawn(browser)
    drawn = browser.execute_script(_MATRIX_JS)
    shoot(browser, f"paper-figures-fig11-{budget}-{width}")
    assert drawn and drawn["cells"], "no matrix drawn"
    problems = []
    if drawn["svg"][0] + drawn["svg"][2] > min(drawn["right"], drawn["viewport"]) + 1:
        problems.append(f"the chart ends at x {drawn['svg'][0] + drawn['svg'][2]:.0f}, past the column's "
                        f"{drawn['right']:.0f} (window {drawn['viewport']} px)")
    for cell in drawn["cells"]:
        if cell[2] < 40 or cell[3] < 18:  # a value such as "0.41 (L12/L5)" needs a box it can be read in
            problems.append(f"a cell is drawn {cell[2]:.0f} × {cell[3]:.0f} px")
    values = [v for v in drawn["values"] if v["text"].strip()]
    if len(values) < len(drawn["cells"]):
        problems.append(f"{len(values)} printed values for {len(drawn['cells'])} cells")
    problems += [f"value {v['text']!r} at {v['box']} leaves its chart" for v in values if not inside(v["box"], drawn["svg"])]
    # a text's box holds its font's ascent: a few px above the first line's glyphs are empty
    problems += [f"title line {t['text']!r} at {t['box']} is cut from {drawn['svg']}" for t in drawn["title"]
                 if not inside(t["box"], drawn["svg"], slack=4)]
    assert not problems, "\n".join(problems)
