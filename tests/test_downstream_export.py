"""``layerscope downstream export``: every downstream value, measured and imported, as the import CSV
plus intervals and source; the file goes back in through ``downstream import``."""

from __future__ import annotations

import csv

import pytest

from analysis.storage.store import connect
from analysis.studies import analyze_store
from precompute.cli import main
from tests.stores import write_labelled_store


def _read(path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    store = root / "a.duckdb"
    write_labelled_store(store)
    analyze_store(store, maps=0, n_null=0, n_boot=20, labels=("scene.shape",), log=lambda m: None)
    assert main(["downstream", "export", "--store", str(store), "--out", str(root / "a.csv")]) == 0
    return root, store, _read(root / "a.csv")


def test_export_writes_every_measured_probe_value_with_its_interval(exported):
    _, store, rows = exported
    con = connect(store, read_only=True)
    try:
        from analysis.storage import results as R

        payloads = [s["payload"] for s in R.read_studies(con, study="probes", current=True)]
    finally:
        con.close()
    expected = {(p["model"], p["field"], score, str(layer)): v
                for p in payloads for score, sc in p["scores"].items() for layer, v in enumerate(sc["values"])
                if v is not None}
    got = {(r["model"], r["task"], r["metric"], r["layer"]): float(r["value"]) for r in rows}
    assert got == expected
    assert all(r["source"] == "measured" and r["setting"].startswith("measured on toy") for r in rows)
    assert all(float(r["ci_low"]) <= float(r["value"]) <= float(r["ci_high"]) for r in rows)


def test_export_round_trips_through_import(exported):
    root, _, rows = exported
    other = root / "b.duckdb"
    write_labelled_store(other)  # the same models, nothing measured
    assert main(["downstream", "import", str(root / "a.csv"), "--store", str(other)]) == 0
    assert main(["downstream", "export", "--store", str(other), "--out", str(root / "b.csv")]) == 0
    back = _read(root / "b.csv")
    keep = ("model", "task", "metric", "layer", "setting", "higher_is_better")
    assert sorted((tuple(r[c] for c in keep), float(r["value"])) for r in back) == \
        sorted((tuple(r[c] for c in keep), float(r["value"])) for r in rows)
    assert all(r["source"].endswith("a.csv") and r["ci_low"] == "" for r in back)  # imported: no interval


def test_export_refuses_the_store_as_its_output(exported, capsys):
    _, store, _ = exported
    before = store.read_bytes()
    assert main(["downstream", "export", "--store", str(store), "--out", str(store)]) != 0
    assert "is the store itself" in capsys.readouterr().err
    assert store.read_bytes() == before
