import streamlit as st

from analysis.views.nuance import (below_chance_text, choice_charts, gallery_chart, interval_coverage_text,
                                   joint_points_chart, negation_chart, nuance_view, same_space_chart,
                                   same_space_long, same_space_studies, undefined_text)
from analysis.views.store_info import dataset_context, study, vision_results_missing
from analysis.views.temporal import (arrow_chart, arrow_uncertainty_text, first_neighbour_types_chart,
                                     reorder_drop_text, temporal_view, tot_chart, tot_uncertainty_text)
from analysis.views.temporal import section as temporal_section
from analysis.views.text import md_escape
from pages._shared import (
    dataset_picker,
    download_data,
    pick,
    require_results,
    require_store,
    view,
)

st.title("Temporal probes")
st.caption("Does a space encode the order of events? Test of Time alignment, what each space takes as its "
           "first neighbour, reorder negatives, how far time reversal moves a video, and, where video and text "
           "share one space, retrieval, the modality gap and the nuanced-retrieval probes.")
require_store()
dataset = dataset_picker()
payload = view(study, "temporal", dataset)
same_rows = view(same_space_studies, dataset)
require_results("temporal probes for this dataset", payload is not None or bool(same_rows),
                why=view(vision_results_missing, dataset))
section = view(temporal_section, dataset)  # the report's temporal section: its reorder charts and notes
payload = payload or {}

def drawable(df, value_col) -> bool:
    """A chart is drawn only when some value is defined: a table of undefined values becomes its one
    line of text (:func:`undefined_text`), never empty axes."""
    return bool(len(df)) and value_col in df and bool(df[value_col].notna().any())


def notes_of(df, what):
    """Undefined values are not drawn: say how many, each reason once with its count."""
    value_col = next(c for c in ("accuracy", "mAP", "recall", "value") if c in df)
    line = undefined_text(df, what, value_col)
    if line:
        st.caption(md_escape(line))


tv = temporal_view(payload)
if len(tv["tot"]):
    st.subheader("Test of Time: alignment at k = 1, 2, 3")
    line = undefined_text(tv["tot"], "alignment", "alignment")
    if drawable(tv["tot"], "alignment"):
        n_items = view(dataset_context, dataset)["n_items"]
        st.altair_chart(tot_chart(tv["tot"], n_items=n_items), width="stretch", key="tot_chart")
        st.caption(md_escape(tot_uncertainty_text(n_items)))
    if line:
        st.caption(md_escape(line))
    st.subheader("First neighbour types")
    if len(tv["types"]):
        st.altair_chart(first_neighbour_types_chart(tv["types"]), key="types_chart")
        download_data(tv["types"], "first_neighbour_types")
    if tv["types_missing"]:
        st.caption("No first-neighbour types (no k = 1 layer pair to read them at): "
                   + md_escape("; ".join(tv["types_missing"])))
if len(tv["reorder"]):
    st.subheader("Reorder negatives: alignment of the positive vs its time-reordered negative")
    st.caption("Both scored at one layer pair (the positive's best, chosen once on all items), with the probe's own "
               "k. Error bars: 95% paired bootstrap intervals over items (each resample finds its k-NN among its "
               "own items, copies of an item never each other's neighbours), conditional on that layer pair; "
               "dashed rule: chance k/(N−1). Second chart: the drop (positive − negative) with its interval and "
               "a rule at 0.")
    for i, (_, chart) in enumerate(section.charts):
        st.altair_chart(chart, width="stretch", key="reorder_chart" if i == 0 else "reorder_drop_chart")
    for line in reorder_drop_text(tv["reorder"]):
        st.caption(md_escape(line))
    st.dataframe(tv["reorder"], hide_index=True, width="stretch")
if len(tv["arrow"]):
    st.subheader("Arrow of time: displacement under reversal / spread between videos")
    if drawable(tv["arrow"], "arrow_of_time"):
        st.altair_chart(arrow_chart(tv["arrow"]), width="stretch", key="arrow_chart")
        st.caption(md_escape(arrow_uncertainty_text(view(dataset_context, dataset)["n_items"])))
    line = undefined_text(tv["arrow"], "arrow-of-time", "arrow_of_time")
    if line:
        st.caption(md_escape(line))
    download_data(tv["arrow"], "arrow_of_time")

