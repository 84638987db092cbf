"""A text-only store (a manifest without videos, analysed) is told why the vision pages are empty, not to
run ``layerscope analyze`` again (it ran: nothing it does adds a vision result) nor to add a video model
to a dataset that has no videos; the Overview offers no analysis that would change nothing."""

import numpy as np
import pytest

from tests.helpers import app


@pytest.fixture(scope="module")
def text_store(tmp_path_factory):
    from tests.stores import write_text_store

    rng = np.random.default_rng(8)
    runs = {(m, n_c): rng.normal(size=(3, 20, 6)).astype(np.float32) for m in ("txt-a", "txt-b") for n_c in (1, 2)}
    path = tmp_path_factory.mktemp("text_advice") / "t.duckdb"
    write_text_store(path, runs, analyze={"k": 3, "n_boot": 0, "n_null": 0})
    return path


def said(at) -> str:
    return " ".join(x.value for kind in ("info", "warning", "markdown", "caption", "code") for x in at.get(kind))


@pytest.mark.parametrize("page", ["scaling", "temporal", "paper_figures"])
def test_a_vision_page_says_the_dataset_has_no_videos_instead_of_asking_for_analyze(text_store, monkeypatch, page):
    text = said(app(text_store, monkeypatch, page))
    assert "layerscope analyze" not in text
    assert "no videos" in text


def test_the_overview_asks_for_no_video_model_and_no_analysis_on_a_text_only_store(text_store, monkeypatch):
    at = app(text_store, monkeypatch)
    text = said(at)
    assert "VIDEO_OR_TEXT_MODEL" not in text and "no videos" in text
    assert not [b for b in at.button if "Run the analysis" in str(b.label)]
