"""The report's heatmap, layer curves, scaling panels, model map and paper figures are the dashboard pages' charts:
for one store and one selection, the Vega-Lite spec a page draws equals the one the report embeds
(a chart drawn twice drifts: another best-cell colour, no intervals, no recommended layers). The
Overview's verdict lines are the report's opening, read from the same section, and the sentences each page
reads under its charts are printed under the report's, once."""

import copy
import json
import math
import re
import shutil
from collections import Counter
from html.parser import HTMLParser
from urllib.parse import parse_qs

import duckdb
import numpy as np
import pytest

from analysis.report import build_report, render_html, render_markdown, to_json
from analysis.report.build import PAGE_SECTIONS
from analysis.storage import results as R
from analysis.views import curves as curves_view, heatmap as heatmap_view, paper_figures as paper_view
from analysis.views import scaling as scaling_view
from analysis.views.overview import section as overview_section
from analysis.views.text import WORD_JOINER, md_escape
from analysis.views.verdicts import VERDICT_BADGES
from analysis.views.store_info import model_labels
from tests.helpers import app, charts
from tests.stores import read_store
from tests.hostile import JSLINK, SCRIPT, assert_inert, render

DATASET = "moving_shapes"


def comparable(spec: dict) -> dict:
    """A spec without what only serialisation changes: the schema URL, Streamlit's autosize, Altair's
    default config, and the names of the data and of the views a selection is bound to (Streamlit
    ships the rows apart and names both by a hash; Altair counts views per process)."""
    spec = {k: v for k, v in spec.items() if k not in ("$schema", "autosize", "config", "datasets")}
    text = json.dumps(spec, sort_keys=True, default=str)
    names = {}
    for name in re.findall(r'"data": \{"name": "([^"]+)"|"(view_[A-Za-z0-9_]+)"', text):
        name = name[0] or name[1]
        names.setdefault(name, f"name-{len(names)}")
    return json.loads(re.sub("|".join(f'"{re.escape(n)}"' for n in names) or "^$",
                             lambda m: f'"{names[m.group(0)[1:-1]]}"', text)) if names else spec


@pytest.fixture(scope="module")
def built_report(demo_like):
    """The report of :data:`DATASET`, every model chosen, built once for the module (a build takes
    seconds; the tests only read it: :func:`demo_report` hands each a copy)."""
    con = duckdb.connect(str(demo_like), read_only=True)
    try:
        return build_report(con, store=str(demo_like), datasets=[DATASET])
    finally:
        con.close()


@pytest.fixture
def demo_report(built_report):
    return copy.deepcopy(built_report)


@pytest.fixture(scope="module")
def report_charts(built_report):
    """``{section: [(caption, spec)]}`` of the report of :data:`DATASET`, every model chosen."""
    out = {}
    for section, caption, spec in copy.deepcopy(built_report)["datasets"][0]["charts"]:
        out.setdefault(section, []).append((caption, spec))
    return out


def page_specs(store, monkeypatch, page, params=None):
    at = app(store, monkeypatch, page, {"dataset": DATASET, **(params or {})})
    return at, [comparable(json.loads(c.proto.spec)) for c in charts(at)]


def titled(entries, text):
    """The report's spec whose title's text is ``text``."""
    found = [comparable(s) for _, s in entries if (s.get("title") or {}).get("text") == text]
    assert len(found) == 1, f"{len(found)} report charts titled {text!r}"
    return found[0]


def test_the_report_heatmap_is_the_heatmap_pages_chart(demo_like, monkeypatch, report_charts):
    _, (page,) = page_specs(demo_like, monkeypatch, "heatmap")
    assert page == titled(report_charts["heatmaps"], page["title"]["text"])
    # what the report's own heatmap lacked: the near-best outlines and the intervals in the tooltips
    assert any(layer.get("mark", {}).get("strokeDash") == [3, 2] for layer in page["layer"])


