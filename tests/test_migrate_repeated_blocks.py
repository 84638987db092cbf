"""`layerscope migrate` of a version-2 store holding a block twice: the same bits are kept once (and
the next analyze works); different bits are refused, the store left as it was."""

import duckdb
import numpy as np

from analysis.storage.store import load_run
from precompute.cli import main
from tests.stores import downgrade_to_v2, write_store


def _v(store, run_id):
    con = duckdb.connect(str(store), read_only=True)
    try:
        return load_run(con, run_id)
    finally:
        con.close()


def test_a_block_stored_twice_with_the_same_bits_is_kept_once_and_analyze_works(tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    ids = write_store(store)
    before = _v(store, ids["vis"])
    downgrade_to_v2(store, repeat=(ids["vis"], 1, 4))
    assert main(["migrate", "--store", str(store)]) == 0
    out = capsys.readouterr()
    assert "4 item vector(s) stored twice" in out.out + out.err and ids["vis"] in out.out + out.err
    np.testing.assert_array_equal(_v(store, ids["vis"]), before)
    assert main(["analyze", "--store", str(store), "--quiet", "--jobs", "1", "--maps", "0", "--bootstrap", "0"]) == 0


def test_a_block_stored_twice_with_different_bits_is_refused_and_nothing_changes(tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    ids = write_store(store)
    downgrade_to_v2(store, repeat=(ids["vis"], 1, 4), change=True)
    assert main(["migrate", "--store", str(store)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and ids["vis"] in err and "item 4 of layer 1" in err and "nothing was changed" in err
    con = duckdb.connect(str(store), read_only=True)
    try:
        assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("2",)
        assert con.execute("SELECT count(*) FROM embeddings").fetchone()[0] > 0
    finally:
        con.close()
