import altair as alt
import streamlit as st

from analysis import url_state, views
from analysis.views import md_escape
from pages._shared import (dataset_picker, download_chart, download_data, pick, pick_many, require_results,
                           require_store, view)

st.title("Layer curves")
st.caption("Per-layer metrics on relative depth (0 = embeddings, 1 = last layer); dots mark the layer each "
           "metric recommends.")
require_store()
dataset = dataset_picker()
prof = view("profiles_long", dataset)
choices = view("layer_choices", dataset)
require_results("per-layer profiles", len(prof) > 0)
labels = view("model_labels")
models = sorted(prof["model"].unique())
chosen = pick_many("Models", models, param="models", default=models, fmt=lambda m: labels.get(m, m), container=st.sidebar)
if not chosen:
    st.info("Pick at least one model in the sidebar.")
    st.stop()
curves = prof[prof["model"].isin(chosen)]
align = views.alignment_curves_long(choices)
if len(align):
    align = align[align["model"].isin(chosen)]
marks = views.recommended_marks(choices)
if len(marks):
    marks = marks[marks["model"].isin(chosen)]
metrics = sorted(curves["metric"].unique()) + (sorted(align["metric"].unique()) if len(align) else [])
# default: an alignment curve (what the layer choice rests on), not the alphabetically first metric
metric = pick("Metric", metrics, param="metric", default=url_state.preferred(metrics, ["alignment with", "rankme"]),
              container=st.sidebar)
data = curves[curves["metric"] == metric] if metric in set(curves["metric"]) else align[align["metric"] == metric]
if data.empty:
    st.info("No model has this curve.")
    st.stop()
line = alt.Chart(data).mark_line(point=True).encode(
    x=alt.X("depth:Q", title="relative depth", scale=alt.Scale(domain=[0, 1])), y=alt.Y("value:Q", title=metric),
    color=alt.Color("model:N"), tooltip=["model", "layer", alt.Tooltip("value:Q", format=".4f")]
    + (["note"] if "note" in data else []))
layers = [line]
if len(marks):
    m = marks[marks["metric"] == metric]
    if len(m):
        layers.append(alt.Chart(m).mark_point(size=180, shape="diamond", filled=True).encode(
            x="depth:Q", y="value:Q", color="model:N", tooltip=["model", "layer", "metric"]))
if "flagged" in data:
    flagged = data[data["flagged"] & data["value"].notna()]
    if len(flagged):  # a value that needs a note (collapsed layer, duplicates merged) is ringed
        layers.append(alt.Chart(flagged).mark_point(size=260, shape="circle", color="#d62728", filled=False).encode(
            x="depth:Q", y="value:Q", tooltip=["model", "layer", "value", "note"]))
chart = alt.layer(*layers).properties(height=380)
st.altair_chart(chart, width="stretch", key="curves_chart")
for line in views.flag_lines(data):  # ringed points and missing values, each note said once
    st.caption(md_escape(line))
st.caption(md_escape(views.metric_direction(metric)) if metric in views.REGISTRY else "higher is better (row maximum of the "
           "mutual k-NN grid: each layer's best alignment with the reference)")
download_data(data, f"curves_{metric}")
download_chart(chart, f"curves_{metric}")
st.subheader("Recommended layers")
rows = []
for model, p in choices.items():
    if model not in chosen:
        continue
    for metric_name, pick_ in p["picks"].items():
        rows.append({"model": labels.get(model, model), "metric": metric_name, "layer": pick_["layer"],
                     "of": p["n_layers"] - 1, "from final": pick_["from_final"],
                     "final layer shortfall": pick_.get("final_shortfall")})
if rows:
    import pandas as pd

    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    for model, p in choices.items():
        a = p["agreement"]
        if model in chosen:
            st.markdown(f"- **{md_escape(labels.get(model, model))}**: layer {a['modal_layer']} is picked by "
                        f"{a['share_agreeing']:.0%} of {a['n_metrics']} metrics; picks spread over "
                        f"{a['depth_spread']:.2f} of the depth.")
