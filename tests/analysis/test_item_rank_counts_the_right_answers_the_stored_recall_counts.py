"""The Embedding map's per-item table ranks each item's first right answer as the same-space study's
stored recall counts it: items whose captions are one text (one embedding) are right answers for each
other's queries, so an item whose caption four items share is found as soon as any of them is; items
of one source (the manifest's ``group``) with captions of their own are not; a wrong caption exactly as
close as the right one ranks before it; and where the study stores no ranking (a collapsed side, every
item in one group) the table shows none either. Expected ranks by brute force (one numpy dot product per
pair, the groups read from the captions written), and checked against the stored recall@k."""

import numpy as np
import pytest

from analysis.storage import results as R
from analysis.views import item_table as views
from tests.stores import read_store as read
from tests.helpers import first_right_ranks
from tests.stores import GROUPED_N, GROUPED_SOURCES, GROUPED_TIE, grouped_caption, write_grouped_store

LAYER = 2  # planted shared captions and the exact tie (tests.stores.grouped_arrays)
RUNS = {"v2t": ("m-v", "m-t"), "t2v": ("m-t", "m-v")}


@pytest.fixture(scope="module")
def grouped(tmp_path_factory):
    path = tmp_path_factory.mktemp("grouped") / "s.duckdb"
    V, T = write_grouped_store(path)
    return path, {"m-v": V, "m-t": T}


def stored(path) -> dict:
    (row,) = read(path, R.read_studies, current=True, study="same_space", dataset="grouped")
    return row["payload"]


CAPTIONS = [grouped_caption(i) for i in range(GROUPED_N)]  # one caption text, one text embedding


@pytest.mark.parametrize("direction", ["v2t", "t2v"])
def test_each_item_ranks_its_first_right_answer_as_the_stored_recall_counts(grouped, direction):
    path, arrays = grouped
    run_a, run_b = RUNS[direction]
    res = read(path, views.item_table, "grouped", run_a, LAYER, run_b, LAYER, k=3)
    got = dict(zip(res.table["idx"], res.table["pair_rank"]))
    want = first_right_ranks(arrays[run_a][LAYER], arrays[run_b][LAYER], CAPTIONS)
    assert got == {i: int(r) for i, r in enumerate(want)}
    # the share of rows with rank <= k is the stored recall@k of that layer pair, for every stored k
    p = stored(path)
    e = p["layers_a"].index(LAYER)
    for k in (1, 5, 10):
        assert np.mean(res.table["pair_rank"] <= k) == pytest.approx(p["metrics"][f"recall@{k}_{direction}"]["values"][e], abs=1e-12)
    assert any("grouped as right answers" in n for n in res.notes)


def test_a_shared_caption_is_found_at_its_first_copy_and_a_source_does_not_count(grouped):
    path, arrays = grouped
    V, T = arrays["m-v"][LAYER], arrays["m-t"][LAYER]
    res = read(path, views.item_table, "grouped", "m-v", LAYER, "m-t", LAYER, k=3)
    got = dict(zip(res.table["idx"], res.table["pair_rank"]))
    own = first_right_ranks(V, T, list(range(GROUPED_N)))  # the partner alone right
    # four videos whose captions are one text: one of them at least ranks its own copy behind the others
    assert any(got[i] < own[i] for i in (0, 1, 2, 3))
    # a source's items with captions of their own: the partner alone is right, as the stored recall has it
    assert all(got[i] == own[i] for i in GROUPED_SOURCES if i not in (10, 11))
    sources = [GROUPED_SOURCES.get(i, c) for i, c in enumerate(CAPTIONS)]
    assert not np.array_equal(first_right_ranks(V, T, sources), first_right_ranks(V, T, CAPTIONS))  # the two rules differ here
    # a wrong caption exactly as close as the right one ranks before it (30's caption 31 and 31's 30)
    a, b = GROUPED_TIE
    assert got[a] >= 2 and got[b] >= 2


@pytest.mark.parametrize("layer, why", [(0, "text side collapsed"), (1, "all are right answers, nothing to rank")])
def test_no_rank_where_the_stored_recall_has_none(grouped, layer, why):
    path, _ = grouped
    res = read(path, views.item_table, "grouped", "m-v", layer, "m-t", layer, k=3)
    assert "pair_rank" not in res.table
    assert any(n.startswith("no rank in retrieval") and why in n for n in res.notes)
    p = stored(path)
    assert p["metrics"]["recall@1_v2t"]["values"][p["layers_a"].index(layer)] is None
