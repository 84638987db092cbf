"""The test tiers (issue #30): a test on a heavy fixture is slow however deep the fixture sits, so
``python -m pytest -m "not slow"`` never builds the demo, a model, Ray or a browser."""

import pytest

from tests.helpers import HEAVY_FIXTURES, SLOW_MODULES, slow_reason


class FakeItem:
    """What :func:`slow_reason` reads of a collected test: its fixture closure and its marks."""

    def __init__(self, fixturenames, marks=(), nodeid="tests/test_x.py::test_y"):
        self.fixturenames = list(fixturenames)
        self.marks = set(marks)
        self.nodeid = nodeid

    def get_closest_marker(self, name):
        return name if name in self.marks else None


def test_a_heavy_fixture_anywhere_in_the_closure_makes_a_test_slow():
    # a test's `store(sides_store, tmp_path)`: sides_store is in the closure, not the signature
    why = slow_reason(FakeItem(["store", "sides_store", "tmp_path", "tmp_path_factory"]))
    assert why is not None and "sides_store" in why


@pytest.mark.parametrize("name", sorted(HEAVY_FIXTURES))
def test_every_heavy_fixture_is_named_in_the_reason(name):
    assert name in slow_reason(FakeItem(["tmp_path", name]))


def test_browser_tests_are_slow_and_plain_tests_are_not():
    assert slow_reason(FakeItem(["tmp_path"], marks={"browser"})) == "drives a real browser"
    assert slow_reason(FakeItem(["tmp_path", "monkeypatch", "dashboard_store", "sweep"])) is None


def test_no_test_of_this_session_uses_a_heavy_fixture_without_the_slow_mark(request):
    # under -m "not slow" the session holds the fast tier: none of it may build the demo or a model
    unmarked = [item.nodeid for item in request.session.items
                if slow_reason(item) is not None and item.get_closest_marker("slow") is None]
    assert unmarked == []
    heavy = [item.nodeid for item in request.session.items if slow_reason(item) is not None]
    if "not slow" in (request.config.getoption("markexpr") or ""):
        assert heavy == []


def test_a_module_of_integration_tests_is_slow_whole_and_each_listed_module_exists():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for module, why in SLOW_MODULES.items():
        assert (root / module).is_file(), module  # a renamed module would silently rejoin the fast tier
        assert slow_reason(FakeItem(["tmp_path"], nodeid=f"{module}::test_any[1]")) == f"in {module}: {why}"
    assert slow_reason(FakeItem(["tmp_path"], nodeid="tests/analysis/test_single_fast.py::test_any")) is None
