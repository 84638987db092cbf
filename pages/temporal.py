import altair as alt
import streamlit as st

from analysis.views import md_escape, temporal_view
from pages._shared import dataset_picker, download_data, require_results, require_store, view

st.title("Temporal probes")
st.caption("Does a space encode the order of events? Test of Time alignment, what each space takes as its "
           "first neighbour, reorder negatives, and how far time reversal moves a video.")
require_store()
dataset = dataset_picker()
payload = view("study", "temporal", dataset)
require_results("temporal probes for this dataset", payload is not None)

tv = temporal_view(payload)
if len(tv["tot"]):
    st.subheader("Test of Time: alignment at k = 1, 2, 3")
    st.altair_chart(alt.Chart(tv["tot"]).mark_bar().encode(
        x=alt.X("k:O"), y=alt.Y("alignment:Q"), color="pair:N", xOffset="pair:N",
        tooltip=["pair", "k", "alignment"]).properties(height=260), width="stretch", key="tot_chart")
    st.subheader("First neighbour types")
    st.altair_chart(alt.Chart(tv["types"]).mark_bar().encode(
        y=alt.Y("model:N", title=None), x=alt.X("share:Q", stack="normalize"), color="type:N",
        row=alt.Row("pair:N", title=None), tooltip=["model", "space", "type", "share"]).properties(height=80),
        key="types_chart")
    download_data(tv["types"], "first_neighbour_types")
if len(tv["reorder"]):
    st.subheader("Reorder negatives: alignment of the positive vs its time-reordered negative")
    st.caption("Both scored at one layer pair (the positive's best), with the probe's own k.")
    long = tv["reorder"].melt(id_vars=["pair", "layers", "k", "note"], value_vars=["positive", "negative"],
                              var_name="captions", value_name="alignment")
    st.altair_chart(alt.Chart(long).mark_bar().encode(
        x=alt.X("captions:N", title=None), y="alignment:Q", color="captions:N", column=alt.Column("pair:N", title=None),
        tooltip=["pair", "layers", "k", "captions", "alignment", "note"]).properties(height=240, width=120),
        key="reorder_chart")
    st.dataframe(tv["reorder"], hide_index=True, width="stretch")
if len(tv["arrow"]):
    st.subheader("Arrow of time: displacement under reversal / spread between videos")
    st.altair_chart(alt.Chart(tv["arrow"]).mark_line(point=True).encode(
        x=alt.X("depth:Q", title="relative depth"), y=alt.Y("arrow_of_time:Q"), color="model:N",
        strokeDash="n_frames:N", tooltip=["model", "n_frames", "layer", "arrow_of_time"]).properties(height=280),
        width="stretch", key="arrow_chart")
    undefined = tv["arrow"][tv["arrow"]["arrow_of_time"].isna()]
    if len(undefined):
        st.caption(f"{len(undefined)} layer(s) have no arrow-of-time value (not drawn): " + md_escape(
            "; ".join(f"{r.model} layer {r.layer}: {r.note or 'undefined'}" for r in undefined.itertuples())))
    download_data(tv["arrow"], "arrow_of_time")
for note in tv["notes"]:
    st.caption(md_escape(note))
