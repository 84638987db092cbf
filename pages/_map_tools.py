"""The Embedding map page's tools, rendered: search over every caption and metadata value (a regular
expression on request), a clicked item's neighbours at the map's layer (with thumbnails), a box
selection or a lasso listed and exported, the density view. Every value lives in the URL (``q``, ``regex``,
``focus``, ``nk``, ``select``, ``box``, ``lasso``, ``density``); a click, a drag or a lasso on the map writes
it there. The logic is in :mod:`analysis.views.embedding_tools`, :mod:`analysis.views.map_lasso` and
:mod:`analysis.views.item_search`."""

import streamlit as st

from analysis.views import embedding_tools as tools
from analysis.views import item_search, map_lasso
from analysis.views.neighbours import items as dataset_items, neighbours
from analysis.views.text import md_escape
from pages._shared import own_params, pick, pick_flag, pick_int, view
from pages import _map_items
from pages._tools import frame_strip, neighbour_table, pick_text

#: the focus selectbox's empty choice
NO_ITEM = "(none)"
FOCUS_KEY = "pick_focus"
#: the map's selection tools: Altair's click and box, or Plotly's click and lasso
SELECT_MODES = {"box": "Click or box", "lasso": "Click or lasso"}


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
    part of the chart's selection changed; a cleared part clears its value. A drag ends in a click on
    the chart's background, which empties the point selection in the same event: a new box with an
    emptied click keeps the clicked item. The URL wins until the chart changes."""
    sel = _selection(st.session_state.get(chart_key))
    seen_key = f"_seen_{chart_key}"
    seen = st.session_state.get(seen_key, {})
    st.session_state[seen_key] = sel
    dragged = sel.get(tools.BOX) != seen.get(tools.BOX) and bool(sel.get(tools.BOX))
    if sel.get(tools.PICK) != seen.get(tools.PICK) and not (dragged and not sel.get(tools.PICK)):
        clicked = tools.picked_items(sel, pts)
        ids = dict(zip(pts["idx"], pts["item_id"]))
        st.session_state[FOCUS_KEY] = str(ids[clicked[-1]]) if clicked else NO_ITEM
    if sel.get(tools.BOX) != seen.get(tools.BOX):
        box = tools.box_from_selection(sel)
        if box is not None:
            st.query_params["box"] = tools.box_param(box)
        elif "box" in st.query_params:
            del st.query_params["box"]


def _apply_lasso_events(chart_key: str, pts) -> None:
    """A new lasso on the Plotly map becomes the URL's ``lasso`` (thinned, rounded to the map's scale), a
    new click the focus item. An empty selection changes nothing: Streamlit names a Plotly chart by its
    figure, so a figure with new rings starts with an empty selection, which is no request to clear
    (the sidebar's button clears the lasso). The URL wins until the chart changes."""
    sel = _selection(st.session_state.get(chart_key))
    seen_key = f"_seen_{chart_key}"
    seen = st.session_state.get(seen_key, {})
    st.session_state[seen_key] = sel
    if sel == seen:
        return
    polygon = map_lasso.lasso_from_selection(sel)
    if polygon is not None:
        st.query_params["lasso"] = map_lasso.lasso_param(polygon, map_lasso.decimals_for(pts))
        return
    clicked = map_lasso.clicked_idx(sel)
    ids = dict(zip(pts["idx"], pts["item_id"]))
    if clicked in ids:
        st.session_state[FOCUS_KEY] = str(ids[clicked])


def _apply_table_pick() -> None:
    """A new row picked in the per-item table becomes the focus item (the table lists the ids it showed
    under :data:`pages._map_items.TABLE_IDS`); a cleared pick leaves the focus as it is."""
    rows = _selection(st.session_state.get(_map_items.TABLE_KEY)).get("rows") or []
    seen_key = f"_seen_{_map_items.TABLE_KEY}"
    if rows == st.session_state.get(seen_key, []):
        return
    st.session_state[seen_key] = rows
    ids = st.session_state.get(_map_items.TABLE_IDS) or []
    if rows and 0 <= int(rows[0]) < len(ids):
        st.session_state[FOCUS_KEY] = str(ids[int(rows[0])])


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
    """The sidebar's tools and what they select: ``{"chart_key", "points", "keep", "pair", "highlight",
    "focus", "density", "found", "query", "item", "neighbours", "box", "in_box", "k", "records"}``
    (``points``: the map's points the metadata filter keeps; ``keep``: their ``idx``, None without a
    filter; ``pair``: the per-item table's two layers; ``highlight``/``focus``: item ``idx`` ringed on
    the map; ``neighbours``: one table per series of the map)."""
    chart_key = f"embedding_map_{result_id}"  # a selection belongs to one map
    own_params("box", "focus", "lasso")
    _apply_chart_events(chart_key, pts)
    _apply_lasso_events(f"{chart_key}_lasso", pts)
    _apply_table_pick()
    st.sidebar.markdown("**Explore**")
    records = view(item_search.item_records, dataset)
    query, regex = _search_box()
    keep = _map_items.filter_controls(records)
    every = pts  # an item hidden by the filter can still be inspected (a link may name it)
    if keep is not None:
        pts = pts[pts["idx"].isin(keep)]
    search = item_search.search_items(records, query, regex=regex, only=pts["idx"].unique())  # items drawn
    if search.message:
        st.warning(md_escape(search.message))
    found = search.found
    item = _focus_item(every)
    n_items = int(meta.get("n_items") or every["idx"].nunique())
    k = pick_int("Neighbours (k)", 1, max(1, min(20, n_items - 1)), param="nk", default=5, container=st.sidebar)
    density = tools.use_density(len(pts), pick_flag(
        "Density view", param="density", container=st.sidebar,
        help=f"binned counts instead of points (always above {tools.DENSITY_THRESHOLD} points)"))
    mode, box, lasso = _selection_tools()
    density = density and mode == "box"  # Plotly draws every point (WebGL above the threshold)
    pair = _map_items.compare_controls(every, dataset, sampled=bool(meta.get("sampled"))) if len(every) else None
    selected = tools.points_in_box(pts, box) if mode == "box" else map_lasso.points_in_lasso(pts, lasso)
    out = {"chart_key": chart_key, "lasso_key": f"{chart_key}_lasso", "select": mode, "lasso": lasso,
           "points": pts, "keep": keep, "pair": pair, "linked": _map_items.linked_flag(pair),
           "highlight": list(found["idx"]), "focus": [], "density": density, "found": found, "query": query,
           "item": item, "video": None, "captions": [], "neighbours": [], "box": box,
           "in_box": selected, "k": k, "records": records, "dataset": dataset}
    if item is not None and "run_id" in every:
        _inspect(out, every, records, dataset, item, k)
    return out


def _selection_tools() -> tuple[str, tuple | None, object]:
    """The map's selection mode (``select``: box or lasso) and the URL's box and lasso:
    ``(mode, box, lasso)``, the other mode's value ``None``; a bad value gives a one-line note."""
    mode = pick("Select with", list(SELECT_MODES), param="select", default="box", widget="radio",
                container=st.sidebar, fmt=SELECT_MODES.get,
                help="a box on the Vega-Lite map (frames on hover, density view), or a free-hand lasso on the "
                     "same map drawn with Plotly (text on hover)")
    box, message = tools.parse_box(st.query_params.get("box"))
    if message:
        st.warning(md_escape(message))
        del st.query_params["box"]
    lasso, message = map_lasso.parse_lasso(st.query_params.get("lasso"))
    if message:
        st.warning(md_escape(message))
        del st.query_params["lasso"]
    if mode == "lasso" and lasso is not None and st.sidebar.button("Clear the lasso", key="clear_lasso"):
        del st.query_params["lasso"]
        lasso = None
    return mode, box if mode == "box" else None, lasso if mode == "lasso" else None


def _search_box() -> tuple[str, bool]:
    """The search box and its regular-expression switch: ``(query, regex)``."""
    query = pick_text("Search captions, metadata or item id", param="q", container=st.sidebar,
                      help="every caption of each item and every metadata value, case-insensitive; matches are "
                           "ringed in black and listed under the map")
    regex = pick_flag("Regular expression", param="regex", container=st.sidebar,
                      help="search with a Python regular expression (e.g. `angle (7|14)$`) instead of plain text")
    return query, regex


def _inspect(out: dict, every, records, dataset: str, item: str, k: int) -> None:
    """The inspected item into ``out``: its ``video`` and ``captions``, and its k nearest items in each
    series of the map (``neighbours``; ``focus``: the item's ``idx`` then theirs, ringed red)."""
    idx = int(every.loc[every["item_id"].astype(str) == item, "idx"].iloc[0])
    items = view(dataset_items, dataset)
    row = records[records["idx"] == idx].iloc[0]
    out.update(focus=[idx], video=row["video"], captions=list(row["captions"]))
    for (series, run_id, layer) in every[["series", "run_id", "layer"]].drop_duplicates().itertuples(index=False):
        nn = tools.neighbour_rows(view(neighbours, run_id, int(layer), idx, k), items)
        out["neighbours"].append((series, nn))
        out["focus"] += list(nn["idx"])


def panels(state: dict) -> None:
    """Under the map: the search's matches, the focus item's neighbours, the box's items with a CSV."""
    if state["query"]:
        found = state["found"]
        st.markdown(f"**Search** — {len(found)} item(s) match “{md_escape(state['query'])}” (ringed in black)")
        if len(found):
            st.dataframe(found[["item_id", "caption", "matched"]], hide_index=True, width="stretch",
                         key="search_results")
    if state["item"] is not None:
        st.markdown(f"**Nearest {state['k']} items to {md_escape(state['item'])}** (ringed in red) — cosine in the "
                    "stored embedding space at the map's layer, not distance on the map")
        if state["captions"]:
            st.caption(" · ".join(md_escape(c) for c in state["captions"]))  # every caption, whole
        frame_strip(state["video"])
        for series, nn in state["neighbours"]:
            st.caption(md_escape(series))
            neighbour_table(nn, key=f"nn_{series}")
    if state["box"] is not None or state["lasso"] is not None:
        sel = state["in_box"]
        what = "Box" if state["box"] is not None else "Lasso"
        st.markdown(f"**{what} selection** — {len(sel)} point(s), {sel['idx'].nunique() if len(sel) else 0} item(s)")
        if len(sel):
            rows = tools.selection_table(sel, state["records"])  # every caption whole, metadata, run, layer
            st.dataframe(rows, hide_index=True, width="stretch", key="box_items")
            st.download_button("Download selection (CSV)", rows.to_csv(index=False).encode("utf-8"),
                               file_name="map_selection.csv", mime="text/csv", key="dl_selection")
            if state["pair"] is not None:
                _map_items.selection_alignment(state["pair"], sel["idx"].unique())
    elif not state["density"]:
        st.caption("Drag on the map to select a box of points; click a point for its neighbours (double-click clears). "
                   "For a free-hand selection, pick “Click or lasso” under Select with in the sidebar."
                   if state["select"] == "box" else
                   "Draw round points to select them with a lasso (the link keeps its outline, up to "
                   f"{map_lasso.MAX_VERTICES} corners; the sidebar's button clears it). To inspect a point, pick "
                   "Pan in the chart's toolbar and click it (Plotly's lasso tool takes a click for a deselection), "
                   "or pick it under Item's neighbours.")
    if state["pair"] is not None:
        _map_items.table_panel(state["pair"], state["dataset"], state["keep"])

