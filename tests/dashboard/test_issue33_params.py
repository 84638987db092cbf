"""Issue #33, state across pages: a page keeps only its own URL parameters and the carried ones
(``dataset``); another page's parameters (Back landing on the Overview with ``item=``) are dropped
after the page ran to its end, and kept when it stopped early (nothing of a link is lost then).

AppTest runs app.py (where the parameters are pruned) only for the entry page; the other pages are
checked in a real browser (test_browser_issue33_params.py)."""

from analysis.views.url_state import stale_params
from tests.helpers import app


def test_stale_params_keeps_owned_and_carried_in_url_order():
    assert stale_params(["dataset", "item", "metric", "la", "item"], {"metric"}, ("dataset",)) == ["item", "la"]
    assert stale_params([], {"a"}, ("dataset",)) == []
    assert stale_params(["a"], set(), ()) == ["a"]


def test_overview_drops_another_pages_parameters(dashboard_store, monkeypatch):
    at = app(dashboard_store, monkeypatch, "overview",
             {"dataset": "moving_shapes", "item": "shape0003", "la": "2", "models": "vit-tiny"})
    assert dict(at.query_params) == {"dataset": "moving_shapes"}


def test_a_page_that_stops_early_keeps_the_link(empty_store, monkeypatch):
    at = app(empty_store, monkeypatch, "curves", {"dataset": "x", "metric": "rankme", "item": "3"})
    assert {"dataset", "metric", "item"} <= set(at.query_params)
