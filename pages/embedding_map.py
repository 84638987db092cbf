import streamlit as st

from analysis import views
from analysis.methods.embedding_map import frame_data_uri, sample_items
from analysis.views import map_command, md_escape
from pages._shared import (
    dataset_picker,
    download_data,
    open_page,
    pick,
    pick_flag,
    pick_text,
    require_results,
    require_store,
    store_path,
    view,
)

#: items that get a frame thumbnail on hover (one first-frame decode each; more are sampled)
THUMB_CAP = 200


@st.cache_data(show_spinner="Reading one frame per item for the hover thumbnails…", max_entries=8)
def thumbnails(videos: tuple) -> tuple[dict, str | None]:
    """``{video: data URI}`` of each video's first frame, and a note when some could not be read
    (videos on another machine than the store: the map then shows captions only)."""
    from precompute.video import poster_frame

    out, failed, first_error = {}, 0, None
    for v in videos:
        try:
            out[v] = frame_data_uri(poster_frame(v))
        except Exception as exc:  # noqa: BLE001 - a missing or unreadable video only loses its thumbnail
            failed += 1
            first_error = first_error or str(exc)
            if not out and failed >= 5:  # the videos are not here at all: stop trying
                failed = len(videos) - len(out)
                break
    note = None if not failed else (f"{failed} of {len(videos)} item(s) have no frame on hover (captions only): "
                                    f"{first_error}")
    return out, note


st.title("Embedding map")
st.caption("UMAP of one layer of one run, or of a model's video and text sides together where they share a space: "
           "clusters, outliers and the modality gap as points. Hover a point for its item, caption and a frame; "
           "find items by caption or id in the sidebar; drag a box to list and export its items; click a point for its "
           "item's neighbours in this space. "
           "Computed by `layerscope analyze` (cosine geometry, exact k-NN graph, fixed seed).")
require_store()
dataset = dataset_picker()
maps = view(views.embedding_maps, dataset)
require_results("embedding maps", not maps.empty)
labels = view(views.model_labels)
subjects = list(maps["subject"])
why = dict(zip(maps["subject"], maps["why"]))
random_init = {s: any(labels.get(m, m) != m for m in models) for s, models in zip(maps["subject"], maps["models"])}
subject = pick("Map", subjects, param="map", container=st.sidebar,
               fmt=lambda s: f"{s}{' (random init)' if random_init.get(s) else ''} — {why.get(s, '')}")
row = maps[maps["subject"] == subject].iloc[0]
mp = view(views.embedding_map_points, row["result_id"])
meta = mp["meta"]
ri = [m for m, r in zip(meta["models"], meta["random_init"]) if r]
if ri:
    st.info(md_escape(f"{', '.join(sorted(set(ri)))}: random-init weights (a control), not a trained model."))

if mp["reason"]:
    st.warning(md_escape(f"No map of {subject}: {mp['reason']}"))
else:
    pts = mp["points"]
    show_frames = pick_flag("Frames on hover", param="frames", default=True, container=st.sidebar)
    colour = pick("Colour by", ["series"] + meta["colour_fields"], param="colour", container=st.sidebar,
                  help="the model side and layer, or a field of the items' metadata")
    tooltip = ["series:N", "item_id:N", "caption:N"] + ([f"{colour}:N"] if colour != "series" else [])
    if show_frames:
        videos = sorted(set(pts["video"]))
        keep = [videos[i] for i in sample_items(len(videos), THUMB_CAP, 0)]
        uris, note = thumbnails(tuple(keep))
        pts = pts.assign(image=pts["video"].map(uris))
        tooltip.append("image")  # vega-tooltip draws a field named "image" as a picture
        if len(videos) > THUMB_CAP:
            st.caption(f"Frames on hover for {THUMB_CAP} sampled items of {len(videos)}.")
        if note:
            st.caption(md_escape(note))
    two_sided = meta["kind"] == "pair"
    connect = two_sided and pick_flag("Connect each item's two points", param="links", container=st.sidebar)
    query = pick_text("Find items", param="find", container=st.sidebar, placeholder="caption or item id",
                      help="rings every point whose item id or caption contains this text")
    found = views.find_points(pts, query)
    chart = views.map_chart(pts, colour=colour, two_sided=two_sided, connect=connect, found=found, box=True,
                            tooltip_fields=[t.split(":")[0] for t in tooltip])
    event = st.altair_chart(chart, width="stretch", key="embedding_map", on_select="rerun",
                            selection_mode=["box", "point"])
    clicked = views.clicked_point(pts, event)
    if clicked is not None:  # a click on a point: its item's neighbours in this very space
        if st.button(f"Neighbours of {md_escape(clicked['item_id'])} in {md_escape(clicked['series'])} →",
                     key="map_to_neighbours"):
            open_page("neighbours", views.neighbours_params(meta, clicked))
    if query:
        st.caption(md_escape(f"{int(found.sum())} of {len(pts)} point(s) match “{query}” (ringed in black)."))
        if found.any():
            st.dataframe(pts.loc[found, ["item_id", "series", "caption"]], hide_index=True, width="stretch")
    picked = views.box_selected(pts, event)
    if len(picked):  # drag a box on the map: its items are listed and exportable
        st.subheader(f"Box selection: {len(picked)} point(s)")
        st.dataframe(picked[["item_id", "series", "caption"]], hide_index=True, width="stretch")
        download_data(picked.drop(columns=[c for c in ("image",) if c in picked]), "embedding_map_selection",
                      label="Download the selection (CSV)")
    notes = [(f"{len(pts)} points; UMAP n_neighbors={meta['n_neighbors']}, min_dist={meta['min_dist']}, "
              f"seed={meta['seed']}; {meta['why']}")]
    if meta.get("sampled"):
        notes.append(f"a seeded sample of {len(pts) // len(meta['models'])} of {meta['n_items']} items")
    if meta.get("n_duplicates"):
        notes.append(f"{meta['n_duplicates']} point(s) duplicate others and are drawn on top of them")
    if meta["kind"] == "pair":
        notes.append(views.gap_text(view(views.map_modality_gap, meta["dataset"], tuple(meta["run_ids"]),
                                                tuple(int(x) for x in meta["layers"]))))
    st.caption(md_escape("; ".join(notes)))
    download_data(pts.drop(columns=[c for c in ("image",) if c in pts]), "embedding_map")

with st.expander("Map another layer"):
    runs = view(views.runs_for_neighbours, dataset)
    models = sorted(runs["model"].unique())
    if models:
        c1, c2, c3 = st.columns(3)
        model = c1.selectbox("Model", models, format_func=lambda m: labels.get(m, m), key="other_model")
        mine = runs[runs["model"] == model]
        side_options = ["auto"] + (["video", "text", "both"] if mine["modality"].nunique() > 1 else [])
        side = c2.selectbox("Side", side_options, key="other_side")
        n_layers = int(mine["n_layers"].max())
        layer = c3.number_input("Layer", 0, n_layers - 1, n_layers - 1, key="other_layer")
        st.caption("The dashboard only reads the store, and a first UMAP takes up to half a minute, so maps are "
                   "computed from the command line; refresh this page when it is done (later `analyze` runs keep "
                   "the map current).")
        st.code(map_command(store_path(), dataset, model, int(layer), side), language="bash")
