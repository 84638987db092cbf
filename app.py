"""LayerScope dashboard entry point: navigation, the store, and the shared sidebar.

Run it with ``layerscope dashboard --store STORE`` (binds to localhost), or
``streamlit run app.py -- --store STORE``. Pages live in ``pages/`` and only render.
"""

from pathlib import Path

import streamlit as st

from pages._shared import new_run, prune_params, query_writes_replace_history, render_sidebar, store_path

HERE = Path(__file__).resolve().parent  # absolute page paths: the entry script may live elsewhere

# a local file (served inline): a material-icon favicon makes every page fetch it from fonts.gstatic.com
st.set_page_config(page_title="LayerScope", page_icon=str(HERE / "pages" / "icon.svg"), layout="wide")

# Material icons ship with Streamlit: no emoji font is needed to tell the pages apart
PAGES = [
    st.Page(HERE / "pages" / "overview.py", title="Overview", icon=":material/home:", default=True),
    st.Page(HERE / "pages" / "heatmap.py", title="Layer heatmap", icon=":material/grid_on:"),
    st.Page(HERE / "pages" / "curves.py", title="Layer curves", icon=":material/show_chart:"),
    st.Page(HERE / "pages" / "scaling.py", title="Scaling", icon=":material/trending_up:"),
    st.Page(HERE / "pages" / "model_map.py", title="Model map", icon=":material/hub:"),
    st.Page(HERE / "pages" / "embedding_map.py", title="Embedding map", icon=":material/scatter_plot:"),
    st.Page(HERE / "pages" / "downstream.py", title="Downstream", icon=":material/link:"),
    st.Page(HERE / "pages" / "predictors.py", title="Layer predictors", icon=":material/insights:"),
    st.Page(HERE / "pages" / "temporal.py", title="Temporal", icon=":material/timer:"),
    st.Page(HERE / "pages" / "neighbours.py", title="Neighbours", icon=":material/group:"),
    st.Page(HERE / "pages" / "paper_figures.py", title="Paper figures", icon=":material/description:"),
]

new_run()
query_writes_replace_history()
nav = st.navigation(PAGES)
render_sidebar(store_path())
nav.run()
prune_params(nav.url_path or "overview")  # only after a page ran to its end: it keeps its own and the carried
