import streamlit as st

from analysis.views import scaling as scaling_view
from analysis.views.charts import export_name
from analysis.views.nuance import collapse_notes
from analysis.views.store_info import model_labels, vision_results_missing
from analysis.views.text import md_escape
from pages._shared import (dataset_picker, download_chart, download_data, pick, require_results, require_store,
                           view)

st.title("Test-time scaling")
st.caption("Best-layer-pair alignment against the frames (n_f) and captions (n_c) given at test time, with "
           "DR's fitted saturating law S∞ − (C_f·n_f^−α + C_c·n_c^−β) and, when another form predicts held-out "
           "points better, that form beside it (each with its own R²).")
require_store()
dataset = dataset_picker()
subjects = view(scaling_view.scaling_subjects, dataset)
require_results("scaling fits", len(subjects) > 0, why=view(vision_results_missing, dataset))
labels = view(model_labels)
pairs = view(scaling_view.subject_pairs, dataset)  # each subject's two models, a dual encoder's sides named


def fmt(subject):
    return f"{pairs[subject]} ({subject.split('|')[2]})"


left = pick("Model pair", subjects, param="pair", fmt=fmt, container=st.sidebar,
            default=next((s for s in subjects if s.endswith("|mutual_knn")), None))
compare = pick("Compare with", ["(none)"] + [s for s in subjects if s != left], param="compare",
               fmt=lambda s: s if s == "(none)" else fmt(s), container=st.sidebar)
columns = st.columns(2) if compare != "(none)" else [st.container()]
for col, subject in zip(columns, [left] + ([compare] if compare != "(none)" else [])):
    with col:
        st.subheader(md_escape(fmt(subject)))
        # the report's scaling section, narrowed to this subject: its two panels, the sentences under them
        # and the subject's entry (fit, curves, warnings, tables, points): the page's one read of the subject
        section = view(scaling_view.section, dataset, subjects=(subject,))
        (_, by_frames), (_, by_captions) = section.charts
        (entry,) = section.data
        a, b, metric = subject.split("|")
        title = scaling_view.scaling_title(entry, subject, dataset=dataset, labels=labels, pair=pairs[subject])
        st.markdown(f"**{md_escape(scaling_view.scaling_heading(entry))}**")
        st.caption(md_escape(" · ".join(title["subtitle"])))
        placed = section.placed_notes()  # each panel's sentences under it, as the report places them
        st.altair_chart(by_frames, width="stretch", key=f"scaling_{subject}")
        for note in placed.under[0]:
            st.caption(md_escape(note))
        st.altair_chart(by_captions, width="stretch", key=f"scaling_c_{subject}")
        for note in (*placed.under[1], *(n for _, said in placed.shared for n in said), *placed.wide):
            st.caption(md_escape(note))
        if entry.get("error"):
            st.warning(md_escape(entry["error"]))
        for note in collapse_notes(entry.get("notes") or []):  # one line per reason, counted
            st.warning(md_escape(note))
        if entry.get("fit"):
            if entry.get("status") and entry["status"] != "ok":
                st.warning(f"The saturating law's parameters cannot be trusted here ({entry['status']}): "
                           f"{md_escape(entry['reason'])}; the parameters it does not determine are left blank")
            for line in scaling_view.scaling_fit_lines(entry):
                st.markdown(f"- {md_escape(line)}")
            st.dataframe(entry["parameter_table"], hide_index=True, width="stretch")
            st.caption("d_v = 2/α: the frame exponent read as the dimension of the video manifold the encoder sees "
                       "(DR App. B); its interval is α's mapped through 2/x, ends swapped. A `paper` column shows DR's "
                       "Table 1 beside the fit where the names are mapped (`layerscope papers map`).")
            st.caption("Held-out error: leave-one-out over grid points, and fitting small budgets to predict "
                       "the largest ones; lower is better.")
            st.dataframe(entry["held_out"], hide_index=True, width="stretch")
        stem = export_name("scaling", dataset, a, b, metric)
        download_data(scaling_view.points_table(entry), stem)
        download_chart(scaling_view.stacked_export(by_frames, by_captions, title), stem)
