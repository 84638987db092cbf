import streamlit as st

from analysis.views import store_info
from analysis.views.overview import section as overview_section
from analysis.views.overview_chart import gain_chart, gain_note, gain_table
from analysis.views.probes import CHECK_BADGES, check_summaries, probe_checks
from analysis.views.store_info import display_table
from analysis.views.text import md_escape
from analysis.views.verdicts import VERDICT_BADGES, VERDICT_RULE, missing_text, verdicts
from pages._shared import (
    background_job,
    download_data,
    last_job_outcome,
    page_path,
    report_files,
    require_store,
    store_path,
    view,
)

st.title("LayerScope")
st.caption("How every layer of your encoders represents the same data — without labels.")
require_store()
ov = view(store_info.overview, store_path())
if ov.get("empty"):
    st.info(f"The store {md_escape(store_path())} holds no runs yet. Fill it with `layerscope precompute` "
            "or try `layerscope demo`.")
    st.stop()

# the answer first: per dataset and model, the layer to use (or a tie, or why none), each with the
# views that show the evidence
st.subheader("Which layer to use")
st.caption(md_escape(VERDICT_RULE))
# the verdict lines and the note on RankMe's bound are the section's, as the report's opening and summary
# show them; the gain chart reads the verdict records themselves
sections = {ds: view(overview_section, ds) for ds in ov["datasets"]["dataset"]}
found_by = {ds: view(verdicts, ds) for ds in ov["datasets"]["dataset"]}
for ds, sec in sections.items():
    if len(ov["datasets"]) > 1:
        st.markdown(f"**{md_escape(ds)}**")
    lines = sec.data["verdicts"]
    if not lines:
        st.caption(md_escape(missing_text(ds)))
    for v in lines:
        line, links = st.columns([5, 2], vertical_alignment="center")
        line.markdown(f"{VERDICT_BADGES[v['status']]} {md_escape(v['sentence'])}")
        with links:
            c_heat, c_curve = st.columns(2)
            if v["heatmap_query"]:
                c_heat.page_link(page_path("heatmap"), label="heatmap", icon=":material/grid_on:",
                                 query_params=v["heatmap_query"], help="the mutual k-NN grid with this layer selected")
            c_curve.page_link(page_path("curves"), label="curves", icon=":material/show_chart:",
                              query_params=v["curves_query"],
                              help=md_escape(f"the curve of {v['lead'] or 'this model'} per layer"))
    checks = check_summaries(view(probe_checks, ds)) if lines else []
    if checks:  # the verdicts set against labels: one line per model, from the probes of its fields
        st.markdown("*Checked against labels (probes on this dataset's manifest fields):*")
        for c in checks:
            st.markdown(f"{CHECK_BADGES[c['outcome']]} {md_escape(c['sentence'])}")
        st.page_link(page_path("downstream"), label="every probe and layer", icon=":material/fact_check:",
                     query_params={"dataset": ds})
    for note in sec.notes:
        st.caption(md_escape(note))

# the answer drawn: each pick's paired gain over the last layer, with its interval, the null and the margin
gains = gain_table(found_by)
chart = gain_chart(gains)
if chart is not None:
    st.altair_chart(chart, width="stretch", key="overview_gains")
    st.caption("Each model's pick against its last layer: the relative gain of the verdict's lead metric, with "
               "its 95% paired-bootstrap interval (the same item resamples at both layers); filled points exclude "
               "zero. The dashed line is no gain (the test's null), the dotted one the practical margin.")
note = gain_note(gains)
if note:
    st.caption(md_escape(note))

c1, c2, c3 = st.columns(3)
c1.metric("Datasets", len(ov["datasets"]))
c2.metric("Models", len(ov["models"]))
done = (ov["runs"]["status"] == "done").sum()
c3.metric("Runs done", f"{done} / {len(ov['runs'])}")

st.subheader("Datasets")
st.dataframe(display_table(ov["datasets"]), hide_index=True, width="stretch")
st.subheader("Models")
st.caption("Models marked *random init* have untrained weights (demo fixtures): their scores say nothing "
           "about real models.")
st.dataframe(display_table(ov["models"][["label", "modality", "model_type", "n_layers", "dim", "params", "revision"]]
             .rename(columns={"label": "model"})), hide_index=True, width="stretch")
st.subheader("Runs")
st.dataframe(display_table(ov["runs"]), hide_index=True, width="stretch")
download_data(ov["runs"], "runs")
st.subheader("What is missing")
if ov["missing"]:
    for m in ov["missing"]:
        st.markdown(f"- {md_escape(m['what'])}")
        if m["command"]:  # a text-only dataset's vision results have nothing to run
            st.code(m["command"], language="bash")
    # only when an analysis alone fixes something (an import, a precompute or a text-only dataset it does not)
    if any((m["command"] or "").startswith("layerscope analyze") for m in ov["missing"]):
        background_job("analyze", "Run the analysis now, in the background (the store's own settings)")
else:
    st.success("Every run is done and analysed.")
    last_job_outcome()  # what the last background analysis did stays in view

st.subheader("Share")
if st.toggle("Prepare the layer-selection report (HTML, JSON, Markdown)", key="prepare_report"):
    with st.spinner("Building the report..."):
        files = report_files()
    c1, c2, c3 = st.columns(3)
    c1.download_button("Report (HTML)", files["html"].encode(), file_name="layerscope-report.html", mime="text/html",
                       key="report_html")
    c2.download_button("Numbers (JSON)", files["json"].encode(), file_name="layerscope-report.json",
                       mime="application/json", key="report_json")
    c3.download_button("Summary (Markdown)", files["md"].encode(), file_name="layerscope-report.md",
                       mime="text/markdown", key="report_md")
