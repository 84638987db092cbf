import streamlit as st

from analysis.views import url_state
from analysis.methods.grid_compare import budget_text
from analysis.views.choices import choose
from analysis.views.layers import layer_label, run_layer_names
from analysis.views.neighbours import items as dataset_items, neighbours, runs_for_neighbours
from analysis.views.store_info import model_labels
from analysis.views.text import md_escape
from analysis.views.embedding_tools import neighbour_rows
from pages._shared import dataset_picker, pick, pick_int, pick_many, require_store, url_list, view
from pages._tools import frame_strip, neighbour_table

st.title("Neighbours")
st.caption("An item's nearest items in each model's space at a chosen layer, and which neighbours the spaces share.")
require_store(reads_results=False)  # embeddings only: results of another analysis version do not matter here
dataset = dataset_picker()
items = view(dataset_items, dataset)
runs = view(runs_for_neighbours, dataset)
if runs.empty:
    st.info("No finished runs for this dataset.")
    st.stop()
item = pick("Item", list(items["item_id"]), param="item", container=st.sidebar)
idx = int(items.loc[items["item_id"] == item, "idx"].iloc[0])
k = pick_int("k", 1, min(20, max(1, len(items) - 1)), param="k", default=5, container=st.sidebar)
row = items[items["idx"] == idx].iloc[0]
st.markdown(f"**{md_escape(item)}** — " + " · ".join(md_escape(c) for c in row["captions"][:3]))
frame_strip(row["video"])  # a text-only dataset's items are their captions: no strip

labels = view(model_labels)
layer_names = view(run_layer_names, dataset)  # {run_id: {index: "default" / "joint"}}
models = sorted(runs["model"].unique())
# a link names models, their runs (budgets) and layers as three aligned lists (?models=a&runs=r1&layers=3&...),
# read before the model picker rewrites the list
url_runs = url_state.layers_for_models(url_list("models"), url_list("runs"))
url_layers = url_state.layers_for_models(url_list("models"), url_list("layers"))
chosen = pick_many("Models", models, param="models", default=models[:3], fmt=lambda m: labels.get(m, m),
                   container=st.sidebar)
sets, chosen_runs, chosen_layers = {}, [], []
cols = st.columns(max(1, len(chosen)))
for col, model in zip(cols, chosen):
    mruns = runs[runs["model"] == model].reset_index(drop=True)
    ids = list(mruns["run_id"])
    run = choose(url_runs.get(model), ids, f"run of {model}", ids[-1])  # default: the largest budget
    layer = url_state.choose_int(url_layers.get(model), 0, int(mruns["n_layers"].max()) - 1, f"layer of {model}",
                                 int(mruns["n_layers"].max()) - 1)
    for message in (run.message, layer.message):
        if message:
            st.warning(md_escape(message))
    run_id = col.selectbox("Setting", ids, index=ids.index(run.value), key=f"nn_run_{model}",
                           format_func=lambda r, m=mruns: budget_text(m[m["run_id"] == r].iloc[0]))
    r = mruns[mruns["run_id"] == run_id].iloc[0]
    top = int(r["n_layers"]) - 1
    layer = col.slider(f"{md_escape(model)} layer", 0, top, min(layer.value, top), key=f"nn_layer_{model}")
    chosen_runs.append(run_id)
    chosen_layers.append(str(layer))
    nn = neighbour_rows(view(neighbours, r["run_id"], layer, idx, k), items)
    sets[model] = set(nn["item_id"])
    shown = layer_label(layer, layer_names.get(run_id))
    where = f"layer {layer}" if shown == str(layer) else f"the {shown} layer ({layer})"  # a named layer by name
    col.markdown(f"**{md_escape(labels.get(model, model))}** ({md_escape(where)}, {md_escape(budget_text(r))})")
    neighbour_table(nn, container=col, key=f"nn_table_{model}")  # each neighbour's first frame where readable
st.query_params["runs"] = chosen_runs or ""
st.query_params["layers"] = chosen_layers or ""
if len(sets) >= 2:
    shared = set.intersection(*sets.values())
    st.markdown(f"Shared by all {len(sets)} spaces: {md_escape(', '.join(sorted(shared)) or 'none')}")
