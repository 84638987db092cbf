"""Issue #33: the Overview draws its answer (each pick's paired gain over the last layer with its
interval, the null and the practical margin) and says in one line when it cannot; #34 item 19: the
RankMe bound min(N, d) is said on the pages that show RankMe when it binds."""

import dataclasses
import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from analysis.methods.layer_selection import PRACTICAL_MARGIN, no_verdict
from analysis.views.overview_chart import gain_chart, gain_note, gain_table
from analysis.views.rankme_cap import rankme_capped
from tests.helpers import app, charts


def verdict(label, status, layer, last, cmp=None):
    """A :func:`analysis.views.verdicts.verdicts` record of one model led by RankMe, as the gain table reads it."""
    v = dataclasses.replace(no_verdict("", last), status=status, layer=layer, lead="rankme", vs_last=cmp)
    return {"model": label, "base": label, "label": label, "verdict": v}


def cmp(gain, low, high):
    return {"gain": gain, "gain_low": low, "gain_high": high}


def test_gain_rows_say_whether_the_interval_excludes_zero():
    t = gain_table({"d": [verdict("a", "recommend", 2, 4, cmp(0.2, 0.1, 0.3)),
                          verdict("b", "tie", 1, 4, cmp(0.05, -0.01, 0.1)),
                          verdict("c", "tie", 3, 4, cmp(-0.3, -0.4, -0.2)),
                          verdict("d", "untested", 3, 4, cmp(0.1, None, None)),
                          verdict("e", "last", 4, 4),
                          verdict("f", "none", None, 4)]})
    by = t.set_index("model")
    assert list(by.loc[["a", "b", "c", "d", "e"], "interval"]) == [
        "excludes 0", "includes 0", "excludes 0", "no interval", "pick is the last layer"]
    assert by.loc["e", "gain"] == 0.0  # the last layer against itself: no gain by definition
    assert pd.isna(by.loc["f", "gain"]) and "no layer picked" in by.loc["f", "note"]
    assert gain_note(t) == "1 of 6 model(s) not drawn: no layer picked (none)."


def test_degenerate_tables_say_so_in_one_line():
    assert "No layer verdict yet" in gain_note(gain_table({}))
    assert gain_chart(gain_table({})) is None
    t = gain_table({"d": [verdict("f", "none", None, 4), verdict("g", "chance", None, 4),
                          verdict("h", "none", None, 4)]})
    assert gain_chart(t) is None
    assert gain_note(t) == ("Nothing to draw: no model has a gain over its last layer "
                            "(2 × no layer picked (none); no layer picked (chance)).")
    # a pick whose last layer is undefined has no gain to draw: said, not drawn at 0
    t = gain_table({"d": [verdict("a", "recommend", 2, 4, None)]})
    assert t["gain"].isna().all() and "degenerate or undefined" in gain_note(t)


@pytest.fixture(scope="module")
def named_store(named_layers_store):
    return named_layers_store  # built once per run (tests/conftest.py); read only


def spec_of(chart) -> dict:
    spec = json.loads(chart.proto.spec)
    spec["datasets"] = {ds.name: json.loads(pa.ipc.open_stream(ds.data.data).read_all().to_pandas()
                                            .to_json(orient="records")) for ds in chart.proto.datasets}
    return spec


def test_overview_draws_each_gain_from_the_stored_curves(named_store, monkeypatch):
    """The drawn gain is (pick − last)/|last| (signed by direction) of the lead metric's stored curve,
    recomputed here from the layer-choice payload; its interval brackets it and the chart has the
    zero and margin rules; vl-convert renders it."""
    import vl_convert as vlc

    from analysis.storage.store import read_store
    from analysis.views.stored_choices import layer_choices

    at = app(named_store, monkeypatch)
    (chart,) = charts(at)  # the Overview's one chart
    spec = spec_of(chart)
    rows = [r for rows in spec["datasets"].values() for r in rows if "gain" in r and "model" in r]
    choices = read_store(named_store, layer_choices, "pairs")
    tested = [r for r in rows if r["interval"] in ("excludes 0", "includes 0")]
    assert tested, rows
    for r in rows:
        if r["interval"] == "pick is the last layer":
            assert r["gain"] == 0.0 and r["layer"] == r["last_layer"]
            continue
        model = next(m for m in choices if r["model"].startswith(m.removesuffix(" [text]"))
                     and r["model"].endswith(" [text]") == m.endswith(" [text]"))
        p = choices[model]
        curve = np.asarray(p["curves"][r["metric"]], dtype=float)
        sign = 1.0 if p["higher_is_better"][r["metric"]] else -1.0
        last = curve[r["last_layer"]]
        assert r["gain"] == pytest.approx(sign * (curve[r["layer"]] - last) / abs(last))
        assert r["gain_low"] <= r["gain"] <= r["gain_high"]
    rules = [r for rows in spec["datasets"].values() for r in rows if "line" in r]
    assert sorted(r["gain"] for r in rules) == [0.0, PRACTICAL_MARGIN]
    assert "<svg" in vlc.vegalite_to_svg(json.dumps(spec))


def test_overview_of_a_store_without_analysis_says_so_once(tmp_path, monkeypatch):
    from tests.stores import write_store

    path = tmp_path / "raw.duckdb"
    write_store(path, n=6)
    at = app(path, monkeypatch)
    assert not charts(at)
    lines = [c.value for c in at.caption if "No layer verdict yet" in c.value]
    assert len(lines) == 1


def test_rankme_bound_formula():
    # RankMe <= min(N, d): with N < d the bound is N; within 20% of it is "capped"
    assert rankme_capped(4.5, 5, 8) and not rankme_capped(3.9, 5, 8)
    assert not rankme_capped(7.9, 10, 8)  # N >= d: the model's width bounds it, not the item count
    assert not rankme_capped(float("nan"), 5, 8) and not rankme_capped(None, 5, 8) and not rankme_capped(4.5, 5, None)


def test_curves_page_says_when_rankme_is_bounded_by_n(tmp_path, monkeypatch):
    """Five random Gaussian items in 8 dimensions: each layer's RankMe (entropy of the normalised
    singular values, recomputed here with numpy) is at most 5 and, for isotropic noise, above 4; the
    page names the bound exactly when this reference says it binds."""
    from analysis.studies import analyze_store
    from tests.stores import vectors, write_store

    path = tmp_path / "small.duckdb"
    write_store(path, n=5, models=("vis",))
    analyze_store(path, k=2, n_boot=0, log=lambda m: None)
    X = vectors("vis", 5).astype(float)  # (layers, N, d)

    def rankme(Z):
        s = np.linalg.svd(Z, compute_uv=False)
        p = s / s.sum() + 1e-7
        return float(np.exp(-(p * np.log(p)).sum()))

    top = max(rankme(Z) for Z in X[1:])  # every layer the curve shows
    at = app(path, monkeypatch, "curves", {"dataset": "toy", "metric": "rankme"})
    lines = [c.value for c in at.caption if "RankMe is at most min(N, d)" in c.value]
    assert lines == ([lines[0]] if top > 0.8 * 5 else []), (top, lines)
    assert top > 0.8 * 5  # the reference says it binds here, so the page must say so
    assert "N = 5 items" in lines[0]
    # the page's own number is the curve's highest value; the reference agrees to rounding
    assert f"({top:.1f})" in lines[0] or abs(float(lines[0].split("(")[1].split(")")[0]) - top) < 0.15
