"""Issue #33 item 2: paired item-bootstrap intervals of the reorder probe (positive, negative, drop) at
its chosen layer pair. References: an explicit loop over each resample's positions that finds every
k-NN among the resampled items with the copies of an item masked (tests/reference.py:
``ref_reorder_resample``), the percentile formula written out, and hand cases with exact answers."""

from __future__ import annotations

import numpy as np
import pytest

import analysis.bootstrap as B
from analysis.bootstrap import ResampleNeighbours, resample_indices
from analysis.methods.temporal import (REORDER_BOUNDS, reorder_alignment, reorder_at_best_pair, reorder_intervals,
                                       reorder_resamples, reorder_spaces)
from analysis.metrics.neighbors import cross_topk
from tests.reference import ref_cross_lists, ref_reorder_resample


def _planted(n=40, seed=0, dv=9, dt=7, shift=0.8):
    """A vision side and positive captions sharing a latent; negatives = positives moved by noise."""
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, 4))
    V = Z @ rng.normal(size=(4, dv)) + 0.6 * rng.normal(size=(n, dv))
    P = Z @ rng.normal(size=(4, dt)) + 0.6 * rng.normal(size=(n, dt))
    N = P + shift * rng.normal(size=(n, dt))
    return V, P, N


def _check_against_reference(V, P, N, k, IX):
    got = reorder_resamples(V, P, N, IX, k=k)
    for b, ix in enumerate(IX):
        want = ref_reorder_resample(V, P, N, ix, k)
        np.testing.assert_array_equal([got["positive"][b], got["negative"][b]], want, err_msg=f"resample {b}")
        if np.isfinite(want[0]):
            assert got["drop"][b] == want[0] - want[1]
    return got


@pytest.mark.parametrize("seed", range(2))
def test_resampled_values_equal_a_brute_force_loop_with_duplicates_masked(seed):
    V, P, N = _planted(seed=seed)
    # items that are exact copies of other items on every side (distinct items that tie exactly),
    # a negative equal to another item's positive, and a zero negative (cosine 0 to every caption)
    for A in (V, P, N):
        A[30:34] = A[:4]
    N[5] = P[9]
    N[7] = 0.0
    IX = resample_indices(len(V), 12, np.random.default_rng(seed))
    got = _check_against_reference(V, P, N, 5, IX)
    assert np.isfinite(got["drop"]).all()
    assert np.ptp(got["negative"]) > 0  # the resamples differ: the test can tell a wrong list apart


def test_the_identity_resample_is_the_full_data_probe():
    V, P, N = _planted(seed=3)
    full = np.arange(len(V))
    got = reorder_resamples(V, P, N, full[None], k=5)
    point = reorder_alignment(V, P, N, k=5)
    assert [got[v][0] for v in ("positive", "negative", "drop")] == [point[v] for v in ("positive", "negative", "drop")]
    assert (point["positive"], point["negative"]) == ref_reorder_resample(V, P, N, full, 5)


def test_the_negatives_full_lists_are_exact_cosine_neighbours_among_the_other_items():
    V, P, N = _planted(seed=4)
    P[20:25] = P[:5]  # exact ties between distinct items go to the lower index
    N[3] = 0.0
    for k in (1, 5, 39):
        idx, sim = cross_topk(N, P, k)
        np.testing.assert_array_equal(idx, ref_cross_lists(N, P, k))  # nearest first, ties to the lower index
        assert (np.diff(sim, axis=1) <= 0).all() and (idx != np.arange(len(P))[:, None]).all()
    assert (cross_topk(N, P, 5)[0][3] == [0, 1, 2, 4, 5]).all()  # the zero query: all cosines 0, by index


def test_lists_that_run_out_are_scanned_whole_on_the_negative_side_too(monkeypatch):
    monkeypatch.setattr(B, "RESAMPLE_LIST_FACTOR", 1)  # lists of k items only: most resamples miss some
    V, P, N = _planted(n=30, seed=5)
    IX = resample_indices(len(V), 6, np.random.default_rng(1))
    spaces = reorder_spaces(V, P, N, 4)
    got = reorder_resamples(V, P, N, IX, k=4, spaces=spaces)
    assert spaces[2].rows_scanned > 0  # the query space's scan path ran
    for b, ix in enumerate(IX):
        assert (got["positive"][b], got["negative"][b]) == ref_reorder_resample(V, P, N, ix, 4)


