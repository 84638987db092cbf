"""The test tiers (issue #30): a test on a heavy fixture is slow however deep the fixture sits, so
``python -m pytest -m "not slow"`` never builds the demo, a model, Ray or a browser."""

import pytest

from tests.helpers import HEAVY_FIXTURES, slow_reason


class FakeItem:
    """What :func:`slow_reason` reads of a collected test: its fixture closure and its marks."""

    def __init__(self, fixturenames, marks=()):
        self.fixturenames = list(fixturenames)
        self.marks = set(marks)

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
