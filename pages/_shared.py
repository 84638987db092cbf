"""Glue every page shares: the store path, one cached read-only connection, cached views,
URL-backed selections, downloads and the sidebar. No SQL and no maths here either: data comes
from ``analysis.views``."""

from __future__ import annotations

import os
import sys

import streamlit as st

from analysis import views

DEFAULT_STORE = "data/demo.duckdb"


def store_path() -> str:
    """``--store`` after ``--`` on the streamlit command line, else $LAYERSCOPE_STORE, else the demo store."""
    argv = sys.argv
    if "--store" in argv and argv.index("--store") + 1 < len(argv):
        return argv[argv.index("--store") + 1]
    return os.environ.get("LAYERSCOPE_STORE", DEFAULT_STORE)


@st.cache_resource(show_spinner=False)
def _connection(path: str, mtime: float):
    from analysis.store import connect

    return connect(path, read_only=True)  # refuses a store of another schema version, saying what to do


def connection():
    """One read-only connection per store file version (a rewritten store gets a fresh one)."""
    path = store_path()
    if not os.path.exists(path):
        return None
    try:
        base = _connection(path, os.path.getmtime(path))
    except Exception as exc:  # locked by a writer, another schema version, or not a DuckDB file
        st.error(f"Cannot open the store {path}: {exc}")
        st.stop()
    return base.cursor()  # cursors are cheap and keep concurrent sessions apart


@st.cache_data(show_spinner=False, max_entries=256)
def cached(fn_name: str, path: str, mtime: float, *args):
    con = connection()
    return getattr(views, fn_name)(con, *args)


def view(fn_name: str, *args):
    """A cached call of ``analysis.views.<fn_name>(con, *args)``."""
    path = store_path()
    return cached(fn_name, path, os.path.getmtime(path), *args)


def pick(label: str, options, *, param: str, default=None, fmt=None, container=st, help=None):
    """A selectbox whose value lives in the URL (``?param=value``); unknown values get a friendly note."""
    options = list(options)
    choice = views.choose(st.query_params.get(param), options, label.lower(), default)
    if choice.message:
        st.warning(choice.message)
    if choice.value is None:
        return None
    index = options.index(choice.value)
    value = container.selectbox(label, options, index=index, format_func=fmt or str, key=f"pick_{param}", help=help)
    st.query_params[param] = str(value)
    return value


def download_data(df, name: str, label: str = "Download data (CSV)"):
    st.download_button(label, df.to_csv(index=False).encode(), file_name=f"{name}.csv", mime="text/csv",
                       key=f"dl_{name}")


def download_chart(chart, name: str):
    """PNG and SVG of a chart when vl-convert is installed (it renders offline)."""
    try:
        import vl_convert as vlc
    except ImportError:
        return
    spec = chart.to_json()
    cols = st.columns(2)
    try:
        cols[0].download_button("Chart (SVG)", vlc.vegalite_to_svg(spec).encode(), file_name=f"{name}.svg",
                                mime="image/svg+xml", key=f"svg_{name}")
        cols[1].download_button("Chart (PNG)", vlc.vegalite_to_png(spec, scale=2), file_name=f"{name}.png",
                                mime="image/png", key=f"png_{name}")
    except Exception as exc:  # a chart vl-convert cannot render still shows in the page
        st.caption(f"chart export unavailable: {exc}")


def require_store():
    """The connection, or a friendly start-here message (and stop) for a missing or empty store."""
    con = connection()
    if con is None or not views.is_layerscope_store(con):
        st.info(
            f"No LayerScope store at `{store_path()}` yet. Start with the demo:\n\n"
            "```bash\nlayerscope demo\n```\n\nor embed your own data:\n\n"
            "```bash\nlayerscope precompute --store data/my.duckdb --manifest my.jsonl --dataset mine "
            "--model MCG-NJU/videomae-base\nlayerscope analyze --store data/my.duckdb\n"
            "layerscope dashboard --store data/my.duckdb\n```")
        st.stop()
    return con


def require_results(what: str, available: bool):
    if not available:
        st.info(f"No {what} in this store yet. Compute them with:\n\n```bash\nlayerscope analyze --store "
                f"{store_path()}\n```")
        st.stop()


def dataset_picker(con):
    ov = view("overview", store_path())
    if ov.get("empty"):
        require_results("runs", False)
    return pick("Dataset", list(ov["datasets"]["dataset"]), param="dataset", container=st.sidebar)


def render_sidebar(path: str):
    st.sidebar.markdown("### LayerScope")
    st.sidebar.caption(f"Store: `{path}`")


def reproducibility(run_ids, params: dict | None = None):
    """The sidebar panel: revisions, sizes, code versions and parameters behind the current view."""
    con = connection()
    if con is None or not run_ids:
        return
    prov = views.provenance(con, tuple(run_ids))
    with st.sidebar.expander("Reproducibility", expanded=False):
        if "runs" in prov:
            st.dataframe(prov["runs"], hide_index=True, width="stretch")
        if params:
            st.json(params)
