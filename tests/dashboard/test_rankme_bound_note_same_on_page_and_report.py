"""RankMe's bound min(N, d) is said in one sentence, by one rule, on the Overview page and in the report:
every model side whose RankMe pick (the layer its RankMe curve picks, which is also a RankMe-led verdict's
layer) is within 20% of ``N`` with ``N < d``. The store is built by hand so the two rules the page and the
report used to follow disagree: one model's verdict is decided by alignment while its RankMe pick is at
the bound (the report named it, the page did not), and a dual encoder's caption side has a RankMe-led
verdict at the bound (the page named it, the report's per-model summary did not)."""

import html as html_mod
import re

import duckdb
import numpy as np
import pytest

from analysis.methods.layer_selection import recommend_layers
from analysis.storage import results as R
from analysis.views.rankme_cap import RANKME_CAP_SHARE, capped_picks, rankme_capped
from analysis.views.text import md_escape
from precompute.synthetic.store import write_run
from tests.helpers import app, make_report
from tests.hostile import render
from tests.stores import write_verdicts

N = 10  #: items of the dataset
BOUND = "RankMe is at most min(N, d)"


def rankme(Z) -> float:
    """RankMe of ``Z`` ``(N, d)`` by its definition (Garrido et al. 2023): exp of the entropy of the
    normalised singular values (+1e-7, as the registry's metric)."""
    s = np.linalg.svd(np.asarray(Z, dtype=float), compute_uv=False)
    p = s / s.sum() + 1e-7
    return float(np.exp(-(p * np.log(p)).sum()))


def at_the_bound(d: int) -> float:
    """RankMe of ``N`` orthonormal rows in ``d > N`` dimensions: ``N`` equal singular values, the bound."""
    Q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(d, N)))
    return rankme(Q.T)


#: side key -> (run id, model, modality, width d, per-layer curves); layer 0 never counts
SIDES = {
    # alignment decides its verdict (layer 1); its RankMe pick (layer 2, 9.5 > 0.8·10) is at the bound
    "aligned": ("ra", "aligned", "video", 16, {"alignment with ref": [0.0, 0.9, 0.2, 0.1],
                                                "rankme": [1.0, 5.0, 9.5, 8.0]}),
    # RankMe alone: its verdict leads with RankMe, at a layer exactly at the bound N
    "solo": ("rs", "solo", "video", 16, {"rankme": [1.0, 6.0, at_the_bound(16), 7.0]}),
    # a dual encoder: its vision side is far from the bound, its caption side's RankMe-led verdict is at it
    "clip": ("rc", "clip", "video", 16, {"rankme": [1.0, 3.0, 4.0, 2.0]}),
    "clip [text]": ("rt", "clip", "text", 16, {"rankme": [1.0, 9.2, 6.0]}),
    # N >= d: its bound is its width d = 8, not the items; 7.9 is near d, which says nothing about N
    "wide": ("rw", "wide", "text", 8, {"rankme": [1.0, 7.9, 7.0]}),
}


def expected_named() -> dict:
    """``{label: RankMe at the pick}`` by the rule's definition: the curve's maximum over layers 1..last,
    named when ``N < d`` and it is above 0.8 · N."""
    out = {}
    for key, (_, model, modality, d, curves) in SIDES.items():
        top = max(curves["rankme"][1:])
        if N < d and top > 0.8 * N:
            out[key] = top
    return out


@pytest.fixture(scope="module")
def bound_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("bound") / "b.duckdb"
    rng = np.random.default_rng(0)
    for key, (run_id, model, modality, d, curves) in SIDES.items():
        L = len(next(iter(curves.values())))
        write_run(path, run_id, rng.normal(size=(L, N, d)), model=model, modality=modality,
                  n_frames=2 if modality == "video" else None, n_captions=1 if modality == "text" else None)
    con = duckdb.connect(str(path))
    for key, (run_id, _, _, _, curves) in SIDES.items():
        # the payload as the layer-choice study stores it: the picks are recommend_layers' on the curves
        rec = recommend_layers({m: (np.asarray(c), True) for m, c in curves.items()})
        payload = {**rec, "curves": curves, "higher_is_better": {m: True for m in curves},
                   "setting": {"run_id": run_id}}
        R.put_study(con, result_id=f"lc-{key}", study="layer_choice", dataset="synthetic", subject=key,
                    params={"k": 3}, payload=payload, input_key="hand")
    con.execute("UPDATE models SET random_init = false")  # write_run marks every model random
    write_verdicts(con, "synthetic")
    con.close()
    return path


