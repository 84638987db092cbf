"""--revision and --cache-dir for hub models (issue #34 item 18), offline: a hub cache laid out as
huggingface_hub lays it out (refs/<name> -> commit, snapshots/<commit>/files) holds two revisions
of one tiny model; each loads from its own snapshot and its commit is the stored revision."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest

from analysis.storage.store import load_embeddings
from precompute.synthetic import tiny_models
from precompute.cli import main
from tests.precompute.helpers import make_dataset

REPO = Path(__file__).resolve().parents[2]
HUB_ID = "layerscope-test/tiny-bert"


def fake_hub_cache(root: Path, revisions: dict) -> Path:
    """``revisions``: {ref name: (commit, model folder)}; returns the cache directory."""
    repo = root / ("models--" + HUB_ID.replace("/", "--"))
    for ref, (commit, folder) in revisions.items():
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
        shutil.copytree(folder, repo / "snapshots" / commit, dirs_exist_ok=True)
    return root


#: ``layerscope precompute`` once per JSON argument list on the command line, in one process; exits with
#: the first non-zero code
_EACH = ("import json, sys; from precompute.cli import main; "
         "sys.exit(next((c for c in (main(json.loads(a)) for a in sys.argv[1:]) if c), 0))")


def precompute(store, data, *extra, then=None):
    """``precompute`` of ``data`` into ``store`` in an offline child process; ``then``: ``[store, *extra]``
    of a second precompute of ``data`` run after it in the same process."""
    # offline from the start: huggingface_hub reads HF_HUB_OFFLINE when it is imported
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    runs = [[store, *extra]] + ([then] if then else [])
    argv = [json.dumps(["precompute", "--store", str(st), "--manifest", str(data), "--dataset", "d", "--captions", "1",
                        "--quiet", "--name", "bert", *map(str, ex)]) for st, *ex in runs]
    return subprocess.run([sys.executable, "-c", _EACH, *argv], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)


def revision_of(store) -> str:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute("SELECT revision FROM models WHERE model = 'bert'").fetchall()[0][0]
    finally:
        con.close()


@pytest.mark.slow  # builds two tiny BERTs and precomputes them in two processes
def test_each_revision_loads_its_own_snapshot_and_is_recorded(tmp_path):
    data = make_dataset(tmp_path / "data", n=3, captions=1)
    v1 = tiny_models.build_bert(tmp_path / "v1")
    v2 = tiny_models.build_bert(tmp_path / "v2", seed=1)
    c1, c2 = "1" * 40, "2" * 40
    cache = fake_hub_cache(tmp_path / "cache", {"v1": (c1, v1), "main": (c2, v2)})
    # both refs in one offline process (one import of torch): the second must not reuse the first's model
    refs = (("v1", c1), ("main", c2))
    r = precompute(tmp_path / "v1.duckdb", data, "--model", HUB_ID, "--revision", "v1", "--cache-dir", cache,
                   then=[tmp_path / "main.duckdb", "--model", HUB_ID, "--revision", "main", "--cache-dir", cache])
    assert r.returncode == 0, r.stderr
    got = {}
    for ref, commit in refs:
        store = tmp_path / f"{ref}.duckdb"
        assert revision_of(store) == commit  # the commit the ref resolved to, not the ref's name
        got[ref] = load_embeddings(store, model="bert", dataset="d", n_captions=1)
    local = tmp_path / "local.duckdb"
    assert main(["precompute", "--store", str(local), "--manifest", str(data), "--dataset", "d", "--captions", "1",
                 "--quiet", "--name", "bert", "--model", str(v1)]) == 0
    np.testing.assert_array_equal(got["v1"], load_embeddings(local, model="bert", dataset="d", n_captions=1))
    assert not np.allclose(got["v1"], got["main"])  # another revision, other weights


def test_revision_of_a_local_folder_is_refused_in_one_line(tmp_path, capsys):
    data = make_dataset(tmp_path / "data", n=2, captions=1)
    folder = tiny_models.build_bert(tmp_path / "bert")
    store = tmp_path / "s.duckdb"
    assert main(["precompute", "--store", str(store), "--manifest", str(data), "--dataset", "d", "--captions", "1",
                 "--quiet", "--model", str(folder), "--revision", "v1"]) == 2
    lines = [l for l in capsys.readouterr().err.splitlines() if l.strip()]
    assert len(lines) == 1 and "--revision v1" in lines[0] and "local folder" in lines[0], lines
    assert main(["precompute", "--store", str(store), "--manifest", str(data), "--dataset", "d", "--captions", "1",
                 "--quiet", "--model", "timm:vit_tiny_patch16_224", "--random-init", "--revision", "v1"]) == 2
    assert "--revision apply to transformers hub ids" in capsys.readouterr().err


@pytest.mark.slow  # builds a tiny BERT and precomputes it in two processes
def test_runs_stored_without_their_commit_are_still_found(tmp_path):
    """A store made while transformers 5 left hub revisions ``unknown``: a rerun finds its runs done."""
    data = make_dataset(tmp_path / "data", n=3, captions=1)
    cache = fake_hub_cache(tmp_path / "cache", {"main": ("3" * 40, tiny_models.build_bert(tmp_path / "m"))})
    store = tmp_path / "s.duckdb"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    old = ("import sys; import precompute.adapters.hf as m; m.hub_commit = lambda *a: None; "
           "from precompute.cli import main; sys.exit(main(sys.argv[1:]))")
    args = ["precompute", "--store", str(store), "--manifest", str(data), "--dataset", "d", "--captions", "1",
            "--quiet", "--name", "bert", "--model", HUB_ID, "--cache-dir", str(cache)]
    r = subprocess.run([sys.executable, "-c", old, *args], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and revision_of(store) == "unknown", r.stderr
    r = precompute(store, data, "--model", HUB_ID, "--cache-dir", cache)
    assert r.returncode == 0, r.stderr
    # found done before loading (as sweep plan decides), so no load and no note
    assert "0 run(s) computed" in r.stdout and "already done, skipped" in r.stderr, r.stderr
