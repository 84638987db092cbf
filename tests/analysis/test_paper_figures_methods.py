"""Issue #31: the pure functions behind DR Figs. 2, 7 and 11/12 and α → d_v, against numpy.polyfit,
scipy.stats.linregress / kendalltau and counts done by hand."""

import numpy as np
import pytest
from scipy import stats

from analysis.methods.exponent_dimension import dimension_from_exponent
from analysis.methods.paper_figures import (kendall_tau_b, kendall_w, line_fit, rank_agreement,
                                            video_minus_image_offset, vision_kind)


def test_line_fit_equals_polyfit_and_linregress_on_hand_built_points():
    x = np.array([0.10, 0.14, 0.18, 0.22, 0.25])
    y = np.array([0.145, 0.205, 0.27, 0.33, 0.385])
    fit = line_fit(x, y)
    slope, intercept = np.polyfit(x, y, 1)
    ref = stats.linregress(x, y)
    assert fit["slope"] == pytest.approx(slope, abs=1e-12) and fit["slope"] == pytest.approx(ref.slope, abs=1e-12)
    assert fit["intercept"] == pytest.approx(intercept, abs=1e-12)
    assert fit["r"] == pytest.approx(ref.rvalue, abs=1e-12) and fit["n"] == 5


def test_line_fit_on_the_papers_line_recovers_it_exactly():
    x = np.array([0.05, 0.1, 0.2, 0.25])
    fit = line_fit(x, 1.6 * x - 0.018)
    assert (fit["slope"], fit["intercept"], fit["r"]) == pytest.approx((1.6, -0.018, 1.0))


def test_line_fit_degenerate_inputs_say_why():
    assert "at least 3" in line_fit([0.2], [0.3])["error"]
    flat_x = line_fit([0.2, 0.2, 0.2], [0.1, 0.2, 0.3])
    assert flat_x["slope"] is None and "equal" in flat_x["error"]
    flat_y = line_fit([0.1, 0.2, 0.3], [0.4, 0.4, 0.4])
    assert flat_y["slope"] == pytest.approx(0.0) and flat_y["r"] is None and "undefined" in flat_y["r_error"]
    # a NaN pair is left out, not propagated
    assert line_fit([0.1, np.nan, 0.3, 0.4], [1, 2, 3, 5])["n"] == 3


@pytest.mark.parametrize("seed", range(5))
def test_kendall_tau_b_equals_scipy_with_ties(seed):
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, 4, 9).astype(float), rng.integers(0, 4, 9).astype(float)
    ref = stats.kendalltau(a, b).statistic
    got = kendall_tau_b(a, b)
    assert (got is None and np.isnan(ref)) or got == pytest.approx(ref, abs=1e-12)


def test_kendall_tau_b_of_a_flat_column_is_none():
    assert kendall_tau_b([1, 1, 1], [1, 2, 3]) is None


def test_kendall_w_by_hand_without_ties():
    # 3 models ranked by 2 encoders: ranks (1,2,3) and (1,3,2): R = (2, 5, 5), mean 4,
    # S = 4 + 1 + 1 = 6, W = 12·6 / (2²·(27 − 3)) = 72/96 = 0.75
    assert kendall_w([[0.1, 0.1], [0.2, 0.3], [0.3, 0.2]])["w"] == pytest.approx(0.75)


def test_kendall_w_by_hand_with_ties():
    # rater 1 ranks (1, 2.5, 2.5) (one tie group of 2: T = 8 − 2 = 6), rater 2 (1, 2, 3):
    # R = (2, 4.5, 5.5), mean 4: S = 4 + 0.25 + 2.25 = 6.5; W = 12·6.5 / (4·24 − 2·6) = 78/84
    assert kendall_w([[0.1, 0.1], [0.2, 0.2], [0.2, 0.3]])["w"] == pytest.approx(78 / 84)


def test_kendall_w_of_opposite_raters_is_zero_and_of_two_raters_matches_spearman():
    assert kendall_w([[1, 3], [2, 2], [3, 1]])["w"] == pytest.approx(0.0)
    # for m = 2 raters without ties, W = (ρ_s + 1)/2 (Kendall & Gibbons): an independent check
    rng = np.random.default_rng(3)
    X = rng.normal(size=(7, 2))
    assert kendall_w(X)["w"] == pytest.approx((stats.spearmanr(X[:, 0], X[:, 1]).statistic + 1) / 2)


def test_kendall_w_degenerate_inputs_say_why():
    assert "at least 2" in kendall_w([[0.1, 0.2]])["error"]
    assert "missing" in kendall_w([[0.1, np.nan], [0.2, 0.3], [0.3, 0.4]])["error"]
    assert "ties every model" in kendall_w([[0.1, 0.2], [0.1, 0.2], [0.1, 0.2]])["error"]