def test_the_store_splits_the_two_old_rules(bound_store):
    """The case the test is about: a RankMe pick at the bound without a RankMe-led verdict, and a
    RankMe-led verdict at the bound on a caption side (no row of the per-model summary)."""
    from analysis.views.verdicts import verdicts

    con = duckdb.connect(str(bound_store), read_only=True)
    by = {v["model"]: v["verdict"] for v in verdicts(con, "synthetic")}
    con.close()
    assert by["aligned"].lead == "alignment with ref" and by["aligned"].layer == 1
    assert by["clip [text]"].lead == "rankme" and by["clip [text]"].value == pytest.approx(9.2)
    assert by["solo"].lead == "rankme" and by["solo"].value == pytest.approx(N, abs=1e-3)


def test_page_and_report_say_the_same_sentence_naming_every_capped_pick(bound_store, monkeypatch, tmp_path):
    expected = expected_named()
    assert set(expected) == {"aligned", "solo", "clip [text]"}  # not clip's vision side, not wide (N >= d)

    _, data, html = make_report(bound_store, tmp_path)
    (ds,) = data["datasets"]
    (note,) = ds["sections"]["summary"]["notes"]
    assert note.startswith(f"{BOUND}, here N = {N} items: ")
    named = note.split("items: ", 1)[1].split(" come within", 1)[0]
    found = dict(part.rsplit(" (", 1) for part in named.split(", "))
    assert set(found) == set(expected)
    for label, value in expected.items():
        assert found[label] == f"{value:.1f})"
    assert "wide" not in note and "clip (" not in note
    # the Markdown summary, as a CommonMark renderer (markdown-it-py) shows it, and the HTML report
    shown = html_mod.escape(note, quote=True)
    md = render(tmp_path.joinpath("report.md").read_text())
    assert [p for p in re.findall(r"<p>(.*?)</p>", md, re.S) if BOUND in p] == [shown]
    assert html.count(BOUND) == 1 and f"<p class='note'>{shown}</p>" in html

    at = app(bound_store, monkeypatch)
    page = [c.value for c in at.caption if BOUND in c.value]
    assert page == [md_escape(note)]


def test_no_sentence_when_no_pick_reaches_the_bound(tmp_path, monkeypatch):
    """N >= d everywhere (the bound is each side's width) or picks well under 0.8 · N: neither the
    page nor the report says anything about the bound."""
    path = tmp_path / "n.duckdb"
    rng = np.random.default_rng(1)
    write_run(path, "rw", rng.normal(size=(3, N, 8)), model="wide", modality="video", n_frames=2)
    write_run(path, "rl", rng.normal(size=(3, N, 16)), model="low", modality="video", n_frames=2)
    con = duckdb.connect(str(path))
    for key, run_id, curve in (("wide", "rw", [1.0, 8.0, 7.0]), ("low", "rl", [1.0, 8.0, 7.0])):
        curves = {"rankme": curve}
        rec = recommend_layers({"rankme": (np.asarray(curve), True)})
        R.put_study(con, result_id=f"lc-{key}", study="layer_choice", dataset="synthetic", subject=key,
                    params={"k": 3}, payload={**rec, "curves": curves, "higher_is_better": {"rankme": True},
                                              "setting": {"run_id": run_id}}, input_key="hand")
    con.execute("UPDATE models SET random_init = false")
    write_verdicts(con, "synthetic")
    con.close()
    # wide: 8.0 is its width d = 8 exactly (N = 10 >= d); low: 8.0 is 0.8 · N, not above it
    _, data, html = make_report(path, tmp_path)
    assert data["datasets"][0]["sections"]["summary"]["notes"] == [] and BOUND not in html
    at = app(path, monkeypatch)
    assert not [c.value for c in at.caption if BOUND in c.value]


def test_capped_picks_follow_the_bound_min_n_d():
    share = RANKME_CAP_SHARE
    choices = {"a": {"picks": {"rankme": {"value": 5.0}}},            # N = 5 < d = 8: exactly the bound N
               "b": {"picks": {"rankme": {"value": share * 5}}},      # 0.8 · N is not above it
               "c": {"picks": {"rankme": {"value": 8.0}}},            # N = 10 >= d = 8: the bound is d
               "d": {"picks": {"uniformity": {"value": 5.0}}},        # no RankMe pick
               "e": {"picks": {"rankme": {"value": float("nan")}}}}   # undefined
    sides = {"a": ("A", 8), "b": ("B", 8), "d": ("D", 8), "e": ("E", 8), "f": ("F", 8)}  # f: no layer choice
    assert capped_picks(choices, sides, 5) == [("A", 5.0)]
    assert capped_picks(choices, {"c": ("C", 8)}, 10) == []
    # the same items in a side wider than N: the bound is N again
    assert capped_picks({"c": {"picks": {"rankme": {"value": 9.0}}}}, {"c": ("C", 16)}, 10) == [("C", 9.0)]
    assert capped_picks(choices, {"b": ("B", 8)}, 5) == [] and not rankme_capped(share * 5, 5, 8)
    assert capped_picks(choices, {}, 5) == []  # a side not asked for is not named
