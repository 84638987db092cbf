import streamlit as st

from analysis.views import md_escape
from pages._shared import dataset_picker, pick, require_store, view

st.title("Neighbours")
st.caption("An item's nearest items in each model's space at a chosen layer, and which neighbours the spaces share.")
require_store()
dataset = dataset_picker()
items = view("items", dataset)
runs = view("runs_for_neighbours", dataset)
if runs.empty:
    st.info("No finished runs for this dataset.")
    st.stop()
item = pick("Item", list(items["item_id"]), param="item", container=st.sidebar)
idx = int(items.loc[items["item_id"] == item, "idx"].iloc[0])
k = st.sidebar.slider("k", 1, 10, 5, key="nn_k")
row = items[items["idx"] == idx].iloc[0]
st.markdown(f"**{md_escape(item)}** — " + " · ".join(md_escape(c) for c in row["captions"][:3]))
try:
    from PIL import Image

    from precompute.video import read_video, sample_indices

    strip = [Image.fromarray(f) for f in read_video(row["video"], lambda T: sample_indices(T, 6)).frames]
    st.image(strip, width=96)
except Exception as exc:  # the video may live on another machine than the store
    st.caption(md_escape(f"frames unavailable: {exc}"))

labels = view("model_labels")
models = sorted(runs["model"].unique())
chosen = st.sidebar.multiselect("Models", models, default=models[:3], format_func=lambda m: labels.get(m, m))
sets = {}
cols = st.columns(max(1, len(chosen)))
for col, model in zip(cols, chosen):
    r = runs[runs["model"] == model].iloc[-1]
    layer = col.slider(f"{md_escape(model)} layer", 0, int(r["n_layers"]) - 1, int(r["n_layers"]) - 1, key=f"layer_{model}")
    nn = view("neighbours", r["run_id"], layer, idx, k)
    nn = nn.merge(items[["idx", "item_id", "captions"]], on="idx")
    nn["caption"] = nn["captions"].map(lambda c: c[0])
    sets[model] = set(nn["item_id"])
    col.markdown(f"**{md_escape(labels.get(model, model))}** (layer {layer})")
    col.dataframe(nn[["rank", "item_id", "cosine", "caption"]], hide_index=True, width="stretch")
if len(sets) >= 2:
    shared = set.intersection(*sets.values())
    st.markdown(f"Shared by all {len(sets)} spaces: {md_escape(', '.join(sorted(shared)) or 'none')}")
