"""LayerScope dashboard entry point: navigation, the store, and the shared sidebar.

Run it with ``layerscope dashboard --store STORE`` (binds to localhost), or
``streamlit run app.py -- --store STORE``. Pages live in ``pages/`` and only render.
"""

import streamlit as st

from pages._shared import render_sidebar, store_path

st.set_page_config(page_title="LayerScope", page_icon=":material/layers:", layout="wide")

PAGES = [
    st.Page("pages/overview.py", title="Overview", icon=":material/home:", default=True),
    st.Page("pages/heatmap.py", title="Layer heatmap", icon=":material/grid_on:"),
    st.Page("pages/curves.py", title="Layer curves", icon=":material/show_chart:"),
    st.Page("pages/scaling.py", title="Scaling", icon=":material/trending_up:"),
    st.Page("pages/model_map.py", title="Model map", icon=":material/hub:"),
    st.Page("pages/downstream.py", title="Downstream", icon=":material/insights:"),
    st.Page("pages/temporal.py", title="Temporal", icon=":material/schedule:"),
    st.Page("pages/neighbours.py", title="Neighbours", icon=":material/group_work:"),
]

nav = st.navigation(PAGES)
render_sidebar(store_path())
nav.run()
