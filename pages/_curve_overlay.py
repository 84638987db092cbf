"""The Layer curves page's overlay of many runs, rendered: runs picked in the URL
(``oruns``), one pinned as the baseline (``base``), optionally drawn as differences to it (``diff``).
The data and chart are :mod:`analysis.views.curve_overlay`."""

import streamlit as st

from analysis.views import curve_overlay
from analysis.views.text import md_escape
from pages._shared import download_data, drop_params, pick, pick_flag, pick_many, view

NO_BASELINE = "(none)"


def overlay_section(dataset: str, metric: str, models, labels: dict) -> None:
    """Under the main chart: the runs (every budget) of ``metric`` of the chosen model sides (``models``:
    the Curves page's side keys, ``clip``, ``clip [text]``; ``labels`` their labels) overlaid."""
    data = view(curve_overlay.run_curves, dataset, tuple(sorted(labels.items())))
    data = data[(data["metric"] == metric) & data["model"].isin(list(models))] if len(data) else data
    label_of = dict(zip(data["run_id"], data["run"])) if len(data) else {}
    runs = sorted(label_of, key=lambda r: label_of[r])  # run ids in the link, labels on screen
    if len(runs) < 2:  # nothing to overlay: the link names only what is on screen
        drop_params("oruns", "base", "diff")
        return
    st.subheader("Overlay runs")
    chosen = pick_many("Runs to overlay", runs, param="oruns", default=curve_overlay.default_runs(data),
                       fmt=lambda r: label_of[r],
                       help="each model side at each budget (n_f frames, n_c captions) with this curve; first, "
                            "each trained model side at its smallest and largest budget")
    if not chosen:
        st.caption("Pick runs to overlay.")
        drop_params("base", "diff")
        return
    c1, c2 = st.columns([3, 2], vertical_alignment="bottom")
    base_id = pick("Baseline run", [NO_BASELINE] + list(chosen), param="base", container=c1,
                   fmt=lambda r: label_of.get(r, r),
                   help="drawn dashed in black; the others can be shown as differences to it")
    baseline = None if base_id == NO_BASELINE else label_of[base_id]
    with c2:
        difference = baseline is not None and pick_flag("Difference to the baseline", param="diff")
    if baseline is None:
        drop_params("diff")
    shown = data[data["run_id"].isin(chosen)]
    chart = curve_overlay.overlay_chart(shown, metric, baseline=baseline, difference=difference)
    st.altair_chart(chart, width="stretch", key="overlay_chart")
    st.caption(md_escape(curve_overlay.overlay_text(shown, baseline, difference)))
    out = curve_overlay.difference_to_baseline(shown, baseline) if difference else shown
    if difference and out["value"].isna().all():  # e.g. a baseline whose every layer is undefined
        st.info(md_escape(f"No difference to {baseline} can be drawn: it has no defined value where the others do."))
    download_data(out, f"curves_overlay_{dataset}_{metric}".replace(" ", "_"), label="Download overlay (CSV)")