def test_the_report_curves_are_the_curves_pages_chart(demo_like, monkeypatch, report_charts):
    _, (page, *_) = page_specs(demo_like, monkeypatch, "curves", {"metric": "rankme"})  # then the overlay's
    assert page == titled(report_charts["layer_curves"], page["title"]["text"])
    assert any(layer.get("mark", {}).get("shape") == "diamond" for layer in page["layer"])  # recommended layers


def test_the_report_scaling_panels_are_the_scaling_pages_charts(demo_like, monkeypatch, report_charts):
    at, pages = page_specs(demo_like, monkeypatch, "scaling")
    a, b = pair_labels(demo_like, str(at.query_params["pair"]))
    report = [comparable(s) for c, s in report_charts["scaling"] if c.startswith(f"scaling: {a} × {b}, ")]
    assert pages == report and len(pages) == 2


def test_the_report_model_map_is_the_model_map_pages_charts(demo_like, monkeypatch, report_charts):
    _, pages = page_specs(demo_like, monkeypatch, "model_map")
    assert pages == [comparable(s) for _, s in report_charts["model_map"]] and len(pages) == 2


#: the report's sections that are a page view's ``section``: report name → that function
VIEW_SECTIONS = {"heatmaps": heatmap_view.section, "layer_curves": curves_view.section, "scaling": scaling_view.section,
                 "paper_figures": paper_view.section}


