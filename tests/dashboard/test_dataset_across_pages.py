"""Issue #33, item 6: the sidebar navigation (a page opened without URL parameters) keeps the dataset
chosen on another page; a link's own dataset still wins."""

import pytest

from tests.helpers import app


@pytest.fixture(scope="module")
def store(dashboard_store):
    return dashboard_store  # built once per run (tests/conftest.py); read only


def navigate(at, page: str):
    """What the sidebar navigation does: another page, no URL parameters."""
    for k in list(at.query_params):
        del at.query_params[k]
    at.switch_page(f"pages/{page}.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_dataset_follows_the_sidebar_navigation(store, monkeypatch):
    at = app(store, monkeypatch, "heatmap")
    assert at.selectbox(key="pick_dataset").value == "moving_shapes"  # the first dataset by default
    at.selectbox(key="pick_dataset").set_value("test_of_time").run()
    for page in ("curves", "neighbours", "scaling"):
        navigate(at, page)
        assert at.selectbox(key="pick_dataset").value == "test_of_time", page
        assert at.query_params["dataset"] == "test_of_time"


def test_a_links_dataset_wins_over_the_carried_one(store, monkeypatch):
    at = app(store, monkeypatch, "heatmap")
    at.selectbox(key="pick_dataset").set_value("test_of_time").run()
    for k in list(at.query_params):
        del at.query_params[k]
    at.query_params["dataset"] = "moving_shapes"
    at.switch_page("pages/curves.py")
    at.run()
    assert at.selectbox(key="pick_dataset").value == "moving_shapes"
