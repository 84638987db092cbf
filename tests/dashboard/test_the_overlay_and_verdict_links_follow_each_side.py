"""A dual encoder's two sides stay apart beyond the Curves page's main chart: the curve overlay keys,
labels and colours each run by its side (``clip · n_f 4``, ``clip [text] · n_c 2``: colour = side,
dash = budget) and starts with each side's smallest and largest budget; a caption side's verdict line
on the Overview links to its own curve (``models=clip [text]``), not to the vision side's.

The store is built by hand: a dual encoder ``clip`` (vision runs at n_f 1, 2 and 4, caption runs at
n_c 1 and 2) and a vision-only ``vit`` (n_f 1 and 2), RankMe curves that differ between every run, a
layer choice per side at its largest run and the verdicts the verdicts study decides on them. Expected
rows are read back from the stored tables with SQL and the side rule written out here, not from the
views."""

import json
from urllib.parse import parse_qs

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from analysis.methods.layer_selection import recommend_layers
from analysis.storage import results as R
from analysis.views import curve_overlay
from analysis.views.overview import section as overview_section
from tests.dashboard.test_curves_show_every_side_of_a_model import build
from tests.helpers import app, charts
from tests.stores import write_verdicts

DATASET = "synthetic"

#: run id -> (model, modality, n_frames, n_captions, RankMe per layer); clip's vision side has a middle
#: budget (n_f 2) that the overlay's first pick leaves out
RUNS = {
    "clip-v1": ("clip", "image", 1, None, [1.0, 2.0, 3.0, 2.5]),
    "clip-v2": ("clip", "image", 2, None, [1.4, 3.0, 4.5, 4.0]),
    "clip-v4": ("clip", "image", 4, None, [1.5, 4.0, 6.0, 5.0]),
    "clip-t1": ("clip", "text", None, 1, [1.2, 7.0, 8.0, 7.5]),
    "clip-t2": ("clip", "text", None, 2, [1.1, 9.0, 10.0, 9.5]),
    "vit-f1": ("vit", "video", 1, None, [1.0, 3.5, 2.0, 1.5]),
    "vit-f2": ("vit", "video", 2, None, [1.3, 5.5, 4.0, 3.0]),
}
#: each side's layer choice is measured at its largest run
LARGEST = {"clip": "clip-v4", "clip [text]": "clip-t2", "vit": "vit-f2"}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = build(tmp_path_factory.mktemp("sides") / "s.duckdb", RUNS)
    con = duckdb.connect(str(path))
    for key, run_id in LARGEST.items():
        curve = RUNS[run_id][4]
        # the payload as the layer-choice study stores it: the picks are recommend_layers' on the curve
        rec = recommend_layers({"rankme": (np.asarray(curve), True)})
        payload = {**rec, "curves": {"rankme": curve}, "higher_is_better": {"rankme": True},
                   "setting": {"run_id": run_id}, "layer_names": {}, "sources": {}}
        R.put_study(con, result_id=f"lc-{key}", study="layer_choice", dataset=DATASET, subject=key,
                    params={"k": 3}, payload=payload, input_key="hand")
    write_verdicts(con, DATASET)
    con.close()
    return path


def _rows(path, sql, params=()):
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(sql, list(params)).fetchall()
    finally:
        con.close()


def expected_runs(path) -> dict:
    """``{run_id: {"key", "run", "budget", "size", "values"}}`` from the stored RankMe profile rows: a
    caption run is keyed ``<model> [text]`` when its model has a vision run here, and a run is named
    ``<key> · n_f N`` / ``<key> · n_c N``."""
    rows = _rows(path, "SELECT model, modality, run_id, n_frames, n_captions, layer_values FROM result_profiles "
                       "WHERE dataset = ? AND metric = 'rankme'", [DATASET])
    vision = {m for m, mod, *_ in rows if mod != "text"}
    out = {}
    for model, modality, run_id, nf, nc, values in rows:
        key = f"{model} [text]" if modality == "text" and model in vision else model
        budget = f"n_f {nf}" if nf is not None else f"n_c {nc}"
        out[run_id] = {"key": key, "run": f"{key} · {budget}", "budget": budget, "size": nf or nc,
                       "values": [float(v) for v in values]}
    return out


