import streamlit as st

from analysis.views import caption_baseline as cb
from analysis.views import paper_figures as pf
from analysis.views import prompt_compare as pc
from analysis.views.charts import export_name
from analysis.views.store_info import model_labels, vision_results_missing
from analysis.views.text import md_escape
from pages._shared import (dataset_picker, download_chart, download_data, drop_params, pick, require_results,
                           require_store, view)

st.title("Paper figures")
st.caption("DR's figures on this store's results, one section each (its own link): Fig. 7 (smallest against "
           "largest caption budget), Figs. 11/12 (vision × text best alignment with its layers, and whether the "
           "ranking survives a change of text encoder), Fig. 2 (alignment against a downstream score), and the "
           "papers' published numbers. A paper's number is shown beside yours where you mapped your names to "
           "the paper's (`layerscope papers map`), never mixed into yours.")
require_store()
dataset = dataset_picker()
choices = view(pf.figure_choices, dataset)
labels = view(model_labels)
SECTIONS = {"fig7": "Fig. 7: 1 vs many captions", "fig11": "Figs. 11/12: vision × text matrix",
            "fig2": "Fig. 2: alignment vs downstream", "fig8": "Fig. 8: long-caption baseline",
            "prompts": "TARA: EOL vs plain prompt", "published": "Published numbers"}
figure = pick("Figure", list(SECTIONS), param="figure", fmt=SECTIONS.get, widget="radio", container=st.sidebar)
#: each figure's URL parameters: another figure's are dropped, so the link names only what is on screen
SECTION_PARAMS = {"fig7": ("metric", "text"), "fig11": ("metric", "budget"), "fig2": ("metric", "text", "task"),
                  "fig8": ("metric", "pair", "nf"), "prompts": ("a", "b"), "published": ()}
drop_params(*{p for ps in SECTION_PARAMS.values() for p in ps} - set(SECTION_PARAMS[figure]))

if figure not in ("published", "prompts"):
    require_results("vision × text grids", bool(choices["metrics"]), why=view(vision_results_missing, dataset))
    metric = pick("Metric", choices["metrics"], param="metric", default=pf.FIGURE_METRIC, container=st.sidebar)


def _notes(section):
    """The sentences of a one-chart section: the chart's own (one line per reason, counted), then any
    tied to no chart."""
    for note in section.placed_notes().one_chart():
        st.caption(md_escape(note))


if figure == "fig7":
    text_model = pick("Text model", choices["text"], param="text", fmt=lambda m: labels.get(m, m), container=st.sidebar)
    fv = view(pf.fig7_view, dataset, metric, text_model)
    st.subheader("DR Fig. 7: best alignment at the smallest against the largest caption budget")
    if fv["error"]:
        st.info(md_escape(fv["error"]))
    else:
        # the report's Fig. 7 against this text model: the titled chart, its sentence and its notes
        section = view(pf.section, dataset, figure="fig7", metric=metric, text=text_model)
        ((_, chart),), (entry,) = section.charts, section.data["fig7"]
        st.altair_chart(chart, width="content", key="fig7")
        st.markdown(md_escape(entry["sentence"]))
        _notes(section)
        st.dataframe(fv["points"], hide_index=True, width="stretch")
        stem = export_name("fig7", dataset, metric, text_model)
        download_data(fv["points"], stem)
        download_chart(chart, stem)
elif figure == "fig11":
    budget = pick("Caption budget", ["smallest", "largest"], param="budget", widget="radio", container=st.sidebar)
    av = view(pf.fig11_view, dataset, metric, budget)
    st.subheader(f"DR Figs. 11/12: best alignment and its layers (vision/text), {budget} n_c")
    if av["error"]:
        st.info(md_escape(av["error"]))
    else:
        section = view(pf.section, dataset, figure="fig11", metric=metric, budget=budget)
        ((_, chart),), (entry,) = section.charts, section.data["fig11"]
        st.altair_chart(chart, width="content", key="fig11")
        st.dataframe(av["table"], hide_index=True, width="stretch")
        st.markdown("**Rank agreement across text encoders.** " + md_escape(entry["sentence"]))
        st.dataframe(pf.agreement_frame(av), hide_index=True, width="stretch")
        _notes(section)
        stem = export_name("fig11", dataset, metric, f"nc{av['n_c']}")
        download_data(av["table"], stem)
        download_chart(chart, stem)
elif figure == "fig2":
    text_model = pick("Text model", choices["text"], param="text", fmt=lambda m: labels.get(m, m), container=st.sidebar)
    st.subheader("DR Fig. 2: alignment against a downstream result, by kind of vision input")
    if not choices["tasks"]:
        st.info("No whole-model downstream results in this store. Import them with "
                "`layerscope downstream import results.csv`.")
        st.stop()
    task = pick("Downstream task", choices["tasks"], param="task", container=st.sidebar)
    fv = view(pf.fig2_view, dataset, metric, text_model, task)
    if fv["error"]:
        st.info(md_escape(fv["error"]))
    else:
        section = view(pf.section, dataset, figure="fig2", metric=metric, text=text_model, task=task)
        ((_, chart),), (entry,) = section.charts, section.data["fig2"]
        st.altair_chart(chart, width="content", key="fig2")
        st.markdown(md_escape(entry["sentence"]))
        st.caption("■ an image model on one frame, ● an image model on its largest n_f, ▲ a video model at its "
                   "largest n_f. The dashed line is fitted on the ● points; the offset is the mean height of the ▲ "
                   "points above it, in the task's units.")
        _notes(section)
        st.dataframe(fv["points"], hide_index=True, width="stretch")
        stem = export_name("fig2", dataset, metric, text_model, task)
        download_data(fv["points"], stem)
        download_chart(chart, stem)