def test_rank_agreement_lists_every_pair_of_text_encoders():
    X = np.array([[0.1, 0.2, 0.3], [0.2, 0.1, 0.4], [0.3, 0.3, 0.5]])
    out = rank_agreement(X, ["t1", "t2", "t3"])
    assert [(p["a"], p["b"]) for p in out["pairs"]] == [("t1", "t2"), ("t1", "t3"), ("t2", "t3")]
    for p, (i, j) in zip(out["pairs"], [(0, 1), (0, 2), (1, 2)]):
        assert p["tau"] == pytest.approx(stats.kendalltau(X[:, i], X[:, j]).statistic)


def test_video_minus_image_offset_on_hand_built_points():
    # image-on-video points on y = 2x + 0.1; video points 0.01 and 0.03 above it: offset 0.02;
    # the image-on-image point far off the line must not move the line
    x = [0.1, 0.2, 0.3, 0.15, 0.25, 0.2]
    y = [0.3, 0.5, 0.7, 0.41, 0.63, 0.9]
    kinds = ["image_on_video"] * 3 + ["video"] * 2 + ["image_on_image"]
    out = video_minus_image_offset(x, y, kinds)
    assert out["offset"] == pytest.approx(0.02) and out["n_target"] == 2 and out["n_reference"] == 3
    assert out["line"]["slope"] == pytest.approx(2.0) and out["line"]["intercept"] == pytest.approx(0.1)


def test_video_minus_image_offset_without_a_reference_line_says_why():
    out = video_minus_image_offset([0.1, 0.2], [0.3, 0.4], ["image_on_video", "video"])
    assert out["offset"] is None and "at least 3" in out["error"]
    out = video_minus_image_offset([0.1, 0.2, 0.3], [0.3, 0.4, 0.6], ["image_on_video"] * 3)
    assert out["offset"] is None and "no ▲" in out["error"]


def test_vision_kind():
    assert vision_kind("image", 1, "frames") == "image_on_image"
    assert vision_kind("image", 8, "first") == "image_on_image"
    assert vision_kind("image", 8, "frames") == "image_on_video"
    assert vision_kind("video", 16, None) == "video"


def test_dimension_from_exponent_maps_the_interval_with_swapped_ends():
    d = dimension_from_exponent(0.75, 0.5, 1.0)
    assert d["value"] == pytest.approx(2 / 0.75) and d["low"] == pytest.approx(2.0) and d["high"] == pytest.approx(4.0)
    # DR's DINOv2-G α = 1.76 gives d_v ≈ 1.1 (issue #31)
    assert dimension_from_exponent(1.76)["value"] == pytest.approx(1.136, abs=1e-3)


def test_dimension_from_exponent_blanks_with_reasons():
    assert dimension_from_exponent(0.7, undetermined="α sits at its bound")["value"] is None
    assert "not positive" in dimension_from_exponent(0.0)["note"]
    d = dimension_from_exponent(0.5, 0.0, 1.0)
    assert d["low"] == pytest.approx(2.0) and d["high"] is None and "no upper end" in d["note"]


def test_rank_agreement_says_why_a_tau_is_missing():
    (one,) = rank_agreement(np.array([[0.2, 0.3]]), ["t1", "t2"])["pairs"]
    assert one["tau"] is None and "fewer than two" in one["why"]
    (flat,) = rank_agreement(np.array([[0.2, 0.3], [0.2, 0.4]]), ["t1", "t2"])["pairs"]
    assert flat["tau"] is None and "same score" in flat["why"]


def test_budget_reaching_is_the_smallest_budget_at_or_above_the_baseline():
    from analysis.methods.paper_figures import budget_reaching

    # hand-computed: values 0.10, 0.30, 0.25, 0.40 at n_c 1, 2, 5, 10 against 0.25 -> n_c 2, margin 0.15
    r = budget_reaching([1, 2, 5, 10], [0.10, 0.30, 0.25, 0.40], 0.25)
    assert r["n_c"] == 2 and r["margin"] == pytest.approx(0.15) and r["error"] is None
    r = budget_reaching([1, 2], [0.1, 0.2], 0.5)  # never reached: margin negative
    assert r["n_c"] is None and r["margin"] == pytest.approx(-0.3)
    assert budget_reaching([1, 2], [float("nan"), 0.5], 0.5)["n_c"] == 2  # a NaN budget is left out
    assert "no baseline" in budget_reaching([1], [0.1], None)["error"]
    assert "no caption-sweep value" in budget_reaching([1], [float("nan")], 0.1)["error"]
    # a flat sweep equal to the baseline reaches it at the first budget
    assert budget_reaching([1, 2, 4], [0.3, 0.3, 0.3], 0.3) == {"n_c": 1, "margin": 0.0, "error": None}