def expected_default(path) -> list[str]:
    """Each side's runs at its smallest and its largest budget, ordered by run name."""
    runs = expected_runs(path)
    keep = set()
    for key in {r["key"] for r in runs.values()}:
        mine = sorted((r["size"], rid) for rid, r in runs.items() if r["key"] == key)
        keep |= {mine[0][1], mine[-1][1]}
    return sorted(keep, key=lambda rid: runs[rid]["run"])


def test_the_store_has_what_the_test_needs(store):
    runs = expected_runs(store)
    assert {r["key"] for r in runs.values()} == {"clip", "clip [text]", "vit"}
    assert len({tuple(r["values"]) for r in runs.values()}) == len(RUNS)  # every curve its own
    # the two sides share budgets' sizes, so a pick over the model mixes them
    assert {r["size"] for r in runs.values() if r["key"] == "clip"} & {r["size"] for r in runs.values()
                                                                      if r["key"] == "clip [text]"}
    assert "clip-v2" not in expected_default(store) and len(expected_default(store)) == 6


def view_runs(data) -> dict:
    """``{run_id: {"key", "run", "budget", "colour", "values"}}`` of the overlay view's RankMe rows."""
    out = {}
    for run_id, g in data[data["metric"] == "rankme"].groupby("run_id"):
        g = g.sort_values("layer")
        (key,), (run,), (budget,), (colour,) = (g[c].unique() for c in ("model", "run", "budget", "model_label"))
        out[run_id] = {"key": key, "run": run, "budget": budget, "colour": colour, "values": list(g["value"])}
    return out


def test_the_overlay_view_keys_and_names_every_run_by_its_side(store):
    con = duckdb.connect(str(store), read_only=True)
    try:
        data = curve_overlay.run_curves(con, DATASET, ())
    finally:
        con.close()
    want = {rid: {"key": r["key"], "run": r["run"], "budget": r["budget"], "colour": r["key"], "values": r["values"]}
            for rid, r in expected_runs(store).items()}
    assert view_runs(data) == want
    assert curve_overlay.default_runs(data[data["metric"] == "rankme"]) == expected_default(store)


def test_the_overlay_chart_colours_by_side_and_dashes_by_budget(store):
    con = duckdb.connect(str(store), read_only=True)
    try:
        data = curve_overlay.run_curves(con, DATASET, ())
    finally:
        con.close()
    spec = curve_overlay.overlay_chart(data[data["metric"] == "rankme"], "rankme").to_dict()
    line = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "line")
    runs = expected_runs(store)
    assert line["encoding"]["color"]["field"] == "model_label"
    assert line["encoding"]["color"]["scale"]["domain"] == sorted({r["key"] for r in runs.values()})
    assert line["encoding"]["strokeDash"]["field"] == "budget"
    drawn = {}
    for r in (r for d in spec["datasets"].values() for r in d):
        drawn.setdefault(r["run_id"], set()).add((r["model_label"], r["budget"]))
    assert drawn == {rid: {(r["key"], r["budget"])} for rid, r in runs.items()}


def overlay_tables(at):
    """The overlay chart's line data (the chart that dashes by budget), as one table per dataset."""
    found = [c for c in charts(at) if '"title": "budget"' in c.proto.spec]
    assert len(found) == 1
    spec = json.loads(found[0].proto.spec)
    line = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "line")
    return line, [pa.ipc.open_stream(d.data.data).read_pandas() for d in found[0].proto.datasets]


