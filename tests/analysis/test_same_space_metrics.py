"""Same-space maths: mAP with several relevant items against brute force, the resampled metrics
against the metrics on resampled rows, degenerate layers, the nuanced-retrieval probes by hand."""

import numpy as np
import pytest
from scipy import linalg
from sklearn.metrics import average_precision_score

from analysis.metrics import frechet, mean_ap, partner_ranks
from analysis.metrics.retrieval import query_average_precision, query_ranks
from analysis.methods.same_space import METRICS, RANKING, paired_resamples, score_layer
from analysis.methods.temporal import (
    chiral_accuracy,
    chiral_gallery_map,
    negated_query_recall,
    time_reversal_accuracy,
)


def brute_ap(scores, relevant):
    """AP by walking the ranked list one candidate at a time; ties: wrong candidates first."""
    order = sorted(range(len(scores)), key=lambda j: (-scores[j], bool(relevant[j])))
    hits, total = 0, 0.0
    for pos, j in enumerate(order, 1):
        if relevant[j]:
            hits += 1
            total += hits / pos
    return total / max(1, sum(relevant)) if any(relevant) else float("nan")


def unit(angles):
    return np.stack([np.cos(angles), np.sin(angles)], axis=1)


def test_several_relevant_items_hand_case():
    # query at angle 0; gallery at angles 0.1 (rel), 0.2 (wrong), 0.3 (rel), 0.4 (wrong): positions 1 and 3
    Q = unit(np.array([0.0]))
    G = unit(np.array([0.1, 0.2, 0.3, 0.4]))
    ap = query_average_precision(Q, G, query_groups=["a"], gallery_groups=["a", "b", "a", "b"])
    assert ap[0] == pytest.approx((1 / 1 + 2 / 3) / 2)
    # ties with a wrong candidate put the relevant one last: one relevant tied with one wrong -> position 2
    G2 = unit(np.array([0.2, 0.2, 0.5]))
    assert query_average_precision(Q, G2, query_groups=[1], gallery_groups=[1, 0, 0])[0] == pytest.approx(1 / 2)
    # first relevant rank: wrong candidates at least as close as the best relevant one
    assert query_ranks(Q, G, query_groups=["a"], gallery_groups=["a", "b", "a", "b"])[0] == 0
    assert np.isnan(query_ranks(Q, G, query_groups=["z"], gallery_groups=["a", "b", "a", "b"])[0])


def test_group_ap_against_brute_force_and_sklearn(rng):
    Q = rng.normal(size=(15, 6))
    G = rng.normal(size=(40, 6))
    qg, gg = rng.integers(0, 4, 15), rng.integers(0, 4, 40)
    got = query_average_precision(Q, G, query_groups=qg, gallery_groups=gg)
    S = (Q / np.linalg.norm(Q, axis=1, keepdims=True)) @ (G / np.linalg.norm(G, axis=1, keepdims=True)).T
    for i in range(15):
        rel = gg == qg[i]
        if not rel.any():
            assert np.isnan(got[i])
            continue
        assert got[i] == pytest.approx(brute_ap(S[i], rel), rel=1e-12)
        assert got[i] == pytest.approx(average_precision_score(rel, S[i]), rel=1e-12)  # no ties here


def test_mean_ap_with_groups_is_the_mean_of_brute_force_ap(rng):
    X, Y = rng.normal(size=(30, 5)), rng.normal(size=(30, 5))
    g = rng.integers(0, 6, 30)
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    Yn = Y / np.linalg.norm(Y, axis=1, keepdims=True)
    expect = np.mean([brute_ap((Xn @ Yn.T)[i], g == g[i]) for i in range(30)])
    assert mean_ap(X, Y, groups=g) == pytest.approx(expect, rel=1e-12)
    # each item its own group: the one-partner mAP
    assert mean_ap(X, Y, groups=np.arange(30)) == pytest.approx(mean_ap(X, Y), rel=1e-12)
    np.testing.assert_array_equal(partner_ranks(X, Y, groups=np.arange(30)), partner_ranks(X, Y))


def test_resampled_metrics_equal_the_metrics_on_resampled_rows_with_copies_grouped(rng):
    n = 25
    z = rng.normal(size=(n, 4))
    V, T = z + 0.8 * rng.normal(size=(n, 4)), z + 0.8 * rng.normal(size=(n, 4))
    ix = rng.integers(0, n, (6, n))
    W = np.stack([np.bincount(r, minlength=n) for r in ix]).astype(float)
    fast = paired_resamples(V, T, W)
    for b, r in enumerate(ix):
        Vb, Tb = V[r], T[r]
        for d, (Q, G) in (("v2t", (Vb, Tb)), ("t2v", (Tb, Vb))):
            ranks = query_ranks(Q, G, query_groups=r, gallery_groups=r)
            for k in (1, 5, 10):
                assert fast[f"recall@{k}_{d}"][b] == pytest.approx(np.mean(ranks < k), abs=1e-12)
            ap = query_average_precision(Q, G, query_groups=r, gallery_groups=r)
            assert fast[f"map_{d}"][b] == pytest.approx(np.mean(ap), rel=1e-12)
            assert fast[f"median_rank_{d}"][b] == np.median(ranks + 1)
        Vn = Vb / np.linalg.norm(Vb, axis=1, keepdims=True)
        Tn = Tb / np.linalg.norm(Tb, axis=1, keepdims=True)
        assert fast["modality_gap"][b] == pytest.approx(np.linalg.norm(Vn.mean(0) - Tn.mean(0)), rel=1e-10)
        assert fast["alignment"][b] == pytest.approx(np.mean(np.sum((Vn - Tn) ** 2, 1)), rel=1e-10)


