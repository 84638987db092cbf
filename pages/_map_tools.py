"""The Embedding map page's tools, rendered: search by caption or item id, a clicked item's
neighbours at the map's layer (with thumbnails), a box selection listed and exported, the density view.
Every value lives in the URL (``q``, ``focus``, ``nk``, ``box``, ``density``); a click or a drag on the
map writes it there. The logic is in :mod:`analysis.views.embedding_tools`."""

import streamlit as st

from analysis import views
from analysis.views import embedding_tools as tools
from analysis.views import md_escape
from pages._shared import own_params, pick_flag, pick_int, view
from pages._tools import neighbour_table, pick_text

#: the focus selectbox's empty choice
NO_ITEM = "(none)"
FOCUS_KEY = "pick_focus"


def _selection(state) -> dict:
    """The ``selection`` dict of a chart's state in ``st.session_state`` (``{}`` before any event)."""
    if state is None:
        return {}
    try:
        sel = state["selection"]
    except (KeyError, TypeError):
        sel = getattr(state, "selection", None)
    return dict(sel or {})


def _apply_chart_events(chart_key: str, pts) -> None:
    """A new click on the map becomes the focus item, a new drag the URL box, each only when its own
    part of the chart's selection changed (a drag keeps the clicked item); a cleared part clears its
    value. The URL wins until the chart changes."""
    sel = _selection(st.session_state.get(chart_key))
    seen_key = f"_seen_{chart_key}"
    seen = st.session_state.get(seen_key, {})
    st.session_state[seen_key] = sel
    if sel.get(tools.PICK) != seen.get(tools.PICK):
        clicked = tools.picked_items(sel, pts)
        ids = dict(zip(pts["idx"], pts["item_id"]))
        st.session_state[FOCUS_KEY] = str(ids[clicked[-1]]) if clicked else NO_ITEM
    if sel.get(tools.BOX) != seen.get(tools.BOX):
        box = tools.box_from_selection(sel)
        if box is not None:
            st.query_params["box"] = tools.box_param(box)
        elif "box" in st.query_params:
            del st.query_params["box"]


def _focus_item(pts) -> str | None:
    """The focus item's id: a selectbox in the sidebar whose value a click sets and the URL (``focus``) keeps."""
    order = pts.drop_duplicates("idx").sort_values("idx")
    options = [NO_ITEM] + [str(i) for i in order["item_id"]]
    if st.session_state.get(FOCUS_KEY) not in options:  # first visit, another map, or a hostile link
        asked = st.query_params.get("focus")
        if asked and asked not in options:
            st.warning(md_escape(f"unknown item {str(asked)[:60]!r} in the link (not on this map); no item is "
                                 "selected"))
        st.session_state[FOCUS_KEY] = asked if asked in options else NO_ITEM
    item = st.sidebar.selectbox("Item's neighbours", options, key=FOCUS_KEY,
                                help="click a point on the map, or pick an item here")
    if item == NO_ITEM:
        if "focus" in st.query_params:
            del st.query_params["focus"]
        return None
    st.query_params["focus"] = item
    return item


def controls(pts, meta, dataset: str, result_id: str) -> dict:
    """The sidebar's tools and what they select: ``{"chart_key", "highlight", "focus", "density",
    "found", "query", "item", "neighbours", "box", "in_box"}`` (``highlight``/``focus``: item ``idx``
    ringed on the map; ``neighbours``: one table per series of the map)."""
    chart_key = f"embedding_map_{result_id}"  # a selection belongs to one map
    own_params("box", "focus")
    _apply_chart_events(chart_key, pts)
    st.sidebar.markdown("**Explore**")
    query = pick_text("Search caption or item id", param="q", container=st.sidebar,
                      help="case-insensitive; matches are ringed in black and listed under the map")
    found = tools.search_items(pts, query)
    item = _focus_item(pts)
    n_items = int(meta.get("n_items") or pts["idx"].nunique())
    k = pick_int("Neighbours (k)", 1, max(1, min(20, n_items - 1)), param="nk", default=5, container=st.sidebar)
    density = tools.use_density(len(pts), pick_flag(
        "Density view", param="density", container=st.sidebar,
        help=f"binned counts instead of points (always above {tools.DENSITY_THRESHOLD} points)"))
    box, message = tools.parse_box(st.query_params.get("box"))
    if message:
        st.warning(md_escape(message))
        del st.query_params["box"]
    out = {"chart_key": chart_key, "highlight": list(found["idx"]), "focus": [], "density": density, "found": found,
           "query": query, "item": item, "neighbours": [], "box": box, "in_box": tools.points_in_box(pts, box), "k": k}
    if item is not None and "run_id" in pts:
        idx = int(pts.loc[pts["item_id"].astype(str) == item, "idx"].iloc[0])
        items = view(views.items, dataset)
        out["focus"] = [idx]
        for (series, run_id, layer) in pts[["series", "run_id", "layer"]].drop_duplicates().itertuples(index=False):
            nn = tools.neighbour_rows(view(views.neighbours, run_id, int(layer), idx, k), items)
            out["neighbours"].append((series, nn))
            out["focus"] += list(nn["idx"])
    return out


def panels(state: dict) -> None:
    """Under the map: the search's matches, the focus item's neighbours, the box's items with a CSV."""
    if state["query"]:
        found = state["found"]
        st.markdown(f"**Search** — {len(found)} item(s) match “{md_escape(state['query'])}” (ringed in black)")
        if len(found):
            st.dataframe(found[["item_id", "caption"]], hide_index=True, width="stretch", key="search_results")
    if state["item"] is not None:
        st.markdown(f"**Nearest {state['k']} items to {md_escape(state['item'])}** (ringed in red) — cosine in the "
                    "stored embedding space at the map's layer, not distance on the map")
        for series, nn in state["neighbours"]:
            st.caption(md_escape(series))
            neighbour_table(nn, key=f"nn_{series}")
    if state["box"] is not None:
        sel = state["in_box"]
        st.markdown(f"**Box selection** — {len(sel)} point(s), {sel['idx'].nunique() if len(sel) else 0} item(s)")
        if len(sel):
            st.dataframe(sel[tools.EXPORT_COLUMNS], hide_index=True, width="stretch", key="box_items")
            st.download_button("Download selection (CSV)", tools.selection_csv(sel), file_name="map_selection.csv",
                               mime="text/csv", key="dl_selection")
    elif not state["density"]:
        st.caption("Drag on the map to select a box of points; click a point for its neighbours (double-click clears).")
