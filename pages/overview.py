import streamlit as st

from analysis.views import md_escape
from pages._shared import background_job, download_data, report_files, require_store, store_path, view

st.title("LayerScope")
st.caption("How every layer of your encoders represents the same data — without labels.")
require_store()
ov = view("overview", store_path())
if ov.get("empty"):
    st.info(f"The store {md_escape(store_path())} holds no runs yet. Fill it with `layerscope precompute` "
            "or try `layerscope demo`.")
    st.stop()

c1, c2, c3 = st.columns(3)
c1.metric("Datasets", len(ov["datasets"]))
c2.metric("Models", len(ov["models"]))
done = (ov["runs"]["status"] == "done").sum()
c3.metric("Runs done", f"{done} / {len(ov['runs'])}")

st.subheader("Datasets")
st.dataframe(ov["datasets"], hide_index=True, width="stretch")
st.subheader("Models")
st.caption("Models marked *random init* have untrained weights (demo fixtures): their scores say nothing "
           "about real models.")
st.dataframe(ov["models"][["label", "modality", "model_type", "n_layers", "dim", "params", "revision"]]
             .rename(columns={"label": "model"}), hide_index=True, width="stretch")
st.subheader("Runs")
st.dataframe(ov["runs"], hide_index=True, width="stretch")
download_data(ov["runs"], "runs")
st.subheader("What is missing")
if ov["missing"]:
    for m in ov["missing"]:
        st.markdown(f"- {md_escape(m['what'])}")
        st.code(m["command"], language="bash")
    background_job("analyze", "Run the analysis now, in the background (the store's own settings)")
else:
    st.success("Every run is done and analysed.")

st.subheader("Share")
if st.toggle("Prepare the layer-selection report (HTML, JSON, Markdown)", key="prepare_report"):
    with st.spinner("Building the report..."):
        files = report_files()
    c1, c2, c3 = st.columns(3)
    c1.download_button("Report (HTML)", files["html"].encode(), file_name="layerscope-report.html", mime="text/html",
                       key="report_html")
    c2.download_button("Numbers (JSON)", files["json"].encode(), file_name="layerscope-report.json",
                       mime="application/json", key="report_json")
    c3.download_button("Summary (Markdown)", files["md"].encode(), file_name="layerscope-report.md",
                       mime="text/markdown", key="report_md")
