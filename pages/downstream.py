import streamlit as st

from analysis.views.downstream import downstream_view, fit_line_verdict, layer_r_chart, scatter_chart
from analysis.views.probes import CHECK_BADGES, checks_table, probe_chart, probe_checks, probes_long, retrieval_long
from analysis.views.probes import section as probes_section
from analysis.views.store_info import study
from analysis.views.text import md_escape
from pages._shared import (
    background_job,
    dataset_picker,
    download_data,
    page_path,
    pick,
    require_store,
    store_path,
    view,
)

st.title("Downstream correlation")
st.caption("Does a label-free score predict your downstream results? Pearson R (with p and a bootstrap "
           "interval over models) and Spearman ρ, signed as computed (a lower-is-better task shows R < 0 for a "
           "score that goes with better results; the task's direction is beside it). A reference is named by "
           "its side (`clip [text]`, `clip [image]`). A model whose grid has no best cell (degenerate layers "
           "only) is left out of that correlation and named, as is a model at the depths where its layer has "
           "no value (layer 0 of a class-token model).")
require_store()
dataset = dataset_picker()

# measured first: the labelled probes of this dataset's manifest fields (analyze --labels), and the
# label-free pick set against the probe's best layer
probes = view(probes_long, dataset)
if len(probes):
    st.subheader("Measured on this dataset: labelled probes per layer")
    st.caption("Each manifest field named with `analyze --labels` is a task: k-NN accuracy (leave-one-out, the "
               "analysis's k), k-means NMI and ARI (as many clusters as classes) and, with `--probes linear`, a "
               "logistic-regression probe (stratified 5-fold), at every layer of every run, with 95% intervals "
               "over item resamples. These numbers are measured here, not imported.")
    checks = view(probe_checks, dataset)
    if checks:
        st.markdown("**The label-free pick against the probe's best layer** (the verdict's run; differences are "
                    "paired on the same item resamples)")
        for c in checks:
            if c["headline"]:
                st.markdown(f"{CHECK_BADGES[c['outcome']]} {md_escape(c['sentence'])}")
        table = checks_table(checks)
        st.dataframe(table, hide_index=True, width="stretch")
        download_data(table, "probe_checks")
    fields = sorted(probes["field"].unique())
    field = pick("Field", fields, param="pfield")
    scores = list(dict.fromkeys(probes.loc[probes["field"] == field, "score"]))
    score_labels = dict(zip(probes["score"], probes["score_label"]))
    score = pick("Probe", scores, param="pscore", fmt=lambda s: score_labels[s])
    # the report's probes section, its chart narrowed to the chosen field and score
    probe_section = view(probes_section, dataset, field=field, score=score)
    for _, chart in probe_section.charts:
        st.altair_chart(chart, width="stretch", key="probe_curves")
        st.caption("Bands: 95% interval over item resamples. Dashed line: the share of the largest class (what "
                   "always answering that class scores). A layer without a point is degenerate (one vector for "
                   "every item, or k-NN lists decided by ties).")
    download_data(probes, "probes_per_layer")
retrieval = view(retrieval_long, dataset)
if len(retrieval):
    st.subheader("Measured on this dataset: video–text retrieval in a shared space")
    r_scores = list(dict.fromkeys(retrieval["score"]))
    r_labels = dict(zip(retrieval["score"], retrieval["score_label"]))
    r_score = pick("Retrieval score", r_scores, param="rscore", fmt=lambda s: r_labels[s])
    shown = retrieval[retrieval["score"] == r_score]
    st.caption("Where a model's two sides share a space (a dual encoder's joint layer, an MLLM's layers), each "
               "item's own caption is the right answer: recall@k and mAP per compared layer at each pair's largest "
               "budgets; the vertical rule through a point spans its 95% item-resampling bounds where stored "
               "(hover for them).")
    chart = probe_chart(shown)
    if chart is not None:
        st.altair_chart(chart, width="stretch", key="retrieval_curves")
if not len(probes):
    st.info("No labelled probes on this dataset. Name a categorical manifest field to measure every layer "
            "against it (nested fields by dotted name):")
    st.code(f"layerscope analyze --store {store_path()} --labels FIELD", language="bash")

with st.expander("Import downstream results (CSV: model, task, metric, value, higher_is_better)"):
    upload = st.file_uploader("results.csv", type=["csv"], key="downstream_csv")
# imported and correlated in a background job with the store's own analysis settings; its progress
# stays in view on every rerun and refresh
background_job("import", "Import and analyse", csv=None if upload is None else upload.getvalue())

payload = view(study, "downstream", dataset)
if payload is None:
    if view(study, "predictors", dataset) is not None:  # per-layer results only: they feed the predictor table
        st.info("This dataset's downstream results are per layer: they are correlated layer by layer on the "
                "Layer predictors page. This page correlates whole-model results (rows without a `layer`).")
        st.page_link(page_path("predictors"), label="Layer predictors →")
    st.info("No imported whole-model downstream results in this store yet. Import a CSV above, or run "
            "`layerscope downstream import` and `layerscope analyze`:")
    st.code(f"layerscope downstream import results.csv --store {store_path()}\n"
            f"layerscope analyze --store {store_path()}", language="bash")
    st.stop()
dv = downstream_view(payload)
st.subheader("Across tasks")
st.dataframe(dv["table"], hide_index=True, width="stretch")
download_data(dv["table"], "downstream_correlations")
ok = [r for r in dv["rows"] if "error" not in r]
if ok:
    labels = [f"{r['score']} → {r['task']} ({r['task_metric']})" for r in ok]
    i = pick("Scatter", range(len(ok)), param="scatter", fmt=lambda j: labels[j])
    row = ok[i]
    _, no_line = fit_line_verdict(row)
    st.altair_chart(scatter_chart(row), width="stretch", key="downstream_scatter")
    ci = (f"95% CI: {row['ci_note']}" if row.get("ci_note")
          else f"95% CI {row['r_ci'][0]:.2f}–{row['r_ci'][1]:.2f}")
    exact = " (exact permutation p)" if row.get("p_method") == "exact permutation" else ""
    st.markdown(f"R = **{row['pearson_r']:.3f}** (p = {row['pearson_p']:.3g}, {ci}) · ρ = **{row['spearman_rho']:.3f}** "
                f"(p = {row['spearman_p']:.3g}) · n = {row['n']} models{exact}")
    if no_line:
        st.caption(md_escape(no_line))
    direction = "higher is better" if row.get("higher_is_better", True) else "lower is better"
    st.caption(f"R is signed as computed. {md_escape(row['task'])} ({md_escape(row['task_metric'])}): {direction}, so a "
               f"{'positive' if row.get('higher_is_better', True) else 'negative'} R means a higher score goes with "
               f"better results; here it goes with {'better' if row.get('better') else 'worse'} results.")
if len(dv["curves"]):
    st.subheader("Which layer's score predicts each task")
    st.altair_chart(layer_r_chart(dv["curves"]), width="stretch", key="downstream_curve")
