"""Starting the Streamlit dashboard on localhost."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ENTRY = Path(__file__).resolve().with_name("dashboard_entry.py")  # see its docstring
#: the folder a wheel installs ``app.py`` and ``pages/`` into (setup.py's build step names it too)
DASHBOARD_PACKAGE = "layerscope_dashboard"


def app_path() -> Path:
    """The dashboard's ``app.py``: in an installed wheel, ``layerscope_dashboard/app.py`` beside this
    package; in a checkout (or an editable install), ``app.py`` at the repository's root."""
    root = Path(__file__).resolve().parents[1]
    for candidate in (root / DASHBOARD_PACKAGE / "app.py", root / "app.py"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"the dashboard's app.py is neither in {root / DASHBOARD_PACKAGE} (an installed wheel) "
                            f"nor in {root} (a checkout); reinstall LayerScope")


def command(store, *, port: int = 8501, address: str = "127.0.0.1") -> list[str]:
    return [sys.executable, "-m", "streamlit", "run", str(ENTRY), "--server.address", address,
            "--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false",
            # no file watcher: it would watch the virtualenv too (inotify overflows) and users run, not edit
            "--server.fileWatcherType", "none",
            # users view results: no developer menu items (Deploy, Rerun settings) in the toolbar
            "--client.toolbarMode", "viewer",
            "--", "--store", str(Path(store).resolve())]


def free_port(address: str, first: int, tries: int = 20) -> int | None:
    """The first of ``first .. first + tries - 1`` that a server can bind on ``address``, else None."""
    import socket

    for port in range(first, min(first + tries, 65536)):
        with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((address, port))
            except OSError:
                continue
            return port
    return None


def launch(store, *, port: int = 8501, address: str = "127.0.0.1") -> int:
    """Run the dashboard in the foreground until interrupted (Ctrl+C, ``kill``).

    A busy ``port`` is replaced by the next free one, said on the console before the URL that
    serves. The server is a child process that ends with this one, however this one ends
    (``kill -TERM``, ``kill -9``): no server is left serving the store.
    """
    import signal

    from analysis.studies.parallel import die_with_parent

    chosen = free_port(address, port)
    if chosen is None:
        raise ValueError(f"ports {port}..{port + 19} on {address} are all in use; pass a free one with --port")
    if chosen != port:
        print(f"dashboard: port {port} is in use; using {chosen} (or pass --port)", file=sys.stderr)
    print(f"dashboard: http://{address}:{chosen}  (store {store}; Ctrl+C to stop)", file=sys.stderr)
    env = {**os.environ, "LAYERSCOPE_STORE": str(Path(store).resolve())}
    child = subprocess.Popen(command(store, port=chosen, address=address), env=env, cwd=app_path().parent,
                             preexec_fn=lambda: die_with_parent(signal.SIGTERM, watch=False))

    def stop(signum, frame):  # kill -TERM / -HUP of the launcher: stop the server, then end as asked
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    try:
        return child.wait()
    except KeyboardInterrupt:  # Ctrl+C reached the server too (same process group): let it finish
        try:
            child.wait(timeout=10)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            child.kill()
        return 0
