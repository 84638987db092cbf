"""Labelled probes per layer: how well a layer's embedding separates the classes of a manifest field.

These are the measured downstream numbers the label-free signals are checked against (the
LayerScope paper's experiment: label-free metrics per layer against classification and clustering
per layer). Three probes, each a pure function of one layer's rows ``X`` ``(N, d)`` and the class
codes ``y`` ``(N,)`` (0..C-1, classes in sorted order):

- **k-NN classification** (:func:`knn_predictions`): leave-one-out on cosine similarity with the
  analysis's ``k``, majority vote over the item's k nearest other items; a tie in votes goes to the
  class with the larger summed cosine, then to the lower class (sorted name). It reads the k-NN
  lists the analysis already holds (``analysis.metrics.knn.KnnState``: ``idx`` and ``sim``), so it
  costs no second search. Accuracy in ``[0, 1]``, higher is better; chance is the share of the
  largest class.
- **Linear probe** (:func:`linear_probe`): scikit-learn ``LogisticRegression(max_iter=1000, C=1.0)``
  on features standardised inside each fold, ``StratifiedKFold(n_splits, shuffle=True,
  random_state=0)``; the value is the mean accuracy over folds (``n_splits`` = 5, fewer when the
  smallest class is smaller).
- **Clustering** (:func:`kmeans_scores`): k-means with as many clusters as classes (``n_init=10``,
  ``random_state=0``), scored by NMI (arithmetic normalisation) and ARI against the labels.

Intervals resample items (:func:`resampled_means`, :func:`resampled_cluster_scores`): every layer is
scored on the same resamples, so a difference between two layers has a paired interval
(:func:`paired_interval`). k-NN and linear predictions are not refitted per resample (the interval
is the accuracy estimate's sampling error given the fitted probe), nor are the k-means clusters.

Reference: Pedregosa et al., "Scikit-learn: Machine Learning in Python", JMLR 12, 2011 (the
estimators and scores); Vinh, Epps & Bailey, "Information theoretic measures for clusterings
comparison", JMLR 11, 2010 (NMI); Hubert & Arabie, "Comparing partitions", J. Classif. 2, 1985 (ARI).
"""

from __future__ import annotations

import math
import warnings

import numpy as np

#: probes ``analyze --probes`` can run; ``linear`` refits a logistic regression per fold and layer,
#: which costs more than the grids at the papers' shape (bench/analyze.py), so it is asked for
PROBES = ("knn", "linear", "kmeans")
DEFAULT_PROBES = ("knn", "kmeans")
#: the scores each probe stores: ``(probe, score name, what it is)``
PROBE_SCORES = (("knn", "knn_accuracy", "k-NN accuracy (leave-one-out)"),
                ("linear", "linear_accuracy", "linear probe accuracy (stratified 5-fold)"),
                ("kmeans", "kmeans_nmi", "k-means NMI"),
                ("kmeans", "kmeans_ari", "k-means ARI"))
LINEAR_FOLDS = 5


class LabelError(ValueError):
    """A manifest field cannot serve as a probe's labels; the message names the field and why."""


