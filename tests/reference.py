"""Literal, slow references of the metrics' paper formulas (loops and dense matrices on purpose), shared
by the metric tests; every test compares the package against these, never against its own output."""

import numpy as np
from scipy import linalg


def ref_knn_sets(X, k):
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    sets = []
    for i in range(len(X)):
        sims = [(float(Xn[i] @ Xn[j]), j) for j in range(len(X)) if j != i]
        sims.sort(reverse=True)
        sets.append({j for _, j in sims[:k]})
    return sets


def ref_mutual_knn(X, Y, k):
    a, b = ref_knn_sets(X, k), ref_knn_sets(Y, k)
    return sum(len(a[i] & b[i]) for i in range(len(X))) / (k * len(X))


def ref_cycle_knn(X, Y, k):
    a, b = ref_knn_sets(X, k), ref_knn_sets(Y, k)
    return np.mean([any(i in a[j] for j in b[i]) for i in range(len(X))])


def ref_hsic_biased(K, L):
    n = len(K)
    H = np.eye(n) - np.ones((n, n)) / n
    return np.trace(K @ H @ L @ H) / (n - 1) ** 2


def ref_hsic_unbiased(K, L):
    # Song et al. (2012), eq. (5), written out literally
    n = len(K)
    Kt, Lt = K.copy(), L.copy()
    np.fill_diagonal(Kt, 0)
    np.fill_diagonal(Lt, 0)
    one = np.ones(n)
    return (np.trace(Kt @ Lt) + (one @ Kt @ one) * (one @ Lt @ one) / ((n - 1) * (n - 2))
            - 2 / (n - 2) * one @ Kt @ Lt @ one) / (n * (n - 3))


def ref_cka(K, L, hsic):
    return hsic(K, L) / np.sqrt(hsic(K, K) * hsic(L, L))


def ref_rbf(X, sigma_frac=1.0):
    D2 = np.array([[np.sum((x - y) ** 2) for y in X] for x in X])
    med = np.sqrt(np.median(D2[np.triu_indices(len(X), 1)]))
    s = sigma_frac * med
    return np.exp(-D2 / (2 * s**2))


def ref_cknna(X, Y, k):
    # platonic-rep cknna(unbiased=True): cosine kernels, top-k masks without self, unbiased HSIC
    def torch_style_hsic_unbiased(K, L):
        m = len(K)
        Kt, Lt = K.copy(), L.copy()
        np.fill_diagonal(Kt, 0)
        np.fill_diagonal(Lt, 0)
        return (np.sum(Kt * Lt.T) + np.sum(Kt) * np.sum(Lt) / ((m - 1) * (m - 2))
                - 2 * np.sum(Kt @ Lt) / (m - 2)) / (m * (m - 3))

    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    Yn = Y / np.linalg.norm(Y, axis=1, keepdims=True)
    K, L = Xn @ Xn.T, Yn @ Yn.T
    n = len(X)

    def mask(S):
        S = S.copy()
        np.fill_diagonal(S, -np.inf)
        m = np.zeros((n, n))
        for i in range(n):
            m[i, np.argsort(-S[i])[:k]] = 1
        return m

    mk, ml = mask(K), mask(L)

    def sim(A, B, ma, mb):
        mm = ma * mb
        return torch_style_hsic_unbiased(mm * A, mm * B)

    return sim(K, L, mk, ml) / np.sqrt(sim(K, K, mk, mk) * sim(L, L, ml, ml))


def ref_svcca(X, Y, keep):
    def reduce(A):
        Ac = A - A.mean(0)
        U, s, Vt = np.linalg.svd(Ac, full_matrices=False)
        frac = np.cumsum(s**2) / np.sum(s**2)
        r = int(np.argmax(frac >= keep - 1e-12)) + 1
        return Ac @ Vt[:r].T

    A, B = reduce(X), reduce(Y)
    # classical CCA: singular values of Sxx^-1/2 Sxy Syy^-1/2
    n = len(A)
    Sxx, Syy, Sxy = A.T @ A / (n - 1), B.T @ B / (n - 1), A.T @ B / (n - 1)
    ix = linalg.inv(linalg.sqrtm(Sxx))
    iy = linalg.inv(linalg.sqrtm(Syy))
    rho = np.linalg.svd(np.real(ix @ Sxy @ iy), compute_uv=False)
    return float(np.mean(rho[: min(A.shape[1], B.shape[1])]))


