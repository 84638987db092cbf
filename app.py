"""LayerScope dashboard entry point: navigation, the store, and the shared sidebar.

Run it with ``layerscope dashboard --store STORE`` (binds to localhost), or
``streamlit run app.py -- --store STORE``. Pages live in ``pages/`` and only render.
"""

from pathlib import Path

import streamlit as st

from pages._shared import render_sidebar, store_path

HERE = Path(__file__).resolve().parent  # absolute page paths: the entry script may live elsewhere

st.set_page_config(page_title="LayerScope", page_icon="🔬", layout="wide")

PAGES = [
    st.Page(HERE / "pages" / "overview.py", title="Overview", icon="🏠", default=True),
    st.Page(HERE / "pages" / "heatmap.py", title="Layer heatmap", icon="🟩"),
    st.Page(HERE / "pages" / "curves.py", title="Layer curves", icon="📈"),
    st.Page(HERE / "pages" / "scaling.py", title="Scaling", icon="📊"),
    st.Page(HERE / "pages" / "model_map.py", title="Model map", icon="🗺️"),
    st.Page(HERE / "pages" / "embedding_map.py", title="Embedding map", icon="🌌"),
    st.Page(HERE / "pages" / "downstream.py", title="Downstream", icon="🔗"),
    st.Page(HERE / "pages" / "predictors.py", title="Layer predictors", icon="🎯"),
    st.Page(HERE / "pages" / "temporal.py", title="Temporal", icon="⏱️"),
    st.Page(HERE / "pages" / "neighbours.py", title="Neighbours", icon="👥"),
    st.Page(HERE / "pages" / "paper_figures.py", title="Paper figures", icon="📄"),
]

nav = st.navigation(PAGES)
render_sidebar(store_path())
nav.run()
