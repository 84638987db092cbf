"""The Model map page's data and charts."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.views.charts import lazy_altair, wrapped_title


def model_map_view(payload: dict) -> dict:
    """The model map as tables: ``cells`` one row per (model_a, model_b) with the similarity and the
    pair kind of the two runs compared (``vision_text``, ``vision_vision``, ``text_text``; empty on the
    diagonal), ``order`` the clustering's order, ``coords`` the 2-D map."""
    from analysis.sides import pair_kind

    names = payload["models"]
    S = np.asarray(payload["similarity"])
    order = [names[i] for i in payload["order"]]
    settings = payload["settings"]
    cells = [{"model_a": names[i], "model_b": names[j], "similarity": float(S[i, j]),
              "pair_kind": "" if i == j else pair_kind(settings[names[i]], settings[names[j]])}
             for i in range(len(names)) for j in range(len(names))]
    coords = pd.DataFrame({"model": names, "x": [c[0] for c in payload["coords"]],
                           "y": [c[1] for c in payload["coords"]], "cluster": [str(c) for c in payload["clusters"]],
                           "modality": [payload["settings"][m]["modality"] for m in names]})
    return {"cells": pd.DataFrame(cells), "order": order, "coords": coords}


def model_map_title(payload: dict, *, dataset: str, labels: dict) -> dict:
    """The model map's chart title: what it shows, the dataset, and each model's largest budget."""
    from analysis.views.charts import chart_title

    budgets = sorted({f"n_f {v['n_frames']}" for v in payload["settings"].values() if v.get("n_frames")}
                     | {f"n_c {v['n_captions']}" for v in payload["settings"].values() if v.get("n_captions")})
    return chart_title("Best-layer mutual k-NN between models", dataset=dataset,
                       details=["each model at its largest budget: " + ", ".join(budgets)] if budgets else [],
                       labels=labels, models=payload["models"])


#: why the model map is empty
MODEL_MAP_OMITTED = "no model map (needs at least two models, then `layerscope analyze`)"


def model_map_section(con, dataset, *, models=None, references=None) -> "Section":
    """The Model map page's section: the stored study (``data``), the similarity matrix and the 2-D map
    (:func:`model_map_charts`, titled by :func:`model_map_title`), and a note naming the model pairs
    no layer pair of which could be scored (placed as unrelated on the map). ``models`` and
    ``references`` are accepted for the report's loop and not used: the map places every model."""
    from analysis.views.nuance import collapse_notes
    from analysis.views.section import Section
    from analysis.views.store_info import model_labels, study

    payload = study(con, "model_map", dataset)
    if not payload:
        return Section(None, omitted=MODEL_MAP_OMITTED)
    labels = model_labels(con)
    heat, scatter = model_map_charts(model_map_view(payload), labels=labels,
                                     title=model_map_title(payload, dataset=dataset, labels=labels))
    notes = ()
    if payload.get("undefined_pairs"):
        notes = ("No layer pair of these models could be scored (degenerate layers); they are placed as unrelated "
                 "(similarity 0) on the map: " + "; ".join(collapse_notes(
                     [f"{' × '.join(p['models'])}: {p['reason']}" for p in payload["undefined_pairs"]])),)
    return Section(payload, charts=(("model × model best-layer alignment", heat),
                                    ("the models on a 2-D map (classical MDS of 1 − similarity)", scatter)),
                   notes=notes)


