import streamlit as st

from analysis.methods.embedding_map import sample_items
from analysis.views import embedding_map as map_view
from analysis.views import embedding_tools as tools
from analysis.views import map_lasso
from analysis.views.neighbours import runs_for_neighbours
from analysis.views.store_info import model_labels
from analysis.views.text import md_escape
from pages._shared import (
    background_job,
    dataset_picker,
    download_data,
    pick,
    pick_flag,
    require_results,
    require_store,
    store_path,
    view,
)
from pages._tools import thumbnails
from pages import _map_items, _map_tools

#: items that get a frame thumbnail on hover (one first-frame decode each; more are sampled)
THUMB_CAP = 200


st.title("Embedding map")
st.caption("UMAP (or PCA, t-SNE) of one layer of one run, or of a model's video and text sides together where they "
           "share a space: clusters, outliers and the modality gap as points. Hover a point for its item, caption and "
           "a frame; search every caption and metadata value, or filter by a field, in the sidebar; click a point for "
           "its frames and neighbours; drag a box (or draw a lasso) to list and export its items; the table under the map lists the "
           "items two layers disagree on. Computed by `layerscope analyze` (cosine geometry, exact k-NN graph, fixed seed); "
           "two-sided maps also by PCA and t-SNE, as TARA pictures the gap.")
require_store()
dataset = dataset_picker()
maps = view(map_view.embedding_maps, dataset)
require_results("embedding maps", not maps.empty)
labels = view(model_labels)
METHOD_NAMES = {"umap": "UMAP", "pca": "PCA", "tsne": "t-SNE"}
methods = [m for m in METHOD_NAMES if m in set(maps["method"])]
method = pick("Method", methods, param="method", default="umap", widget="radio", container=st.sidebar,
              fmt=METHOD_NAMES.get, help="PCA: the first two principal components (distances are faithful, "
              "a gap between the sides shows its size); t-SNE and UMAP: neighbourhoods (a gap shows, its size less so)")
maps = maps[maps["method"] == method]
subjects = list(maps["subject"])
why = dict(zip(maps["subject"], maps["why"]))
random_init = {s: any(labels.get(m, m) != m for m in models) for s, models in zip(maps["subject"], maps["models"])}
subject = pick("Map", subjects, param="map", container=st.sidebar,
               fmt=lambda s: f"{s}{' (random init)' if random_init.get(s) else ''} — {why.get(s, '')}")
row = maps[maps["subject"] == subject].iloc[0]
mp = view(tools.map_points_for_tools, row["result_id"])
meta = mp["meta"]
ri = [m for m, r in zip(meta["models"], meta["random_init"]) if r]
if ri:
    st.info(md_escape(f"{', '.join(sorted(set(ri)))}: random-init weights (a control), not a trained model."))

if mp["reason"]:
    st.warning(md_escape(f"No map of {subject}: {mp['reason']}"))
