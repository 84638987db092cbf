"""`--knn ann` where faiss is not installed: one line naming faiss and the way out, nothing saved."""

import sys

from analysis.studies import stored_settings
from analysis.storage.store import connect
from precompute.cli import main
from tests.stores import write_store


def test_knn_ann_without_faiss_is_one_line_and_not_saved(tmp_path, monkeypatch, capsys):
    store = tmp_path / "s.duckdb"
    write_store(store)
    assert main(["analyze", "--store", str(store), "--quiet", "--jobs", "1", "--maps", "0"]) == 0
    capsys.readouterr()
    monkeypatch.setitem(sys.modules, "faiss", None)  # import faiss raises ImportError
    assert main(["analyze", "--store", str(store), "--quiet", "--jobs", "1", "--knn", "ann"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "faiss" in err and "--knn exact" in err and "Traceback" not in err
    con = connect(store, read_only=True)
    try:
        assert stored_settings(con).get("knn") == "exact"  # the refused setting was not kept
    finally:
        con.close()
    # the next plain analyze works as before
    assert main(["analyze", "--store", str(store), "--quiet", "--jobs", "1"]) == 0
