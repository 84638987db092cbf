"""Rendering helpers of the embedding-map and neighbours tools: frame thumbnails, an item's frame
strip, a text box whose value lives in the URL, a neighbours table with thumbnails. Render only: the logic is in
:mod:`analysis.views.embedding_tools`."""

import streamlit as st

from analysis.methods.embedding_map import frame_data_uri
from analysis.views.embedding_tools import clean_query
from analysis.views.text import md_escape
from pages._shared import own_params


@st.cache_data(show_spinner="Reading one frame per item for the thumbnails…", max_entries=8)
def thumbnails(videos: tuple, where: str = "") -> tuple[dict, str | None]:
    """``{video: data URI}`` of each video's first frame, and a note when some could not be read
    (videos on another machine than the store: captions only); ``where`` says where frames would show
    (" on hover")."""
    from precompute.inputs.video import poster_frame

    out, failed, first_error = {}, 0, None
    # five videos spread over the list are tried first: when all five fail the videos are taken to be
    # elsewhere (another machine) and the rest is not tried; a list whose first few are missing (missing
    # paths can sort first) still gets the frames of the others
    n = len(videos)
    probe = sorted({round(i * (n - 1) / 4) for i in range(5)}) if n else []
    tried = set(probe)
    videos = tuple(videos[i] for i in probe) + tuple(v for i, v in enumerate(videos) if i not in tried)
    for v in videos:
        try:
            out[v] = frame_data_uri(poster_frame(v))
        except Exception as exc:  # noqa: BLE001 - a missing or unreadable video only loses its thumbnail
            failed += 1
            first_error = first_error or str(exc)
            if not out and failed >= 5:  # the videos are not here at all: stop trying
                failed = len(videos) - len(out)
                break
    note = None if not failed else (f"{failed} of {len(videos)} item(s) have no frame{where} (captions only): "
                                    f"{first_error}")
    return out, note


def pick_text(label: str, *, param: str, container=st, help=None, placeholder: str = "") -> str:
    """A text box whose value lives in the URL (``?param=text``), cleaned by
    :func:`analysis.views.embedding_tools.clean_query` (printable, at most 200 characters); ``""`` for none."""
    own_params(param)
    value = container.text_input(label, value=clean_query(st.query_params.get(param, "")), key=f"pick_{param}",
                                 help=help, placeholder=placeholder)
    value = clean_query(value)
    if value:
        st.query_params[param] = value
    elif param in st.query_params:
        del st.query_params[param]
    return value


#: pixels of a neighbours table's row: its first-frame thumbnails are drawn at this height (72 px JPEGs)
THUMB_ROW = 64
#: frames in an item's strip, and each frame's width in pixels
STRIP_FRAMES, STRIP_WIDTH = 6, 120


def frame_strip(video, *, container=st, n: int = STRIP_FRAMES, width: int = STRIP_WIDTH) -> None:
    """``n`` frames spread over an item's video, ``width`` pixels each; a one-line note when the video
    cannot be read here (it may live on another machine than the store). Nothing for a text item."""
    if not isinstance(video, str):
        return
    try:
        from PIL import Image

        from precompute.inputs.video import read_video, sample_indices

        strip = [Image.fromarray(f) for f in read_video(video, lambda T: sample_indices(T, n)).frames]
        container.image(strip, width=width)
    except Exception as exc:  # noqa: BLE001 - a missing or unreadable video only loses its strip
        container.caption(md_escape(f"frames unavailable: {exc}"))


def neighbour_table(rows, *, container=st, key: str | None = None):
    """A neighbours table (:func:`analysis.views.embedding_tools.neighbour_rows`) with each neighbour's
    first frame as a thumbnail (rows :data:`THUMB_ROW` pixels high) where its video can be read here;
    a one-line note when some cannot."""
    uris, note = thumbnails(tuple(sorted(set(rows["video"])))) if len(rows) else ({}, None)
    shown = rows.assign(frame=rows["video"].map(uris))[["rank", "frame", "item_id", "cosine", "caption"]]
    container.dataframe(shown, hide_index=True, width="stretch", key=key, row_height=THUMB_ROW,
                        column_config={"frame": st.column_config.ImageColumn("frame", width="small"),
                                       "cosine": st.column_config.NumberColumn("cosine", format="%.4f")})
    if note:
        container.caption(md_escape(note))