def categorical(value) -> str | None:
    """A label's class name, or None when ``value`` is not categorical (a non-integral number, a list,
    a mapping). Strings, booleans and integers (also ``7.0``) are classes; ``None`` is missing."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return str(int(value))
    return None


def label_codes(values: list, field: str, ids: list | None = None) -> tuple[np.ndarray, list[str]]:
    """Class codes ``(N,)`` (0..C-1, classes sorted by name) and the class names of ``values``.

    Raises :class:`LabelError`, one line naming ``field``, when a value is missing (count and first
    ids), not categorical, when there is one class only, a class with a single item (leave-one-out
    and stratified folds need two), or more classes than half the items.
    """
    ids = list(ids) if ids is not None else [str(i) for i in range(len(values))]
    missing = [i for i, v in zip(ids, values) if v is None]
    if missing:
        raise LabelError(f"--labels {field}: missing on {len(missing)} of {len(values)} items "
                         f"(first: {', '.join(map(str, missing[:3]))})")
    names = [categorical(v) for v in values]
    odd = [(i, v) for i, v, n in zip(ids, values, names) if n is None]
    if odd:
        i, v = odd[0]
        raise LabelError(f"--labels {field}: {len(odd)} value(s) are not categorical (item {i}: {v!r}); "
                         "a label is a string, an integer or a boolean")
    classes = sorted(set(names))
    if len(classes) < 2:
        raise LabelError(f"--labels {field}: one class only ({classes[0]!r}); a probe needs at least two")
    if len(classes) > len(values) / 2:  # checked first: an id-like field would otherwise read as singletons
        raise LabelError(f"--labels {field}: {len(classes)} classes for {len(values)} items (more than half); "
                         "is it an id rather than a class?")
    counts = {c: names.count(c) for c in classes}
    single = [c for c, n in counts.items() if n < 2]
    if single:
        raise LabelError(f"--labels {field}: class {single[0]!r} has a single item ({len(single)} such class(es)); "
                         "every class needs at least two")
    code = {c: i for i, c in enumerate(classes)}
    return np.array([code[n] for n in names], dtype=np.int64), classes


def knn_predictions(idx: np.ndarray, sim: np.ndarray, y: np.ndarray, n_classes: int) -> np.ndarray:
    """Leave-one-out k-NN predictions ``(N,)`` from neighbour lists, or ``(P, N)`` for ``P`` labellings.

    Args:
        idx: ``(N, k)`` the k nearest other items of each item (the item itself excluded).
        sim: ``(N, k)`` their cosine similarities.
        y: ``(N,)`` class codes 0..C-1, or ``(P, N)``: ``P`` labellings of the same lists scored in one
            pass (the shuffled-label null); row ``p`` of the result equals the call with ``y[p]``.
        n_classes: ``C``.
    Returns:
        The class with the most votes; among equal votes the larger summed cosine; then the lower code.
    """
    idx = np.asarray(idx)
    n, k = idx.shape
    Y = np.asarray(y)
    one = Y.ndim == 1
    Y = Y[None] if one else Y
    P = len(Y)
    M = P * n
    # one bin per (class, labelling, item), classes outermost so the per-item maxima below reduce over
    # whole rows; each bin sums its neighbours in list order, as one labelling alone does
    slot = (Y[:, idx] * M + np.arange(M).reshape(P, n, 1)).ravel()
    votes = np.bincount(slot, minlength=n_classes * M).reshape(n_classes, M)
    weights = np.broadcast_to(np.asarray(sim, dtype=np.float64), (P, n, k)).ravel()
    sums = np.bincount(slot, weights=weights, minlength=n_classes * M).reshape(n_classes, M)
    sums = np.where(votes == votes.max(axis=0), sums, -np.inf)
    best = (sums == sums.max(axis=0)).argmax(axis=0).reshape(P, n)  # the first (lowest) class among ties
    return best[0] if one else best


def linear_folds(y: np.ndarray) -> int:
    """Folds of the linear probe: :data:`LINEAR_FOLDS`, fewer when the smallest class is smaller (>= 2)."""
    return int(max(2, min(LINEAR_FOLDS, np.bincount(y).min())))


def linear_probe(X: np.ndarray, y: np.ndarray, *, folds: int | None = None) -> tuple[float, np.ndarray]:
    """``(mean accuracy over folds, (N,) per-item predictions)`` of a standardised logistic regression.

    ``StratifiedKFold(folds, shuffle=True, random_state=0)``; in each fold a ``StandardScaler`` is fitted
    on the training items only, then ``LogisticRegression(max_iter=1000, C=1.0)``."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X = np.asarray(X, dtype=np.float64)
    folds = linear_folds(y) if folds is None else int(folds)
    pred = np.empty(len(y), dtype=np.int64)
    scores = []
    for train, test in StratifiedKFold(folds, shuffle=True, random_state=0).split(X, y):
        model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000, C=1.0))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(X[train], y[train])
        pred[test] = model.predict(X[test])
        scores.append(float(np.mean(pred[test] == y[test])))
    return float(np.mean(scores)), pred


