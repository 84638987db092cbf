"""Issue #33, state across pages: a page drops the URL parameters another page of the session owns
(Back landing on the Overview with the Neighbours page's ``item=``), keeps its own and the carried
``dataset``, and never drops a parameter no page has claimed.

AppTest runs app.py (where the parameters are pruned) only for the entry page; pages within one
session are checked in a real browser (test_browser_url_params.py)."""

from analysis.views.url_state import stale_params


def test_another_pages_parameters_are_dropped_in_url_order():
    present = ["dataset", "item", "metric", "la", "k", "item"]
    assert stale_params(present, owned={"metric"}, others={"item", "la", "k", "dataset"},
                        carried=("dataset",)) == ["item", "la", "k"]


def test_own_carried_and_unclaimed_parameters_are_kept():
    assert stale_params(["metric", "utm"], owned={"metric"}, others={"metric"}) == []  # "utm": no page's
    assert stale_params(["dataset"], owned=set(), others={"dataset"}, carried=("dataset",)) == []
    assert stale_params([], owned=set(), others={"a"}) == []
