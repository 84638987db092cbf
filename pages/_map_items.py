"""The Embedding map page's item-level tools, rendered: a filter by a metadata field, the layer pair
the per-item table compares (the map's layer and another run's layer), the sortable per-item table
(outliers first) and a selection's alignment with its chance level. Every value lives in the URL
(``ff``, ``fv``, ``cmp``, ``cmpl``, ``ak``, ``linked``); the compared layer's map beside this one.
The logic is in :mod:`analysis.views.item_table` and :mod:`analysis.views.item_search`."""

import streamlit as st

from analysis.methods.grid_compare import budget_text
from analysis.views import embedding_map, item_search, item_table
from analysis.views import embedding_tools as tools
from analysis.views.neighbours import runs_for_neighbours
from analysis.views.text import fmt_number, md_escape
from pages._shared import pick, pick_flag, pick_int, pick_many, store_path, view

NO_FIELD = "(none)"
#: the per-item table's widget key, and where the item ids it shows are kept (a picked row names one)
TABLE_KEY, TABLE_IDS = "item_table", "_item_table_ids"


def filter_controls(records) -> set | None:
    """A metadata field and its values in the sidebar; the ``idx`` of the items kept, None for all."""
    fields = item_search.filter_fields(records)
    if not fields:
        return None
    field = pick("Filter by", [NO_FIELD] + list(fields), param="ff", default=NO_FIELD, container=st.sidebar,
                 help="show only the items whose metadata field has one of the chosen values (map, search, table)")
    if field in (None, NO_FIELD):
        return None
    values = pick_many(f"{field} is", fields[field], param="fv", container=st.sidebar)
    return item_search.filter_items(records, field, values)


def _run_text(r) -> str:
    return f"{r['model']} · {r['modality']} · {budget_text(r)}"


def compare_controls(pts, dataset: str, *, sampled: bool = False) -> dict | None:
    """The layer pair of the per-item table: A is the map's (first) series, B a run and layer picked in
    the sidebar (default: a two-sided map's other side, else another model's largest run at its last
    layer). ``{"a": (run, layer), "b": (run, layer), "a_text", "b_text", "k", "only"}`` (``only``: the
    map's items when the map is a sample of a large dataset, the table's items then); None when the
    map's points do not name their runs."""
    if "run_id" not in pts:
        return None
    series = pts[["run_id", "layer"]].drop_duplicates().itertuples(index=False)
    pairs = [(str(r), int(l)) for r, l in series]
    run_a, layer_a = pairs[0]
    runs = view(runs_for_neighbours, dataset)
    by_id = {r["run_id"]: r for r in runs.to_dict("records")}
    if run_a not in by_id:
        return None
    default_run, default_layer = item_table.default_comparison(runs, pairs)
    st.sidebar.markdown("**Compare layers** (per-item table)")
    run_b = pick("Compare with run", list(by_id), param="cmp", default=default_run, container=st.sidebar,
                 fmt=lambda r: _run_text(by_id[r]))
    top = int(by_id[run_b]["n_layers"]) - 1
    layer_b = pick_int("Its layer", 0, top, param="cmpl", default=min(default_layer, top), container=st.sidebar)
    n = int(pts["idx"].nunique())
    k = pick_int("Agreement k", 1, max(1, min(50, n - 1)), param="ak", default=min(10, max(1, n - 1)),
                 container=st.sidebar, help="neighbours per item compared between the two layers")
    only = tuple(sorted(int(i) for i in pts["idx"].unique())) if sampled else None
    return {"a": (run_a, layer_a), "b": (run_b, int(layer_b)), "k": k, "only": only,
            "a_text": f"{_run_text(by_id[run_a])} L{layer_a}", "b_text": f"{_run_text(by_id[run_b])} L{layer_b}"}


