import altair as alt
import streamlit as st

from analysis import views
from pages._shared import (dataset_picker, download_chart, download_data, pick, reproducibility, require_results,
                           require_store, view)

st.title("Layer × layer heatmap")
require_store()
dataset = dataset_picker()
index = view("grid_index")
index = index[index["dataset"] == dataset]
require_results("layer grids", len(index) > 0)
labels = view("model_labels")

side = st.sidebar
model_a = pick("Model A (rows)", sorted(index["model_a"].unique()), param="a", fmt=lambda m: labels.get(m, m),
               container=side)
sub = index[index["model_a"] == model_a]
model_b = pick("Model B (columns)", sorted(sub["model_b"].unique()), param="b", fmt=lambda m: labels.get(m, m),
               container=side)
sub = sub[sub["model_b"] == model_b]
metric = pick("Metric", sorted(sub["metric"].unique()), param="metric", container=side,
              help="see `layerscope metrics`")
sub = sub[sub["metric"] == metric]
n_f = pick("Frames n_f", sorted(sub["n_frames"].unique()), param="nf", container=side)
sub = sub[sub["n_frames"] == n_f]
if sub["pair_kind"].iloc[0] == "vision_text":
    n_c = pick("Captions n_c", sorted(sub["n_captions"].dropna().astype(int).unique()), param="nc", container=side)
    sub = sub[sub["n_captions"] == n_c]
g = view("grid_by_id", sub["result_id"].iloc[0])
df = views.grid_long(g)

st.caption(f"{views.metric_direction(metric)} · {views.md_escape(views.best_cell_text(g, model_a, model_b))}")
if g.get("best_a") is None:
    st.warning("No layer pair can be called best here: "
               f"{views.md_escape((g.get('flags') or {}).get('best', 'no cell was scored'))}. "
               "The cells are shown as computed; degenerate ones are crossed out, undefined ones grey.")
cell = alt.selection_point(name="cell", fields=["layer_a", "layer_b"], on="click")
base = alt.Chart(df).encode(
    x=alt.X("layer_b:O", title=f"{model_b} layer"), y=alt.Y("layer_a:O", title=f"{model_a} layer", sort="descending"))
tips = ["layer_a", "layer_b", alt.Tooltip("value:Q", format=".4f"), "interval", "note"]
heat = base.transform_filter("isValid(datum.value)").mark_rect().encode(
    color=alt.Color("value:Q", title=metric, scale=alt.Scale(scheme="viridis")),
    opacity=alt.condition(cell, alt.value(1.0), alt.value(0.55)), tooltip=tips,
).add_params(cell)
# undefined cells stay visible (grey) and degenerate ones are crossed out: marked, never dropped
undefined = base.transform_filter("!isValid(datum.value)").mark_rect(color="#c8c8c8").encode(tooltip=tips)
crossed = base.transform_filter(alt.datum.degenerate).mark_text(text="×", color="#d62728", fontSize=14).encode(
    tooltip=tips)
best = base.transform_filter(alt.datum.best).mark_rect(fill=None, stroke="#ff4b4b", strokeWidth=3)
chart = (heat + undefined + crossed + best).properties(height=420)
event = st.altair_chart(chart, width="stretch", on_select="rerun", key="heatmap_chart")
shape = (g["n_rows"], g["n_cols"])
best_pair = (g["best_a"], g["best_b"]) if g["best_a"] is not None else (shape[0] - 1, shape[1] - 1)
# the URL's layers (validated), then a click on the chart, then the boxes below, in that order
start = views.layers_from_params(st.query_params.get("la"), st.query_params.get("lb"), *shape, best_pair)
clicked = views.selection_to_layers(event, *shape, None)
if clicked is not None:
    st.session_state["sel_la"], st.session_state["sel_lb"] = clicked
c1, c2 = st.columns(2)
la = c1.selectbox("Selected layer of A", list(range(shape[0])), index=start[0], key="sel_la")
lb = c2.selectbox("Selected layer of B", list(range(shape[1])), index=start[1], key="sel_lb")
st.query_params["la"], st.query_params["lb"] = str(la), str(lb)
st.session_state["selected_layers"] = {"model_a": model_a, "model_b": model_b, "layer_a": la, "layer_b": lb}
st.metric(f"{views.md_escape(metric)} at layers ({la}, {lb})", views.fmt_number(g["grid"][la, lb], 4))
note = df[(df["layer_a"] == la) & (df["layer_b"] == lb)]["note"].iloc[0]
if note:
    st.caption(f"This cell: {views.md_escape(note)}")
download_data(df, f"grid_{model_a}_{model_b}_{metric}")
download_chart(chart, f"heatmap_{metric}")
reproducibility([g["run_a"], g["run_b"]], {"metric": metric, **g["params"], "n_boot": g["n_boot"]})
