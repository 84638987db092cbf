"""A finished precompute or sweep is known from the store before any model loads, and the plan and
the run agree about random-init controls (issue #34 items 13 and 17)."""

import pytest

import precompute.batch.runner
from precompute.cli import main
from precompute.sweep import load_sweep, plan_sweep, run_sweep
from tests.precompute.helpers import make_dataset, stored_contents
from tests.precompute.helpers import write_sweep


@pytest.fixture
def dataset(tmp_path):
    return make_dataset(tmp_path / "data", n=4, captions=3)


def no_load(*a, **k):
    raise AssertionError("a finished model must not be loaded")


def no_decode(*a, **k):
    raise AssertionError("a finished model's videos must not be decoded")


@pytest.mark.parametrize("model, flags", [
    ("vit", ["--frames", "1,2"]),
    ("bert", ["--captions", "1,2"]),
    ("t5", ["--captions", "1", "--random-init"]),
])
def test_rerun_of_a_finished_precompute_loads_nothing_and_says_done(tmp_path, dataset, tiny, monkeypatch, capsys,
                                                                    model, flags):
    store = tmp_path / "s.duckdb"
    args = ["precompute", "--store", str(store), "--manifest", str(dataset), "--dataset", "d", "--model", tiny[model],
            "--batch-size", "2", "--quiet", *flags]
    assert main(args) == 0
    before = stored_contents(store)
    capsys.readouterr()
    monkeypatch.setattr(precompute.batch.runner, "load_adapter", no_load)
    monkeypatch.setattr(precompute.batch.runner, "read_video", no_decode)
    assert main(args) == 0
    out = capsys.readouterr()
    n_runs = len(before[1])
    assert f"0 run(s) computed, {n_runs} already done, 0 item embeddings" in out.out
    assert "already done, skipped" in out.err
    assert stored_contents(store) == before


def test_a_partly_done_model_is_still_loaded_and_resumed(tmp_path, dataset, tiny, capsys):
    store = tmp_path / "s.duckdb"
    args = ["precompute", "--store", str(store), "--manifest", str(dataset), "--dataset", "d", "--model", tiny["vit"],
            "--batch-size", "2", "--quiet"]
    assert main([*args, "--frames", "1"]) == 0
    capsys.readouterr()
    assert main([*args, "--frames", "1,2"]) == 0  # n_f=2 is new: the model loads and computes only it
    assert "1 run(s) computed, 1 already done, 4 item embeddings" in capsys.readouterr().out


@pytest.mark.parametrize("model, precompute_lines", [
    ("t5", 'captions = [1]\nbatch_size = 2\nrandom_init = true'),           # load changes T5's config
    ("bert", 'captions = [1]\nbatch_size = 2\nrandom_init = true\ndtype = "bfloat16"'),  # load sets dtype
])
def test_plan_of_a_finished_random_init_sweep_says_done_as_the_run_does(tmp_path, dataset, tiny, monkeypatch,
                                                                       model, precompute_lines):
    """Issue #34 item 13: the plan hashed the config before loading, the store held its hash after."""
    path = write_sweep(tmp_path / "sweep.toml", manifest=dataset, models=[tiny[model]], precompute=precompute_lines,
                       extra="[analyze]\nenabled = false\n")
    store = tmp_path / "s.duckdb"
    out = run_sweep(load_sweep(path), store, progress=False, log=lambda m: None)
    assert out["runs_computed"] == 2  # n_c=1 and the negatives
    plan = plan_sweep(load_sweep(path), store)
    assert [(r.label, r.status) for r in plan.runs] == [("n_c=1", "done"), ("n_c=1 negatives", "done")]
    monkeypatch.setattr(precompute.batch.runner, "load_adapter", no_load)
    again = run_sweep(load_sweep(path), store, progress=False, log=lambda m: None)
    assert again["runs_computed"] == 0 and again["pairs_skipped"] == 1
