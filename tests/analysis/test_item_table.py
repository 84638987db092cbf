"""The per-item table read from a store: each item's agreement between two layers, its own pair's rank
in a shared space, the best layer's k-NN probe verdict where probes are stored, outliers first; and the
alignment on a subset with its chance level. Expected values from the arrays the stores were written
with (sklearn NearestNeighbors, loops written here), never from the view under test."""

import duckdb
import numpy as np
import pytest
from sklearn.neighbors import NearestNeighbors

from analysis.storage import results as R
from analysis.studies import analyze_store
from analysis.views import item_table as views
from precompute.synthetic.store import write_run
from tests.stores import read_store as read
from tests.stores import write_labelled_store


def sk_lists(X, k):
    nn = NearestNeighbors(n_neighbors=k + 1, metric="cosine", algorithm="brute").fit(X)
    return [set(int(j) for j in row if j != i) for i, row in enumerate(nn.kneighbors(X)[1])]


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    path = tmp_path_factory.mktemp("itemtable") / "s.duckdb"
    arrays = write_labelled_store(path)
    analyze_store(path, k=5, n_boot=0, labels=("colour",), probes=("knn",), log=lambda m: None)
    return path, arrays


def test_each_row_holds_its_items_agreement_sorted_outliers_first(labelled):
    path, arrays = labelled
    A, B = arrays["vis-4"][2], arrays["txt-1"][1]
    k = 4
    res = read(path, views.item_table, "toy", "vis-4", 2, "txt-1", 1, k=k)
    la, lb = sk_lists(A, k), sk_lists(B, k)
    want = {f"item{i}": len(a & b) / k for i, (a, b) in enumerate(zip(la, lb))}
    t = res.table
    assert dict(zip(t["item_id"], t["agreement"])) == pytest.approx(want)
    assert list(t["agreement"]) == sorted(t["agreement"])  # the least agreeing first
    assert res.k == k and res.chance == pytest.approx(k / (len(A) - 1))
    assert "pair_rank" not in t and any("no rank in retrieval" in n for n in res.notes)  # two models


def test_the_best_layers_knn_probe_verdict_is_listed_per_item(labelled):
    path, arrays = labelled
    con = duckdb.connect(str(path), read_only=True)
    (p,) = [r["payload"] for r in R.read_studies(con, current=True, study="probes", dataset="toy")
            if r["payload"]["run_id"] == "vis-4"]
    con.close()
    best = int(np.nanargmax([np.nan if v is None else v for v in p["scores"]["knn_accuracy"]["values"]]))
    res = read(path, views.item_table, "toy", "vis-4", 2, "txt-1", 1, k=4)
    col = f"probe colour (L{best})"
    assert col in res.table
    X = arrays["vis-4"][best]
    y = np.array([1 - i % 2 for i in range(len(X))])  # red on even items, blue on odd; codes by name: blue 0, red 1
    lists = sk_lists(X, p["k"])
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    want = {}
    for i, nb in enumerate(lists):
        votes = np.bincount(y[list(nb)], minlength=2)
        top = np.flatnonzero(votes == votes.max())
        sums = {c: sum(Xn[i] @ Xn[j] for j in nb if y[j] == c) for c in top}
        want[f"item{i}"] = max(top, key=lambda c: (sums[c], -c)) == y[i]
    got = dict(zip(res.table["item_id"], res.table[col]))
    assert got == want
    # its mean is the stored k-NN accuracy of that layer
    assert np.mean(list(got.values())) == pytest.approx(p["scores"]["knn_accuracy"]["values"][best])


def test_one_models_two_sides_rank_each_items_own_pair(tmp_path):
    rng = np.random.default_rng(5)
    Z = rng.normal(size=(2, 25, 6))
    V, T = Z + 0.3 * rng.normal(size=Z.shape), Z + 0.3 * rng.normal(size=Z.shape)
    path = tmp_path / "s.duckdb"
    write_run(path, "m-v", V, model="m", modality="video", n_frames=1, config={"side": "video"})
    write_run(path, "m-t", T, model="m", modality="text", n_captions=1, config={"side": "text"})
    res = read(path, views.item_table, "synthetic", "m-v", 1, "m-t", 1, k=3)
    Vn = V[1] / np.linalg.norm(V[1], axis=1, keepdims=True)
    Tn = T[1] / np.linalg.norm(T[1], axis=1, keepdims=True)
    S = Vn @ Tn.T
    want = {i: 1 + sum(S[i, j] >= S[i, i] for j in range(25) if j != i) for i in range(25)}
    assert dict(zip(res.table["idx"], res.table["pair_rank"])) == want


def test_alignment_on_a_subset_searches_inside_it(labelled):
    path, arrays = labelled
    A, B = arrays["vis-4"][3], arrays["txt-1"][2]
    items = tuple(range(0, len(A), 2))
    got = read(path, views.subset_alignment, "vis-4", 3, "txt-1", 2, items, k=3)
    la, lb = sk_lists(A[list(items)], 3), sk_lists(B[list(items)], 3)
    assert got.value == pytest.approx(np.mean([len(a & b) / 3 for a, b in zip(la, lb)]))
    assert got.chance == pytest.approx(3 / (len(items) - 1)) and got.n == len(items)


def test_the_default_comparison_is_the_other_side_else_another_models_last_layer():
    import pandas as pd

    runs = pd.DataFrame({"run_id": ["a-1", "a-2", "b-1", "b-4", "c-1"], "model": ["a", "a", "b", "b", "c"],
                         "n_layers": [3, 3, 5, 5, 7]})
    assert views.default_comparison(runs, [("a-2", 1), ("a-t", 2)]) == ("a-t", 2)  # a two-sided map
    assert views.default_comparison(runs, [("a-2", 1)]) == ("c-1", 6)  # the last run of another model
    assert views.default_comparison(runs[runs["model"] == "a"], [("a-2", 2)]) == ("a-2", 1)  # one model only
    assert views.default_comparison(runs[runs["model"] == "a"], [("a-2", 0)]) == ("a-2", 0)


def test_a_sample_of_the_items_searches_neighbours_among_it(labelled):
    path, arrays = labelled
    A, B = arrays["vis-4"][2], arrays["txt-1"][1]
    only = tuple(range(1, len(A), 3))
    res = read(path, views.item_table, "toy", "vis-4", 2, "txt-1", 1, k=3, only=only)
    la, lb = sk_lists(A[list(only)], 3), sk_lists(B[list(only)], 3)
    want = {f"item{i}": len(a & b) / 3 for i, a, b in zip(only, la, lb)}
    assert dict(zip(res.table["item_id"], res.table["agreement"])) == pytest.approx(want)
    assert not [c for c in res.table if c.startswith("probe ")] and any("sample" in n for n in res.notes)
