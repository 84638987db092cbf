"""Starting the Streamlit dashboard on localhost."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app.py"
ENTRY = Path(__file__).resolve().with_name("dashboard_entry.py")  # see its docstring


def command(store, *, port: int = 8501, address: str = "127.0.0.1") -> list[str]:
    return [sys.executable, "-m", "streamlit", "run", str(ENTRY), "--server.address", address,
            "--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false",
            # no file watcher: it would watch the virtualenv too (inotify overflows) and users run, not edit
            "--server.fileWatcherType", "none",
            # users view results: no developer menu items (Deploy, Rerun settings) in the toolbar
            "--client.toolbarMode", "viewer",
            "--", "--store", str(Path(store).resolve())]


def launch(store, *, port: int = 8501, address: str = "127.0.0.1") -> int:
    """Run the dashboard in the foreground until interrupted (Ctrl+C)."""
    print(f"dashboard: http://{address}:{port}  (store {store}; Ctrl+C to stop)", file=sys.stderr)
    env = {**os.environ, "LAYERSCOPE_STORE": str(Path(store).resolve())}
    try:
        return subprocess.call(command(store, port=port, address=address), env=env, cwd=APP.parent)
    except KeyboardInterrupt:
        return 0