def test_intervals_are_the_median_shifted_percentiles_of_the_reference_resamples():
    V, P, N = _planted(n=30, seed=6)
    n_boot, seed, k = 25, 3, 4
    out = reorder_intervals(V, P, N, k=k, n_boot=n_boot, seed=seed)
    IX = resample_indices(len(V), n_boot, np.random.default_rng(seed))  # the documented draw
    ref = np.array([ref_reorder_resample(V, P, N, ix, k) for ix in IX])
    point = reorder_alignment(V, P, N, k=k)
    samples = {"positive": ref[:, 0], "negative": ref[:, 1], "drop": ref[:, 0] - ref[:, 1]}
    assert out["n_valid"] == n_boot and out["reason"] is None and out["n_boot"] == n_boot
    for v, (lo_b, hi_b) in REORDER_BOUNDS.items():
        s = samples[v]
        shift = point[v] - np.median(s)
        lo, hi = np.quantile(s, 0.025) + shift, np.quantile(s, 0.975) + shift
        assert out[v] == pytest.approx([max(lo_b, lo), min(hi_b, hi)], abs=1e-12), v
        assert out["estimate"][v] == point[v]
    assert out["chance"] == k / (len(V) - 1)
    assert "conditional on that pair" in out["method"]


def test_negatives_equal_to_the_positives_drop_exactly_zero_on_every_resample():
    V, P, _ = _planted(seed=7)
    IX = resample_indices(len(V), 10, np.random.default_rng(0))
    got = reorder_resamples(V, P, P.copy(), IX, k=5)
    np.testing.assert_array_equal(got["positive"], got["negative"])
    out = reorder_intervals(V, P, P.copy(), k=5, n_boot=10)
    assert out["drop"] == [0.0, 0.0] and out["positive"] == out["negative"]


def test_items_duplicated_beyond_k_give_no_interval_and_say_ties_decide_the_lists():
    """Four distinct captions for 40 items: each item's caption neighbours are 5 of its ~9 copies
    picked by index, so no interval is drawn (never a number made of tie-breaking)."""
    V, P, N = _planted(seed=8)
    P = np.repeat(P[:4], 10, axis=0)
    N = np.repeat(N[:4], 10, axis=0)
    out = reorder_intervals(V, P, N, k=5, n_boot=20)
    assert out["positive"] is out["negative"] is out["drop"] is None
    assert out["reason"].startswith("no interval: ") and "decided by ties" in out["reason"]
    assert "positive-caption side" in out["reason"]


def test_n_just_above_k_scores_only_resamples_with_more_than_k_distinct_items():
    k = 5
    V, P, N = _planted(n=k + 1, seed=9)
    out = reorder_intervals(V, P, N, k=k, n_boot=30)
    # a resample of N = k + 1 items needs all of them distinct: (k+1)!/(k+1)^(k+1) = 1.5%
    IX = resample_indices(k + 1, 30, np.random.default_rng(0))
    valid = sum(len(np.unique(ix)) > k for ix in IX)
    assert out["n_valid"] == valid < 2
    assert out["drop"] is None and out["reason"].startswith("no interval: ")
    assert f"held <= k={k} distinct items (of N={k + 1})" in out["reason"]
    V, P, N = _planted(n=9, seed=9)
    out = reorder_intervals(V, P, N, k=k, n_boot=40)
    IX = resample_indices(9, 40, np.random.default_rng(0))
    valid = sum(len(np.unique(ix)) > k for ix in IX)
    assert 2 <= out["n_valid"] == valid < 40 and out["drop"] is not None
    assert out["reason"] == f"{40 - valid} of 40 resamples skipped: {40 - valid} held <= k={k} distinct items (of N=9)"
    assert reorder_intervals(V[:5], P[:5], N[:5], k=k, n_boot=5)["reason"] == "no interval: 5 items, the probe needs more than k=5"


