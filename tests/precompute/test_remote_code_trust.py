"""Remote code is said to run with the user's rights, and `sweep plan` never runs it (issue #34 item 10)."""

import pytest

from precompute.cli import build_parser, main
from precompute.sweep import load_sweep, plan_sweep, run_sweep
from precompute.synthetic.tiny_models import build_remote_videomae_v2
from tests.precompute.helpers import make_dataset, write_sweep

MARK = "\nimport pathlib as _p\n_p.Path(__file__).parent.joinpath('{name}').touch()\n"


@pytest.fixture
def remote(tmp_path):
    """A remote-code folder whose config and modeling code each leave a mark when they run.

    Transformers runs a copy of the code from its module cache, so a mark is an empty file named
    ``<token>-config_code_ran`` / ``<token>-model_code_ran`` beside whichever copy ran; the token is
    new for every test, which also makes the code's text new, so transformers reloads it rather than
    reusing a module an earlier test imported. Yields ``(folder, token)``; the marks go at teardown."""
    import uuid

    token = uuid.uuid4().hex
    folder = build_remote_videomae_v2(tmp_path / "tinyv2", seed=7)
    for code, name in (("configuration_tinyvideomaev2.py", "config_code_ran"),
                       ("modeling_tinyvideomaev2.py", "model_code_ran")):
        path = folder / code
        path.write_text(path.read_text() + MARK.format(name=f"{token}-{name}"))
    yield folder, token
    for mark in marks(tmp_path, token):
        mark.unlink()


def marks(tmp_path, token) -> list:
    from pathlib import Path

    from transformers.utils import HF_MODULES_CACHE

    return [p for root in (tmp_path, Path(HF_MODULES_CACHE)) for p in Path(root).rglob(f"{token}-*")]


def code_ran(tmp_path, token) -> set:
    """Which of the folder's code files have run (``config_code_ran``, ``model_code_ran``)."""
    return {p.name.split("-", 1)[1] for p in marks(tmp_path, token)}


def test_the_flags_help_says_remote_code_runs_with_the_users_rights():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    flag = next(a for a in sub.choices["precompute"]._actions if "--trust-remote-code" in a.option_strings)
    assert "arbitrary" in flag.help and "your user" in flag.help


def test_sweep_plan_does_not_execute_remote_code_and_says_what_it_cannot_know(tmp_path, remote, capsys):
    remote, token = remote
    data = make_dataset(tmp_path / "d", n=3, frames=10)
    path = write_sweep(tmp_path / "sweep.toml", manifest=data, precompute="frames = [2]\nbatch_size = 3",
                       models=[{"source": str(remote), "trust_remote_code": True}],
                       extra="[analyze]\nenabled = false\n")
    store = tmp_path / "s.duckdb"
    plan = plan_sweep(load_sweep(path), store)
    assert code_ran(tmp_path, token) == set()
    assert [(r.model, r.label, r.status, r.bytes_left) for r in plan.runs] == [("tinyv2", "n_f=2", "todo", None)]
    assert any("remote code" in line and "not run" in line for line in plan.lines())
    # the run executes it (trusted), warns once in one line, and the plan then agrees with the store
    run_sweep(load_sweep(path), store, progress=False, log=lambda m: None)
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "tinyv2" in warnings[0] and "your user" in warnings[0]
    assert code_ran(tmp_path, token) == {"config_code_ran", "model_code_ran"}
    assert [r.status for r in plan_sweep(load_sweep(path), store).runs] == ["done"]


def test_precompute_warns_before_running_remote_code(tmp_path, remote, capsys):
    remote, _ = remote
    data = make_dataset(tmp_path / "d", n=2, frames=10)
    store = tmp_path / "s.duckdb"
    args = ["precompute", "--store", str(store), "--manifest", str(data), "--dataset", "toy", "--model",
            str(remote), "--frames", "2", "--quiet", "--trust-remote-code"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert sum(line.startswith("warning:") and "arbitrary" in line for line in err.splitlines()) == 1
