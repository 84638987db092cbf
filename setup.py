"""Build step that puts the dashboard into the wheel (the rest of the build is in pyproject.toml).

The repository keeps ``app.py`` and ``pages/`` at its root, where ``streamlit run app.py`` finds
them. A wheel carries them as the package folder ``layerscope_dashboard/`` (``app.py``, ``pages/``),
not as top-level ``app``/``pages`` modules, whose generic names would collide with other
installs. ``precompute.dashboard.app_path`` finds the app in either layout.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
#: the wheel's folder for the dashboard; precompute/dashboard.py names it too
DASHBOARD_PACKAGE = "layerscope_dashboard"


class BuildWithDashboard(build_py):
    """``build_py``, then ``app.py`` and ``pages/`` (modules and icon) copied under ``DASHBOARD_PACKAGE``."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install runs the checkout's app.py in place
        out = Path(self.build_lib) / DASHBOARD_PACKAGE
        (out / "pages").mkdir(parents=True, exist_ok=True)
        (out / "__init__.py").write_text('"""LayerScope\'s dashboard: app.py and pages/, run by `layerscope dashboard`."""\n')
        shutil.copy2(ROOT / "app.py", out / "app.py")
        for path in sorted((ROOT / "pages").iterdir()):
            if path.suffix in (".py", ".svg"):
                shutil.copy2(path, out / "pages" / path.name)


setup(cmdclass={"build_py": BuildWithDashboard})