def test_the_curves_page_overlays_each_side_by_its_own_name_and_pick(store, monkeypatch):
    runs = expected_runs(store)
    at = app(store, monkeypatch, "curves", {"dataset": DATASET, "metric": "rankme"})
    picker = at.multiselect(key="pick_oruns")
    assert set(picker.options) == {r["run"] for r in runs.values()}
    assert picker.value == expected_default(store)
    line, tables = overlay_tables(at)
    assert line["encoding"]["color"]["scale"]["domain"] == ["clip", "clip [text]", "vit"]
    drawn = {}
    for t in tables:
        for rid, g in t.groupby("run_id") if "run_id" in t else ():
            g = g.sort_values("layer")
            drawn[rid] = (set(g["model_label"]), list(g["value"]))
    assert drawn == {rid: ({runs[rid]["key"]}, runs[rid]["values"]) for rid in expected_default(store)}
    # the caption side alone in the sidebar: its two runs overlaid, the vision side's left out
    at = app(store, monkeypatch, "curves", {"dataset": DATASET, "metric": "rankme", "models": ["clip [text]"]})
    text_runs = sorted(rid for rid, r in runs.items() if r["key"] == "clip [text]")
    assert sorted(at.multiselect(key="pick_oruns").options) == sorted(runs[rid]["run"] for rid in text_runs)
    _, tables = overlay_tables(at)
    assert sorted({rid for t in tables if "run_id" in t for rid in t["run_id"]}) == text_runs


def expected_curve_keys(path) -> dict:
    """``{verdict subject: the key the Curves page draws its run's curve under}``: the verdict's layer
    choice names the run; a caption run is keyed ``<model> [text]`` when its model has a vision run."""
    runs = dict(((rid), (m, mod)) for rid, m, mod in _rows(path, "SELECT run_id, model, modality FROM runs"))
    vision = {m for m, mod in runs.values() if mod != "text"}
    out = {}
    for subject, payload in _rows(path, "SELECT v.subject, c.payload FROM result_studies v JOIN result_studies c "
                                        "ON c.subject = v.subject AND c.study = 'layer_choice' "
                                        "WHERE v.study = 'verdict' AND v.dataset = ?", [DATASET]):
        model, modality = runs[json.loads(payload)["setting"]["run_id"]]
        out[subject] = f"{model} [text]" if modality == "text" and model in vision else model
    return out


def test_a_caption_side_s_verdict_links_to_its_own_curve(store):
    keys = expected_curve_keys(store)
    assert keys == {"clip": "clip", "clip [text]": "clip [text]", "vit": "vit"}
    con = duckdb.connect(str(store), read_only=True)
    try:
        rows = overview_section(con, DATASET).data["verdicts"]
    finally:
        con.close()
    assert {v["model"]: v["curves_query"]["models"] for v in rows} == keys


def test_the_overview_s_curve_link_opens_the_caption_side_s_curve(store, monkeypatch):
    at = app(store, monkeypatch)
    links = [parse_qs(e.proto.query_string) for e in at.get("page_link") if e.proto.page == "curves"]
    assert [q["models"] for q in links] == [["clip"], ["clip [text]"], ["vit"]]  # the lines, by side key
    (text,) = [q for q in links if q["models"] == ["clip [text]"]]
    at = app(store, monkeypatch, "curves", {k: v if k == "models" else v[0] for k, v in text.items()})
    assert at.multiselect(key="pick_models").value == ["clip [text]"]
    page = next(c for c in charts(at) if json.loads(c.proto.spec).get("title", {}).get("text", "").endswith(
        "per layer"))
    rows = [r for d in page.proto.datasets for r in pa.ipc.open_stream(d.data.data).read_pandas().to_dict("records")
            if "run_id" in r]  # the curve's rows (the pick's diamond is a row of its own, without a run)
    assert {r["model"] for r in rows} == {"clip [text]"}
    # the caption side at its largest budget, as the page draws every side
    want = max((r for r in expected_runs(store).values() if r["key"] == "clip [text]"), key=lambda r: r["size"])
    assert [r["value"] for r in sorted(rows, key=lambda r: r["layer"])] == want["values"]
