"""Labelled probes per layer (``analyze --labels``): values equal scikit-learn's own computation on the
stored embeddings, intervals resample items, bad label fields are refused before anything is saved."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
from sklearn.model_selection import StratifiedKFold, cross_val_score
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from analysis.bootstrap import resample_indices
from analysis.methods.probes import (
    LabelError, cluster_scores, cluster_scores_stack, contingency, knn_predictions, label_codes,
    resampled_cluster_scores, shuffle_maxima, shuffled_cluster_scores,
)
from analysis.storage import results as R
from analysis.storage.store import StoreError, connect
from analysis.studies import analyze_store
from tests.stores import LABELLED_CLASSES as CLASSES, LABELLED_N as N, labelled_shapes as _labels, write_labelled_store

def _analyze(store, **kw):
    return analyze_store(store, maps=0, n_null=20, log=lambda m: None, **kw)


def _probes(store) -> dict:
    con = connect(store, read_only=True)
    try:
        rows = R.read_studies(con, study="probes", current=True)
    finally:
        con.close()
    return {(r["payload"]["run_id"], r["payload"]["field"]): r["payload"] for r in rows}


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    store = tmp_path_factory.mktemp("probes") / "p.duckdb"
    arrays = write_labelled_store(store)
    _analyze(store, labels=("scene.shape", "colour"), probes=("knn", "kmeans", "linear"), n_boot=50)
    return store, arrays, _probes(store)


def _sklearn_knn_accuracy(X, y, k):
    # weights 1 + 1e-9·cos: a count difference (>= 1) always wins; equal counts go to the larger summed
    # cosine; sklearn then takes the first (lowest, sorted) class: the rule the probe documents
    clf = KNeighborsClassifier(n_neighbors=k, metric="cosine", algorithm="brute",
                               weights=lambda dist: 1.0 + 1e-9 * (1.0 - dist))
    clf.fit(X.astype(np.float64), y)
    return float(np.mean(clf.predict(None) == y))


def test_probe_values_equal_scikit_learn_on_the_stored_embeddings(probed):
    store, arrays, probes = probed
    y = np.array([CLASSES.index(s) for s in _labels()])
    for run_id, X in arrays.items():
        p = probes[(run_id, "scene.shape")]
        assert p["classes"] == list(CLASSES) and p["n"] == N and p["counts"] == [20, 20, 20]
        sc = p["scores"]
        for layer in range(1, X.shape[0]):
            Xl = X[layer].astype(np.float64)
            assert sc["knn_accuracy"]["values"][layer] == _sklearn_knn_accuracy(Xl, y, 10)
            km = KMeans(n_clusters=3, n_init=10, random_state=0).fit_predict(Xl)
            assert sc["kmeans_nmi"]["values"][layer] == pytest.approx(normalized_mutual_info_score(y, km), abs=1e-12)
            assert sc["kmeans_ari"]["values"][layer] == pytest.approx(adjusted_rand_score(y, km), abs=1e-12)
            lin = cross_val_score(make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000, C=1.0)), Xl, y,
                                  cv=StratifiedKFold(5, shuffle=True, random_state=0)).mean()
            assert sc["linear_accuracy"]["values"][layer] == pytest.approx(lin, abs=1e-6)
        # layer 0 is one vector for every item: no probe value, and the reason is kept
        for score in sc.values():
            assert score["values"][0] is None and "0" in score["notes"]


def test_the_separating_layer_is_the_probes_best(probed):
    _, _, probes = probed
    acc = probes[("vis-4", "scene.shape")]["scores"]["knn_accuracy"]["values"]
    assert int(np.nanargmax(np.array(acc[1:], dtype=float))) + 1 == 2  # planted: layer 2 separates most
    assert acc[2] > 0.9 and acc[1] < acc[2]


def test_intervals_resample_items_with_the_analysis_draws(probed):
    store, arrays, probes = probed
    y = np.array([CLASSES.index(s) for s in _labels()])
    X = arrays["vis-4"]
    p = probes[("vis-4", "scene.shape")]
    IX = resample_indices(N, 50, np.random.default_rng(0))
    correct = {}
    for layer in (1, 2, 3):
        clf = KNeighborsClassifier(n_neighbors=10, metric="cosine", algorithm="brute",
                                   weights=lambda dist: 1.0 + 1e-9 * (1.0 - dist)).fit(X[layer].astype(np.float64), y)
        correct[layer] = (clf.predict(None) == y).astype(float)
        boot = np.array([correct[layer][ix].mean() for ix in IX])
        sc = p["scores"]["knn_accuracy"]
        assert sc["ci_low"][layer] == pytest.approx(np.quantile(boot, 0.025), abs=1e-12)
        assert sc["ci_high"][layer] == pytest.approx(np.quantile(boot, 0.975), abs=1e-12)
    diff = np.array([correct[2][ix].mean() - correct[1][ix].mean() for ix in IX])
    sc = p["scores"]["knn_accuracy"]
    assert sc["diff_low"][2][1] == pytest.approx(np.quantile(diff, 0.025), abs=1e-12)
    assert sc["diff_high"][2][1] == pytest.approx(np.quantile(diff, 0.975), abs=1e-12)
    assert sc["diff_low"][2][1] > 0  # the planted gap is beyond noise


def test_fields_missing_from_one_dataset_are_probed_where_present(probed):
    _, _, probes = probed
    assert {f for _, f in probes} == {"scene.shape", "colour"}
    assert probes[("txt-1", "colour")]["classes"] == ["blue", "red"]


def test_knn_vote_ties_go_to_the_larger_summed_cosine_then_the_lower_class():
    y = np.array([0, 1, 0, 1, 2])
    idx = np.array([[1, 2], [0, 2], [0, 1], [0, 1], [0, 1]])  # item 0 sees classes 1 and 0: a tie in votes
    sim = np.array([[0.9, 0.5], [0.2, 0.2], [0.3, 0.3], [0.1, 0.1], [0.4, 0.4]])
    pred = knn_predictions(idx, sim, y, 3)
    assert pred[0] == 1  # class 1's cosine 0.9 beats class 0's 0.5
    assert pred[1] == 0  # 0 and 0: summed 0.4 for class 0 alone
    assert pred[3] == 0  # classes 0 and 1 tie in votes and cosines: the lower class


@pytest.mark.parametrize("seed", range(5))
def test_cluster_scores_equal_scikit_learn_with_and_without_repeated_items(seed):
    rng = np.random.default_rng(seed)
    y, c = rng.integers(0, 4, 80), rng.integers(0, 3, 80)
    nmi, ari = cluster_scores(contingency(y, c, 4, 3))
    assert nmi == pytest.approx(normalized_mutual_info_score(y, c), abs=1e-12)
    assert ari == pytest.approx(adjusted_rand_score(y, c), abs=1e-12)
    IX = resample_indices(80, 3, rng)
    S_nmi, S_ari = resampled_cluster_scores(y, [c], IX, 4)
    for b, ix in enumerate(IX):  # a resample counts an item as often as it is drawn
        assert S_nmi[b, 0] == pytest.approx(normalized_mutual_info_score(y[ix], c[ix]), abs=1e-12)
        assert S_ari[b, 0] == pytest.approx(adjusted_rand_score(y[ix], c[ix]), abs=1e-12)


def test_identical_partitions_score_one_and_a_single_cluster_zero():
    y = np.array([0, 0, 1, 1, 2, 2])
    assert cluster_scores(contingency(y, y, 3, 3)) == (1.0, 1.0)
    nmi, ari = cluster_scores(contingency(y, np.zeros(6, int), 3, 1))
    assert (nmi, ari) == (normalized_mutual_info_score(y, np.zeros(6)), adjusted_rand_score(y, np.zeros(6)))


@pytest.mark.parametrize("values, why", [
    (["a", None, "b", "a", "b", None], "missing on 2 of 6 items (first: i1, i5)"),
    (["a"] * 6, "one class only"),
    (["a", "a", "b", "b", "c", "a"], "class 'c' has a single item"),
    ([0.5, 0.25, 0.5, 0.25, 0.5, 0.25], "not categorical"),
    ([{"x": 1}] * 6, "not categorical"),
    (["a", "b", "c", "d", "a"], "4 classes for 5 items"),
])
def test_bad_label_values_are_named_in_one_line(values, why):
    with pytest.raises(LabelError) as exc:
        label_codes(values, "scene.shape", [f"i{i}" for i in range(len(values))])
    msg = str(exc.value)
    assert "\n" not in msg and "scene.shape" in msg and why in msg


def test_integer_and_boolean_labels_are_classes():
    codes, classes = label_codes([7, 7.0, 3, 3], "digit")
    assert classes == ["3", "7"] and codes.tolist() == [1, 1, 0, 0]


def _state(store) -> tuple:
    con = connect(store, read_only=True)
    try:
        meta = con.execute("SELECT value FROM meta WHERE key = 'analysis_settings'").fetchall()
        studies = con.execute("SELECT count(*) FROM result_studies").fetchone()[0]
        grids = con.execute("SELECT count(*) FROM result_grids").fetchone()[0]
    finally:
        con.close()
    return meta, studies, grids


@pytest.mark.parametrize("field, why", [("nope", "no item of dataset(s) 'toy' has this field"),
                                        ("scene", "not categorical"),
                                        ("half", "missing on 30 of 60 items (first: item1, item3, item5)")])
def test_a_bad_label_field_is_refused_before_anything_is_saved(tmp_path, field, why):
    store = tmp_path / "s.duckdb"
    md = [{"scene": {"shape": s}, **({"half": "x" if i % 4 else "y"} if i % 2 == 0 else {})}
          for i, s in enumerate(_labels())]
    write_labelled_store(store, metadata=md)
    _analyze(store, n_boot=0)
    before = _state(store)
    with pytest.raises(StoreError) as exc:
        _analyze(store, labels=(field,), n_boot=0)
    assert why in str(exc.value) and field in str(exc.value) and "\n" not in str(exc.value)
    assert _state(store) == before
    assert json.loads(before[0][0][0]).get("labels") == []


def test_the_best_layers_shuffled_label_null_separates_planted_classes(probed):
    _, _, probes = probed
    sc = probes[("vis-4", "scene.shape")]["scores"]
    for score in ("knn_accuracy", "kmeans_nmi", "kmeans_ari"):
        null = sc[score]["null"]
        assert null["n_perm"] == 20 and null["p"] == pytest.approx(1 / 21)  # no shuffle reaches the planted layer
        assert null["q95"] < max(v for v in sc[score]["values"] if v is not None)
    assert sc["linear_accuracy"].get("null") is None  # refitting per shuffle is not done


def test_label_null_is_the_share_of_shuffles_reaching_the_observed_best():
    from analysis.methods.probes import label_null

    y = np.arange(10) % 2
    # a score that is 1 for one particular labelling and 0.5 otherwise: no shuffle of 10 reaches 1 often
    calls = []

    def score(Y):
        calls.extend(Y.copy())
        return np.array([[0.5, float(np.array_equal(labels, y))] for labels in Y])

    out = label_null(score, y, 1.0, n_perm=50, seed=0)
    hits = sum(np.array_equal(c, y) for c in calls)
    assert len(calls) == 50 and out["p"] == pytest.approx((1 + hits) / 51)
    assert label_null(score, y, float("nan"), n_perm=50) is None and label_null(score, y, 1.0, n_perm=0) is None


def test_batched_knn_predictions_equal_one_labelling_at_a_time():
    rng = np.random.default_rng(3)
    n, k, C = 40, 5, 4
    idx = np.array([rng.choice(np.delete(np.arange(n), i), k, replace=False) for i in range(n)])
    sim = rng.integers(-4, 5, (n, k)) / 4  # quarters: sums are exact, so ties in summed cosines happen
    Y = np.stack([rng.integers(0, C, n) for _ in range(7)])
    batched = knn_predictions(idx, sim, Y, C)
    assert batched.shape == (7, n)
    for p in range(7):
        # reference: count votes and summed cosines per class by hand, then the documented tie rule
        for i in range(n):
            votes = np.bincount(Y[p, idx[i]], minlength=C)
            sums = np.array([sim[i][Y[p, idx[i]] == c].sum() for c in range(C)])
            top = np.flatnonzero(votes == votes.max())
            best = top[sums[top] == sums[top].max()]
            assert batched[p, i] == best.min()


@pytest.mark.parametrize("seed", range(4))
def test_shuffled_cluster_scores_equal_scikit_learn_per_labelling(seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 4, 60)
    c = rng.integers(0, 3, 60)
    Y = np.stack([rng.permutation(y) for _ in range(9)] + [y])
    nmi, ari = shuffled_cluster_scores(Y, c, 4)
    for p, labels in enumerate(Y):
        assert nmi[p] == pytest.approx(normalized_mutual_info_score(labels, c), abs=1e-12)
        assert ari[p] == pytest.approx(adjusted_rand_score(labels, c), abs=1e-12)


def test_stacked_cluster_scores_keep_the_degenerate_cases():
    y = np.array([0, 0, 1, 1, 2, 2])
    zeros = np.zeros(6, int)
    # identical partitions; one cluster (two empty columns); one class and one cluster (empty rows too)
    tables = np.stack([contingency(y, y, 3, 3), contingency(y, zeros, 3, 3), contingency(zeros, zeros, 3, 3)])
    nmi, ari = cluster_scores_stack(tables)
    for p, t in enumerate(tables):
        assert (nmi[p], ari[p]) == pytest.approx(cluster_scores(t), abs=1e-15)
    assert (nmi[0], ari[0]) == (1.0, 1.0) and (nmi[2], ari[2]) == (1.0, 1.0) and nmi[1] == 0.0


@pytest.mark.parametrize("batch", [1, 7, 1 << 16])
def test_shuffle_maxima_draw_the_same_shuffles_in_any_batch_size(monkeypatch, batch):
    import analysis.methods.probes as probes

    y = np.arange(12) % 3
    monkeypatch.setattr(probes, "SHUFFLE_BATCH", batch)

    def score(Y):  # two scores, three layers; layer 2 NaN: skipped by the maximum
        first = (Y == y).mean(axis=1)
        return np.stack([np.stack([first, 1 - first, np.full(len(Y), np.nan)], axis=1),
                         np.stack([np.full(len(Y), np.nan)] * 3, axis=1)])

    got = shuffle_maxima(score, y, n_perm=10, seed=4)
    rng = np.random.default_rng([4, 7])
    want = []
    for _ in range(10):
        share = float(np.mean(y[rng.permutation(12)] == y))
        want.append(max(share, 1 - share))
    assert got.shape == (2, 10)
    np.testing.assert_allclose(got[0], want, rtol=0, atol=1e-15)
    assert np.all(got[1] == -np.inf)  # every layer NaN under every shuffle


def test_the_studys_kmeans_null_equals_scikit_learn_under_the_same_shuffles(probed):
    _, arrays, probes = probed
    y = np.array([CLASSES.index(s) for s in _labels()])
    X = arrays["txt-1"]
    clusters = {l: KMeans(n_clusters=3, n_init=10, random_state=0).fit_predict(X[l].astype(np.float64))
                for l in range(1, X.shape[0])}  # layer 0 is degenerate: no value, not in the null
    rng = np.random.default_rng([0, 7])
    shuffles = [y[rng.permutation(len(y))] for _ in range(20)]
    sc = probes[("txt-1", "scene.shape")]["scores"]
    for score, fn in (("kmeans_nmi", normalized_mutual_info_score), ("kmeans_ari", adjusted_rand_score)):
        null = np.array([max(fn(s, c) for c in clusters.values()) for s in shuffles])
        best = max(v for v in sc[score]["values"] if v is not None)
        assert sc[score]["null"]["q95"] == pytest.approx(np.quantile(null, 0.95), abs=1e-12)
        assert sc[score]["null"]["p"] == pytest.approx((1 + np.sum(null >= best - 1e-12)) / 21)


def test_kmeans_clusters_on_one_thread_equal_scikit_learns_default_threads():
    from analysis.methods.probes import kmeans_clusters

    rng = np.random.default_rng(1)
    for _ in range(5):
        X = rng.normal(size=(150, 16)) + rng.integers(0, 4, 150)[:, None]
        want = KMeans(n_clusters=4, n_init=10, random_state=0).fit_predict(X)  # the pool as it is
        np.testing.assert_array_equal(kmeans_clusters(X, 4), want)


def test_kmeans_clusters_hold_the_openmp_pool_to_one_thread(monkeypatch):
    from threadpoolctl import threadpool_info

    from analysis.methods.probes import kmeans_clusters

    seen = []
    fit = KMeans.fit_predict

    def spy(self, X, *args, **kwargs):
        seen.extend(p["num_threads"] for p in threadpool_info() if p["user_api"] == "openmp")
        return fit(self, X, *args, **kwargs)

    monkeypatch.setattr(KMeans, "fit_predict", spy)
    kmeans_clusters(np.random.default_rng(0).normal(size=(40, 3)), 2)
    assert seen and set(seen) == {1}
    assert all(p["num_threads"] >= 1 for p in threadpool_info())  # restored after the fit


def test_interval_matrix_equals_each_pairs_percentile_interval():
    from analysis.methods.probes import interval_matrix

    rng = np.random.default_rng(2)
    S = rng.normal(size=(30, 5))
    S[:, 3] = np.nan  # a layer without a value
    S[4, 1] = np.nan  # one resample without layer 1's score
    lo, hi = interval_matrix(S, 0.9)
    for a in range(5):
        for b in range(5):
            d = S[:, a] - S[:, b]
            d = d[np.isfinite(d)]
            if a == b or len(d) < 2:
                assert lo[a][b] is None and hi[a][b] is None
            else:  # the 5th and 95th percentiles of the paired differences (to the last bits)
                assert (lo[a][b], hi[a][b]) == pytest.approx((np.quantile(d, 0.05), np.quantile(d, 0.95)), abs=1e-12)
