"""Page links under ``layerscope dashboard``, whose entry script (precompute/dashboard_entry.py) lives
outside the repository root: Streamlit resolves a relative page path next to the entry script, so a
link written as ``"pages/x.py"`` raises StreamlitPageNotFoundError there (AppTest on app.py cannot
see it)."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from precompute.dashboard import ENTRY

PAGES = Path(__file__).resolve().parents[2] / "pages"


@pytest.mark.parametrize("page, params", [
    ("overview", {}),
    ("downstream", {"dataset": "moving_shapes"}),
    ("predictors", {"dataset": "moving_shapes"}),
])
def test_pages_with_links_render_from_the_real_entry_script(demo_like, monkeypatch, page, params):
    monkeypatch.setenv("LAYERSCOPE_STORE", str(demo_like))
    at = AppTest.from_file(str(ENTRY), default_timeout=120)
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    if page != "overview":
        at.switch_page(str(PAGES / f"{page}.py"))
        at.run()
    assert not at.exception, [e.value for e in at.exception]
