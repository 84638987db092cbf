"""A layer verdict is a typed record: it survives the store's JSON unchanged, and a renamed or
missing field is refused by name instead of silently dropped."""

import dataclasses
import json

import numpy as np
import pytest

from analysis.methods.layer_selection import layer_verdict, no_verdict, verdict_sentence
from analysis.methods.verdict import Verdict
from analysis.storage.results import clean_json


def _stored(v: Verdict) -> Verdict:
    """What the verdicts study writes and a view reads back: strict JSON of the fields."""
    return Verdict.from_dict(json.loads(json.dumps(clean_json(v.to_dict()), allow_nan=False)))


def _verdicts() -> list[Verdict]:
    rng = np.random.default_rng(4)
    align, single = [0, .3, .8, .5, .6], [0, .9, .2, .3, .35]
    res = {m: {i: list(c[i] + 0.01 * rng.normal(size=20)) for i in range(5)}
           for m, c in (("alignment with t", align), ("rankme", single))}
    null = {"p": 0.01, "q95": 0.4, "n_perm": 99, "kind": "plain"}
    return [
        # a recommendation with a dissenting single-space signal, a default output and a null
        layer_verdict({"alignment with t": align, "rankme": single}, {"alignment with t": True, "rankme": True},
                      last_layer=3, default_layer=4, resamples=res, nulls={"alignment with t": null}),
        # a tie against the default output (tie_with set), and a model without any pick
        layer_verdict({"a": [0, .5, 1.0, 1.0, 1.0]}, {"a": True}, last_layer=3, default_layer=4,
                      resamples={"a": {i: [1.0] * 5 for i in range(5)}}, alignment=["a"]),
        no_verdict("every curve is undefined", 3, ["rankme"]),
    ]


@pytest.mark.parametrize("i", range(3))
def test_a_verdict_read_back_from_stored_json_equals_the_one_computed(i):
    v = _verdicts()[i]
    back = _stored(v)
    assert back == v
    assert verdict_sentence("m", back) == verdict_sentence("m", v)


def test_the_planted_verdicts_cover_a_recommendation_a_tie_with_the_default_and_no_verdict():
    # the round trip above is only worth something if these carry nested gains, dissent and a null
    rec, tie, none = _verdicts()
    assert rec.status == "recommend" and rec.layer == 2 and rec.vs_last["low"] > 0 and rec.dissent and rec.null
    assert tie.tie_with == "the default output" and tie.vs_default is not None
    assert none.status == "none" and none.layer is None


def test_a_renamed_or_missing_field_is_refused_by_name():
    d = _verdicts()[0].to_dict()
    d["layer_index"] = d.pop("layer")
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['layer_index'\] and missing field\(s\) \['layer'\]"):
        Verdict.from_dict(d)


def test_a_verdict_cannot_be_changed_after_it_is_decided():
    with pytest.raises(dataclasses.FrozenInstanceError):
        _verdicts()[0].status = "recommend"
