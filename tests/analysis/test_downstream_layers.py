"""Per-layer downstream results: the CSV's optional ``layer`` and ``setting`` columns, named layers
resolved through the run configs, one-line errors naming file, line and column, and the schema-4 ->
5 migration that keeps every older row as a whole-model result."""

import json

import duckdb
import pytest

from analysis.storage.downstream_import import import_downstream
from analysis.storage.schema import MODEL_LEVEL, SCHEMA_VERSION
from precompute.cli import main
from tests.stores import write_store

HEADER = "model,task,metric,value,higher_is_better"


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "s.duckdb"
    write_store(path, n=8)  # vis: 3 layers, txt: 2 layers
    con = duckdb.connect(str(path))  # vis's runs name their last layer "default", as a named-layer precompute does
    for (run_id, config) in con.execute("SELECT run_id, config FROM runs WHERE model = 'vis'").fetchall():
        cfg = {**json.loads(config), "layer_names": {"2": "default"}}
        con.execute("UPDATE runs SET config = ? WHERE run_id = ?", [json.dumps(cfg), run_id])
    con.close()
    return path


def rows(path):
    con = duckdb.connect(str(path), read_only=True)
    out = con.execute("SELECT model, task, metric, setting, layer, layer_name, value, higher_is_better "
                      "FROM downstream_results ORDER BY model, task, setting, layer").fetchall()
    con.close()
    return out


def test_per_layer_and_per_model_rows_import_side_by_side(store, tmp_path):
    csv = tmp_path / "r.csv"
    csv.write_text(f"{HEADER},layer,setting\n"
                   "vis,ssv2,top1,0.5,true,,\n"
                   "vis,ssv2,top1,0.4,true,0,probe\n"
                   "vis,ssv2,top1,0.6,true,1,probe\n"
                   "vis,ssv2,top1,0.55,true,default,probe\n"
                   "vis,ssv2,top1,0.3,true,1,knn\n"
                   "txt,ssv2,top1,0.2,true,1,probe\n")
    assert import_downstream(store, csv) == 6
    assert rows(store) == [
        ("txt", "ssv2", "top1", "probe", 1, None, 0.2, True),
        ("vis", "ssv2", "top1", "", MODEL_LEVEL, None, 0.5, True),
        ("vis", "ssv2", "top1", "knn", 1, None, 0.3, True),
        ("vis", "ssv2", "top1", "probe", 0, None, 0.4, True),
        ("vis", "ssv2", "top1", "probe", 1, None, 0.6, True),
        ("vis", "ssv2", "top1", "probe", 2, "default", 0.55, True),  # "default" is layer 2 in vis's runs
    ]
    csv.write_text(f"{HEADER},layer,setting\nvis,ssv2,top1,0.7,true,1,probe\n")  # same key: replaced
    assert import_downstream(store, csv) == 1
    assert ("vis", "ssv2", "top1", "probe", 1, None, 0.7, True) in rows(store) and len(rows(store)) == 6


def test_a_csv_without_the_new_columns_still_imports_whole_model_rows(store, tmp_path):
    csv = tmp_path / "r.csv"
    csv.write_text(f"{HEADER}\nvis,depth,rmse,0.9,false\ntxt,depth,rmse,1.2,false\n")
    assert main(["downstream", "import", str(csv), "--store", str(store)]) == 0
    assert rows(store) == [("txt", "depth", "rmse", "", MODEL_LEVEL, None, 1.2, False),
                           ("vis", "depth", "rmse", "", MODEL_LEVEL, None, 0.9, False)]