def as_json(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


@pytest.mark.parametrize("name", sorted(VIEW_SECTIONS))
def test_the_report_section_is_its_page_view_s_section(demo_like, demo_report, name):
    """The report stores the section's data and embeds its charts under their titles, nothing more."""
    report = demo_report["datasets"][0]
    con = duckdb.connect(str(demo_like), read_only=True)
    try:
        section = VIEW_SECTIONS[name](con, DATASET)
    finally:
        con.close()
    assert section.omitted is None and section.charts
    assert as_json(report["sections"][name]) == as_json(section.data)
    assert ([(title, comparable(spec)) for sec, title, spec in report["charts"] if sec == name]
            == [(title, comparable(chart.to_dict())) for title, chart in section.charts])


@pytest.mark.parametrize("name", sorted(VIEW_SECTIONS))
def test_a_section_with_nothing_to_show_says_which_command_fills_it(demo_like, name):
    con = duckdb.connect(str(demo_like), read_only=True)
    try:
        section = VIEW_SECTIONS[name](con, "no_such_dataset")
    finally:
        con.close()
    assert section.data is None and section.charts == ()
    assert "`layerscope analyze`" in section.omitted


def test_the_curves_page_reads_its_section_s_notes_under_the_chart(demo_like, monkeypatch):
    at, (page, *_) = page_specs(demo_like, monkeypatch, "curves", {"metric": "rankme"})
    con = duckdb.connect(str(demo_like), read_only=True)
    try:
        models = tuple(sorted(curves_view.profiles_long(con, DATASET)["model"].unique()))
        section = curves_view.section(con, DATASET, models=models, metrics=("rankme",))
    finally:
        con.close()
    ((_, chart),) = section.charts
    assert page == comparable(chart.to_dict())
    captions = [c.value for c in at.caption]
    start = captions.index(md_escape(section.notes[0]))
    assert captions[start:start + len(section.notes)] == [md_escape(n) for n in section.notes]
    # a profile metric has no stored per-layer interval, and the page says so under the chart
    assert any("per-layer profiles have no stored intervals" in n for n in section.notes)


def test_side_by_side_grids_of_one_metric_share_one_colour_scale(demo_like, monkeypatch):
    params = {"a": "vit-tiny", "b": "llama-tiny", "metric": "mutual_knn", "nf": "4", "nc": "4",
              "view": "side by side", "vs": "budgets", "with_budgets": "n_f=1, n_c=1"}
    _, (left, right) = page_specs(demo_like, monkeypatch, "heatmap", params)
    con = duckdb.connect(str(demo_like), read_only=True)
    try:
        grids = [g for g in R.read_grids(con, current=True, dataset=DATASET, metric="mutual_knn")
                 if (g["model_a"], g["model_b"]) == ("vit-tiny", "llama-tiny")
                 and (g["n_frames"], g["n_captions"]) in ((4, 4), (1, 1))]
    finally:
        con.close()
    assert len(grids) == 2
    values = np.concatenate([np.asarray(g["grid"], dtype=float).ravel() for g in grids])
    values = values[np.isfinite(values)]  # undefined cells are grey, outside the colour scale
    expected = [float(values.min()), float(values.max())]

    def domain(spec):
        return next(layer["encoding"]["color"]["scale"]["domain"] for layer in spec["layer"]
                    if "scale" in layer.get("encoding", {}).get("color", {}))

    assert domain(left) == pytest.approx(expected) and domain(right) == pytest.approx(expected)



def rows(records) -> list[str]:
    """A chart's data rows, comparable across Streamlit's Arrow copy and the report's inline JSON:
    each row as sorted JSON, an undefined value as null, numbers to 9 significant digits."""
    def cell(v):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return None
        return float(f"{v:.9g}") if isinstance(v, (int, float)) and not isinstance(v, bool) else v
    return sorted(json.dumps({k: cell(v) for k, v in r.items()}, sort_keys=True, default=str) for r in records)


def page_charts(store, monkeypatch, page, params=None) -> list[tuple[dict, list]]:
    """``(spec, data rows)`` of every chart the page drew (:func:`comparable`, :func:`rows`)."""
    import pyarrow as pa

    at = app(store, monkeypatch, page, {"dataset": DATASET, **(params or {})})
    return [(comparable(json.loads(c.proto.spec)),
             sorted(rows(pa.ipc.open_stream(d.data.data).read_all().to_pandas().to_dict("records"))
                    for d in c.proto.datasets)) for c in charts(at)]


def pair_labels(store, subject: str) -> tuple[str, str]:
    """The two models of a scaling subject ``"vision|text|metric"`` as every caption and note names them:
    their labels (``clip-tiny (random init)``) and, for the demo-like store's one dual encoder (it writes
    clip-tiny's image run and its text run on every dataset; every other model has one side), its side:
    the image side first, the text side second."""
    labels = read_store(store, model_labels)
    a, b = subject.split("|")[:2]
    return (labels.get(a, a) + (" [image]" if a == "clip-tiny" else ""),
            labels.get(b, b) + (" [text]" if b == "clip-tiny" else ""))


def report_chart(entries, caption) -> tuple[dict, list]:
    """``(spec, data rows)`` of the report's chart shown under ``caption``."""
    found = [s for c, s in entries if c == caption]
    assert len(found) == 1, f"{len(found)} report charts captioned {caption!r}"
    return comparable(found[0]), sorted(rows(r) for r in found[0].get("datasets", {}).values())


#: the report's caption of a probe chart
PROBE_CAPTION = "{} on {} per layer (bands: 95% item-resampling intervals; dashed: the largest class's share)"


def test_the_report_probe_charts_are_the_downstream_pages_chart(demo_like, monkeypatch, report_charts):
    # the page draws the chosen field and score; the report every accuracy and NMI, this one among them
    shape = report_chart(report_charts["probes"], PROBE_CAPTION.format("k-NN accuracy (leave-one-out)", "shape"))
    direction = report_chart(report_charts["probes"], PROBE_CAPTION.format("k-NN accuracy (leave-one-out)",
                                                                           "direction"))
    assert shape[1] != direction[1]  # the data tell the two fields apart
    pages = page_charts(demo_like, monkeypatch, "downstream", {"pfield": "shape", "pscore": "knn_accuracy"})
    assert shape in pages and direction not in pages
    pages = page_charts(demo_like, monkeypatch, "downstream", {"pfield": "direction", "pscore": "knn_accuracy"})
    assert direction in pages and shape not in pages


def test_the_report_reorder_charts_are_the_temporal_pages_charts(demo_like, monkeypatch, report_charts):
    pages = page_charts(demo_like, monkeypatch, "temporal")
    report = [report_chart(report_charts["temporal"], c) for c, _ in report_charts["temporal"]]
    assert len(report) == 2 and [p for p in pages if p in report] == report


def test_the_report_predictor_charts_are_the_predictors_pages_chart(demo_like, monkeypatch, report_charts):
    # the report draws each task's signals at ρ across layers; the page the picked task's, the same chart
    captions = [c for c, _ in report_charts["predictors"]]
    tasks = [c.removeprefix("signals for ").split(": Spearman ")[0] for c in captions]
    assert len(tasks) >= 2 and all(c.startswith("signals for ") for c in captions)
    first, last = (report_chart(report_charts["predictors"], captions[i]) for i in (0, -1))
    assert first[1] != last[1]  # the data tell the tasks apart
    pages = page_charts(demo_like, monkeypatch, "predictors", {"task": tasks[0]})
    assert first in pages and last not in pages
    pages = page_charts(demo_like, monkeypatch, "predictors", {"task": tasks[-1]})
    assert last in pages and first not in pages


def _plain(data) -> str:
    """``data`` as JSON text (NaN written as NaN, so two equal sections compare equal)."""
    return json.dumps(data, sort_keys=True, default=str)


def test_the_overviews_verdict_lines_are_the_reports_opening(demo_like, monkeypatch):
    con = duckdb.connect(str(demo_like), read_only=True)
    try:
        report = build_report(con, store=str(demo_like))
        sections = {d["dataset"]: overview_section(con, d["dataset"]) for d in report["datasets"]}
    finally:
        con.close()
    # every model and the store's text references by default: the report's opening and summary
    for d in report["datasets"]:
        assert _plain(sections[d["dataset"]].data) == _plain({"verdicts": d["verdicts"],
                                                              "summary": d["sections"]["summary"]})
        assert list(sections[d["dataset"]].notes) == d["sections"]["summary"]["notes"]
    verdicts = [v for d in report["datasets"] for v in d["verdicts"]]
    assert verdicts, "the demo-shaped store has verdicts to compare"

    at = app(demo_like, monkeypatch)
    badges = tuple(VERDICT_BADGES.values())
    lines = [m.value for m in at.markdown if m.value.startswith(badges)]
    assert lines == [f"{VERDICT_BADGES[v['status']]} {md_escape(v['sentence'])}" for v in verdicts]
    # each line's links open the evidence the report names: the heatmap cell (when a grid decided) and the curve
    links = [(e.proto.page, parse_qs(e.proto.query_string)) for e in at.get("page_link")
             if e.proto.page in ("heatmap", "curves")]
    expected = [(page, {k: [str(x)] for k, x in query.items()})
                for v in verdicts for page, query in (("heatmap", v["heatmap_query"]), ("curves", v["curves_query"]))
                if query]
    assert links == expected


def test_the_scaling_pages_panels_and_their_data_are_the_reports(demo_like, monkeypatch, report_charts):
    at = app(demo_like, monkeypatch, "scaling", {"dataset": DATASET})
    a, b = pair_labels(demo_like, str(at.query_params["pair"]))
    pages = page_charts(demo_like, monkeypatch, "scaling")
    report = [report_chart(report_charts["scaling"], f"scaling: {a} × {b}, against {what}") for what in ("n_f", "n_c")]
    assert pages == report
    assert all(data for _, data in report)  # the points (and the law's curves) travel with each panel


def test_the_scaling_page_reads_its_section_s_notes_under_the_panels(demo_like, monkeypatch):
    at = app(demo_like, monkeypatch, "scaling", {"dataset": DATASET})
    subject = str(at.query_params["pair"])
    con = duckdb.connect(str(demo_like), read_only=True)
    try:
        section = scaling_view.section(con, DATASET, subjects=(subject,))
    finally:
        con.close()
    captions = [c.value for c in at.caption]
    start = captions.index(md_escape(section.notes[0]))
    assert captions[start:start + len(section.notes)] == [md_escape(n) for n in section.notes]
    assert any("Chance (unrelated spaces)" in n for n in section.notes)  # mutual k-NN has a chance level


def _paper_chart(entries, prefix) -> tuple[dict, list]:
    """The report's paper-figure chart whose caption starts with ``prefix``, as :func:`report_chart`."""
    (caption,) = [c for c, _ in entries if c.startswith(prefix)]
    return report_chart(entries, caption)


@pytest.mark.parametrize("params, caption", [
    ({"figure": "fig7", "text": "llama-tiny"}, "DR Fig. 7: mutual_knn, n_c 1 against 4, text model llama-tiny"),
    ({"figure": "fig11", "budget": "smallest"}, "DR Figs. 11/12: mutual_knn at n_c 1,"),
    ({"figure": "fig11", "budget": "largest"}, "DR Figs. 11/12: mutual_knn at n_c 4,"),
])
def test_the_report_paper_figures_are_the_paper_figures_pages_charts(demo_like, monkeypatch, report_charts, params,
                                                                    caption):
    (page,) = page_charts(demo_like, monkeypatch, "paper_figures", {"metric": "mutual_knn", **params})
    spec, data = _paper_chart(report_charts["paper_figures"], caption)
    assert page == (spec, data) and data
    # the page's title, now the report's too: it names the dataset, so an exported figure says where it is from
    assert spec["title"]["text"] and "dataset moving_shapes" in spec["title"]["subtitle"]


def test_the_report_fig2_is_the_paper_figures_pages_chart(tmp_path, monkeypatch):
    from tests.stores import write_paper_store

    store = tmp_path / "paper.duckdb"
    write_paper_store(store)
    con = duckdb.connect(str(store), read_only=True)
    try:
        report = build_report(con, store=str(store))["datasets"][0]
    finally:
        con.close()
    entries = [(caption, spec) for sec, caption, spec in report["charts"] if sec == "paper_figures"]
    spec, data = _paper_chart(entries, "DR Fig. 2: k400 · top1 against mutual_knn with gemma")
    params = {"dataset": "mine", "figure": "fig2", "metric": "mutual_knn", "text": "gemma", "task": "k400 · top1"}
    (page,) = page_charts(store, monkeypatch, "paper_figures", params)
    assert page == (spec, data) and data
    assert spec["title"]["text"].startswith("k400 · top1 against mutual_knn with gemma")


class _ElementTexts(HTMLParser):
    """The text of every paragraph and list item of an HTML text (entities decoded, inner tags dropped)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.texts, self._open, self._depth = [], [], 0

    def handle_starttag(self, tag, attrs):
        if tag in ("p", "li"):
            self._depth += 1
            if self._depth == 1:
                self._open = []

    def handle_endtag(self, tag):
        if tag in ("p", "li") and self._depth:
            self._depth -= 1
            if not self._depth:
                self.texts.append("".join(self._open).strip())

    def handle_data(self, data):
        if self._depth:
            self._open.append(data)


def shown_texts(report) -> tuple[Counter, Counter]:
    """How often each paragraph or list item's text is shown: in report.html, and in report.md as
    markdown-it renders it (an independent CommonMark parser; the invisible word joiners dropped)."""
    def texts(html_text):
        parser = _ElementTexts()
        parser.feed(html_text)
        return parser.texts

    return (Counter(texts(render_html(report))),
            Counter(t.replace(WORD_JOINER, "") for t in texts(render(render_markdown(report)))))


def pages_notes(con, dataset) -> dict:
    """``{section: its notes}`` of every page section with notes, each distinct sentence once, in order."""
    sections = {name: section(con, dataset) for name, section in PAGE_SECTIONS.items()}
    return {name: list(dict.fromkeys(s.notes)) for name, s in sections.items() if s.notes}


def assert_each_note_shown_once(report, notes):
    assert json.loads(to_json(report))["datasets"][0]["notes"] == notes
    html, md = shown_texts(report)
    wrong = [(name, note, html[note], md[note]) for name, said in notes.items() for note in said
             if (html[note], md[note]) != (1, 1)]
    assert not wrong, wrong


def test_every_note_a_page_reads_under_its_charts_is_in_the_report_once(demo_like, demo_report):
    """The sentences a page prints under its charts (what RankMe's bound, a chance level, an interval
    or a collapsed layer means for those numbers) travel with the charts: in the report's JSON under
    ``notes``, and as a paragraph or list item of its HTML and Markdown, each exactly once (a sentence
    the page repeats under several charts is said once)."""
    report = demo_report
    con = duckdb.connect(str(demo_like), read_only=True)
    try:
        notes = pages_notes(con, DATASET)
    finally:
        con.close()
    assert {"layer_curves", "scaling", "paper_figures"} <= set(notes)  # the store has notes to carry
    assert any("per-layer profiles have no stored intervals" in n for n in notes["layer_curves"])
    assert any("Chance (unrelated spaces)" in n for n in notes["scaling"])
    assert_each_note_shown_once(report, notes)


def _set_payload(con, study, dataset, **changes):
    """Change the stored payload of the current ``study`` row of ``dataset``."""
    (row,) = R.read_studies(con, study=study, dataset=dataset, current=True)
    con.execute("UPDATE result_studies SET payload = ? WHERE result_id = ?",
                [json.dumps({**row["payload"], **changes}), row["result_id"]])


def test_a_study_s_notes_kept_in_its_data_are_printed_once_as_its_section_s_notes(demo_like, tmp_path):
    """The temporal and predictor studies keep their notes in their data too, one per layer; the
    report prints the page's lines (one per reason, counted) and not the study's lines beside them.
    A model pair the model map could not score is named under the map, its reason shown as written
    (escaped: a script or a link in it stays text)."""
    store = tmp_path / "s.duckdb"
    shutil.copy(demo_like, store)
    per_layer = ["vit-tiny layer 1: constant rows", "vit-tiny layer 2: constant rows"]
    con = duckdb.connect(str(store))
    try:
        _set_payload(con, "temporal", DATASET, notes=per_layer)
        _set_payload(con, "predictors", DATASET, notes=[n.replace("constant", "tied") for n in per_layer])
        _set_payload(con, "model_map", DATASET, undefined_pairs=[{"models": ["vit-tiny", "llama-tiny"],
                                                                  "reason": f"degenerate {SCRIPT} {JSLINK}"}])
    finally:
        con.close()
    con = duckdb.connect(str(store), read_only=True)
    try:
        report = build_report(con, store=str(store), datasets=[DATASET])
        notes = pages_notes(con, DATASET)
    finally:
        con.close()
    # one line per reason: the page says the two layers' notes as one line naming both (the data keep both)
    for name, reason in (("temporal", "constant rows"), ("predictors", "tied rows")):
        (line,) = notes[name]
        assert reason in line and "vit-tiny layer 1" in line and "vit-tiny layer 2" in line
    assert f"vit-tiny × llama-tiny: degenerate {SCRIPT} {JSLINK}" in notes["model_map"][0]
    assert report["datasets"][0]["sections"]["temporal"]["notes"] == per_layer
    assert_each_note_shown_once(report, notes)
    html, md = shown_texts(report)
    assert not [n for n in per_layer if html[n] or md[n]]
    assert_inert(render_markdown(report))


class _PlacedTexts(HTMLParser):
    """Every paragraph and list item of an HTML text as ``(tag, text, caption)``: ``caption`` the
    text of the figure's caption when the element sits inside a ``<figure>``, else None."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found, self._tag, self._open, self._figure, self._caption = [], None, [], False, None

    def handle_starttag(self, tag, attrs):
        if tag == "figure":
            self._figure, self._caption = True, None
        elif tag in ("p", "li", "figcaption") and self._tag is None:
            self._tag, self._open = tag, []

    def handle_endtag(self, tag):
        if tag == "figure":
            self._figure = False
        elif tag == self._tag:
            text = "".join(self._open).strip().replace(WORD_JOINER, "")
            if tag == "figcaption":
                self._caption = text
            else:
                self.found.append((tag, text, self._caption if self._figure else None))
            self._tag = None

    def handle_data(self, data):
        if self._tag:
            self._open.append(data)


def placed_texts(html_text) -> list[tuple]:
    parser = _PlacedTexts()
    parser.feed(html_text)
    return parser.found


def shown_places(report) -> tuple[list, list, dict]:
    """The report's HTML and Markdown (as markdown-it renders it) as :func:`placed_texts`, and its JSON."""
    return (placed_texts(render_html(report)), placed_texts(render(render_markdown(report))),
            json.loads(to_json(report)))


def assert_under_its_chart_alone(shown_in, note, title):
    """``note`` is shown once in report.html, inside the figure captioned ``title``; once in report.md,
    in the list under the line naming that chart; and the JSON ties it to that chart alone.
    ``shown_in``: :func:`shown_places` of the report."""
    html, md, data = shown_in
    shown = [(tag, caption) for tag, text, caption in html if text == note]
    assert shown == [("p", title)], (note, shown)
    at = [i for i, (_, text, _) in enumerate(md) if text == note]
    assert len(at) == 1 and md[at[0]][0] == "li", (note, at)
    heading = next(text for tag, text, _ in reversed(md[:at[0]]) if tag == "p")
    assert heading == f"Under the chart {title}:", (note, heading)
    ties = [c["chart"] for cs in data["datasets"][0]["chart_notes"].values() for c in cs
            if note in c["notes"]]
    assert ties == [title]


def test_a_scaling_note_and_a_curve_note_sit_under_their_own_chart_and_nowhere_else(demo_report, demo_like):
    """A sentence about one chart (that one pair's fitted ceiling S∞ is not drawn; what the metric of one
    curve measures) is printed directly under that chart, not after every chart of its section."""
    d, shown_in = demo_report["datasets"][0], shown_places(demo_report)
    # the pairs whose fit cannot determine S∞ (their stored status), each named in its own sentence
    unfit = [pair_labels(demo_like, f["subject"]) for f in d["sections"]["scaling"]
             if f["fit"] and f["status"] != "ok"]
    assert unfit and len(unfit) < len(d["sections"]["scaling"])  # one pair keeps S∞: the note is not everyone's
    said = [n for n in d["notes"]["scaling"] if n.startswith("S∞ is not drawn on the ")]
    assert len(said) == len(unfit)
    for a, b in unfit:
        (note,) = [n for n in said if n.startswith(f"S∞ is not drawn on the {a} × {b} panels: ")]
        # the pair's sentences read under its panels, the second (against n_c, captioned with the same
        # names) closing the pair
        assert_under_its_chart_alone(shown_in, note, f"scaling: {a} × {b}, against n_c")
    # each curve's metric help opens with the metric's name and sits under that metric's chart
    curves = [t for s, t, _ in d["charts"] if s == "layer_curves"]
    assert len(curves) >= 2
    for title in curves:
        metric = title.removesuffix(" per layer")
        (note,) = [n for n in d["notes"]["layer_curves"] if n.startswith(f"{metric}: ")]
        assert_under_its_chart_alone(shown_in, note, title)
