"""Issue #31: the papers' published numbers are package data. A wheel built from the checkout carries
the CSV, and the package installed from that wheel (not the checkout) finds and reads it."""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    # built from a copy: pip builds in the source tree and would leave build/ in the checkout
    src = out / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "setup.py", "MANIFEST.in", "app.py"):
        shutil.copy(ROOT / name, src / name)
    for pkg in ("analysis", "precompute", "pages"):
        shutil.copytree(ROOT / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    # --no-build-isolation: build with the environment's setuptools (no registry needed)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out), str(src)], check=True, capture_output=True, cwd=out)
    (whl,) = out.glob("layerscope-*.whl")
    return whl


@pytest.mark.slow
def test_the_wheel_carries_the_published_csv(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "analysis/data/papers.csv" in names
    with zipfile.ZipFile(wheel).open("analysis/data/papers.csv") as fh:
        shipped = fh.read()
    assert shipped == (ROOT / "analysis" / "data" / "papers.csv").read_bytes()


@pytest.mark.slow
def test_the_installed_package_reads_its_published_numbers(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target",
                    str(target), str(wheel)], check=True, capture_output=True)
    code = ("import analysis.storage.published as P; rows = P.load_published(); "
            "print(P.PUBLISHED_CSV); print(len(rows))")
    # run outside the checkout with the installed copy first on the path
    env = dict(os.environ, PYTHONPATH=str(target))
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                          cwd=tmp_path, env=env)
    path, n = done.stdout.split()
    assert Path(path).is_relative_to(target) and Path(path).is_file()
    expected = sum(1 for line in (ROOT / "analysis" / "data" / "papers.csv").read_text().splitlines()
                   if line.strip() and not line.lstrip().startswith("#")) - 1  # less the header
    assert int(n) == expected > 0


@pytest.mark.slow
def test_the_wheel_carries_the_dashboard_in_its_own_package_folder(wheel):
    """Issue #46: app.py and pages/ travel in the wheel under layerscope_dashboard/, not as top-level
    modules with generic names (app, pages) that would collide with other installs."""
    names = set(zipfile.ZipFile(wheel).namelist())
    pages = {p.name for p in (ROOT / "pages").iterdir() if p.suffix in (".py", ".svg")}
    assert "layerscope_dashboard/app.py" in names
    assert {f"layerscope_dashboard/pages/{p}" for p in pages} <= names
    assert not any(n.split("/")[0] in ("app.py", "pages", "app") for n in names)
    with zipfile.ZipFile(wheel).open("layerscope_dashboard/app.py") as fh:
        assert fh.read() == (ROOT / "app.py").read_bytes()


@pytest.mark.slow
def test_the_installed_package_finds_its_dashboard(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target",
                    str(target), str(wheel)], check=True, capture_output=True)
    code = "from precompute.dashboard import app_path; print(app_path())"
    env = dict(os.environ, PYTHONPATH=str(target))
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                          cwd=tmp_path, env=env)
    assert Path(done.stdout.strip()) == target / "layerscope_dashboard" / "app.py"
