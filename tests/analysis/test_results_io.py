"""analyze's store I/O: result rows written in batches equal rows written one by one, freshness
from one query per table agrees with the table, a failure mid-study leaves every stored row whole
(and the next analyze computes only what is missing), nothing stays pending across the write
connection's release, and a second analyze reuses everything."""

import json
import math

import duckdb
import numpy as np
import pytest

from analysis.storage import results as R
from analysis.storage.schema import create_all
from analysis.studies import analyze_store
from analysis.studies.context import Context, Settings
from tests.helpers import quiet

TABLES = ("result_grids", "result_profiles", "result_studies")


def _empty_store(path):
    con = duckdb.connect(str(path))
    create_all(con, str(path))
    return con


def _table(con, table):
    """Every row but the ``computed`` stamp, NaN made comparable, in result_id order."""
    cur = con.execute(f"SELECT * EXCLUDE (computed) FROM {table} ORDER BY result_id")
    cols = [d[0] for d in cur.description]

    def norm(v):
        if isinstance(v, float) and math.isnan(v):
            return "nan"
        if isinstance(v, list):
            return [norm(x) for x in v]
        return v
    return [{c: norm(v) for c, v in zip(cols, row)} for row in cur.fetchall()]


def _rows():
    """Rows with what the writers must carry exactly: NaN cells, NULL best cells, integer-keyed
    flags, numpy scalars, and one id written twice (the second must win)."""
    g = np.arange(12, dtype=float).reshape(3, 4) / 7
    g[1, 2] = np.nan
    grids = [{"result_id": f"g{i}", "dataset": "d", "pair_kind": "vision_text", "model_a": "va",
              "model_b": "tb", "run_a": "ra", "run_b": f"rb{i}", "n_frames": np.int64(2), "n_captions": i,
              "n_frames_b": None, "metric": "mutual_knn", "params": {"k": 10}, "grid": g + i,
              "best_a": None if i == 1 else np.int64(2), "best_b": None if i == 1 else 3,
              "best_value": None if i == 1 else np.float64(g[2, 3] + i), "ci_low": None, "ci_high": 0.5,
              "n_boot": 0, "flags": {"degenerate_a": {1: "collapsed"}} if i == 1 else {}, "input_key": f"k{i}"}
             for i in range(3)]
    grids.append({**grids[0], "grid": g * 2, "input_key": "k0-new"})
    profiles = [{"result_id": f"p{i}", "dataset": "d", "model": "m", "run_id": "r", "modality": "video",
                 "n_frames": 1, "n_captions": None, "metric": m, "params": {},
                 "layer_values": np.array([1.0, np.nan, 3.5]), "flags": {0: "collapsed"}, "input_key": "pk"}
                for i, m in enumerate(("rankme", "lid"))]
    studies = [{"result_id": "s0", "study": "scaling", "dataset": "d", "subject": "a|b|cka",
                "params": {"metric": "cka", "n_boot": np.int64(3)},
                "payload": {"scores": [np.float32(0.25), np.nan], "fit": {"r2": np.float64(0.5)}},
                "input_key": "sk"}]
    return grids, profiles, studies


def _insert_one_by_one(con, table, row):
    """The reference writer: one parameterised DELETE + INSERT per row, as analyze used to write."""
    cols = list(row) + ["computed"]
    row = {k: v.item() if isinstance(v, np.generic) else v for k, v in row.items()}  # DuckDB binds Python scalars
    con.execute(f"DELETE FROM {table} WHERE result_id = ?", [row["result_id"]])
    con.execute(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                list(row.values()) + [R.now()])


def test_batched_rows_equal_rows_written_one_by_one(tmp_path):
    grids, profiles, studies = _rows()
    ref = _empty_store(tmp_path / "ref.duckdb")
    for r in grids:
        g = np.asarray(r["grid"], float)
        _insert_one_by_one(ref, "result_grids", {
            **{k: v for k, v in r.items() if k not in ("grid", "params", "flags")},
            "params": json.dumps(r["params"]), "flags": json.dumps(R.clean_json(r["flags"])),
            "n_rows": g.shape[0], "n_cols": g.shape[1], "grid_values": g.ravel().tolist()})
    for r in profiles:
        _insert_one_by_one(ref, "result_profiles", {**r, "params": "{}", "flags": json.dumps(R.clean_json(r["flags"])),
                                                    "layer_values": [float(v) for v in r["layer_values"]]})
    for r in studies:
        _insert_one_by_one(ref, "result_studies", {
            **r, "params": json.dumps(R.clean_json(r["params"])),
            "payload": json.dumps(R.clean_json(r["payload"]), allow_nan=False)})

    con = _empty_store(tmp_path / "batched.duckdb")
    ctx = Context(tmp_path / "batched.duckdb", con, Settings(), log=quiet)
    for r in grids:
        ctx.put_grid(**r)
    for r in profiles:
        ctx.put_profile(**r)
    for r in studies:
        ctx.put_study(**r)
    assert all(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] == 0 for t in TABLES)  # held until flushed
    ctx.flush()
    for t in TABLES:
        assert _table(con, t) == _table(ref, t), t
    assert len(_table(con, "result_grids")) == 3  # g0 written twice: one row, the second
    (g0,) = R.read_grids(con, result_id="g0")
    assert g0["input_key"] == "k0-new" and np.isnan(g0["grid"][1, 2]) and g0["grid"][0, 1] == 2 / 7
    # what the context serves from memory is what the store's reader returns
    for r in R.read_grids(con) + R.read_profiles(con):
        table = "result_grids" if "grid" in r else "result_profiles"
        mine = ctx.result_row(table, "d", r["result_id"])
        assert mine.keys() == r.keys()
        for k, v in r.items():
            if isinstance(v, np.ndarray):
                np.testing.assert_array_equal(mine[k], v)
            elif k != "computed":
                assert mine[k] == v, k
    con.close()
    ref.close()


