import streamlit as st

from analysis import views
from analysis.views.nuance import collapse_notes
from analysis.views import md_escape, model_map_view
from analysis.views.studies import model_map_title
from pages._shared import dataset_picker, download_chart, download_data, require_results, require_store, view

st.title("Model map")
st.caption("Best-layer mutual k-NN between every two models, clustered (average linkage on 1 − similarity), "
           "and a 2-D map (classical MDS of the same distances).")
require_store()
dataset = dataset_picker()
payload = view(views.study, "model_map", dataset)
require_results("model map", payload is not None)

mv = model_map_view(payload)
labels = view(views.model_labels)
title = model_map_title(payload, dataset=dataset, labels=labels)
heat, scatter = views.model_map_charts(mv, labels=labels, title=title)
# one under the other: each at its own size (the map's plot 380 px square, labels placed for it), not
# squeezed into half the column
st.altair_chart(heat, width="content", key="map_heat")
st.altair_chart(scatter, width="content", key="map_scatter")
st.caption("Shapes: modality; colours: clusters. Both map axes share one scale, so distances read the same in any "
           "direction. No intervals: each similarity is the best layer pair's value on all items.")
if payload.get("undefined_pairs"):
    st.warning("No layer pair of these models could be scored (degenerate layers); they are placed as unrelated "
               "(similarity 0) on the map: " + md_escape("; ".join(collapse_notes(
                   [f"{' × '.join(p['models'])}: {p['reason']}" for p in payload["undefined_pairs"]]))))
stem = views.export_name("model_map", dataset, "mutual_knn")
download_data(mv["cells"].assign(model_a=mv["cells"]["model_a"].map(lambda m: labels.get(m, m)),
                                 model_b=mv["cells"]["model_b"].map(lambda m: labels.get(m, m))), stem)
download_chart(heat, stem)
