"""The Temporal page's shared-space sections (same-space metrics, chiral choice, time reversal,
chiral galleries, negated queries) on a store with planted answers, and its facet labels."""

import json


from tests.helpers import app, charts


def _spec(chart):
    return json.loads(chart.proto.spec)


def _titles(at):
    return [h.value for h in at.subheader] + [h.value for h in at.header]


def test_shared_space_sections_render_with_their_numbers(nuance_store, monkeypatch):
    at = app(nuance_store, monkeypatch, "temporal", {"dataset": "nuance"})
    titles = " | ".join(_titles(at))
    for t in ("Shared video–text space", "Chiral choice", "Time reversal", "Chiral galleries", "Negated queries"):
        assert t in titles
    assert at.selectbox(key="pick_ss_metric").value == "recall@1_t2v"
    pairs = at.selectbox(key="pick_ss_pair").options
    assert any("mllm × mllm (layers" in p for p in pairs) and any("clip × clip (joint" in p for p in pairs)
    assert at.selectbox(key="pick_ss_pair").value.startswith("mllm × mllm (layers")  # a per-layer curve first
    # the collapsed video layer and the reversal that changes nothing are said, not drawn
    captions = " ".join(c.value for c in at.caption)
    assert "collapsed" in captions and "cannot choose" in captions
    wide = at.dataframe[-1].value
    assert {"recall@1_v2t", "map_t2v", "modality_gap", "mmd", "frechet"} <= set(wide.columns)


def test_metric_and_pair_choices_live_in_the_url(nuance_store, monkeypatch):
    at = app(nuance_store, monkeypatch, "temporal", {"dataset": "nuance", "ss_metric": "modality_gap"})
    assert at.selectbox(key="pick_ss_metric").value == "modality_gap"
    clip = next(p for p in at.selectbox(key="pick_ss_pair").options if p.startswith("clip"))
    at.selectbox(key="pick_ss_pair").set_value(clip).run()
    assert at.query_params["ss_pair"] == clip and not at.exception
    at = app(nuance_store, monkeypatch, "temporal", {"dataset": "nuance", "ss_metric": "no_such_metric"})
    assert any("unknown" in w.value for w in at.warning)


def test_facet_labels_do_not_overlap(demo_like, monkeypatch):
    at = app(demo_like, monkeypatch, "temporal", {"dataset": "test_of_time"})
    specs = [_spec(c) for c in charts(at)]
    faceted = [s for s in specs if "facet" in s or "row" in (s.get("encoding") or {})]
    for s in faceted:
        header = (s.get("facet") or s["encoding"])["row"]["header"]
        assert header["labelAngle"] == 0 and header["labelOrient"] == "top"  # above each row, horizontal
        assert s["resolve"]["scale"]["y"] == "independent"  # each row names only its own models
    assert not any("column" in (s.get("facet") or {}) or "column" in (s.get("encoding") or {}) for s in specs)
