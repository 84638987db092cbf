"""The Embedding map's per-item ``pair_rank`` on a sampled map ranks each listed item among all the
items of the two layers, as the stored recall does (not among the sample, which would read better);
an MLLM's two sides at two layer indices are ranked with a help text saying the rank is computed across
those layers and is not the stored recall; a dual encoder's towers are ranked only at their joint
layers (cut to their true width), never at their numbered layers; and degenerate data follows the
stored rule: a sample whose items all share one caption is still ranked among all items, a collapsed
side gives no rank and says why.

Expected ranks by brute force: each query's cosines against every gallery row (numpy), the candidates
ordered by ``np.lexsort`` (cosine descending, a wrong candidate before a right one at a tie, as the
stored recall rules ties), the rank the position of the first right answer; right answers are the
items whose caption or video row was written as one row. The same rule reproduces the stored
recall@k of the whole run (checked against the analysed store)."""

import numpy as np
import pytest

from analysis.storage import results as R
from analysis.studies import analyze_store
from analysis.views import item_table as views
from precompute.synthetic.store import write_run
from tests.stores import read_store as read

N, D = 14, 5
SHARED_CAPTION = (5, 12)  # one caption text: one text row, right answers for each other
SHARED_VIDEO = (3, 9)  # one video: one video row
TIE = (10, 11)  # caption 11 is caption 10 times two: one direction, so v10 finds it exactly as close (a wrong tie)
SAMPLE = (0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11)  # 11 of 14 items: 12 and 9, the copies of 5 and 3, left out
RUNS = {"v2t": ("m-v", "m-t"), "t2v": ("m-t", "m-v")}


def labels() -> np.ndarray:
    lab = np.arange(N)
    for a, b in (SHARED_CAPTION, SHARED_VIDEO):
        lab[b] = lab[a]
    return lab


def argsort_ranks(Q, G, lab, rows) -> np.ndarray:
    """1-based rank of the first right answer of each query row in ``rows`` among all rows of ``G``."""
    Qn = Q / np.linalg.norm(Q, axis=1, keepdims=True)
    Gn = G / np.linalg.norm(G, axis=1, keepdims=True)
    out = []
    for i in rows:
        s = Gn @ Qn[i]
        right = lab == lab[i]
        order = np.lexsort((right, -s))  # by cosine, descending; at a tie the wrong candidate first
        out.append(1 + int(np.flatnonzero(right[order])[0]))
    return np.array(out)


@pytest.fixture(scope="module")
def mllm(tmp_path_factory):
    """An MLLM's video and text sides, 3 layers: layer 0's text side collapsed (every caption one
    point), layers 1 and 2 captions near their videos with the planted copies and tie."""
    rng = np.random.default_rng(3)
    V = rng.normal(size=(3, N, D))
    T = V + 1.0 * rng.normal(size=V.shape)
    T[0] = 1.0
    for L in (1, 2):
        T[L, SHARED_CAPTION[1]] = T[L, SHARED_CAPTION[0]]
        V[L, SHARED_VIDEO[1]] = V[L, SHARED_VIDEO[0]]
        T[L, TIE[1]] = 2.0 * T[L, TIE[0]]  # power-of-two scaling: the normalised rows are the same bits
    V, T = V.astype(np.float32), T.astype(np.float32)
    path = tmp_path_factory.mktemp("itemrank") / "s.duckdb"
    write_run(path, "m-v", V, model="m", modality="video", n_frames=1, config={"side": "video"})
    write_run(path, "m-t", T, model="m", modality="text", n_captions=1, config={"side": "text"})
    analyze_store(path, k=3, metrics=("mutual_knn",), n_boot=0, n_null=0, log=lambda m: None)
    return path, {"m-v": V.astype(np.float64), "m-t": T.astype(np.float64)}


def ranks_of(res) -> dict:
    return {int(i): int(r) for i, r in zip(res.table["idx"], res.table["pair_rank"])}


@pytest.mark.parametrize("direction", ["v2t", "t2v"])
def test_a_sampled_map_ranks_each_item_among_all_items_as_the_stored_recall_does(mllm, direction):
    path, arrays = mllm
    run_a, run_b = RUNS[direction]
    A, B, lab = arrays[run_a][2], arrays[run_b][2], labels()
    res = read(path, views.item_table, "synthetic", run_a, 2, run_b, 2, k=10, only=SAMPLE)
    assert res.k == len(SAMPLE) - 1  # k close to the sample's size: clamped to n - 1
    want = argsort_ranks(A, B, lab, SAMPLE)
    assert ranks_of(res) == dict(zip(SAMPLE, want.tolist()))
    # ranked among the sample alone the numbers would read better: the test tells the two apart
    among_sample = argsort_ranks(A[list(SAMPLE)], B[list(SAMPLE)], lab[list(SAMPLE)], range(len(SAMPLE)))
    assert (among_sample < want).any() and (among_sample <= want).all()
    # the wrong tie ranks before the right answer (v10 finds caption 11 as close as its own)
    if direction == "v2t":
        assert ranks_of(res)[TIE[0]] >= 2
    # the rule is the stored recall's: over every item its share of ranks <= k is the stored recall@k
    (row,) = read(path, R.read_studies, current=True, study="same_space", dataset="synthetic")
    p = row["payload"]
    full = argsort_ranks(A, B, lab, range(N))
    for k in (1, 5, 10):
        assert np.mean(full <= k) == pytest.approx(p["metrics"][f"recall@{k}_{direction}"]["values"][2], abs=1e-12)
    assert f"ranked among all {N} items both runs hold at these layers, not among the {len(SAMPLE)}" in res.rank_help
    assert "not the stored recall@k" in res.rank_help