# ---------------------------------------------------------------- one shared video–text space
if same_rows:
    st.header("Shared video–text space")
    st.caption("Where a video side and a text side live in one space (an MLLM's two sides at every layer, a dual "
               "encoder's joint layer): retrieval both ways (Recall@k, mAP, median rank), the modality gap "
               "(‖mean video − mean text‖ on the unit sphere), alignment, MMD and Fréchet distance.")
    ss = same_space_long(same_rows)
    pairs = sorted(ss["pair"].unique())
    per_layer = [p for p in pairs if (ss.loc[ss["pair"] == p, "space"] == "layers").all()]
    pair = pick("Video × text pair", pairs, param="ss_pair", default=(per_layer or pairs)[0])  # a curve first
    metric = pick("Same-space metric", list(dict.fromkeys(ss["metric"])), param="ss_metric",
                  default="recall@1_t2v")
    sel = ss[(ss["pair"] == pair) & (ss["metric"] == metric)]
    st.altair_chart(same_space_chart(sel, metric), width="stretch", key="same_space_chart")
    notes_of(sel, metric)
    st.caption(md_escape(interval_coverage_text(sel)))
    wide = ss[ss["pair"] == pair].pivot_table(index="layer_a", columns="metric", values="value", sort=False)
    st.dataframe(wide.reset_index().rename(columns={"layer_a": "layer"}), hide_index=True, width="stretch")
    download_data(ss, "same_space")

nv = nuance_view(payload)
for key, title, caption in (
        ("chiral", "Chiral choice: video → its caption vs the temporal opposite",
         ("Each video chooses between its caption and the caption of the opposite action (the manifest's "
          "negatives); 0.5 is chance, ties count ½.")),
        ("time_reversal", "Time reversal: caption → its video vs the reversed video",
         ("Each caption chooses between its video and the video played backwards (RTime text-to-video); 0.5 "
          "is chance, ties count ½."))):
    df = nv[key]
    if not len(df):
        continue
    st.subheader(title)
    charts = choice_charts(df) if drawable(df, "accuracy") else []
    # the chart's key only under a chart: with every value undefined, no error bar is promised
    st.caption(caption + (" Error bars: 95% Wilson intervals over the items' choices (approximate, as ties count "
                          "½); dashed rule: chance. A dual encoder's joint layer has no depth: it is drawn apart."
                          if charts else ""))
    for i, chart in enumerate(charts):
        st.altair_chart(chart, width="stretch", key=f"{key}_chart" + (f"_{i}" if i else ""))
    below = below_chance_text(df, key.replace("_", " "))
    if below:
        st.caption(md_escape(below))
    notes_of(df, key.replace("_", " "))
    download_data(df, key)
if len(nv["gallery"]):
    st.subheader("Chiral galleries: caption queries, mAP over videos")
    st.caption("Chirality in Action's settings: chiral = the query's action and its temporal opposite only; "
               "static = its action among every unrelated action; all = every video. Several videos can be "
               "right for one query (every video of its action).")
    deep = nv["gallery"][nv["gallery"]["depth"].notna()]
    if drawable(deep, "mAP"):
        st.altair_chart(gallery_chart(deep), width="stretch", key="gallery_chart")
    joint = joint_points_chart(nv["gallery"], "mAP", "setting")
    if joint is not None:
        st.altair_chart(joint, width="stretch", key="gallery_joint_chart")
    notes_of(nv["gallery"], "chiral-gallery")
    download_data(nv["gallery"], "chiral_gallery")
if len(nv["negation"]):
    st.subheader("Negated queries: Recall@k of the caption vs its negated form")
    st.caption("NegBench-style: items whose manifest marks their negatives as negated captions; both query "
               "forms retrieve from every video.")
    deep = nv["negation"][nv["negation"]["depth"].notna()]
    if drawable(deep, "recall"):
        st.altair_chart(negation_chart(deep), width="stretch", key="negation_chart")
    joint = joint_points_chart(nv["negation"], "recall", "queries")
    if joint is not None:
        st.altair_chart(joint, width="stretch", key="negation_joint_chart")
    notes_of(nv["negation"], "negated-query")
    download_data(nv["negation"], "negated_queries")
for note in section.notes:  # one line per reason, counted
    st.caption(md_escape(note))