@pytest.mark.parametrize("side", ["vision", "positive-caption", "negative-caption"])
def test_a_collapsed_side_gives_no_interval_and_says_which(side):
    V, P, N = _planted(seed=10)
    A = {"vision": V, "positive-caption": P, "negative-caption": N}[side]
    A[:] = A[0] * (1 + 1e-9 * np.arange(len(A)))[:, None]  # one direction (up to rounding noise)
    out = reorder_intervals(V, P, N, k=5, n_boot=10)
    assert out["positive"] is out["negative"] is out["drop"] is None and out["n_valid"] == 0
    assert out["reason"] == f"no interval: the {side} rows are collapsed (every row one direction): neighbours are undefined"


def test_bad_arguments_name_what_is_wrong():
    V, P, N = _planted(seed=11)
    with pytest.raises(ValueError, match="n_boot must be at least 2"):
        reorder_intervals(V, P, N, n_boot=1)
    with pytest.raises(ValueError, match="T_neg"):
        reorder_intervals(V, P, N[:-1], n_boot=5)
    with pytest.raises(ValueError, match="queries"):
        ResampleNeighbours(P, 3, queries=N).state(np.arange(len(P)), None, {})


@pytest.fixture(scope="module")
def nuance(tmp_path_factory):
    """The nuance store (tests/stores.py) analysed with 20 resamples, its arrays, and a copy analysed
    again without resamples."""
    import shutil

    from analysis.studies import analyze_store
    from tests.stores import write_nuance_store

    root = tmp_path_factory.mktemp("reorder33")
    arrays = write_nuance_store(root / "n.duckdb")
    shutil.copy(root / "n.duckdb", root / "off.duckdb")
    analyze_store(root / "off.duckdb", n_boot=0, log=lambda m: None)
    return {"boot": root / "n.duckdb", "off": root / "off.duckdb", "arrays": arrays}


def _temporal_row(path):
    from analysis.storage import results as R
    from analysis.storage.store import connect

    con = connect(path, read_only=True)
    try:
        (row,) = R.read_studies(con, study="temporal", dataset="nuance")
    finally:
        con.close()
    return row


@pytest.mark.slow  # builds and analyses a store twice
def test_the_study_stores_intervals_at_the_chosen_pair(nuance):
    """The nuance store's reorder entries (20 items with a temporal negative) carry intervals from its
    20 resamples at the stored pair; the mllm pair, whose negatives are the opposite captions at the
    chosen layer, drops with an interval above 0."""
    from tests.stores import NUANCE_NEGATED

    arrays = nuance["arrays"]
    row = _temporal_row(nuance["boot"])
    assert row["params"]["n_boot"] == 20 and row["params"]["seed"] == 0
    entries = {e["vision"]: e for e in row["payload"]["reorder"]}
    keep = np.array([i for i in range(len(arrays["T"][0])) if i not in NUANCE_NEGATED])
    e = entries["mllm"]
    la, lb = e["layers"]
    want = reorder_at_best_pair(arrays["V"][:, keep], arrays["T"][:, keep], arrays["neg"][:, keep], k=e["k"])
    assert (la, lb) == (want["layer_v"], want["layer_t"])
    iv = e["intervals"]
    assert iv["n_boot"] == 20 and iv["k"] == e["k"] == 5 and iv["n_items"] == len(keep)
    assert iv["estimate"] == {v: e[v] for v in ("positive", "negative", "drop")}
    assert iv["drop"][0] > 0 and iv["positive"][0] <= e["positive"] <= iv["positive"][1]
    assert iv["chance"] == 5 / (len(keep) - 1)


@pytest.mark.slow  # shares the store above
def test_without_resamples_the_study_says_why_there_is_no_interval(nuance):
    row = _temporal_row(nuance["off"])
    assert row["params"]["n_boot"] == 0
    defined = [e for e in row["payload"]["reorder"] if "layers" in e]
    assert defined
    for e in defined:
        assert e["intervals"]["drop"] is None
        assert e["intervals"]["reason"] == "no interval: the analysis ran without item resamples (--bootstrap 0)"


