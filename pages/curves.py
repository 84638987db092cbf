import streamlit as st

from analysis.views import curves as curves_view, stored_choices, url_state
from analysis.views.charts import export_name
from analysis.views.layers import layer_label
from analysis.views.nuance import undefined_text
from analysis.views.store_info import display_table, model_labels
from analysis.views.text import md_escape
from analysis.views.verdicts import verdicts
from pages._curve_overlay import overlay_section
from pages._shared import (dataset_picker, download_chart, download_data, pick, pick_many, require_results,
                           require_store, view)

st.title("Layer curves")
st.caption("Per-layer metrics on relative depth (0 = embeddings, 1 = last numbered layer); diamonds mark the layer each "
           "metric recommends, dashed rules the chance level and bounds near the data.")
require_store()
dataset = dataset_picker()
prof = view(curves_view.profiles_long, dataset)
choices = view(stored_choices.layer_choices, dataset)
require_results("per-layer profiles", len(prof) > 0)
models = sorted(prof["model"].unique())  # each model's sides: "clip" and "clip [text]" for a dual encoder
labels = curves_view.side_labels(view(model_labels), models + sorted(choices))
chosen = pick_many("Models", models, param="models", default=models, fmt=lambda m: labels.get(m, m), container=st.sidebar)
if not chosen:
    st.info("Pick at least one model in the sidebar.")
    st.stop()
curves, align, marks = curves_view.chosen_curves(prof, choices, chosen)
metrics = sorted(curves["metric"].unique()) + (sorted(align["metric"].unique()) if len(align) else [])
# default: an alignment curve (what the layer choice rests on), not the alphabetically first metric
metric = pick("Metric", metrics, param="metric", default=url_state.preferred(metrics, ["alignment with", "rankme"]),
              container=st.sidebar)
data = curves_view.metric_rows(curves, align, metric)
if data.empty:
    st.info("No model has this curve.")
    st.stop()
if data["value"].isna().all():  # nothing to draw: one line with the count and each reason, not empty axes
    st.info(md_escape(undefined_text(data, f"{metric}", "value")))
    st.stop()
# the report's section, narrowed to the page's models and metric: the same chart and the sentences under it
section = view(curves_view.section, dataset, sides=tuple(chosen), metrics=(metric,))
((_, chart),) = section.charts
st.altair_chart(chart, width="stretch", key="curves_chart")
for note in section.placed_notes().one_chart():
    st.caption(md_escape(note))
stem = export_name("curves", dataset, metric)
download_data(data.assign(model=data["model"].map(lambda x: labels.get(x, x))), stem)
download_chart(chart, stem)
overlay_section(dataset, metric, chosen, labels)  # many runs with their bands, one pinned as the baseline
st.subheader("Which layer to use")
for v in view(verdicts, dataset):
    if v["model"] in chosen:
        st.markdown(md_escape(v["sentence"]))
st.subheader("Each metric's pick")
rows = []
for model, p in choices.items():
    if model not in chosen:
        continue
    last = p["last_layer"]
    for metric_name, pick_ in p["picks"].items():
        rows.append({"model": labels.get(model, model), "metric": metric_name,
                     "layer": layer_label(pick_["layer"], p.get("layer_names")),
                     "last layer": last, "layers before the last": pick_["from_final"],
                     "last layer shortfall": f"{round(pick_['final_shortfall'], 4) + 0.0:.1%}"
                     if pick_.get("final_shortfall") is not None else ""})
if rows:
    import pandas as pd

    st.dataframe(display_table(pd.DataFrame(rows)), hide_index=True, width="stretch")
