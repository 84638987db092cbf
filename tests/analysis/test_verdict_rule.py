"""The verdict rule: alignment with a trained reference decides "use layer N"; single-space
signals (RankMe, uniformity) support or dissent but never decide; dissent is said in the line; and
a difference whose interval includes 0 never picks between the last layer and the default output.
Planted data with the answer known: a model whose layer 1 is isotropic Gaussian noise (it wins
RankMe and uniformity, carries nothing) and whose layer 3 shares a latent with the reference."""

import numpy as np
import pytest

from analysis.methods.layer_selection import layer_verdict, verdict_sentence
from analysis.metrics import mutual_knn, rankme, uniformity

N, B = 100, 25


def _noise_layer_model(seed=0):
    """6 layers + a text reference: layer 1 isotropic noise, layer 3 = the shared latent, the rest
    low-rank (anisotropic) and unrelated to the reference."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(N, 4))
    text = z @ rng.normal(size=(4, 16)) + 0.1 * rng.normal(size=(N, 16))
    layers = [rng.normal(size=(N, 2)) @ rng.normal(size=(2, 16)) + 0.05 * rng.normal(size=(N, 16))
              for _ in range(6)]
    layers[1] = rng.normal(size=(N, 16))  # isotropic noise: best RankMe and uniformity, no information
    layers[3] = z @ rng.normal(size=(4, 16)) + 0.1 * rng.normal(size=(N, 16))
    return layers, text


def _curves_and_resamples(layers, text, seed=1):
    IX = np.random.default_rng(seed).integers(0, N, size=(B, N))
    fns = {"rankme": (rankme, True), "uniformity": (uniformity, False),
           "alignment with mpnet": (lambda X: mutual_knn(X, text, k=10), True)}
    curves, res, hib = {}, {}, {}
    for name, (f, up) in fns.items():
        curves[name] = np.array([f(X) for X in layers])
        hib[name] = up
        # resamples with repeated items: compare on distinct rows so k-NN is defined
        res[name] = {i: np.array([f(X[np.unique(ix)]) if name != "alignment with mpnet"
                                  else mutual_knn(X[np.unique(ix)], text[np.unique(ix)], k=10) for ix in IX])
                     for i, X in enumerate(layers)}
    return curves, hib, res


def test_isotropic_noise_never_wins_a_verdict_over_the_alignment_curve():
    layers, text = _noise_layer_model()
    curves, hib, res = _curves_and_resamples(layers, text)
    # the planted answer: noise wins both single-space signals, alignment peaks at the latent layer
    assert int(np.argmax(curves["rankme"][1:])) + 1 == 1 and int(np.argmin(curves["uniformity"][1:])) + 1 == 1
    assert int(np.argmax(curves["alignment with mpnet"][1:])) + 1 == 3
    v = layer_verdict(curves, hib, resamples=res)
    assert v.layer == 3 and v.lead == "alignment with mpnet" and v.decided_by == "alignment"
    assert v.status == "recommend"
    s = verdict_sentence("vid", v)
    assert s.startswith("vid: use layer 3 of 0–5")
    # the out-voted single-space signals are said, not hidden
    assert "rankme picks layer 1" in s and "uniformity picks layer 1" in s


def test_single_space_signals_alone_never_say_use_layer_n():
    layers, text = _noise_layer_model()
    curves, hib, res = _curves_and_resamples(layers, text)
    single = {m: curves[m] for m in ("rankme", "uniformity")}
    v = layer_verdict(single, hib, resamples=res)
    assert v.layer == 1 and v.status == "unsupported" and v.decided_by == "single-space"
    s = verdict_sentence("vid", v)
    assert "use layer" not in s and "not recommended" in s and "no alignment with a trained reference" in s


def _shifted(values, spread=0.0, seed=0):
    rng = np.random.default_rng(seed)
    shared = rng.normal(scale=0.01, size=B)
    return {i: v + shared + rng.normal(scale=spread, size=B) for i, v in enumerate(values)}


def test_an_alignment_curve_that_dissents_beyond_its_interval_is_said_in_the_line():
    # the real MiniLM case: RankMe picks the last layer, alignment with MPNet picks layer 3 at +27%
    curves = {"rankme": [1, 5, 6, 7, 8, 9, 10], "alignment with mpnet": [0, .3, .4, .508, .45, .42, .40]}
    hib = {m: True for m in curves}
    res = {m: _shifted(c) for m, c in curves.items()}
    v = layer_verdict(curves, hib, resamples=res)
    assert v.layer == 3 and v.status == "recommend"
    assert v.gain_vs_last == pytest.approx(0.27)
    s = verdict_sentence("minilm", v)
    assert "no earlier layer scores higher" not in s and "rankme picks the last layer" in s
    # two references that disagree: the one out-voted is said with its own gain and interval
    curves["alignment with clip"] = [0, .3, .2, .2, .2, .6, .4]
    curves["alignment with e5"] = [0, .3, .4, .5, .45, .42, .40]
    hib.update({m: True for m in curves})
    res.update({m: _shifted(curves[m], seed=2) for m in ("alignment with clip", "alignment with e5")})
    v = layer_verdict(curves, hib, resamples=res)
    assert v.layer == 3
    (clip,) = [d for d in v.dissent if d["metric"] == "alignment with clip"]
    assert clip["layer"] == 5 and clip["beyond_interval"]
    assert "alignment with clip picks layer 5, +50% over the last layer (95% CI" in verdict_sentence("m", v)


@pytest.mark.parametrize("sign", [+1, -1])
def test_a_difference_whose_interval_includes_zero_never_picks_last_layer_or_default(sign):
    # layers 0..6 numbered, 7 = the default output: the last layer and the default differ by ±0.3%
    curve = [0, .3, .4, .45, .48, .49, .50, .50 * (1 - sign * 0.003)]
    up = {"alignment with mpnet": True}
    v = layer_verdict({"alignment with mpnet": curve}, up, last_layer=6, default_layer=7,
                      resamples={"alignment with mpnet": _shifted(curve, spread=0.01)})
    assert v.vs_default["low"] <= 0 <= v.vs_default["high"]
    assert v.status == "tie" and v.tie_with == "the default output" and v.layer == 6
    s = verdict_sentence("minilm", v)
    assert "use the last layer" not in s and "keep the model's default output" not in s
    assert "tie between the last layer" in s and "includes zero" in s


def _shuffled_pairing_null(layers, text, observed, n_perm=60, seed=3):
    """The best cell's null by brute force: the grid maximum (over layers) under shuffled pairings,
    p = (1 + #{max >= observed}) / (1 + n_perm) (Phipson & Smyth 2010)."""
    rng = np.random.default_rng(seed)
    maxima = [max(mutual_knn(X, text[perm], k=10) for X in layers[1:])
              for perm in (rng.permutation(N) for _ in range(n_perm))]
    return {"p": (1 + sum(m >= observed for m in maxima)) / (1 + n_perm),
            "q95": float(np.quantile(maxima, 0.95)), "n_perm": n_perm}


@pytest.mark.slow  # a brute-force null of 60 shuffles per seed
@pytest.mark.parametrize("seed", [0, 1])
def test_a_reference_unrelated_to_every_layer_never_yields_use_layer_n(seed):
    layers, _ = _noise_layer_model(seed)
    unrelated = np.random.default_rng(50 + seed).normal(size=(N, 16))
    curves, hib, res = _curves_and_resamples(layers, unrelated, seed=seed + 7)
    name = "alignment with mpnet"
    null = _shuffled_pairing_null(layers, unrelated, float(np.max(curves[name][1:])))
    v = layer_verdict(curves, hib, resamples=res, nulls={name: null})
    assert name in v.chance  # the planted answer: no alignment beyond chance
    assert v.status in ("tie", "last", "untested", "unsupported"), verdict_sentence("vid", v)
    assert "use layer" not in verdict_sentence("vid", v)
