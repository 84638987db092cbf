"""A CSV whose header names a column twice is refused naming the column (a row would otherwise keep
the last of the two cells without a word): manifests and downstream results alike."""

import duckdb
import pytest

from precompute.cli import main
from precompute.inputs.manifest import ManifestError, load_manifest
from tests.stores import write_store


def test_a_manifest_csv_with_a_repeated_column_is_refused(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("id,captions,captions\ns0,a dog,a cat\n")
    with pytest.raises(ManifestError, match=r"m.csv:1: column\(s\) 'captions' appear more than once"):
        load_manifest(path, check_videos=False)
    path.write_text("id,captions\ns0,a dog\n")  # one of each: read
    assert [it.captions for it in load_manifest(path, check_videos=False).items] == [["a dog"]]


def test_a_downstream_csv_with_a_repeated_column_imports_nothing(tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    write_store(store, n=8)
    csv = tmp_path / "d.csv"
    csv.write_text("model,task,metric,value,value,higher_is_better\nvis,ssv2,top1,0.5,0.9,true\n")
    assert main(["downstream", "import", str(csv), "--store", str(store)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "'value' appear more than once" in err and "d.csv" in err
    con = duckdb.connect(str(store), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM downstream_results").fetchall() == [(0,)]
    finally:
        con.close()