def test_a_sample_whose_items_share_one_caption_is_still_ranked_among_all_items(mllm):
    path, arrays = mllm
    only = SHARED_CAPTION  # alone, its text side is one point and every item one group
    res = read(path, views.item_table, "synthetic", "m-t", 2, "m-v", 2, k=10, only=only)
    want = argsort_ranks(arrays["m-t"][2], arrays["m-v"][2], labels(), only)
    assert ranks_of(res) == dict(zip(only, want.tolist()))
    assert res.k == 1


def test_a_collapsed_side_gives_no_rank_on_a_sample_either(mllm):
    path, _ = mllm
    res = read(path, views.item_table, "synthetic", "m-v", 0, "m-t", 0, k=10, only=SAMPLE)
    assert "pair_rank" not in res.table and res.rank_help == ""
    assert any(n.startswith("no rank in retrieval: text side collapsed") for n in res.notes)


ACROSS = ("Here it is computed across video layer 1 and text layer 2: the stored recall ranks a layer only "
          "against the same layer of the other side, so this rank is not the stored recall and no stored "
          "number is its share.")


def test_two_layer_indices_of_an_mllm_are_ranked_with_a_sentence_saying_it_is_not_the_stored_recall(mllm):
    path, arrays = mllm
    res = read(path, views.item_table, "synthetic", "m-t", 2, "m-v", 1, k=3)
    # captions of layer 2 query videos of layer 1; right answers by the rows written as one at either layer
    want = argsort_ranks(arrays["m-t"][2], arrays["m-v"][1], labels(), range(N))
    assert ranks_of(res) == dict(enumerate(want.tolist()))
    assert res.rank_help.startswith(views.RANK_HELP) and ACROSS in res.rank_help
    assert "is the stored recall@k" not in res.rank_help
    same = read(path, views.item_table, "synthetic", "m-t", 2, "m-v", 2, k=3)
    assert "computed across" not in same.rank_help
    assert same.rank_help.endswith("With every item listed, the share of rows with rank ≤ k is the stored recall@k.")


@pytest.fixture(scope="module")
def dual(tmp_path_factory):
    """Two dual encoders, 3 layers, joint layer 2 of true width 4 zero-padded to the run's width:
    ``clip`` with towers of one width (6), ``enc`` with towers of widths 6 and 5."""
    rng = np.random.default_rng(8)
    path = tmp_path_factory.mktemp("dual") / "s.duckdb"
    arrays = {}
    cfg = {"layer_names": {"2": "joint"}, "layer_dims": {"2": 4}}
    for model, (dv, dt) in (("clip", (6, 6)), ("enc", (6, 5))):
        V, T = rng.normal(size=(3, N, dv)), rng.normal(size=(3, N, dt))
        T[2, :, :4] = V[2, :, :4] + 0.8 * rng.normal(size=(N, 4))
        V[2, :, 4:], T[2, :, 4:] = 0.0, 0.0
        V, T = V.astype(np.float32), T.astype(np.float32)
        write_run(path, f"{model}-v", V, model=model, modality="video", n_frames=1, config=cfg)
        write_run(path, f"{model}-t", T, model=model, modality="text", n_captions=1, config=cfg)
        arrays[model] = (V.astype(np.float64), T.astype(np.float64))
    return path, arrays


def test_a_dual_encoders_towers_are_ranked_at_their_joint_layers_alone(dual):
    path, arrays = dual
    res = read(path, views.item_table, "synthetic", "clip-v", 1, "clip-t", 1, k=3)  # one width, two towers
    assert "pair_rank" not in res.table
    assert ("no rank in retrieval: a dual encoder's towers share a space only at their joint layers (video "
            "layer 2, text layer 2); video layer 1 and text layer 1 belong to two towers") in res.notes
    V, T = arrays["enc"]
    res = read(path, views.item_table, "synthetic", "enc-v", 2, "enc-t", 2, k=3)  # padded to widths 6 and 5
    want = argsort_ranks(V[2][:, :4], T[2][:, :4], np.arange(N), range(N))
    assert ranks_of(res) == dict(enumerate(want.tolist()))
    assert "is the stored recall@k" in res.rank_help