def ref_ranks(X, Y):
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    Yn = Y / np.linalg.norm(Y, axis=1, keepdims=True)
    ranks = []
    for i in range(len(X)):
        sims = [float(Xn[i] @ Yn[j]) for j in range(len(Y))]
        ranks.append(sum(s > sims[i] for s in sims))
    return np.array(ranks)


def ref_knn_lists(X, k, groups=None):
    """``(N, k)`` exact cosine k-NN lists, each row sorted: cosines of the float64 unit rows summed by
    ``math.fsum`` (correctly rounded), the row itself and its group left out, a stable sort on the
    negated cosines (equal values keep index order: ties to the lower index)."""
    import math

    U = np.asarray(X, dtype=np.float64)
    norms = np.linalg.norm(U, axis=1, keepdims=True)
    U = U / np.where(norms == 0, 1.0, norms)
    n = len(U)
    S = np.array([[math.fsum(U[i] * U[j]) for j in range(n)] for i in range(n)])
    np.fill_diagonal(S, -np.inf)
    if groups is not None:
        S[np.asarray(groups)[:, None] == np.asarray(groups)[None, :]] = -np.inf
    return np.sort(np.argsort(-S, axis=1, kind="stable")[:, :k], axis=1)


def ref_reorder_resample(V, T_pos, T_neg, ix, k):
    """``(positive, negative)`` of the reorder probe on the item resample ``ix``, by explicit loops over
    its positions: cosines of the float64 unit rows summed by ``math.fsum`` (correctly rounded, so
    copies of one row tie exactly); each position's k nearest *positions* among those holding another
    item (copies of its own item masked), sorted by (−cosine, position): ties to the lower position.
    Positive: V lists against positive-caption lists; negative: V lists against the lists of the
    position's negative caption among the other positions' positive captions. Overlap counted in
    positions, over ``k n``. NaN when the resample holds ``<= k`` distinct items."""
    import math

    ix = [int(i) for i in ix]
    n = len(ix)
    if len(set(ix)) <= k:
        return float("nan"), float("nan")

    def unit(A):
        A = np.asarray(A, dtype=np.float64)
        norms = np.linalg.norm(A, axis=1, keepdims=True)
        return A / np.where(norms == 0, 1.0, norms)

    Vu, Pu, Nu = unit(V), unit(T_pos), unit(T_neg)
    memo = {}

    def cos(name, A, B, a, b):
        key = (name, a, b)
        if key not in memo:
            memo[key] = math.fsum(A[a] * B[b])
        return memo[key]

    def lists(name, Q, B):
        out = []
        for p in range(n):
            cand = sorted((-cos(name, Q, B, ix[p], ix[q]), q) for q in range(n) if ix[q] != ix[p])
            out.append({q for _, q in cand[:k]})
        return out

    v, pos, neg = lists("v", Vu, Vu), lists("p", Pu, Pu), lists("n", Nu, Pu)
    return (sum(len(v[p] & pos[p]) for p in range(n)) / (k * n),
            sum(len(v[p] & neg[p]) for p in range(n)) / (k * n))


def ref_cross_lists(Q, X, k):
    """``(N, k)`` each query row's k nearest rows of X (row i of X left out for query i), nearest first:
    ``math.fsum`` cosines of the float64 unit rows, a stable sort on the negated cosines (ties to the
    lower index)."""
    import math

    def unit(A):
        A = np.asarray(A, dtype=np.float64)
        norms = np.linalg.norm(A, axis=1, keepdims=True)
        return A / np.where(norms == 0, 1.0, norms)

    Qu, Xu = unit(Q), unit(X)
    n = len(X)
    S = np.array([[math.fsum(Qu[i] * Xu[j]) for j in range(n)] for i in range(n)])
    np.fill_diagonal(S, -np.inf)
    return np.argsort(-S, axis=1, kind="stable")[:, :k]


def ref_points_in_polygon(points, polygon):
    """Even-odd point-in-polygon by matplotlib (``Path.contains_points`` with no radius), an
    implementation independent of ours; its boundary convention differs, so compare off the edges."""
    from matplotlib.path import Path

    return Path(np.asarray(polygon, float)).contains_points(np.asarray(points, float))