def test_score_layer_collapsed_side_gives_nan_rankings_with_a_reason(rng):
    V = np.tile(rng.normal(size=(1, 6)), (20, 1))
    T = rng.normal(size=(20, 6))
    values, reasons, _ = score_layer(V, T)
    assert all(np.isnan(values[m]) for m in RANKING)
    assert all("collapsed" in reasons[m] for m in RANKING)
    assert np.isfinite(values["modality_gap"]) and np.isfinite(values["frechet"])
    assert set(values) == set(METRICS)


def test_score_layer_duplicated_captions_are_right_answers_not_ties(rng):
    n = 12
    V = rng.normal(size=(n, 8))
    T = V + 0.01 * rng.normal(size=(n, 8))
    T[1] = T[0]  # items 0 and 1 carry one caption, and their videos show it
    V[1] = V[0] + 0.01 * rng.normal(size=8)
    values, reasons, groups = score_layer(V, T)
    assert groups[0] == groups[1] and len(np.unique(groups)) == n - 1
    # v_1's query finds t_0 == t_1 first: right (grouped), where the pessimistic tie rule would say rank 2
    assert values["recall@1_v2t"] == 1.0 and values["recall@1_t2v"] == 1.0 and values["map_v2t"] == 1.0
    assert partner_ranks(V, T)[1] == 1  # what the one-partner rule would have said
    assert "grouped" in reasons["recall@1_v2t"]
    everything = np.tile(T[:1], (n, 1))
    values, reasons, _ = score_layer(V, everything)
    assert np.isnan(values["map_t2v"]) and reasons["map_t2v"]


@pytest.mark.parametrize("n,d", [(40, 3), (12, 30)])
def test_frechet_equals_the_sqrtm_formula(rng, n, d):
    X = rng.normal(size=(n, d)) * rng.uniform(0.5, 2, d)
    Y = rng.normal(size=(n + 5, d)) + 0.3
    cx, cy = np.cov(X, rowvar=False), np.cov(Y, rowvar=False)
    ref = np.sum((X.mean(0) - Y.mean(0)) ** 2) + np.trace(cx + cy - 2 * np.real(linalg.sqrtm(cx @ cy)))
    assert frechet(X, Y) == pytest.approx(ref, rel=1e-6)


def test_time_reversal_choice_hand_cases():
    T = unit(np.array([0.0, 1.0, 2.0, 3.0]))
    V = unit(np.array([0.1, 1.1, 2.1, 3.1]))
    back = unit(np.array([0.5, 0.8, 2.5, 3.05]))  # item 1's reversal sits closer to its caption
    acc, ties, why = time_reversal_accuracy(T, V, back)
    assert (acc, ties, why) == (0.75, 0, None)
    acc, ties, _ = time_reversal_accuracy(T, V, np.vstack([V[:2], back[2:]]))  # two reversals change nothing
    assert (acc, ties) == ((0.5 + 0.5 + 1 + 0) / 4, 2)  # ties count 1/2; item 3's reversal is closer
    acc, ties, why = time_reversal_accuracy(T, V, V.copy())  # a frame-order-blind space
    assert np.isnan(acc) and ties == 4 and "cannot choose" in why
    assert chiral_accuracy(V, T, back) == 0.75  # V2T: video 3 (3.1) sits nearer "back" (3.05) than its caption (3.0)


