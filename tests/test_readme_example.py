"""The README's own-data example runs as written, offline (issue #30: "every command shown in the
README runs as written"), and so does the user guide's Python example on the store it writes.

The block after the README's ``own-data example`` marker is run by bash in an empty folder, with
``layerscope`` and ``python`` resolving to this checkout (a user gets the same from
``pip install -e``). Expected values come from the example's own words (24 videos, 10 captions
each, ``--frames 1,2,4 --captions 1,2,4``) and from the models' configs, not from a run's output.
"""

from __future__ import annotations

import ast
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MARKER = "<!-- own-data example:"
USER_GUIDE = ROOT / "docs" / "user-guide.md"
PY_MARKER = "<!-- python example:"


def fenced_block_after(text: str, marker: str) -> str:
    """The body of the first fenced code block after ``marker`` in ``text``."""
    at = text.find(marker)
    if at < 0:
        raise AssertionError(f"README.md has no {marker!r} marker before its own-data example")
    m = re.compile(r"```[a-z]*\n(.*?)```", re.S).search(text, at)
    if m is None:
        raise AssertionError(f"README.md: no fenced block after {marker!r}")
    return m.group(1)


def shims(bin_dir: Path) -> dict:
    """An environment where ``python`` is this interpreter and ``layerscope`` this checkout's CLI."""
    bin_dir.mkdir()
    for name, line in {"python": f'exec "{sys.executable}" "$@"',
                       "layerscope": f'exec "{sys.executable}" -m precompute.cli "$@"'}.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{line}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ)
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1")
    return env


def test_the_readme_manifest_example_is_one_valid_manifest_line():
    text = README.read_text()
    m = re.search(r"```json\n(.*?)```", text[:text.find(MARKER)], re.S)
    assert m, "README.md: no JSON manifest example before the own-data example"
    row = json.loads(m.group(1))
    assert {"id", "video", "captions"} <= set(row) and isinstance(row["captions"], list)


def test_the_dashboard_is_shown_apart_from_the_example_block():
    """The example block must finish by itself: the dashboard (a server) is in a block of its own."""
    block = fenced_block_after(README.read_text(), MARKER)
    assert "layerscope dashboard" not in block
    assert "layerscope precompute" in block and "layerscope analyze" in block


@pytest.mark.slow
def test_the_readme_own_data_example_runs_as_written(tmp_path):
    block = fenced_block_after(README.read_text(), MARKER)
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=work, env=shims(tmp_path / "bin"),
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"README example failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"

    store = work / "my.duckdb"
    con = duckdb.connect(str(store), read_only=True)
    try:
        n_items = con.execute("SELECT count(*) FROM items WHERE dataset = 'mine'").fetchone()[0]
        runs = con.execute("SELECT model, n_frames, n_captions, status FROM runs "
                           "WHERE dataset = 'mine' AND variant = 'original'").fetchall()
        models = dict(con.execute("SELECT model, modality FROM models").fetchall())
        n_grids = con.execute("SELECT count(*) FROM result_grids").fetchone()[0]
    finally:
        con.close()
    assert n_items == 24  # write_moving_shapes('my_data', n=24)
    assert models == {"videomae-tiny": "video", "all-MiniLM-L6-v2": "text"}  # the two --name values
    assert all(status == "done" for *_, status in runs)
    # --frames 1,2,4 for the video model, --captions 1,2,4 for the text model
    assert sorted(f for m, f, _, _ in runs if m == "videomae-tiny") == [1, 2, 4]
    assert sorted(c for m, _, c, _ in runs if m == "all-MiniLM-L6-v2") == [1, 2, 4]
    # analyze: every video run x every text caption run, for the three default grid metrics
    assert n_grids == 3 * 3 * 3
    for suffix in (".html", ".json", ".md"):
        assert (work / f"my_report{suffix}").stat().st_size > 0
    assert "run(s)" in done.stdout + done.stderr

    # docs/user-guide.md's "From Python" block, on the same store, from the same folder
    code = fenced_block_after(USER_GUIDE.read_text(), PY_MARKER)
    shown = subprocess.run([sys.executable, "-c", code], cwd=work, env=shims(tmp_path / "bin2"), capture_output=True,
                           text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr[-4000:]
    layer_v, layer_t, score = ast.literal_eval(shown.stdout.strip().splitlines()[-1])
    # build_videomae(layers=4): embedding output + 4 blocks; all-MiniLM-L6-v2: embedding output + 6 blocks + its
    # named default output (7: layer 6 normalised, the same neighbours, so an equal cell, and ties go deeper)
    assert 0 <= layer_v < 5 and 0 <= layer_t < 8 and 0.0 <= score <= 1.0


def test_the_readme_cli_table_names_every_subcommand():
    """"The CLI at a glance" lists every command the parser has (a new command needs its line)."""
    import argparse

    from precompute.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    table = README.read_text().split("## The CLI at a glance", 1)[1].split("\n## ", 1)[0]
    missing = [name for name in sub.choices if f"`layerscope {name}" not in table]
    assert not missing, f"README.md's CLI table lacks: {missing}"