else:
    pts = mp["points"]
    videos = sorted({v for v in pts["video"] if isinstance(v, str)})  # none in a text-only dataset
    show_frames = bool(videos) and pick_flag("Frames on hover", param="frames", default=True, container=st.sidebar)
    colour = pick("Colour by", ["series"] + list(meta["fields"]), param="colour", container=st.sidebar,
                  help="the model side and layer, or a field of the items' metadata (numbers on a continuous scale)")
    tooltip = ["series:N", "item_id:N", "caption:N"] + ([f"{colour}:N"] if colour != "series" else [])
    if show_frames:
        keep = [videos[i] for i in sample_items(len(videos), THUMB_CAP, 0)]
        uris, note = thumbnails(tuple(keep), " on hover")
        pts = pts.assign(image=pts["video"].map(uris))
        tooltip.append("image")  # vega-tooltip draws a field named "image" as a picture
        if len(videos) > THUMB_CAP:
            st.caption(f"Frames on hover for {THUMB_CAP} sampled items of {len(videos)}.")
        if note:
            st.caption(md_escape(note))
    two_sided = meta["kind"] == "pair"
    connect = two_sided and pick_flag("Connect each item's two points", param="links", container=st.sidebar)
    tools_state = _map_tools.controls(pts, meta, dataset, row["result_id"])  # search, density, the clicked item, the box
    pts = tools_state["points"]  # the items the metadata filter keeps
    here, beside = st.columns(2) if tools_state["linked"] else (st, None)
    if beside is not None:
        here.markdown(f"**{md_escape(tools_state['pair']['a_text'])}**")
    if tools_state["select"] == "lasso":
        fig = map_lasso.lasso_figure(pts, colour=colour, kind=meta["fields"].get(colour, "nominal"),
                                     two_sided=two_sided, tooltip_fields=[t.split(":")[0] for t in tooltip],
                                     highlight=tools_state["highlight"], focus=tools_state["focus"],
                                     lasso=tools_state["lasso"])
        here.plotly_chart(fig, width="stretch", key=tools_state["lasso_key"], on_select="rerun",
                          selection_mode=("lasso", "points"))
    else:
        chart = tools.explore_chart(pts, colour=colour, kind=meta["fields"].get(colour, "nominal"),
                                    two_sided=two_sided, connect=connect,
                                    tooltip_fields=[t.split(":")[0] for t in tooltip],
                                    highlight=tools_state["highlight"], focus=tools_state["focus"],
                                    density=tools_state["density"], box=tools_state["box"])
        here.altair_chart(chart, width="stretch", key=tools_state["chart_key"], on_select="rerun",
                          selection_mode=tools.selection_modes(tools_state["density"]))
    if beside is not None:
        _map_items.linked_map(beside, tools_state, dataset, method)
    how = {"umap": f"UMAP n_neighbors={meta['n_neighbors']}, min_dist={meta['min_dist']}, seed={meta['seed']}",
           "pca": "PCA of the unit rows (first two components)",
           "tsne": f"t-SNE (sklearn, seed={meta['seed']})"}[meta["method"]]
    drawn = mp["points"]
    notes = [f"{len(drawn)} points; {how}; {meta['why']}"]
    if tools_state["keep"] is not None:
        notes.append(f"the filter shows {pts['idx'].nunique()} of {drawn['idx'].nunique()} items")
    if meta.get("sampled"):
        notes.append(f"a seeded sample of {len(drawn) // len(meta['models'])} of {meta['n_items']} items")
    if meta.get("n_duplicates"):
        notes.append(f"{meta['n_duplicates']} point(s) duplicate others and are drawn on top of them")
    if meta["kind"] == "pair":
        notes.append(map_view.gap_text(view(map_view.map_modality_gap, meta["dataset"], tuple(meta["run_ids"]),
                                                tuple(int(x) for x in meta["layers"]))))
    st.caption(md_escape("; ".join(notes)))
    download_data(tools.selection_table(pts, tools_state["records"]), "embedding_map")  # every caption, all metadata
    _map_tools.panels(tools_state)

with st.expander("Map another layer"):
    runs = view(runs_for_neighbours, dataset)
    models = sorted(runs["model"].unique())
    if models:
        c1, c2, c3 = st.columns(3)
        model = c1.selectbox("Model", models, format_func=lambda m: labels.get(m, m), key="other_model")
        mine = runs[runs["model"] == model]
        side_options = ["auto"] + (["video", "text", "both"] if mine["modality"].nunique() > 1 else [])
        side = c2.selectbox("Side", side_options, key="other_side")
        n_layers = int(mine["n_layers"].max())
        layer = c3.number_input("Layer", 0, n_layers - 1, n_layers - 1, key="other_layer")
        other_method = st.radio("Method", list(METHOD_NAMES), format_func=METHOD_NAMES.get, horizontal=True,
                                key="other_method")
        st.caption("The page itself only reads the store: the map is computed in a background process (a first "
                   "UMAP takes up to half a minute) and appears in the Map picker when it is done; later "
                   "`analyze` runs keep it current. The same from the command line:")
        st.code(map_view.map_command(store_path(), dataset, model, int(layer), side, other_method), language="bash")
        background_job("map", "Compute this map in the background",
                       request={"dataset": dataset, "model": model, "layer": int(layer), "side": side,
                                "method": other_method},
                       help="one map with the store's saved settings (seed, clamp), in a subprocess")
