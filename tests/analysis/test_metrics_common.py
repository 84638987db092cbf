"""Properties every registered metric must have, parametrised over the registry."""

import numpy as np
import pytest

from analysis.registry import REGISTRY
from tests.helpers import planted, random_rotation

ALL = sorted(REGISTRY)
TWO_SPACE = [n for n in ALL if REGISTRY[n].kind != "single"]


def inputs(name, n=120, seed=0):
    """Data a metric of this kind accepts, with planted shared structure."""
    kind = REGISTRY[name].kind
    X, Y = planted(n, seed=seed)
    if kind == "single":
        return (X,)
    if kind in ("same_space", "unpaired"):
        rng = np.random.default_rng(seed + 1)
        return (X, X + 0.5 * rng.normal(size=X.shape))
    return (X, Y)


def call(name, *arrays):
    return REGISTRY[name](*arrays)


@pytest.mark.parametrize("name", ALL)
def test_returns_plain_float_within_bounds(name):
    value = call(name, *inputs(name))
    assert type(value) is float
    assert np.isfinite(value)
    lo, hi = REGISTRY[name].bounds
    if lo is not None:
        assert value >= lo - 1e-9
    if hi is not None:
        assert value <= hi + 1e-9


@pytest.mark.parametrize("name", [n for n in TWO_SPACE if REGISTRY[n].symmetric])
def test_symmetric(name):
    X, Y = inputs(name)
    assert call(name, X, Y) == pytest.approx(call(name, Y, X), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("name", [n for n in TWO_SPACE if not REGISTRY[n].symmetric])
def test_asymmetric_metrics_really_depend_on_order(name):
    # registry honesty: a metric not marked symmetric should show it on some data
    differs = []
    for seed in range(5):
        rng = np.random.default_rng(seed)
        X, Y = inputs(name, seed=seed)
        # hard enough that ranks are spread out (easy data gives rank 1 both ways)
        Y = Y + 4.0 * rng.normal(size=Y.shape) * (np.arange(len(Y)) % 3 != 0)[:, None]
        differs.append(call(name, X, Y) != call(name, Y, X))
    assert any(differs)


def _transform(name, arrays, *, rotate, scale):
    kind = REGISTRY[name].kind
    out = []
    for i, A in enumerate(arrays):
        # one shared space gets one shared map; separate spaces get their own
        seed = 7 if kind in ("same_space", "unpaired") else 7 + i
        Q = random_rotation(A.shape[1], seed) if rotate else np.eye(A.shape[1])
        c = (3.7 if kind in ("same_space", "unpaired") else 3.7 + 2 * i) if scale else 1.0
        out.append(c * A @ Q)
    return out


@pytest.mark.parametrize("name", [n for n in ALL if "rotation" in REGISTRY[n].invariances])
def test_rotation_invariance(name):
    arrays = inputs(name)
    assert call(name, *_transform(name, arrays, rotate=True, scale=False)) == pytest.approx(
        call(name, *arrays), rel=1e-7, abs=1e-10
    )


@pytest.mark.parametrize("name", [n for n in ALL if "scale" in REGISTRY[n].invariances])
def test_isotropic_scale_invariance(name):
    arrays = inputs(name)
    assert call(name, *_transform(name, arrays, rotate=False, scale=True)) == pytest.approx(
        call(name, *arrays), rel=1e-7, abs=1e-10
    )


@pytest.mark.parametrize("name", [n for n in ALL if not {"rotation", "scale"} <= REGISTRY[n].invariances])
def test_metrics_not_claiming_scale_invariance_do_change(name):
    arrays = inputs(name)
    assert call(name, *_transform(name, arrays, rotate=False, scale=True)) != pytest.approx(call(name, *arrays))


@pytest.mark.parametrize("name", ALL)
def test_consistent_item_permutation_invariance(name):
    arrays = inputs(name)
    perm = np.random.default_rng(3).permutation(len(arrays[0]))
    assert call(name, *[A[perm] for A in arrays]) == pytest.approx(call(name, *arrays), rel=1e-9, abs=1e-12)


# modality_gap compares the two means only: by definition it ignores which row goes with which
@pytest.mark.parametrize("name", [n for n in TWO_SPACE if REGISTRY[n].kind != "unpaired" and n != "modality_gap"])
def test_paired_metrics_see_broken_pairing(name):
    X, Y = inputs(name)
    perm = np.random.default_rng(3).permutation(len(X))
    assert call(name, X, Y[perm]) != pytest.approx(call(name, X, Y), rel=1e-3)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_input_rejected(name, bad):
    arrays = [A.copy() for A in inputs(name)]
    arrays[-1][3, 2] = bad
    with pytest.raises(ValueError, match="NaN or inf"):
        call(name, *arrays)


@pytest.mark.parametrize("name", [n for n in ALL if "k" in REGISTRY[n].params and n != "recall_at_k"])
def test_too_few_items_for_k(name):
    arrays = inputs(name, n=8)
    with pytest.raises(ValueError, match="too few"):
        REGISTRY[name](*arrays, k=10)


@pytest.mark.parametrize("name", [n for n in TWO_SPACE if REGISTRY[n].kind != "unpaired"])
def test_mismatched_item_counts_rejected(name):
    X, Y = inputs(name)
    with pytest.raises(ValueError, match="same number of rows"):
        call(name, X, Y[:-1])


@pytest.mark.parametrize("name", [n for n in TWO_SPACE if REGISTRY[n].kind in ("same_space", "unpaired")])
def test_same_space_metrics_reject_different_dimensions(name):
    X, _ = inputs(name)
    with pytest.raises(ValueError, match="one embedding space"):
        call(name, X, X[:, :-1])


@pytest.mark.parametrize("name", ALL)
def test_wrong_rank_rejected(name):
    arrays = inputs(name)
    with pytest.raises(ValueError, match="2-D"):
        call(name, *[A[None] for A in arrays])


def test_mutual_knn_of_a_space_with_itself_is_one():
    X, _ = planted()
    assert REGISTRY["mutual_knn"](X, X) == 1.0
    assert REGISTRY["cycle_knn"](X, X) == 1.0


@pytest.mark.parametrize("name", ["cka", "cknna", "svcca"])
def test_identity_gives_one(name):
    X, _ = planted()
    assert REGISTRY[name](X, X) == pytest.approx(1.0, abs=1e-9)


def test_planted_structure_beats_noise():
    X, Y = planted()
    noise = np.random.default_rng(9).normal(size=Y.shape)
    for name in ("mutual_knn", "cycle_knn", "cka", "cknna", "svcca"):
        assert REGISTRY[name](X, Y) > REGISTRY[name](X, noise) + 0.1, name
