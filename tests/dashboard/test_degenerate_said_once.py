"""Issue #33 item 3: degenerate data said once, on every page: near-identical notes (the same reason with
other numbers or subjects) collapse into one line per reason with its count, and a chart whose values
are all undefined is replaced by that line."""

import numpy as np
import pandas as pd
import pytest

from analysis.views.nuance import collapse_notes, undefined_text
from tests.helpers import app, charts


def test_twenty_seven_near_identical_notes_are_one_line_with_their_count():
    notes = [f"caption{i:02d} × vit layer {i % 5}: decided by ties (12 distinct of 180, k=5)" for i in range(27)]
    (line,) = collapse_notes(notes)
    assert line.startswith("27 × decided by ties")
    assert "and 24 more" in line  # three subjects named, the rest counted


def test_distinct_reasons_stay_apart_and_single_notes_are_kept_as_written():
    notes = ["a: constant", "b: constant", "c: undefined", "lone note without subject"]
    assert collapse_notes(notes) == ["2 × constant (a, b)", "c: undefined", "lone note without subject"]
    assert collapse_notes([]) == [] and collapse_notes(["", None]) == []
    # the same reason with other values is said once, and says that the values differ
    (line,) = collapse_notes(["m: spread 0.1 of 3.2", "n: spread 0.2 of 1.1"])
    assert line == "2 × spread 0.1 of 3.2 (values differ) (m, n)"


def test_undefined_text_counts_reasons_that_differ_only_in_numbers():
    df = pd.DataFrame({"value": [np.nan] * 4 + [1.0],
                       "note": [f"collapsed (scale {s})" for s in (1.5, 2.5, 3.5)] + ["too few items", ""]})
    assert undefined_text(df, "lid", "value") == ("4 of 5 lid value(s) undefined (not drawn): 3 × collapsed (scale 1.5) "
                                                  "(values differ); too few items")


@pytest.fixture(scope="module")
def flat_store(tmp_path_factory):
    """Two video models on 12 items: ``flat``'s every layer is one repeated row (collapsed), ``ok`` is noise."""
    from analysis.studies import analyze_store
    from precompute.synthetic.store import write_run

    path = tmp_path_factory.mktemp("flat") / "flat.duckdb"
    rng = np.random.default_rng(0)
    write_run(path, "flat-1", np.repeat(rng.normal(size=(4, 1, 8)), 12, axis=1), model="flat", modality="video",
              n_frames=1)
    write_run(path, "ok-1", rng.normal(size=(4, 12, 8)), model="ok", modality="video", n_frames=1)
    analyze_store(path, k=3, n_boot=0, log=lambda m: None)
    return path


def test_a_curve_undefined_everywhere_is_one_line_not_empty_axes(flat_store, monkeypatch):
    # a collapsed layer has no local intrinsic dimension: every LID value of "flat" is undefined
    at = app(flat_store, monkeypatch, "curves", {"dataset": "synthetic", "models": "flat", "metric": "lid"})
    assert not charts(at)
    (line,) = [i.value.replace("\\", "") for i in at.info]  # as shown: without the Markdown escapes
    assert line.startswith("4 of 4 lid value(s) undefined (not drawn): 4 × collapsed")


def test_near_identical_flags_are_one_line_on_the_curves_page(flat_store, monkeypatch):
    at = app(flat_store, monkeypatch, "curves", {"dataset": "synthetic", "models": "flat", "metric": "rankme"})
    flagged = [c.value.replace("\\", "") for c in at.caption if "collapsed" in c.value]
    assert len(flagged) == 1 and flagged[0].startswith("4 × collapsed"), flagged