def _entry(name, drop_ci, **extra):
    return {"vision": name, "text": "t", "n_items": 21, "k": 5, "layers": [1, 2], "positive": 0.5,
            "negative": 0.4, "drop": 0.1, "intervals": {"positive": [0.4, 0.6], "negative": [0.3, 0.5],
                                                        "drop": drop_ci, "chance": 0.25, "n_valid": 30}, **extra}


def test_the_reorder_view_keeps_every_interval_and_says_when_one_is_missing():
    from analysis.views.temporal import reorder_drop_text, temporal_view

    flat = {"vision": "flat", "text": "t", "n_items": 21, "k": 5, "reason": "the positive grid is flat"}
    tied = _entry("tied", None)
    tied["intervals"] = {"positive": None, "negative": None, "drop": None, "chance": 0.25, "n_valid": 0,
                         "reason": "no interval: positive-caption side: k-NN lists decided by ties"}
    df = temporal_view({"reorder": [_entry("a", [-0.02, 0.2]), _entry("b", [0.05, 0.15]), _entry("c", [-0.3, -0.1]),
                                    flat, tied]})["reorder"]
    a = df.iloc[0]
    assert (a["positive_low"], a["positive_high"], a["drop_low"], a["drop_high"]) == (0.4, 0.6, -0.02, 0.2)
    assert df.iloc[3]["chance"] == 5 / 20  # k/(N−1) from the entry when no interval was stored
    assert df.iloc[3]["note"] == "the positive grid is flat"
    assert reorder_drop_text(df) == [
        "a × t: drop 0.100, 95% interval [-0.020, 0.200] includes 0: no evidence at this pair that the text side "
        "tells the order apart.",
        "b × t: drop 0.100, 95% interval [0.050, 0.150] excludes 0: the reordered caption aligns worse.",
        "c × t: drop 0.100, 95% interval [-0.300, -0.100] excludes 0, below it: the reordered caption aligns better.",
        "tied × t: drop 0.100; no interval: positive-caption side: k-NN lists decided by ties."]


def test_the_reorder_charts_draw_error_bars_only_where_an_interval_exists():
    import vl_convert as vlc

    from analysis.views.temporal import reorder_charts, temporal_view

    tied = _entry("tied", None)
    tied["intervals"] = {"positive": None, "negative": None, "drop": None, "chance": 0.25, "n_valid": 0,
                         "reason": "no interval: ties"}
    df = temporal_view({"reorder": [_entry("a", [-0.02, 0.2]), tied]})["reorder"]
    bars, drop = reorder_charts(df)
    spec = bars.to_dict()
    err = spec["layer"][1]
    assert err["mark"]["type"] == "errorbar" and err["transform"] == [{"filter": "isValid(datum.ci_low)"}]
    rows = spec["datasets"][spec["data"]["name"]] if "data" in spec else next(iter(spec["datasets"].values()))
    with_ci = [r for r in rows if r["ci_low"] is not None]
    assert {(r["pair"], r["captions"], r["ci_low"], r["ci_high"]) for r in with_ci} == {
        ("a × t", "positive", 0.4, 0.6), ("a × t", "negative", 0.3, 0.5)}
    chance = [r for v in spec["datasets"].values() for r in v if "chance" in r]
    assert [r["chance"] for r in chance] == [0.25]
    zero = [r for v in drop.to_dict()["datasets"].values() for r in v if "zero" in r]
    assert [r["zero"] for r in zero] == [0.0]
    for chart in (bars, drop):
        assert "<svg" in vlc.vegalite_to_svg(chart.to_json())  # valid Vega-Lite (no NaN in the data)
    assert reorder_charts(temporal_view({"reorder": [{"vision": "f", "text": "t", "k": 5, "n_items": 9,
                                                      "reason": "flat"}]})["reorder"]) == []
