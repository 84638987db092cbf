import streamlit as st

from analysis.methods import grid_compare
from analysis.views import heatmap as heatmap_view, url_state
from analysis.views.choices import layers_from_params, selection_to_layers
from analysis.views.heatmap import grid_chance, grid_title, heat_chart
from analysis.views.heatmap_diff import best_difference, best_difference_text
from analysis.views.layers import layer_label, run_layer_names
from analysis.views.metric_help import metric_direction, metric_help
from analysis.views.null import grid_null
from analysis.views.store_info import dataset_context, dataset_runs, model_labels
from analysis.views.text import fmt_number, md_escape
from pages._shared import (dataset_picker, own_params, download_chart, download_data, drop_params, open_page, pick,
                           reproducibility, require_results, require_store, view)

st.title("Layer × layer heatmap")
require_store()
dataset = dataset_picker()
index = view(heatmap_view.grid_index)
index = index[index["dataset"] == dataset]
require_results("layer grids", len(index) > 0)
labels = view(model_labels)
runs = view(dataset_runs, dataset)  # what names a dual encoder's sides in titles and axes


def name(model) -> str:
    return labels.get(model, model)  # "(random init)" travels with the model's name



side = st.sidebar
kinds = heatmap_view.pair_kinds(index)
kind = pick("Pair kind", kinds, param="kind", fmt=heatmap_view.pair_kind_label, container=side, default=kinds[0],
            help="vision × text: a vision model against a text model; vision × vision and text × text: two "
                 "models of one modality at an equal budget.")
of_kind = index[index["pair_kind"] == kind]
model_a = pick("Model A (rows)", sorted(of_kind["model_a"].unique()), param="a", fmt=name, container=side)
sub = of_kind[of_kind["model_a"] == model_a]
model_b = pick("Model B (columns)", sorted(sub["model_b"].unique()), param="b", fmt=name, container=side)
sub = sub[sub["model_b"] == model_b]
# defaults: mutual k-NN (the alignment the project is about) at the largest budgets, where it is steadiest
metric = pick("Metric", sorted(sub["metric"].unique()), param="metric", container=side, default="mutual_knn",
              help="What each metric measures, its range, direction and chance level: under the chart.")
sub = sub[sub["metric"] == metric]
for column, label, param in heatmap_view.budget_pickers(kind):  # the budgets this kind of pair has
    values = sorted(sub[column].dropna().astype(int).unique())
    if not values:
        continue
    chosen = pick(label, values, param=param, container=side, default=url_state.largest(values))
    sub = sub[sub[column] == chosen]
row = sub.iloc[0]
g = view(heatmap_view.grid_by_id, row["result_id"])
layer_names = view(run_layer_names, dataset)  # {run_id: {index: "default" / "joint"}}
names_a, names_b = layer_names.get(g["run_a"]) or {}, layer_names.get(g["run_b"]) or {}
df = heatmap_view.grid_long(g)
axis_a, axis_b = heatmap_view.grid_names(g, runs, {})  # the models' plain names, each with its side
setting = grid_compare.budget_text(row)

mode = pick("View", ["one grid", "side by side", "difference"], param="view", container=side, widget="radio",
            help="Compare this grid with another that differs in one thing: the budgets, model B or the metric.")
second = None
if mode == "one grid":
    drop_params("vs", *(f"with_{k}" for k in grid_compare.VARY_PARAM.values()))
else:
    vary = pick("Compare with another", list(grid_compare.VARY), param="vs", container=side)
    others = grid_compare.alternatives(index, row, vary)
    if others.empty:
        st.info(md_escape(f"No other grid differs from this one only in its {vary}; showing one grid."))
    else:  # one URL parameter per kind of comparison: switching kinds never meets a stale value
        other = pick("Second grid", list(others["label"]), param=f"with_{grid_compare.VARY_PARAM[vary]}",
                     container=side)
        second = others[others["label"] == other].iloc[0]
        g2 = view(heatmap_view.grid_by_id, second["result_id"])

def cell_text(grid) -> str:
    return "none" if grid.get("best_a") is None else f"{grid['best_a']}×{grid['best_b']}"


def title_of(r) -> str:
    return grid_title(r, labels, runs)


st.caption(f"{metric_direction(metric)} · {md_escape(heatmap_view.best_cell_text(g, axis_a, axis_b))}")
if g.get("best_a") is None:
    st.warning("No layer pair can be called best here: "
               f"{md_escape((g.get('flags') or {}).get('best', 'no cell was scored'))}. "
               "The cells are shown as computed; degenerate ones are crossed out, undefined ones grey.")
n_items = view(dataset_context, dataset)["n_items"]
if second is not None and mode == "difference":
    try:
        dg = grid_compare.difference(g, g2)
    except ValueError as exc:
        st.warning(md_escape(f"{exc}; showing them side by side."))
        mode = "side by side"
side_by_side = second is not None and mode == "side by side"
same_metric = side_by_side and second["metric"] == metric  # one colour scale when both grids hold the same metric
domain = grid_compare.shared_domain(g, g2) if same_metric else None
# the report's heatmap section, narrowed to this grid: the chart the report embeds for it
section = view(heatmap_view.section, dataset, result_ids=(row["result_id"],),
               domain=tuple(domain) if domain else None)
