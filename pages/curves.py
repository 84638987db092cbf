import streamlit as st

from analysis.views import url_state

from analysis import views
from analysis.views import md_escape
from analysis.views.nuance import collapse_notes, undefined_text
from analysis.views.rankme_cap import capped_curves, rankme_cap_text
from pages._curve_overlay import overlay_section
from pages._shared import (dataset_picker, download_chart, download_data, pick, pick_many, require_results,
                           require_store, store_path, view)

st.title("Layer curves")
st.caption("Per-layer metrics on relative depth (0 = embeddings, 1 = last numbered layer); diamonds mark the layer each "
           "metric recommends, dashed rules the chance level and bounds near the data.")
require_store()
dataset = dataset_picker()
prof = view(views.profiles_long, dataset)
choices = view(views.layer_choices, dataset)
require_results("per-layer profiles", len(prof) > 0)
labels = view(views.model_labels)
models = sorted(prof["model"].unique())
chosen = pick_many("Models", models, param="models", default=models, fmt=lambda m: labels.get(m, m), container=st.sidebar)
if not chosen:
    st.info("Pick at least one model in the sidebar.")
    st.stop()
curves, align, marks = views.chosen_curves(prof, choices, chosen)
metrics = sorted(curves["metric"].unique()) + (sorted(align["metric"].unique()) if len(align) else [])
# default: an alignment curve (what the layer choice rests on), not the alphabetically first metric
metric = pick("Metric", metrics, param="metric", default=url_state.preferred(metrics, ["alignment with", "rankme"]),
              container=st.sidebar)
data = views.metric_rows(curves, align, metric)
if data.empty:
    st.info("No model has this curve.")
    st.stop()
if data["value"].isna().all():  # nothing to draw: one line with the count and each reason, not empty axes
    st.info(md_escape(undefined_text(data, f"{metric}", "value")))
    st.stop()
ctx = view(views.dataset_context, dataset)
nulls = view(views.curve_null_levels, dataset) if views.is_alignment_curve(metric) else None
fig = views.metric_curves(data, metric, dataset=dataset, chosen=chosen, choices=choices, marks=marks, ctx=ctx,
                          intervals=view(views.curve_intervals, dataset), nulls=nulls, labels=labels)
chart, is_alignment, intervals, nulls = fig["chart"], fig["is_alignment"], fig["intervals"], fig["nulls"]
base_metric, params = fig["base_metric"], fig["params"]
st.altair_chart(chart, width="stretch", key="curves_chart")
named_text = views.named_layers_text(views.named_layer_rows(data), labels)
if named_text:
    st.caption(md_escape(named_text))
for line in collapse_notes(views.flag_lines(data)):  # ringed and missing values: one line per reason, counted
    st.caption(md_escape(line))
if metric == "rankme":  # at small N the item count, not the model, bounds RankMe (#34)
    stored = view(views.overview, store_path())["models"]
    dims = dict(zip(stored["model"], stored["dim"]))
    cap = rankme_cap_text(capped_curves(data, ctx["n_items"], dims, labels), ctx["n_items"])
    if cap:
        st.caption(md_escape(cap))
help_text = views.metric_help(base_metric, ctx["n_items"], params)
if is_alignment:
    help_text = (f"{metric}: each layer's best mutual k-NN with any layer of the reference (the row maximum of the "
                 f"grid; diamonds mark each model's pick). {help_text} A maximum over many layers sits a little "
                 "above chance even for unrelated spaces.")
st.caption(md_escape(help_text))
st.caption(md_escape(views.uncertainty_text(intervals, is_alignment, ctx["n_items"])))
if nulls is not None and len(nulls):
    st.caption(md_escape(views.null_levels_text(nulls, labels)))
stem = views.export_name("curves", dataset, metric)
download_data(data.assign(model=data["model"].map(lambda x: labels.get(x, x))), stem)
download_chart(chart, stem)
overlay_section(dataset, metric, chosen, labels)  # many runs with their bands, one pinned as the baseline
st.subheader("Which layer to use")
for v in view(views.verdicts, dataset):
    if v["model"] in chosen:
        st.markdown(md_escape(v["sentence"]))
st.subheader("Each metric's pick")
rows = []
for model, p in choices.items():
    if model not in chosen:
        continue
    last = p.get("last_layer", p["n_layers"] - 1)
    for metric_name, pick_ in p["picks"].items():
        rows.append({"model": labels.get(model, model), "metric": metric_name,
                     "layer": views.layer_label(pick_["layer"], p.get("layer_names")),
                     "last layer": last, "layers before the last": pick_["from_final"],
                     "last layer shortfall": f"{round(pick_['final_shortfall'], 4) + 0.0:.1%}"
                     if pick_.get("final_shortfall") is not None else ""})
if rows:
    import pandas as pd

    st.dataframe(views.display_table(pd.DataFrame(rows)), hide_index=True, width="stretch")
