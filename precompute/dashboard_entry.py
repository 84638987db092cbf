"""Streamlit entry script used by ``layerscope dashboard``: runs the top-level ``app.py``.

Why not ``streamlit run app.py``: Streamlit treats a ``pages/`` folder beside the entry script as
a legacy multipage app, and a first visitor arriving on a deep link (``/heatmap?...``) then gets
the page without ``app.py``'s navigation and sidebar. Starting from this folder, which has no
``pages/``, keeps ``st.navigation`` in charge, so shared links open the same page and selections.
"""

import runpy
import sys
from pathlib import Path

PACKAGES = Path(__file__).resolve().parents[1]  # the folder holding precompute (a checkout or site-packages)
if str(PACKAGES) not in sys.path:
    sys.path.insert(0, str(PACKAGES))
from precompute.dashboard import app_path  # noqa: E402  (after the path above)

APP = app_path()  # the checkout's app.py, or the installed wheel's layerscope_dashboard/app.py
if str(APP.parent) not in sys.path:  # its pages/ import as `pages`
    sys.path.insert(0, str(APP.parent))
runpy.run_path(str(APP), run_name="__main__")