elif figure == "fig8":
    st.subheader("DR Fig. 8: the long original caption beside the caption sweep")
    bc = view(cb.baseline_choices, dataset)
    if not bc["pairs"]:
        st.info("No long-caption baseline in this store. Give every manifest item a `long_caption` (the dataset's "
                "own long description), precompute the text model(s) again (a run of its own, variant "
                "`long_caption`), then run `layerscope analyze`.")
        st.stop()
    pair_names = [f"{v}|{t}" for v, t in bc["pairs"]]
    pair = pick("Vision × text", pair_names, param="pair", container=st.sidebar,
                fmt=lambda p: " × ".join(labels.get(m, m) for m in p.split("|", 1)))
    vision, text_model = pair.split("|", 1)
    fv = view(cb.fig8_view, dataset, metric, vision, text_model)
    if fv["error"]:
        st.info(md_escape(fv["error"]))
    else:
        budgets = cb.frame_budgets(fv)
        n_f = int(pick("Frames (n_f)", budgets, param="nf", container=st.sidebar))
        section = view(pf.section, dataset, figure="fig8", metric=metric, baseline_pair=(vision, text_model),
                       n_frames=n_f)
        ((_, chart),) = section.charts
        (entry,) = [e for e in section.data["fig8"] if e["n_frames"] == n_f]
        st.altair_chart(chart, width="content", key="fig8")
        st.markdown(md_escape(entry["sentence"]))
        st.caption("The line: the best alignment at each caption budget (its band: the bootstrap interval). The dashed "
                   "line and its band: the same text model on each item's one long original caption, scored the same "
                   "way against the same vision run.")
        st.dataframe(fv["baselines"], hide_index=True, width="stretch")
        stem = export_name("fig8", dataset, metric, vision, text_model, f"nf{n_f}")
        download_data(fv["sweep"], stem)
        download_chart(chart, stem)
elif figure == "prompts":
    st.subheader("TARA: one MLLM under two prompts (EOL against plain), side by side")
    st.caption("Two same-space models (an MLLM's video and text sides), each at its largest n_f, n_c and last layer: "
               "modality gap, retrieval, alignment (with their bootstrap intervals) and each side's uniformity. "
               "Precompute one MLLM twice under two names (`--name qwen-eol`, `--name qwen-plain --prompt plain`); pairs "
               "of one source whose stored prompts differ are proposed first.")
    models = view(pc.prompt_models, dataset)
    if len(models) < 2:
        st.info("This needs two models whose video and text runs share one space (MLLMs), e.g. one MLLM precomputed "
                "twice under two `--name`s, once with `--prompt plain`, then `layerscope analyze`.")
        st.stop()
    proposed = view(pc.prompt_pairs, dataset)
    first = proposed[0] if proposed else (models[0], models[1])
    fmt = lambda m: labels.get(m, m)  # noqa: E731
    model_a = pick("Model A (e.g. EOL prompt)", models, param="a", default=first[0], fmt=fmt, container=st.sidebar)
    model_b = pick("Model B (e.g. plain prompt)", models, param="b", default=first[1], fmt=fmt, container=st.sidebar)
    cv = view(pc.compare_view, dataset, model_a, model_b)
    if cv["error"]:
        st.info(md_escape(cv["error"]))
    else:
        section = view(pf.section, dataset, figure="prompts", prompt_pair=(model_a, model_b))
        ((_, chart),), (entry,) = section.charts, section.data["prompts"]
        st.markdown(md_escape(entry["sentence"]))
        st.dataframe(cv["table"], hide_index=True, width="stretch")
        st.caption(md_escape("Prompts: " + "; ".join(f"{m}: {p!r}" for m, p in cv["prompts"].items())
                             + ". 'intervals apart': the two bootstrap intervals do not overlap."))
        st.altair_chart(chart, width="content", key="prompts")
        st.caption("The gap as a picture: the Embedding map page draws each model's two sides by PCA and t-SNE "
                   "(TARA's Figs. 4, 10, 11) beside UMAP.")
        stem = export_name("prompts", dataset, model_a, model_b)
        download_data(cv["table"], stem)
        download_chart(chart, stem)
else:
    st.subheader("Published numbers (DR and TARA), with your mapped names")
    st.caption("Only numbers the papers state, each with its section. Map your names once: "
               "`layerscope papers map --store STORE MYMODEL VideoMAEv2-H`, "
               "`layerscope papers map --store STORE --dataset MYDATASET VATEX`.")
    table = view(pf.published_table)
    st.dataframe(table, hide_index=True, width="stretch")
    download_data(table, export_name("published", dataset))
