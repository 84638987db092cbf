"""Reports are for colleagues: written with the user's umask, not the tempfile default 0600 (issue #34 item 10)."""

import os
import stat

import pytest

from analysis.cli import write_atomic


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_write_atomic_gives_the_file_the_users_umask_permissions(tmp_path, umask):
    old = os.umask(umask)
    try:
        path = tmp_path / "report.html"
        write_atomic(path, "<p>hi</p>")
        # what open() gives a new file under this umask: 0666 less the umask
        want = 0o666 & ~umask
        assert stat.S_IMODE(path.stat().st_mode) == want
        assert path.read_text() == "<p>hi</p>"
    finally:
        os.umask(old)


def test_write_atomic_over_an_existing_file_keeps_the_umask_mode_and_leaves_no_temp(tmp_path):
    old = os.umask(0o022)
    try:
        path = tmp_path / "report.json"
        path.write_text("old")
        os.chmod(path, 0o600)
        write_atomic(path, "new")
        assert stat.S_IMODE(path.stat().st_mode) == 0o644 and path.read_text() == "new"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]
    finally:
        os.umask(old)
