import streamlit as st

from analysis.views.predictors import layer_results_chart, predictor_matrix, predictors_tables
from analysis.views.predictors import section as predictors_section
from analysis.views.probes import checks_table, probe_checks
from analysis.views.text import md_escape
from pages._shared import (
    dataset_picker,
    download_data,
    page_path,
    pick,
    pick_many,
    require_store,
    store_path,
    view,
)

st.title("Layer predictors")
st.caption("Which label-free signal predicts which task, layer by layer: Spearman ρ between each per-layer "
           "signal (RankMe, LID, uniformity, alignment with each reference text side, same-space metrics when "
           "stored) and your per-layer downstream results, across the layers of each model (mean of the "
           "per-model ρ) and pooled over models × layers, with bootstrap intervals over layers. ρ is signed as "
           "computed: for a lower-is-better task a signal that goes with better results shows ρ < 0. "
           "Degenerate layers and undefined values are left out and counted. Ranked by the number of models "
           "a signal's ρ stands on (`coverage`), then whether its interval excludes 0, then |ρ|: a signal seen "
           "in one model only is marked `1 model only` and ranks below every signal seen in more.")
require_store()
dataset = dataset_picker()

section = view(predictors_section, dataset)  # the report's predictors section too
if section.data is None:
    st.info("No per-layer downstream results in this store yet. Measure them with labelled probes "
            f"(`layerscope analyze --store {store_path()} --labels FIELD`: a categorical manifest field), or "
            "import a CSV with a `layer` column (an index, or "
            "`default` / `joint`) and, optionally, a `setting`, then analyse:")
    st.code("model,task,metric,value,higher_is_better,layer,setting\n"
            "videomae,ssv2,top1,0.41,true,6,linear-probe\n"
            "videomae,ssv2,top1,0.44,true,default,linear-probe\n\n"
            f"layerscope downstream import results.csv --store {store_path()}\n"
            f"layerscope analyze --store {store_path()}", language="bash")
    st.stop()

data = view(predictors_tables, dataset)
if section.data["fabricated"]:
    st.warning("FABRICATED numbers: the downstream results of "
               + ", ".join(md_escape(t) for t in section.data["fabricated"]) + " were made up by `layerscope demo` to exercise this page. They measure nothing; import your own "
               "results to read this table.")

table = data["table"]
# both controls live in the URL (?stat=...&kinds=...): a shared link shows the same table
statistic = pick("Correlation", ["ρ across layers", "ρ pooled"], param="stat", widget="radio", horizontal=True,
                 key="pred_stat", help="across layers: within each model, then the mean over models; pooled: "
                                       "every (model, layer) point together")
kinds = sorted(k for k in table["kind"].dropna().unique()) if len(table) else []
chosen_kinds = pick_many("Signals", kinds, param="kinds", default=kinds, key="pred_kinds",
                         help="profile: one run per layer; pairwise: best alignment of the layer with a "
                              "reference text model (row max of the grid); same_space: metrics where the video "
                              "and text sides share a space")
shown = table[table["kind"].isin(chosen_kinds)] if len(table) else table

checks = view(probe_checks, dataset)
if checks:  # the verdict itself, set against the measured probes (every signal's own pick is below)
    st.subheader("The verdict's layer against the measured best layer")
    st.caption("Per model and measured task: the layer its label-free verdict advises against the probe's best "
               "layer on the verdict's run, each difference with a 95% paired interval on the same item resamples "
               "(the Downstream page draws every layer).")
    st.dataframe(checks_table(checks), hide_index=True, width="stretch")

st.subheader("Signal × task")
st.dataframe(predictor_matrix(shown, statistic), hide_index=True, width="stretch")
st.caption(f"Cells: {statistic} with its {int((data['level'] or 0.95) * 100)}% bootstrap interval "
           f"({data['n_boot']} resamples of layers within each model); rows ordered by the best rank a signal "
           f"reaches. Runs used: the `{md_escape(data['setting'])}` setting of `--downstream-setting`.")
for sentence in section.data["not_measured"]:  # the signals no model measures: named, not rows of blanks
    st.caption(md_escape(sentence))

task = pick("Task", data["tasks"], param="task")
rows = shown[shown["task"] == task].sort_values("rank") if len(shown) else shown
st.subheader(f"Signals for {md_escape(task)}")
# the report draws every task's chart of this section at ρ across layers, every signal kind
task_section = view(predictors_section, dataset, tasks=(task,), statistic=statistic, kinds=tuple(chosen_kinds))
for _, chart in task_section.charts:
    st.altair_chart(chart, width="stretch", key="pred_rho")
    st.caption(f"Filled: the 95% interval excludes 0 (the sign is established); hollow: it includes 0; dashed: "
               f"ρ = 0. {md_escape(statistic)}, {data['n_boot']} resamples of layers within each model.")
st.dataframe(rows.drop(columns=["task"]), hide_index=True, width="stretch")
download_data(table, "layer_predictors")

st.subheader("Best layer per model")
models = data["models"][data["models"]["task"] == task]
st.dataframe(models.drop(columns=["task"]), hide_index=True, width="stretch")
st.caption("Gaps are in the task's metric, positive when the first layer named is better. The last layer is the "
           "last numbered one (hidden states); `default` is the model's own output when its runs store it.")
curves = data["curves"][data["curves"]["task"] == task]
if len(curves):
    st.altair_chart(layer_results_chart(curves, task), width="stretch", key="pred_curves")

signals = list(rows["signal"]) if len(rows) else []
picks = data["picks"]
if signals and len(picks):
    signal = pick("Signal", signals, param="signal")
    chosen = picks[(picks["task"] == task) & (picks["signal"] == signal)]
    st.subheader(f"The layer {md_escape(signal)} picks")
    if len(chosen):
        st.dataframe(chosen.drop(columns=["task", "signal"]), hide_index=True, width="stretch")
        found = int(chosen["found best"].sum())
        st.markdown(f"Picks the truly best layer for **{found} of {len(chosen)}** model(s).")
    else:
        st.caption("This signal has no direction (e.g. LID): shown in the table, not used to pick a layer.")

for note in section.notes:  # one line per reason, counted
    st.caption(md_escape(note))
cols = st.columns(2)
cols[0].page_link(page_path("curves"), label="Layer curves: the signals per layer", icon=":material/show_chart:")
cols[1].page_link(page_path("downstream"), label="Downstream: whole-model correlations", icon=":material/link:")
