"""Issue #33, item 9: status icons ship with the app (Streamlit's Material icons), never emoji that a
machine without an emoji font draws as identical boxes; every verdict status looks different."""

import re
from pathlib import Path

import pytest

from analysis.views.store_info import UNTRAINED_ICON
from analysis.views.verdicts import VERDICT_BADGES
from tests.helpers import app

REPO = Path(__file__).resolve().parents[2]
#: pictographic emoji and the dingbats/symbols the dashboard used as icons
EMOJI = re.compile("[\U0001F000-\U0001FAFF\u2600-\u27BF\u2B00-\u2BFF\uFE0F]")


def test_no_emoji_in_the_app_and_pages():
    for path in [REPO / "app.py", *sorted((REPO / "pages").glob("*.py"))]:
        found = EMOJI.findall(path.read_text())
        assert not found, (path.name, found)


def test_each_verdict_status_has_its_own_material_icon_and_word():
    icons = [re.search(r":material/(\w+):", b).group(1) for b in VERDICT_BADGES.values()]
    words = [b.split(": ", 1)[1] for b in VERDICT_BADGES.values()]
    assert len(set(icons)) == len(icons) and len(set(words)) == len(words)
    assert not any(EMOJI.search(b) for b in VERDICT_BADGES.values())


@pytest.fixture(scope="module")
def named_store(named_layers_store):
    return named_layers_store  # built once per run (tests/conftest.py); read only


def test_overview_marks_verdicts_and_the_banner_with_material_icons(named_store, monkeypatch):
    at = app(named_store, monkeypatch)
    assert any(w.icon == UNTRAINED_ICON for w in at.warning)
    lines = [m.value for m in at.markdown if "badge[" in m.value]
    assert lines and all(line.startswith(VERDICT_BADGES["control"]) for line in lines)  # random-init models
