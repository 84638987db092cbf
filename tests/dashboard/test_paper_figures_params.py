"""Switching the Paper figures page to another figure leaves no parameter of the figure before in the
link (a stale ``text`` or ``budget`` there is a choice the page no longer shows)."""

from tests.helpers import app


def test_another_figure_drops_the_parameters_of_the_one_before(dashboard_store, monkeypatch):
    at = app(dashboard_store, monkeypatch, "paper_figures", {"dataset": "moving_shapes", "figure": "fig7"})
    assert "text" in at.query_params  # Fig. 7's text model
    at.radio(key="pick_figure").set_value("fig11").run()
    assert "budget" in at.query_params and "text" not in at.query_params
    at.radio(key="pick_figure").set_value("published").run()
    assert not {"budget", "metric", "text"} & set(at.query_params)