def test_chiral_gallery_map_hand_case():
    # two groups (door: open/close, box: open/close); queries on the unit circle, videos placed by hand
    T = unit(np.array([0.0, 0.0, 1.5, 3.0, 4.5]))
    V = unit(np.array([0.05, 0.2, 1.55, 3.2, 4.4]))
    group = ["door", "door", "door", "box", "box"]
    action = ["open", "open", "close", "open", "close"]
    # chiral gallery of query 0 (door/open): v0 (0.05, rel), v1 (0.2, rel), v2 (1.55) -> AP 1
    # query 2 (door/close at 1.5): v2 first -> AP 1; query 3 (box/open at 3.0): v3 (0.2 away) vs v4 (1.5) -> 1
    # query 4 (box/close at 4.5): v4 (0.1 away) -> 1
    assert chiral_gallery_map(T, V, group=group, action=action, setting="chiral")[:2] == (1.0, 4)  # 4 actions
    assert chiral_gallery_map(T, V, group=group, action=action, queries="item")[:2] == (1.0, 5)  # 5 items
    # the door videos played the other way: "open" videos sit by the "close" caption and back
    V2 = unit(np.array([1.45, 1.6, 0.05, 3.2, 4.4]))
    m, n, _ = chiral_gallery_map(T, V2, group=group, action=action, queries="item")
    # queries 0, 1 (angle 0): v2 (wrong) first, then v0, v1 -> (1/2 + 2/3)/2; query 2 (1.5): v0, v1, then v2 -> 1/3
    expect = np.mean([7 / 12, 7 / 12, 1 / 3, 1.0, 1.0])
    assert n == 5 and m == pytest.approx(expect)
    # one query per action (the default): door/open 7/12, door/close 1/3, box/open 1, box/close 1
    m, n, _ = chiral_gallery_map(T, V2, group=group, action=action)
    assert n == 4 and m == pytest.approx((7 / 12 + 1 / 3 + 1 + 1) / 4)
    m, n, why = chiral_gallery_map(T, V, group=["g"] * 5, action=["a"] * 5)
    assert np.isnan(m) and n == 0 and "two actions" in why


def test_chiral_gallery_map_one_query_per_action_on_unbalanced_actions():
    """Issue #29 item 6: CiA's mAP is one query per action (TARA Tab. 1: 32 queries for SSv2), not
    one per item; with 3 "open" videos and 1 "close" video the two averages differ."""
    # every item of an action carries the action's caption (as in CiA): one caption direction per action
    cap = {"open": 0.0, "close": 1.5}
    action = ["open", "open", "open", "close"]
    T = unit(np.array([cap[a] for a in action]))
    # the "close" video sits nearest the "open" caption: both queries rank a wrong video first
    V = unit(np.array([0.3, 0.5, 0.7, 0.1]))
    group = ["door"] * 4
    # by hand, chiral gallery = the 4 door videos; cosines fall with the angle to the caption.
    # "open" query (angle 0): v3 (0.1, wrong), v0, v1, v2 -> AP = (1/2 + 2/3 + 3/4) / 3 = 23/36
    # "close" query (angle 1.5): v2 (0.8 away), v1, v0, v3 (1.4 away, right) -> AP = 1/4
    open_ap, close_ap = (1 / 2 + 2 / 3 + 3 / 4) / 3, 1 / 4
    # the same by brute force: one query per action over the whole gallery
    labels = np.array(action)
    brute = [brute_ap(list(unit(np.array([cap[a]])) @ V.T)[0], list(labels == a)) for a in ("open", "close")]
    assert brute == pytest.approx([open_ap, close_ap])
    m, n, why = chiral_gallery_map(T, V, group=group, action=action)
    assert why is None and n == 2 and m == pytest.approx((open_ap + close_ap) / 2)
    m_item, n_item, _ = chiral_gallery_map(T, V, group=group, action=action, queries="item")
    assert n_item == 4 and m_item == pytest.approx((3 * open_ap + close_ap) / 4)
    assert abs(m - m_item) > 0.05  # the protocols really differ on unbalanced actions
    # one group: the "all" gallery is the four door videos again; the "static" one holds only the
    # query's own action (no other group), so nothing is wrong to rank against: NaN with the reason
    assert chiral_gallery_map(T, V, group=group, action=action, setting="all")[0] == pytest.approx(m)
    m_static, n_static, why = chiral_gallery_map(T, V, group=group, action=action, setting="static")
    assert np.isnan(m_static) and n_static == 0 and "static gallery" in why
    with pytest.raises(ValueError, match="queries must be one of action, item"):
        chiral_gallery_map(T, V, group=group, action=action, queries="video")


def test_negated_query_recall(rng):
    V = rng.normal(size=(30, 8))
    Tq = V + 0.05 * rng.normal(size=V.shape)
    assert negated_query_recall(Tq, V)["recall@1"] == 1.0
    Tq[:10] = rng.normal(size=(10, 8)) * 5
    got = negated_query_recall(Tq, V, queries=np.arange(10, 30))
    assert got["recall@1"] == 1.0


def test_resamples_are_the_same_in_small_blocks(rng, monkeypatch):
    import analysis.metrics.neighbors as nb

    V, T = rng.normal(size=(30, 5)), rng.normal(size=(30, 5))
    W = np.stack([np.bincount(r, minlength=30) for r in rng.integers(0, 30, (4, 30))]).astype(float)
    whole = paired_resamples(V, T, W)
    monkeypatch.setattr(nb, "CHUNK_ENTRIES", 64)  # blocks of 2 query rows
    for name, values in paired_resamples(V, T, W).items():
        np.testing.assert_array_equal(values, whole[name])
