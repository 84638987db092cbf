"""The demo as a new user runs it: ``layerscope demo --small --no-dashboard`` from an empty folder
outside the checkout, with its default (relative) store and data folder. Everything it writes lands
in that folder; nothing lands in the checkout or the packages (Python's and numba's ``__pycache__``
aside). Regression test for issue #46: the dataset writer, a child process started in the package's
folder, was given a relative path and wrote the videos beside the packages."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: what a test run itself writes into the checkout, besides bytecode caches
_NOT_PRODUCT = {".git", ".venv", ".pytest_cache", ".hypothesis", "test-artifacts"}


def _files(root: Path) -> dict[str, int]:
    """Every file under ``root`` (less bytecode caches and test-run folders) -> its mtime in ns."""
    found = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__" and not (Path(folder) == root and d in _NOT_PRODUCT)]
        for name in files:
            path = Path(folder) / name
            try:
                found[str(path.relative_to(root))] = path.stat().st_mtime_ns
            except FileNotFoundError:
                continue
    return found


def _written(before: dict, after: dict) -> list[str]:
    """Files that appeared, and files under ``data/`` that changed (where the demo writes; a source file
    edited while the test runs is not the demo's doing)."""
    return sorted(p for p, t in after.items() if p not in before or (p.startswith("data/") and before[p] != t))


def _layerscope() -> list[str]:
    """The console script beside this interpreter (what a user types), else the module."""
    script = Path(sys.executable).with_name("layerscope")
    return [str(script)] if script.exists() else [sys.executable, "-m", "precompute.cli"]


@pytest.mark.slow
def test_the_small_demo_runs_from_an_empty_folder_and_writes_only_there(tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's packages, as an install would provide
    before = _files(ROOT)
    done = subprocess.run([*_layerscope(), "demo", "--small", "--no-dashboard", "--quiet"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (folder / "data" / "demo.duckdb").is_file()
    assert (folder / "data" / "generated-small" / "test_of_time.jsonl").is_file()
    assert (folder / "data" / "generated-small" / "stamp.json").is_file()  # the child finished writing here
    videos = list((folder / "data" / "generated-small").rglob("*.mkv"))
    assert videos, "the dataset writer wrote no videos into the user's folder"
    assert _written(before, _files(ROOT)) == []
    shutil.rmtree(folder)  # a few hundred MB of models and videos: not kept until pytest prunes tmp