def test_a_failing_batch_writes_nothing(tmp_path):
    """All or nothing: a batch that fails in its second table leaves its first table's rows and the
    rows it was replacing as they were."""
    con = _empty_store(tmp_path / "s.duckdb")
    R.put_study(con, result_id="kept", study="x", dataset="d", subject="s", params={}, payload={}, input_key="a")
    good = R.grid_row(**_rows()[0][0])
    with pytest.raises(ValueError, match="no column"):
        R.replace_rows(con, {"result_grids": [good], "result_studies": [{"result_id": "bad", "nonsense": 1}]})
    bad = R.study_row(result_id="kept", study="x", dataset="d", subject="s", params={}, payload={}, input_key="b")
    bad["payload"] = "{not json"  # DuckDB refuses it inside the transaction, after the DELETE of "kept"
    with pytest.raises(duckdb.Error):
        R.replace_rows(con, {"result_grids": [good], "result_studies": [bad]})
    assert con.execute("SELECT count(*) FROM result_grids").fetchone()[0] == 0
    assert con.execute("SELECT result_id, input_key FROM result_studies").fetchall() == [("kept", "a")]
    con.close()


def test_freshness_dict_agrees_with_the_table(sweep):
    analyze_store(sweep, metrics=("mutual_knn",), n_boot=0, maps=0, log=quiet)
    con = duckdb.connect(str(sweep))
    ctx = Context(sweep, con, Settings(), log=quiet)
    for t in TABLES:
        stored = dict(con.execute(f"SELECT result_id, input_key FROM {t}").fetchall())
        assert stored and ctx.input_keys(t) == stored
        for rid, ikey in stored.items():
            assert R.is_current(con, t, rid, ikey) and ctx.fresh("x", t, rid, ikey) is False
            assert ctx.fresh("x", t, rid, ikey + "-changed") is True
    # a write keeps the dict current before and after it reaches the table
    ctx.put_study(result_id="new", study="x", dataset="d", subject="s", params={}, payload={}, input_key="n")
    assert ctx.fresh("x", "result_studies", "new", "n") is False
    ctx.flush()
    assert R.is_current(con, "result_studies", "new", "n")
    con.close()


def test_nothing_is_pending_across_the_release_of_the_write_connection(sweep):
    analyze_store(sweep, metrics=("mutual_knn",), n_boot=0, maps=0, log=quiet)
    con = duckdb.connect(str(sweep))
    ctx = Context(sweep, con, Settings(), log=quiet)
    ctx.put_study(result_id="pending", study="x", dataset="d", subject="s", params={}, payload={"v": 1},
                  input_key="p")
    with ctx.released():
        reader = duckdb.connect(str(sweep), read_only=True)  # what a worker process sees
        assert R.read_studies(reader, result_id="pending")[0]["payload"] == {"v": 1}
        reader.close()
    ctx.con.close()