def table_panel(pair: dict, dataset: str, keep: set | None) -> None:
    """The per-item table of the pair, restricted to the filtered items, sortable by any column."""
    (ra, la), (rb, lb) = pair["a"], pair["b"]
    res = view(item_table.item_table, dataset, ra, la, rb, lb, pair["k"], pair["only"])
    t = res.table if keep is None else res.table[res.table["idx"].isin(keep)]
    st.markdown(f"**Items: where the layers disagree** — {md_escape(pair['a_text'])} vs "
                f"{md_escape(pair['b_text'])}, outliers first")
    st.caption(md_escape(
        f"agreement: the share of an item's {res.k} nearest items (cosine) that both layers hold, 0–1 "
        f"(chance about {fmt_number(res.chance)}; its mean over all items is the pair's mutual k-NN). "
        + (res.rank_help + " " if "pair_rank" in t else "")
        + "Click a column header to sort; pick a row to inspect its item on the map."
        + (" " + " ".join(res.notes) if res.notes else "")))
    if keep is not None:
        selection_alignment(pair, keep, "the filtered items")
    st.session_state[TABLE_IDS] = list(t["item_id"])
    st.dataframe(t.drop(columns=["idx"]), hide_index=True, width="stretch", key=TABLE_KEY, on_select="rerun",
                 selection_mode="single-row",
                 column_config={"agreement": st.column_config.NumberColumn("agreement", format="%.2f"),
                                "pair_rank": st.column_config.NumberColumn("pair_rank", help=res.rank_help)})


def selection_alignment(pair: dict, items, what: str = "this selection") -> None:
    """The pair's mutual k-NN on the selected items alone (``what``: which selection), with its chance level."""
    (ra, la), (rb, lb) = pair["a"], pair["b"]
    got = view(item_table.subset_alignment, ra, la, rb, lb, tuple(sorted(int(i) for i in items)), pair["k"])
    if got.value is None:
        st.caption(f"Alignment on {what}: needs at least 2 items on two layers that are not collapsed.")
        return
    st.markdown(md_escape(
        f"Alignment on {what}: mutual k-NN {fmt_number(got.value)} between {pair['a_text']} and "
        f"{pair['b_text']} (k={got.k}, neighbours searched among its {got.n} items; chance "
        f"{fmt_number(got.chance)})"))


def linked_flag(pair: dict | None) -> bool:
    """The sidebar switch that draws the compared layer's map beside this one."""
    if pair is None:
        return False
    return pick_flag("Linked map of the compared layer", param="linked", container=st.sidebar,
                     help="the compared run's layer drawn beside this map: the search's matches, the clicked item "
                          "and its neighbours, and the box's or lasso's items (orange) are ringed on both")


def linked_map(container, state: dict, dataset: str, method: str) -> None:
    """The compared layer's stored map in ``container``, ringing what the main map selected: the search's
    matches, the clicked item and its neighbours, and the box's or lasso's items (orange); the command that
    computes it when the store holds none."""
    run_b, layer_b = state["pair"]["b"]
    container.markdown(f"**{md_escape(state['pair']['b_text'])}**")
    result_id = view(embedding_map.map_of_layer, dataset, run_b, layer_b, method)
    if result_id is None:
        model = str(run_b)
        runs = view(runs_for_neighbours, dataset)
        model = str(runs.loc[runs["run_id"] == run_b, "model"].iloc[0]) if (runs["run_id"] == run_b).any() else model
        container.caption(md_escape(f"No {method} map of this layer is stored; compute it with:"))
        container.code(embedding_map.map_command(store_path(), dataset, model, layer_b, "auto", method),
                       language="bash")
        return
    pts = view(tools.map_points_for_tools, result_id)["points"]
    if state["keep"] is not None:
        pts = pts[pts["idx"].isin(state["keep"])]
    chart = tools.explore_chart(pts, highlight=state["highlight"], focus=state["focus"],
                                marked=list(state["in_box"]["idx"].unique()), selectable=False)
    container.altair_chart(chart, width="stretch", key=f"linked_{result_id}")
