"""A scaling subject names its two models as a person reads them: a dual encoder scored against its own
captions (``clip-tiny|clip-tiny|mutual_knn``) reads ``clip-tiny (random init) [image] × clip-tiny (random
init) [text]`` in the panels' captions, the chart title, the S∞ note, the report's table and the page's
picker, never the same name twice; a one-sided model keeps its plain label.

The expected names are spelled out by hand from what tests.stores.write_demo_like_store writes: clip-tiny
is a random-init image model with a text run too; videomae-tiny (video) and all-MiniLM-L6-v2 (text) are
trained, one-sided; vit-tiny is a random-init image model, one-sided."""

import duckdb
import pytest

from analysis.report.text import scaling_rows
from analysis.views import scaling as scaling_view
from analysis.views.store_info import model_labels
from analysis.views.text import md_escape
from tests.helpers import app

DATASET = "moving_shapes"

#: subject -> the pair as it must read
NAMED = {
    "clip-tiny|clip-tiny|mutual_knn": "clip-tiny (random init) [image] × clip-tiny (random init) [text]",
    "vit-tiny|clip-tiny|mutual_knn": "vit-tiny (random init) × clip-tiny (random init) [text]",
    "clip-tiny|llama-tiny|mutual_knn": "clip-tiny (random init) [image] × llama-tiny (random init)",
    "videomae-tiny|all-MiniLM-L6-v2|mutual_knn": "videomae-tiny × all-MiniLM-L6-v2",
}


@pytest.fixture(scope="module")
def section(demo_like):
    con = duckdb.connect(str(demo_like), read_only=True)
    try:
        yield con, scaling_view.section(con, DATASET, subjects=tuple(NAMED))
    finally:
        con.close()


def test_each_subjects_captions_and_report_row_name_its_sides(section):
    _, sec = section
    assert [c for c, _ in sec.charts] == [f"scaling: {pair}, against {what}" for pair in NAMED.values()
                                          for what in ("n_f", "n_c")]
    assert [r["pair"] for r in scaling_rows(sec.data)] == [f"{pair} · mutual_knn" for pair in NAMED.values()]


def test_the_s_inf_note_and_the_title_name_the_dual_encoders_sides(section):
    con, sec = section
    subject = "clip-tiny|clip-tiny|mutual_knn"
    entry = next(f for f in sec.data if f["subject"] == subject)
    assert entry["status"] != "ok"  # this store's fit cannot determine S∞ here: the note is said
    assert ("S∞ is not drawn on the clip-tiny (random init) [image] × clip-tiny (random init) [text] panels: "
            "the fit cannot determine it here.") in sec.notes
    title = scaling_view.scaling_title(entry, subject, dataset=DATASET, labels=model_labels(con),
                                       pair=scaling_view.subject_pairs(con, DATASET)[subject])
    assert title["text"].startswith("mutual_knn of the best layer pair: clip-tiny (random init) [image] × "
                                    "clip-tiny (random init) [text]; ")


def test_the_scaling_pages_picker_and_heading_name_the_sides(demo_like, monkeypatch):
    subject = "clip-tiny|clip-tiny|mutual_knn"
    at = app(demo_like, monkeypatch, "scaling", {"dataset": DATASET, "pair": subject})
    assert at.subheader[0].value == md_escape(f"{NAMED[subject]} (mutual_knn)")  # Markdown: escaped
    picker = next(s for s in at.sidebar.selectbox if s.label == "Model pair")
    assert picker.format_func(subject) == f"{NAMED[subject]} (mutual_knn)"
    assert picker.format_func("videomae-tiny|all-MiniLM-L6-v2|cka") == "videomae-tiny × all-MiniLM-L6-v2 (cka)"
