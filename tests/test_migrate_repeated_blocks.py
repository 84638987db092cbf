"""`layerscope migrate` of a version-2 store holding a block twice: the same bits are kept once (and
the next analyze works); different bits are refused, the store left as it was."""

import duckdb
import numpy as np

from analysis.storage.store import load_run
from precompute.cli import main
from tests.stores import write_store


def _to_v2(store, *, repeat=None, change=False):
    """The store in the version-2 layout (one float32 BLOB per run, layer and 4 items), with the block
    ``repeat`` = ``(run_id, layer, first_idx)`` stored twice (``change``: the copy's first value + 1)."""
    con = duckdb.connect(str(store))
    con.execute("CREATE TABLE embeddings (run_id VARCHAR, layer SMALLINT, first_idx INTEGER, n_items INTEGER, "
                "vectors BLOB)")
    for run_id, dim, n_layers in con.execute("SELECT run_id, dim, n_layers FROM runs").fetchall():
        for layer in range(n_layers):
            rows = con.execute(f"SELECT idx, vec FROM embeddings_{dim} WHERE run_id = ? AND layer = ? ORDER BY idx",
                               [run_id, layer]).fetchall()
            for b in range(0, len(rows), 4):
                block = np.array([r[1] for r in rows[b:b + 4]], dtype="<f4")
                con.execute("INSERT INTO embeddings VALUES (?, ?, ?, ?, ?)",
                            [run_id, layer, rows[b][0], len(block), block.tobytes()])
                if (run_id, layer, rows[b][0]) == repeat:
                    copy = block.copy()
                    copy[0, 0] += 1.0 if change else 0.0
                    con.execute("INSERT INTO embeddings VALUES (?, ?, ?, ?, ?)",
                                [run_id, layer, rows[b][0], len(copy), copy.tobytes()])
        con.execute(f"DROP TABLE IF EXISTS embeddings_{dim}")
    con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    con.close()


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
    _to_v2(store, repeat=(ids["vis"], 1, 4))
    assert main(["migrate", "--store", str(store)]) == 0
    out = capsys.readouterr()
    assert "4 item vector(s) stored twice" in out.out + out.err and ids["vis"] in out.out + out.err
    np.testing.assert_array_equal(_v(store, ids["vis"]), before)
    assert main(["analyze", "--store", str(store), "--quiet", "--jobs", "1", "--maps", "0", "--bootstrap", "0"]) == 0


def test_a_block_stored_twice_with_different_bits_is_refused_and_nothing_changes(tmp_path, capsys):
    store = tmp_path / "s.duckdb"
    ids = write_store(store)
    _to_v2(store, repeat=(ids["vis"], 1, 4), change=True)
    assert main(["migrate", "--store", str(store)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and ids["vis"] in err and "item 4 of layer 1" in err and "nothing was changed" in err
    con = duckdb.connect(str(store), read_only=True)
    try:
        assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("2",)
        assert con.execute("SELECT count(*) FROM embeddings").fetchone()[0] > 0
    finally:
        con.close()
