"""The Model map page's section (:func:`analysis.views.studies.model_map_section`): the stored study, the
page's two charts, and the reason when there is none; the report's model-map section is this one."""

import duckdb

from analysis.report import build_report
from analysis.storage import results as R
from analysis.views.studies import MODEL_MAP_OMITTED, model_map_section


def test_the_section_holds_the_stored_map_and_the_pages_two_charts(demo_like):
    con = duckdb.connect(str(demo_like), read_only=True)
    try:
        section = model_map_section(con, "moving_shapes")
        (stored,) = R.read_studies(con, study="model_map", dataset="moving_shapes")
        report = build_report(con, store=str(demo_like), datasets=["moving_shapes"])["datasets"][0]
    finally:
        con.close()
    assert section.data == stored["payload"] and section.omitted is None
    assert [title for title, _ in section.charts] == ["model × model best-layer alignment",
                                                      "the models on a 2-D map (classical MDS of 1 − similarity)"]
    assert report["sections"]["model_map"] == section.data
    assert [t for s, t, _ in report["charts"] if s == "model_map"] == [t for t, _ in section.charts]


def test_a_store_without_a_map_says_why(tmp_path):
    con = duckdb.connect(str(tmp_path / "empty.duckdb"))
    try:
        section = model_map_section(con, "anything")
    finally:
        con.close()
    assert section.data is None and section.charts == () and section.omitted == MODEL_MAP_OMITTED
