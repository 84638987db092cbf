import streamlit as st

from analysis.views.charts import export_name
from analysis.views.store_info import model_labels
from analysis.views.studies import model_map_section, model_map_view
from analysis.views.text import md_escape
from pages._shared import dataset_picker, download_chart, download_data, require_results, require_store, view

st.title("Model map")
st.caption("Best-layer mutual k-NN between every two models, clustered (average linkage on 1 − similarity), "
           "and a 2-D map (classical MDS of the same distances).")
require_store()
dataset = dataset_picker()
section = view(model_map_section, dataset)  # the report's model-map section too
require_results("model map", section.data is not None)

labels = view(model_labels)
(_, heat), (_, scatter) = section.charts
# one under the other: each at its own size (the map's plot 380 px square, labels placed for it), not
# squeezed into half the column
st.altair_chart(heat, width="content", key="map_heat")
st.altair_chart(scatter, width="content", key="map_scatter")
st.caption("Shapes: modality; colours: clusters. Both map axes share one scale, so distances read the same in any "
           "direction. No intervals: each similarity is the best layer pair's value on all items.")
for note in section.notes:
    st.warning(md_escape(note))
mv = model_map_view(section.data)
stem = export_name("model_map", dataset, "mutual_knn")
download_data(mv["cells"].assign(model_a=mv["cells"]["model_a"].map(lambda m: labels.get(m, m)),
                                 model_b=mv["cells"]["model_b"].map(lambda m: labels.get(m, m))), stem)
download_chart(heat, stem)