def test_failure_mid_study_keeps_whole_rows_and_the_next_analyze_computes_the_rest(sweep, tmp_path, monkeypatch):
    import shutil

    reference = tmp_path / "reference.duckdb"
    shutil.copy(sweep, reference)
    full = analyze_store(reference, metrics=("mutual_knn",), n_boot=0, maps=0, log=quiet)
    n_grids = full["computed_by_study"]["grids"]
    assert n_grids > 9

    monkeypatch.setattr(Context, "FLUSH_ROWS", 4)
    monkeypatch.setattr(Context, "FLUSH_SECONDS", 1e9)
    put = Context.put_grid
    calls = []

    def failing_put(self, **row):
        calls.append(row["result_id"])
        if len(calls) == 10:
            raise RuntimeError("crash in the middle of the grids study")
        return put(self, **row)

    monkeypatch.setattr(Context, "put_grid", failing_put)
    with pytest.raises(RuntimeError, match="crash"):
        analyze_store(sweep, metrics=("mutual_knn",), n_boot=0, maps=0, log=quiet)
    monkeypatch.undo()

    con = duckdb.connect(str(sweep), read_only=True)
    ref = duckdb.connect(str(reference), read_only=True)
    grids = {r["result_id"]: r for r in _table(con, "result_grids")}
    # the two full batches of 4 rows before the crash, each row whole and equal to a full analyze's
    assert sorted(grids) == sorted(calls[:8])
    want = {r["result_id"]: r for r in _table(ref, "result_grids")}
    for rid, row in grids.items():
        assert row == want[rid]
        assert len(row["grid_values"]) == row["n_rows"] * row["n_cols"]
    assert _table(con, "result_profiles") == _table(ref, "result_profiles")  # the study before: complete
    assert _table(con, "result_studies") == []  # later studies never ran
    con.close()

    again = analyze_store(sweep, metrics=("mutual_knn",), n_boot=0, maps=0, log=quiet)
    assert again["reused_by_study"]["grids"] == 8 and again["computed_by_study"]["grids"] == n_grids - 8
    assert "profiles" not in again["computed_by_study"]
    con = duckdb.connect(str(sweep), read_only=True)
    for t in TABLES:
        assert _table(con, t) == _table(ref, t), t
    con.close()
    ref.close()


def test_second_analyze_reuses_everything_the_first_computed(sweep):
    first = analyze_store(sweep, metrics=("mutual_knn", "cka"), n_boot=3, maps=0, log=quiet)
    assert first["computed"] > 0 and first["skipped"] == 0
    second = analyze_store(sweep, log=quiet)
    assert second["computed"] == 0 and second["computed_by_study"] == {}
    assert second["reused_by_study"] == first["computed_by_study"]


def test_a_store_analysed_under_two_clamps_never_mixes_their_rows(sweep, tmp_path):
    """Rows of an earlier ``--clamp`` stay in the tables (results are keyed by settings); the layer
    choice and the predictors read this analysis's own profiles and grids: the ``feature`` rows of
    a store analysed first with ``off`` equal those of a store analysed only with ``feature``."""
    import shutil

    fresh = tmp_path / "fresh.duckdb"
    shutil.copy(sweep, fresh)
    analyze_store(sweep, metrics=("mutual_knn",), n_boot=0, maps=0, clamp="off", log=quiet)
    analyze_store(sweep, metrics=("mutual_knn",), n_boot=0, maps=0, clamp="feature", log=quiet)
    analyze_store(fresh, metrics=("mutual_knn",), n_boot=0, maps=0, clamp="feature", log=quiet)

    def rows(path):
        con = duckdb.connect(str(path), read_only=True)
        try:
            studies = {r["result_id"]: r["payload"] for r in R.read_studies(con, study="layer_choice")}
            profiles = {r["result_id"]: r["layer_values"].tolist() for r in R.read_profiles(con)}
        finally:
            con.close()
        return studies, profiles

    mixed, mixed_profiles = rows(sweep)
    clean, clean_profiles = rows(fresh)
    assert clean and len(mixed) == 2 * len(clean)  # both clamps' choices are stored side by side
    assert len(mixed_profiles) == 2 * len(clean_profiles)
    # the clamp changes the profiles, so reading the other clamp's rows would change the choice
    assert sorted(map(str, mixed_profiles.values())) != sorted(map(str, clean_profiles.values())) * 2
    for rid, payload in clean.items():
        assert mixed[rid] == payload


def test_create_all_on_an_existing_store_creates_only_what_is_missing(tmp_path):
    """Opening a store for writing creates (and comments) only missing tables: a dropped table
    comes back with its column comments, rows of the others stay, and their comments are not
    rewritten (a rewrite would restore the one changed below)."""
    from analysis.storage.schema import TABLE_NAMES

    path = tmp_path / "s.duckdb"
    con = _empty_store(path)
    con.execute("INSERT INTO meta VALUES ('note', 'kept') ON CONFLICT (key) DO NOTHING")
    con.execute("COMMENT ON COLUMN result_grids.metric IS 'changed by hand'")
    con.execute("DROP TABLE result_profiles")
    create_all(con, str(path))
    have = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert set(TABLE_NAMES) <= have
    comments = dict(con.execute("SELECT table_name || '.' || column_name, comment FROM duckdb_columns()").fetchall())
    assert comments["result_profiles.metric"], "a recreated table gets its comments"
    assert comments["result_grids.metric"] == "changed by hand"
    assert con.execute("SELECT value FROM meta WHERE key = 'note'").fetchall() == [("kept",)]
    create_all(con, str(path), comment_all=True)
    comments = dict(con.execute("SELECT table_name || '.' || column_name, comment FROM duckdb_columns()").fetchall())
    assert comments["result_grids.metric"] != "changed by hand"