@pytest.mark.parametrize("cell,needle", [
    ("joint", "has no layer named 'joint'"),       # vis's runs name no joint layer
    ("3", "past the last layer of model 'vis' (2)"),  # vis stores layers 0..2
    ("-2", "is negative"),
    ("top", "is not a layer index"),
])
def test_a_bad_layer_cell_is_one_line_naming_file_line_and_column(store, tmp_path, capsys, cell, needle):
    csv = tmp_path / "bad.csv"
    csv.write_text(f"{HEADER},layer\nvis,ssv2,top1,0.5,true,1\nvis,ssv2,top1,0.4,true,{cell}\n")
    assert main(["downstream", "import", str(csv), "--store", str(store)]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    bad = [line for line in lines if "bad.csv:3" in line]
    assert len(bad) == 1 and "column 'layer'" in bad[0] and needle in bad[0], err
    assert not any("bad.csv:2" in line for line in lines) and "Traceback" not in err
    assert rows(store) == []  # nothing imported


def test_duplicates_and_contradicting_directions_are_refused(store, tmp_path, capsys):
    csv = tmp_path / "dup.csv"
    # "default" resolves to layer 2: the same key as the explicit 2 on line 2
    csv.write_text(f"{HEADER},layer\nvis,ssv2,top1,0.5,true,2\nvis,ssv2,top1,0.4,true,default\n"
                   "txt,ssv2,top1,0.4,false,1\n")
    assert main(["downstream", "import", str(csv), "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert "dup.csv:3: duplicate of line 2" in err
    assert "dup.csv:4: column 'higher_is_better'" in err and "contradicts line 2" in err
    assert rows(store) == []


def _downgrade_to_v4(path):
    """What a schema-4 store looks like: downstream_results keyed by (model, task, metric) only."""
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE old AS SELECT model, task, metric, value, higher_is_better, source, imported "
                "FROM downstream_results")
    con.execute("DROP TABLE downstream_results")
    con.execute("CREATE TABLE downstream_results (model VARCHAR, task VARCHAR, metric VARCHAR, value DOUBLE, "
                "higher_is_better BOOLEAN, source VARCHAR, imported TIMESTAMP, PRIMARY KEY (model, task, metric))")
    con.execute("INSERT INTO downstream_results SELECT * FROM old")
    con.execute("DROP TABLE old")
    con.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    con.close()


def test_migrate_upgrades_a_version_4_store_keeping_its_results(store, tmp_path, capsys):
    csv = tmp_path / "r.csv"
    csv.write_text(f"{HEADER}\nvis,ssv2,top1,0.5,true\ntxt,ssv2,top1,0.25,true\n")
    assert import_downstream(store, csv) == 2
    _downgrade_to_v4(store)
    capsys.readouterr()
    assert main(["runs", "--store", str(store)]) == 2  # refused until migrated
    assert "layerscope migrate" in capsys.readouterr().err
    assert main(["migrate", "--store", str(store)]) == 0
    assert f"schema 4 -> {SCHEMA_VERSION}" in capsys.readouterr().out
    assert rows(store) == [("txt", "ssv2", "top1", "", MODEL_LEVEL, None, 0.25, True),
                           ("vis", "ssv2", "top1", "", MODEL_LEVEL, None, 0.5, True)]
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall() == [(str(SCHEMA_VERSION),)]
    comments = dict(con.execute("SELECT column_name, comment FROM duckdb_columns() "
                                "WHERE table_name = 'downstream_results'").fetchall())
    assert comments["layer"] and comments["setting"]
    con.close()
    # the new key takes per-layer rows beside the migrated whole-model ones
    csv.write_text(f"{HEADER},layer\nvis,ssv2,top1,0.6,true,1\n")
    assert import_downstream(store, csv) == 1
    assert len(rows(store)) == 3
    assert main(["migrate", "--store", str(store)]) == 0 and "nothing to do" in capsys.readouterr().out


def test_a_failed_migration_leaves_the_version_4_store_as_it_was(store, tmp_path, monkeypatch):
    import precompute.upkeep.migrate as mig

    csv = tmp_path / "r.csv"
    csv.write_text(f"{HEADER}\nvis,ssv2,top1,0.5,true\n")
    import_downstream(store, csv)
    _downgrade_to_v4(store)

    def boom(con):
        raise RuntimeError("disk went away")

    monkeypatch.setattr(mig, "add_missing_columns", boom)  # fails after the table was rebuilt
    with pytest.raises(RuntimeError):
        mig.migrate_store(store, log=lambda m: None)
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall() == [("4",)]
    cols = [r[0] for r in con.execute("SELECT column_name FROM information_schema.columns "
                                      "WHERE table_name = 'downstream_results'").fetchall()]
    assert "layer" not in cols
    assert con.execute("SELECT model, value FROM downstream_results").fetchall() == [("vis", 0.5)]
    con.close()


@pytest.mark.parametrize("line, column, needle", [
    ("vis,ssv2,top1,0.5,true,extra", None, "6 fields, the header has 5"),
    ("vis,ssv2,top1,1_000,true", "value", "'1_000' is not a finite number"),
    ("vis,ssv2,top1,\u0661\u0662,true", "value", "is not a finite number written with ASCII digits"),  # Arabic-Indic 12
    ("vis,ssv2,top1,\uff10.5,true", "value", "ASCII digits"),  # a full-width zero
    ("vis,ssv2,top1,nan,true", "value", "'nan' is not a finite number"),
    ("vis,ssv2,top1,1e999,true", "value", "is not a finite number"),
])
def test_values_float_would_take_and_extra_fields_are_refused_with_file_and_line(store, tmp_path, capsys, line,
                                                                                  column, needle):
    csv = tmp_path / "bad.csv"
    csv.write_text(f"{HEADER}\ntxt,ssv2,top1,0.5,true\n{line}\n", encoding="utf-8")
    assert main(["downstream", "import", str(csv), "--store", str(store)]) == 2
    err = capsys.readouterr().err
    bad = [l for l in err.splitlines() if "bad.csv:3" in l]
    assert len(bad) == 1 and needle in bad[0], err
    assert column is None or f"column '{column}'" in bad[0]
    assert "bad.csv:2" not in err and rows(store) == []


@pytest.mark.parametrize("cell", ["1_0", "\u0661", "1e0", "1.0"])
def test_a_layer_index_is_ascii_digits_only(store, tmp_path, capsys, cell):
    csv = tmp_path / "bad.csv"
    csv.write_text(f"{HEADER},layer\nvis,ssv2,top1,0.4,true,{cell}\n", encoding="utf-8")
    assert main(["downstream", "import", str(csv), "--store", str(store)]) == 2
    assert "bad.csv:2: column 'layer'" in capsys.readouterr().err and rows(store) == []


def test_plain_numbers_in_every_spreadsheet_form_import(store, tmp_path):
    csv = tmp_path / "ok.csv"
    values = ["0.5", "-1", "+2.", ".25", "1e-3", "3E+2", " 7 "]
    csv.write_text(HEADER + ",setting\n" + "".join(f"vis,t,m,{v},true,s{i}\n" for i, v in enumerate(values)))
    assert main(["downstream", "import", str(csv), "--store", str(store)]) == 0
    assert sorted(r[6] for r in rows(store)) == sorted(float(v) for v in values)