def _one_thread():
    """A context holding the BLAS and OpenMP pools to one thread on the calling thread
    (:func:`analysis.metrics.base.one_blas_thread`): scikit-learn's OpenMP pool loads with
    ``sklearn.cluster``, after the analysis took its hold, and is held from here on."""
    from analysis.metrics.base import one_blas_thread

    return one_blas_thread(openmp=True)


def kmeans_clusters(X: np.ndarray, n_clusters: int) -> np.ndarray:
    """``(N,)`` k-means cluster of each row (``KMeans(n_clusters, n_init=10, random_state=0)``)."""
    from sklearn.cluster import KMeans
    from sklearn.exceptions import ConvergenceWarning

    # one OpenMP thread: the chunked Lloyd iterations give the same clusters bit for bit on any number
    # of threads, and on a few hundred rows a second thread mostly waits (2-3x the CPU on a busy machine)
    with warnings.catch_warnings(), _one_thread():
        warnings.simplefilter("ignore", ConvergenceWarning)  # fewer distinct rows than clusters
        return KMeans(n_clusters=n_clusters, n_init=10, random_state=0).fit_predict(np.asarray(X, dtype=np.float64))


def _entropy(counts: np.ndarray, n: float) -> float:
    p = counts[counts > 0] / n
    return float(-(p * np.log(p)).sum())


def cluster_scores(table: np.ndarray) -> tuple[float, float]:
    """``(NMI, ARI)`` of a contingency table ``(C, K)`` (classes × clusters, item counts).

    NMI = MI / ((H(classes) + H(clusters)) / 2) (scikit-learn's ``normalized_mutual_info_score``,
    arithmetic mean; 1 when both sides have one group, 0 when MI is 0). ARI = (Σ C(n_ij,2) − E) /
    (½(Σ C(a_i,2) + Σ C(b_j,2)) − E), E = Σ C(a_i,2) Σ C(b_j,2) / C(n,2) (1 when numerator and
    denominator vanish together, as scikit-learn's ``adjusted_rand_score``). NMI in [0, 1], ARI in
    [-0.5, 1], both 1 for identical partitions."""
    t = np.asarray(table, dtype=np.float64)
    t = t[t.sum(axis=1) > 0][:, t.sum(axis=0) > 0]
    n = t.sum()
    a, b = t.sum(axis=1), t.sum(axis=0)
    if len(a) == len(b) == 1:
        nmi = 1.0
    else:
        nz = t > 0
        mi = float((t[nz] / n * (np.log(t[nz] * n) - np.log(np.outer(a, b)[nz]))).sum())
        mi = max(mi, 0.0)
        norm = max((_entropy(a, n) + _entropy(b, n)) / 2, np.finfo(np.float64).eps)
        nmi = 0.0 if mi == 0 else mi / norm
    pairs = lambda v: v * (v - 1) / 2  # noqa: E731
    index, sa, sb, total = pairs(t).sum(), pairs(a).sum(), pairs(b).sum(), pairs(n)
    expected = sa * sb / total if total else 0.0
    top = (sa + sb) / 2
    ari = 1.0 if top == expected else float((index - expected) / (top - expected))
    return float(nmi), ari


