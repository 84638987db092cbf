import altair as alt
import streamlit as st

from analysis.views import md_escape
from pages._shared import (dataset_picker, download_chart, download_data, pick, require_results, require_store,
                           view)

st.title("Test-time scaling")
st.caption("Best-layer-pair alignment against the frames (n_f) and captions (n_c) given at test time, with the "
           "fitted law S∞ − (C_f·n_f^−α + C_c·n_c^−β).")
require_store()
dataset = dataset_picker()
subjects = view("scaling_subjects", dataset)
require_results("scaling fits", len(subjects) > 0)


def fmt(subject):
    a, b, m = subject.split("|")
    return f"{a} × {b} ({m})"


left = pick("Model pair", subjects, param="pair", fmt=fmt, container=st.sidebar,
            default=next((s for s in subjects if s.endswith("|mutual_knn")), None))
compare = pick("Compare with", ["(none)"] + [s for s in subjects if s != left], param="compare",
               fmt=lambda s: s if s == "(none)" else fmt(s), container=st.sidebar)
columns = st.columns(2) if compare != "(none)" else [st.container()]
for col, subject in zip(columns, [left] + ([compare] if compare != "(none)" else [])):
    with col:
        st.subheader(md_escape(fmt(subject)))
        sv = view("scaling_view", dataset, subject)
        pts = sv["points"]
        c1 = alt.Chart(pts).mark_point(filled=True, size=70).encode(
            x=alt.X("n_frames:Q", scale=alt.Scale(type="log"), title="frames n_f"), y=alt.Y("score:Q"),
            color=alt.Color("n_captions:O", title="n_c"), tooltip=["n_frames", "n_captions", "score"])
        c2 = alt.Chart(pts).mark_point(filled=True, size=70).encode(
            x=alt.X("n_captions:Q", scale=alt.Scale(type="log"), title="captions n_c"), y=alt.Y("score:Q"),
            color=alt.Color("n_frames:O", title="n_f"), tooltip=["n_frames", "n_captions", "score"])
        if sv.get("fit"):
            c1 = c1 + alt.Chart(sv["curve_vs_frames"]).mark_line().encode(x="n_frames:Q", y="score:Q",
                                                                         color="n_captions:O")
            c2 = c2 + alt.Chart(sv["curve_vs_captions"]).mark_line().encode(x="n_captions:Q", y="score:Q",
                                                                           color="n_frames:O")
        chart = alt.vconcat(c1.properties(height=240), c2.properties(height=240))
        st.altair_chart(chart, width="stretch", key=f"scaling_{subject}")
        if sv.get("error"):
            st.warning(md_escape(sv["error"]))
        for note in sv.get("notes", []):
            st.warning(md_escape(note))
        if sv.get("fit"):
            if sv.get("status") and sv["status"] != "ok":
                st.warning(f"The saturating law's parameters cannot be trusted here ({sv['status']}): "
                           f"{md_escape(sv['reason'])}")
            st.markdown(f"R² = **{sv['fit']['r2']:.3f}** in sample on {sv['fit']['n_points']} grid points; the "
                        f"curve drawn is the **{sv.get('drawn')}** form (lowest held-out error)")
            st.dataframe(sv["table"], hide_index=True, width="stretch")
            st.caption("Held-out error: leave-one-out over grid points, and fitting small budgets to predict "
                       "the largest ones; lower is better.")
            st.dataframe(sv["held_out"], hide_index=True, width="stretch")
        download_data(pts, f"scaling_{subject.replace('|', '_')}")
        download_chart(chart, f"scaling_{subject.replace('|', '_')}")
