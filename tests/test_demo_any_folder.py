"""The demo as a new user runs it: ``layerscope demo --small --no-dashboard`` from an empty folder
outside the checkout, with its default (relative) store and data folder (the ``small_demo`` fixture,
shared with tests/test_demo.py, runs it). Everything it writes lands in that folder; nothing lands in
the checkout or the packages (Python's and numba's ``__pycache__`` aside). Regression test for issue
#46: the dataset writer, a child process started in the package's folder, was given a relative path
and wrote the videos beside the packages."""

import json

import pytest


@pytest.mark.slow
def test_the_small_demo_runs_from_an_empty_folder_and_writes_only_there(small_demo):
    folder = small_demo
    done = json.loads((folder.parent / "result.json").read_text())
    assert done["returncode"] == 0, done["stderr"]
    assert (folder / "data" / "demo.duckdb").is_file()
    assert (folder / "data" / "generated-small" / "test_of_time.jsonl").is_file()
    assert (folder / "data" / "generated-small" / "stamp.json").is_file()  # the child finished writing here
    videos = list((folder / "data" / "generated-small").rglob("*.mkv"))
    assert videos, "the dataset writer wrote no videos into the user's folder"
    assert done["written"] == []
