"""The Embedding map's per-item table on a store whose captions are shared by several items and whose
manifest groups items by source (tests/stores.py ``write_grouped_store``): ``pair_rank`` ranks each
item's first right answer as the stored same-space recall counts it (a copy of its caption is right,
a clip of its source with its own caption is not), its header's help and the caption say so, and a layer
pair the study does not rank (a collapsed side) shows no rank, with why. Expected ranks by brute
force (tests.helpers ``first_right_ranks``, the groups read from the captions written)."""

import json

import duckdb
import numpy as np
import pytest

from analysis.storage import results as R
from tests.helpers import app, first_right_ranks
from tests.stores import GROUPED_N, grouped_caption, write_grouped_store

MAP = "m · video L2 + text L2"  # the two-sided map of the last layer: the table compares video L2 with text L2


@pytest.fixture(scope="module")
def grouped(tmp_path_factory):
    path = tmp_path_factory.mktemp("grouped-page") / "s.duckdb"
    V, T = write_grouped_store(path, maps=1)
    return path, V, T


def item_table(at):
    (d,) = [d for d in at.dataframe if "agreement" in d.value.columns]
    return d.value, json.loads(d.proto.columns)


def test_the_rank_counts_a_shared_captions_copies_as_found_as_the_stored_recall_does(grouped, monkeypatch):
    path, V, T = grouped
    at = app(path, monkeypatch, "embedding_map", {"dataset": "grouped", "map": MAP})
    assert at.selectbox(key="pick_cmp").value == "m-t" and at.slider(key="pick_cmpl").value == 2
    t, columns = item_table(at)
    want = first_right_ranks(V[2], T[2], [grouped_caption(i) for i in range(GROUPED_N)])
    assert dict(zip(t["item_id"], t["pair_rank"])) == {f"it{i:02d}": int(r) for i, r in enumerate(want)}
    con = duckdb.connect(str(path), read_only=True)
    (row,) = R.read_studies(con, current=True, study="same_space", dataset="grouped")
    con.close()
    recall = row["payload"]["metrics"]["recall@5_v2t"]["values"][row["payload"]["layers_a"].index(2)]
    assert np.mean(t["pair_rank"] <= 5) == pytest.approx(recall, abs=1e-12)
    help_text = columns["pair_rank"]["help"]
    assert "first right answer" in help_text and "sharing its video or caption embedding" in help_text
    assert help_text.endswith("With every item listed, the share of rows with rank ≤ k is the stored recall@k.")
    caption = " ".join(c.value.replace("\\", "") for c in at.caption)
    assert "4 item(s) share a video or caption embedding with another" in caption
    assert "an item is found at the first of its group" in caption


def test_a_collapsed_compared_side_shows_no_rank_and_says_why(grouped, monkeypatch):
    path, _, _ = grouped
    at = app(path, monkeypatch, "embedding_map", {"dataset": "grouped", "map": MAP, "cmpl": "0", "ak": "3"})
    t, _ = item_table(at)
    assert "pair_rank" not in t  # every caption one point: every cosine ties, the study ranks nothing there
    caption = " ".join(c.value.replace("\\", "") for c in at.caption)
    assert "no rank in retrieval: text side collapsed" in caption and "pair_rank: the rank" not in caption
