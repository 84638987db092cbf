import altair as alt
import streamlit as st

from analysis.views import md_escape, model_map_view
from pages._shared import dataset_picker, download_chart, download_data, require_results, require_store, view

st.title("Model map")
st.caption("Best-layer mutual k-NN between every two models, clustered (average linkage on 1 − similarity), "
           "and a 2-D map (classical MDS of the same distances).")
require_store()
dataset = dataset_picker()
payload = view("study", "model_map", dataset)
require_results("model map", payload is not None)

mv = model_map_view(payload)
heat = alt.Chart(mv["cells"]).mark_rect().encode(
    x=alt.X("model_b:N", sort=mv["order"], title=None), y=alt.Y("model_a:N", sort=mv["order"], title=None),
    color=alt.Color("similarity:Q", scale=alt.Scale(scheme="viridis")),
    tooltip=["model_a", "model_b", alt.Tooltip("similarity:Q", format=".3f")]).properties(height=380)
scatter = alt.Chart(mv["coords"]).mark_circle(size=220).encode(
    x=alt.X("x:Q", title=None), y=alt.Y("y:Q", title=None), color="cluster:N", shape="modality:N",
    tooltip=["model", "modality", "cluster"])
labels = scatter.mark_text(dy=-14).encode(text="model:N")
c1, c2 = st.columns(2)
c1.altair_chart(heat, width="stretch", key="map_heat")
c2.altair_chart((scatter + labels).properties(height=380), width="stretch", key="map_scatter")
if payload.get("undefined_pairs"):
    st.warning("No layer pair of these models could be scored (degenerate layers); they are placed as unrelated "
               "(similarity 0) on the map: " + md_escape("; ".join(
                   f"{' × '.join(p['models'])}: {p['reason']}" for p in payload["undefined_pairs"])))
download_data(mv["cells"], "model_similarity")
download_chart(heat, "model_map")