((_, chart),) = section.charts
if side_by_side:
    chart2 = heat_chart(heatmap_view.grid_long(g2), g2, title_of(second), second["metric"],
                        *heatmap_view.grid_names(g2, runs, {}),
                        layer_names=layer_names, domain=domain, chance=grid_chance(g2, n_items))
    c1, c2 = st.columns(2)
    with c1:
        event = st.altair_chart(chart, width="stretch", on_select="rerun", key="heatmap_chart")
    c2.altair_chart(chart2, width="stretch", key="heatmap_chart_2")
    st.caption(md_escape(f"Left: {title_of(row)}. Right: {title_of(second)}. "
                         + ("One colour scale for both." if same_metric else "Each has its own colour scale.")))
elif second is not None and mode == "difference":
    ddf = heatmap_view.grid_long(dg)
    chart2 = heat_chart(ddf, dg, f"{title_of(row)} minus {second['label']}", "difference", axis_a, axis_b,
                        layer_names=layer_names, diverging=True)
    c1, c2 = st.columns(2)
    with c1:
        event = st.altair_chart(chart, width="stretch", on_select="rerun", key="heatmap_chart")
    c2.altair_chart(chart2, width="stretch", key="heatmap_diff")
    st.caption(md_escape(f"Right: this grid minus the grid at {second['label']} (red: higher here, blue: "
                         "lower). A cell undefined in either grid is grey; a degenerate layer in either is "
                         "crossed out."))
    st.caption(md_escape(best_difference_text(
        best_difference(g, g2), f"here {cell_text(g)}, there {cell_text(g2)}", second["label"])))
    download_data(ddf, f"grid_difference_{model_a}_{model_b}_{metric}")
else:
    event = st.altair_chart(chart, width="stretch", on_select="rerun", key="heatmap_chart")

shape = (g["n_rows"], g["n_cols"])
best_pair = (g["best_a"], g["best_b"]) if g["best_a"] is not None else (shape[0] - 1, shape[1] - 1)
# the URL's layers (validated), then a click on the chart, then the boxes below, in that order
own_params("la", "lb")
start = layers_from_params(st.query_params.get("la"), st.query_params.get("lb"), *shape, best_pair)
clicked = selection_to_layers(event, *shape, None)
if clicked is not None:
    st.session_state["sel_la"], st.session_state["sel_lb"] = clicked
c1, c2, c3 = st.columns([2, 2, 3], vertical_alignment="bottom")
# the start goes through session state (not index=): a widget whose state a click also sets takes no default
for key, first, n in (("sel_la", start[0], shape[0]), ("sel_lb", start[1], shape[1])):
    if st.session_state.get(key) not in range(n):  # first visit, or another grid of fewer layers
        st.session_state[key] = first
la = c1.selectbox("Selected layer of A", list(range(shape[0])), key="sel_la",
                  format_func=lambda i: layer_label(i, names_a))
lb = c2.selectbox("Selected layer of B", list(range(shape[1])), key="sel_lb",
                  format_func=lambda i: layer_label(i, names_b))
shown_la, shown_lb = (md_escape(layer_label(i, n)) for i, n in ((la, names_a), (lb, names_b)))
st.query_params["la"], st.query_params["lb"] = str(la), str(lb)
st.session_state["selected_layers"] = {"model_a": model_a, "model_b": model_b, "layer_a": la, "layer_b": lb}
# the selected cell's two spaces, side by side on the Neighbours page (same runs, same layers)
if c3.button(f"Neighbours at layers ({shown_la}, {shown_lb}) →", key="to_neighbours",
             help="Open the Neighbours page on these two models, their runs (budgets) and these layers"):
    open_page("neighbours", {
        "dataset": dataset, "models": [model_a, model_b], "layers": [str(la), str(lb)],
        "runs": [str(g["run_a"]), str(g["run_b"])]})
if grid_null(g):
    st.caption(md_escape(heatmap_view.null_rule_text(g, int(df["beyond_null"].sum()))))
n_near = int(df["near_best"].sum()) if "near_best" in df else 0
if n_near:
    st.caption(f"Dashed outline: {n_near} other cell(s) whose value lies inside the best cell's 95% interval "
               f"({g['n_boot']} resamples): the data do not tell them apart from the best. Only the best cell's "
               "interval is computed, so this compares values with that one interval.")
st.caption(md_escape(metric_help(metric, view(dataset_context, dataset)["n_items"],
                                  {k: v for k, v in (g.get("params") or {}).items() if k != "n_boot"})))
st.metric(f"{md_escape(metric)} at layers ({shown_la}, {shown_lb})", fmt_number(g["grid"][la, lb], 4))
st.caption(md_escape(heatmap_view.selected_cell_text(g, la, lb)))  # the number's uncertainty, where it is read
note = df[(df["layer_a"] == la) & (df["layer_b"] == lb)]["note"].iloc[0]
if note:
    st.caption(f"This cell: {md_escape(note)}")
download_data(df, f"grid_{model_a}_{model_b}_{metric}")
download_chart(chart, f"heatmap_{metric}")
reproducibility([g["run_a"], g["run_b"]], {"metric": metric, "setting": setting, **g["params"], "n_boot": g["n_boot"]})
