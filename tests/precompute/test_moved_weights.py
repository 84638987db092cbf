"""The same weights in a moved folder are the same model (issue #34 item 11): a rerun after moving
the folder finds its runs (done ones skipped, unfinished ones resumed) instead of refusing the name;
other weights under the same name are still refused."""

import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from precompute.synthetic import tiny_models
from precompute.cli import main
from tests.precompute.helpers import make_dataset

REPO = Path(__file__).resolve().parents[2]


def runs(store):
    con = duckdb.connect(str(store), read_only=True)
    try:
        return sorted(con.execute("SELECT run_id, status, n_done FROM runs").fetchall()), \
            con.execute("SELECT model, source FROM models").fetchall()
    finally:
        con.close()


@pytest.mark.slow  # builds a tiny BERT and precomputes in a process killed mid-run, then resumes
def test_moved_weights_resume_their_runs(tmp_path, capsys):
    data = make_dataset(tmp_path / "data", n=6, captions=2)
    first = tiny_models.build_bert(tmp_path / "a" / "model")
    store = tmp_path / "s.duckdb"
    args = ["precompute", "--store", str(store), "--manifest", str(data), "--dataset", "d", "--captions", "1,2",
            "--batch-size", "2", "--quiet"]
    # killed after one batch: the first run is unfinished, the rest not started
    r = subprocess.run([sys.executable, "-m", "precompute.cli", *args, "--model", str(first)], cwd=REPO,
                       env={**__import__("os").environ, "LAYERSCOPE_KILL_AFTER_BATCHES": "1"}, capture_output=True)
    assert r.returncode == -9, r.stderr
    (before, models) = runs(store)
    assert any(status == "running" for _, status, _ in before) and models == [("model", str(first))]
    moved = tmp_path / "b" / "model"
    moved.parent.mkdir()
    shutil.move(str(first), moved)
    capsys.readouterr()
    assert main([*args, "--model", str(moved)]) == 0
    out = capsys.readouterr()
    assert "same weights" in out.out + out.err and str(moved) in out.out + out.err
    after, models = runs(store)
    # the same run ids, now all done; one model, still recorded under the source its runs were made from
    assert [r[0] for r in after] == [r[0] for r in before] and all(s == "done" for _, s, _ in after)
    assert models == [("model", str(first))]
    # an uninterrupted run from the moved folder into a fresh store gives the same run ids
    fresh = tmp_path / "fresh.duckdb"
    assert main([*args[:2], str(fresh), *args[3:], "--model", str(moved)]) == 0
    assert len(runs(fresh)[0]) == len(after)


def test_other_weights_under_the_same_name_are_still_refused(tmp_path, capsys):
    data = make_dataset(tmp_path / "data", n=4, captions=1)
    first = tiny_models.build_bert(tmp_path / "a" / "model")
    other = tiny_models.build_bert(tmp_path / "b" / "model", seed=1)
    store = tmp_path / "s.duckdb"
    args = ["precompute", "--store", str(store), "--manifest", str(data), "--dataset", "d", "--captions", "1",
            "--quiet"]
    assert main([*args, "--model", str(first)]) == 0
    capsys.readouterr()
    assert main([*args, "--model", str(other)]) == 2
    assert "pass --name" in capsys.readouterr().err