def model_map_charts(mv: dict, *, labels: dict, title: dict | None = None):
    """The model map's two charts: the similarity matrix (values written in the cells while the
    matrix is small enough to read) and the 2-D map with one shape per modality, one colour per
    cluster, and equal scales on both axes (a distance on the map means the same either way).
    Model names carry "(random init)". Returns ``(matrix, map)``."""
    alt = lazy_altair()
    cells = mv["cells"].assign(model_a=mv["cells"]["model_a"].map(lambda m: labels.get(m, m)),
                               model_b=mv["cells"]["model_b"].map(lambda m: labels.get(m, m)))
    order = [labels.get(m, m) for m in mv["order"]]
    # whole names: "(random init)" was cut to "(rando…" at the default label limit, so no limit
    base = alt.Chart(cells).encode(x=alt.X("model_b:N", sort=order, title=None, axis=alt.Axis(labelLimit=0)),
                                   y=alt.Y("model_a:N", sort=order, title=None, axis=alt.Axis(labelLimit=0)))
    heat = base.mark_rect().encode(color=alt.Color("similarity:Q", scale=alt.Scale(scheme="viridis"),
                                                   title="mutual k-NN", legend=alt.Legend(orient="bottom")),
                                   tooltip=["model_a", "model_b", alt.Tooltip("similarity:Q", format=".3f"),
                                            alt.Tooltip("pair_kind:N", title="pair kind")])
    if len(order) <= 10:
        heat = heat + base.mark_text(fontSize=11).encode(
            text=alt.Text("similarity:Q", format=".2f"),
            color=alt.condition(alt.datum.similarity > 0.5 * float(cells["similarity"].max() or 1),
                                alt.value("black"), alt.value("white")))
    coords = mv["coords"].assign(model=mv["coords"]["model"].map(lambda m: labels.get(m, m)))
    half = max(float(np.ptp(coords["x"])), float(np.ptp(coords["y"])), 1e-9) / 2 * 1.25
    cx, cy = float(coords["x"].mean()) if len(coords) else 0.0, float(coords["y"].mean()) if len(coords) else 0.0
    dom_x, dom_y = [cx - half, cx + half], [cy - half, cy + half]
    sx = alt.Scale(domain=dom_x, nice=False, zero=False)
    sy = alt.Scale(domain=dom_y, nice=False, zero=False)
    points = alt.Chart(coords).mark_point(filled=True, size=220, opacity=0.9).encode(
        x=alt.X("x:Q", title="MDS 1", scale=sx), y=alt.Y("y:Q", title="MDS 2", scale=sy),
        color=alt.Color("cluster:N", title="cluster", legend=alt.Legend(orient="bottom")),
        shape=alt.Shape("modality:N", title="modality", legend=alt.Legend(orient="top")),
        tooltip=["model", "modality", "cluster"])
    side = 260  # with the legends above and below, the map and its axes fit a phone's column
    # labels placed beside their points without overlapping each other or a marker; one that finds no
    # free place is left off (the point's tooltip names it)
    from analysis.views.label_layout import label_positions

    spots = label_positions(coords["x"], coords["y"], coords["model"], domain_x=dom_x, domain_y=dom_y,
                            side=side)
    coords_l = coords.assign(lx=[s[0] if s else None for s in spots], ly=[s[1] if s else None for s in spots])
    names = alt.Chart(coords_l[coords_l["lx"].notna()]).mark_text(
        fontSize=11, align="center", baseline="middle").encode(x=alt.X("lx:Q", scale=sx), y=alt.Y("ly:Q", scale=sy),
                                                               text="model:N")
    # "pad": the plot is exactly side × side and the names, legends and titles go around it. Under
    # Streamlit's default fit they came out of the 380 px, which left a 220 px map whose labels (placed
    # for 380 px) overlapped, and 22 px matrix cells. One legend above, one below, titles wrapped: a
    # phone's column holds the charts (beside them, the map was 541 px wide)
    pad = alt.AutoSizeParams(type="pad")
    cell = min(300, max(120, 30 * len(order)))
    matrix = heat.properties(width=cell, height=cell, autosize=pad)
    mapped = (points + names).properties(width=side, height=side, autosize=pad)  # square, same span: equal scales
    if title:
        matrix = matrix.properties(title=wrapped_title(title))
        mapped = mapped.properties(title=wrapped_title({**title, "text": "2-D map (classical MDS of 1 − similarity)"}))
    return matrix, mapped