def cluster_scores_stack(tables: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(nmi, ari)``, each ``(P,)``: :func:`cluster_scores` of ``P`` contingency tables ``(P, C, K)`` at
    once (the item resamples and the label shuffles of one layer's clusters); equal to it per table
    up to the last bits of the sums (empty rows and columns count as nothing, as there)."""
    t = np.asarray(tables, dtype=np.float64)
    n = t.sum(axis=(1, 2))
    a, b = t.sum(axis=2), t.sum(axis=1)
    nz = t > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        outer = a[:, :, None] * b[:, None, :]
        terms = t / n[:, None, None] * (np.log(np.where(nz, t, 1.0) * n[:, None, None]) - np.log(np.where(nz, outer, 1.0)))
        mi = np.maximum(np.where(nz, terms, 0.0).sum(axis=(1, 2)), 0.0)

        def entropy(m):  # (P, G) group sizes -> (P,)
            q = m / n[:, None]
            return -np.where(m > 0, q * np.log(np.where(m > 0, q, 1.0)), 0.0).sum(axis=1)

        norm = np.maximum((entropy(a) + entropy(b)) / 2, np.finfo(np.float64).eps)
        nmi = np.where(mi == 0, 0.0, mi / norm)
        nmi = np.where(((a > 0).sum(axis=1) == 1) & ((b > 0).sum(axis=1) == 1), 1.0, nmi)
        pairs = lambda v: v * (v - 1) / 2  # noqa: E731
        index, sa, sb, total = pairs(t).sum(axis=(1, 2)), pairs(a).sum(axis=1), pairs(b).sum(axis=1), pairs(n)
        expected = np.where(total > 0, sa * sb / np.where(total > 0, total, 1.0), 0.0)
        top = (sa + sb) / 2
        ari = np.where(top == expected, 1.0, (index - expected) / np.where(top == expected, 1.0, top - expected))
    return nmi, ari


def shuffled_cluster_scores(Y: np.ndarray, clusters: np.ndarray, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """``(nmi, ari)``, each ``(P,)``: one layer's clusters ``(N,)`` scored against ``P`` labellings
    ``Y`` ``(P, N)`` (codes 0..C-1), as :func:`cluster_scores` of each labelling's contingency table."""
    Y = np.asarray(Y)
    P, K = len(Y), int(clusters.max()) + 1
    flat = ((np.arange(P)[:, None] * n_classes + Y) * K + clusters).ravel()
    return cluster_scores_stack(np.bincount(flat, minlength=P * n_classes * K).reshape(P, n_classes, K))


def contingency(y: np.ndarray, c: np.ndarray, n_classes: int, n_clusters: int, weights=None) -> np.ndarray:
    """``(C, K)`` counts of items per (class, cluster); ``weights`` ``(N,)`` counts each item that many times."""
    flat = np.bincount(y * n_clusters + c, weights=weights, minlength=n_classes * n_clusters)
    return flat.reshape(n_classes, n_clusters)


def resampled_means(correct: np.ndarray, IX: np.ndarray) -> np.ndarray:
    """``(B, L)`` accuracy of each layer on each item resample: ``correct`` ``(L, N)`` 0/1 (NaN rows
    stay NaN), ``IX`` ``(B, N)`` resampled item indices."""
    c = np.asarray(correct, dtype=np.float64)
    return np.stack([c[:, ix].mean(axis=1) for ix in IX]) if len(IX) else np.empty((0, c.shape[0]))


def resampled_cluster_scores(y: np.ndarray, clusters: list, IX: np.ndarray, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """``(nmi, ari)``, each ``(B, L)``: every layer's clusters (``clusters[l]`` ``(N,)``, or None for a
    layer without a value: NaN) scored on the same item resamples."""
    n = len(y)
    B, L = len(IX), len(clusters)
    nmi, ari = np.full((B, L), np.nan), np.full((B, L), np.nan)
    weights = [np.bincount(ix, minlength=n).astype(np.float64) for ix in IX]
    for l, c in enumerate(clusters):
        if c is None or not B:
            continue
        K = int(c.max()) + 1
        nmi[:, l], ari[:, l] = cluster_scores_stack(np.stack([contingency(y, c, n_classes, K, w) for w in weights]))
    return nmi, ari


#: label entries scored at once while shuffling: permutations go in batches of ``SHUFFLE_BATCH // N``
#: (at least one), so a batch's neighbour labels (``P × N × k``) stay a few MiB at any N
SHUFFLE_BATCH = 1 << 16


def shuffle_maxima(score_layers, y: np.ndarray, *, n_perm: int, seed: int = 0) -> np.ndarray:
    """``(S, n_perm)``: for each of ``S`` scores sharing the shuffles, the maximum over layers of the
    scores under each of ``n_perm`` random permutations of the labels ``y`` ``(N,)`` (-inf where every
    layer is NaN). ``score_layers(Y)`` takes ``Y`` ``(P, N)`` (``P`` permuted labellings) and returns
    ``(S, P, L)`` scores (NaN where a layer has none). The permutations are drawn one after another from
    ``default_rng([seed, 7])``, so every score and every batch size sees the same shuffles."""
    rng = np.random.default_rng([seed, 7])
    n = len(y)
    step = max(1, SHUFFLE_BATCH // max(n, 1))
    out = []
    for start in range(0, n_perm, step):
        Y = np.stack([y[rng.permutation(n)] for _ in range(min(step, n_perm - start))])
        v = np.asarray(score_layers(Y), dtype=np.float64)
        out.append(np.where(np.isnan(v), -np.inf, v).max(axis=2))
    return np.concatenate(out, axis=1) if out else np.empty((0, 0))


def null_summary(null: np.ndarray, observed: float) -> dict | None:
    """``{"p", "q95", "n_perm"}`` of an observed best score against its shuffled maxima ``(n_perm,)``:
    ``p = (1 + #{null >= observed}) / (1 + n_perm)``; None without shuffles or a finite ``observed``."""
    if len(null) < 1 or not np.isfinite(observed):
        return None
    return {"p": float((1 + np.sum(null >= observed - 1e-12)) / (1 + len(null))),
            "q95": float(np.quantile(null, 0.95)), "n_perm": int(len(null))}


def label_null(score_layers, y: np.ndarray, observed: float, *, n_perm: int, seed: int = 0) -> dict | None:
    """The shuffled-label null of the best layer's score: the maximum over layers of ``score_layers(Y)``
    for ``n_perm`` random permutations of the labels (the fitted lists or clusters kept), so the
    layer chosen as best is chosen again under each shuffle (selection-aware, as the grids' null).

    ``score_layers(Y)``: ``Y`` ``(P, N)`` permuted labellings -> ``(P, L)`` scores (NaN where a layer
    has none). Returns :func:`null_summary`, or None when ``n_perm`` is 0 or ``observed`` is not finite."""
    if n_perm < 1 or not np.isfinite(observed):
        return None
    maxima = shuffle_maxima(lambda Y: np.asarray(score_layers(Y))[None], y, n_perm=n_perm, seed=seed)
    return null_summary(maxima[0], observed)


def percentile(samples: np.ndarray, level: float = 0.95) -> tuple[float, float] | None:
    """The percentile interval of finite ``samples`` (None with fewer than two)."""
    s = np.asarray(samples, dtype=np.float64)
    s = s[np.isfinite(s)]
    if len(s) < 2:
        return None
    a = (1 - level) / 2
    return float(np.quantile(s, a)), float(np.quantile(s, 1 - a))


def paired_interval(S: np.ndarray, a: int, b: int, level: float = 0.95) -> tuple[float, float] | None:
    """The percentile interval of layer ``a``'s score minus layer ``b``'s over the same resamples
    (``S`` ``(B, L)``); None without two finite differences."""
    return percentile(S[:, a] - S[:, b], level)


def interval_matrix(S: np.ndarray, level: float = 0.95) -> tuple[list, list]:
    """``(low, high)``, each ``L × L`` lists: the paired interval of every layer ``a`` minus layer ``b``
    (None where undefined). ``S`` ``(B, L)`` resample scores."""
    L = S.shape[1]
    lo = [[None] * L for _ in range(L)]
    hi = [[None] * L for _ in range(L)]
    if S.shape[0] < 2:
        return lo, hi
    a_ = (1 - level) / 2
    for a in range(L):
        d = S[:, [a]] - S  # (B, L)
        ok = np.isfinite(d)
        # the columns without a NaN in one call (each column's own quantiles, to the last bits)
        whole = [b for b in range(L) if b != a and ok[:, b].all()]
        if whole:
            q = np.quantile(d[:, whole], [a_, 1 - a_], axis=0)
            for j, b in enumerate(whole):
                lo[a][b], hi[a][b] = float(q[0, j]), float(q[1, j])
        for b in range(L):
            col = d[ok[:, b], b]
            if a != b and lo[a][b] is None and len(col) >= 2:
                lo[a][b] = float(np.quantile(col, a_))
                hi[a][b] = float(np.quantile(col, 1 - a_))
    return lo, hi
