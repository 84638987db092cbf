"""Centred kernel alignment (CKA), linear or RBF, with biased or unbiased HSIC.

Three ways to the same number, chosen by N alone (so a grid cell and the one-pair function take
the same way and agree bit for bit):

- **packed** (``N <= GRAM_CACHE_MAX_N``, the papers' N = 512-1024): ``prepare`` builds the layer's
  HSIC kernel once (centred ``H K H`` or zero-diagonal ``K~``) and keeps its diagonal and upper
  triangle as two float64 vectors. ``<K, L>_F = 2 <triu K, triu L> + <diag K, diag L>``, so a pair
  costs one read of half the Gram of each side; all pairs of a block are contracted on fixed
  ``(32, 2048)`` gemm tiles (:func:`analysis.metrics.base.tiled_inner`), about 6x faster than
  copying full N x N Grams into per-call buffers as before. Self terms are cached on the state.
- **feature** (linear kernels, ``N > FEATURE_CKA_MIN_N``): no N x N object at all.
  ``<Xc Xc^T, Yc Yc^T>_F = ||Xc^T Yc||_F^2`` (Kornblith et al. 2019, eq. 4), accumulated over row
  chunks of ``FEATURE_CHUNK_ROWS`` rows, each centred in float64 from the layer as stored
  (float32 stays float32 in memory): O(N·p·q) per pair, memory ``p·q`` plus one chunk. Debiased
  HSIC uses the same cross-covariance: with ``k_i = ||x_i||^2`` (centred rows: unbiased HSIC of a
  linear kernel does not change when a constant is added to every row, since each of its terms
  is a sum of ``k_ij + k_qr - k_iq - k_jr``), ``tr(K~L~) = ||Xc^T Yc||^2 - k·l``,
  ``K~1 = Xc (Xc^T 1) - k``.
  Above ``FEATURE32_CKA_MIN_N`` (biased linear CKA, what ``analyze`` computes)
  ``Xc^T Yc`` is summed in float64 over float32 products of ``FEATURE32_ROWS`` rows, each block
  centred in float64, rounded to float32 and used for a whole tile of pairs (sgemm: about half
  dgemm's time). Each cell's error is proven a posteriori from
  ``||C̃ - C||_F <= δ ||Xc||_F ||Yc||_F`` (``δ ≈ γ_m(u32) + 2u32``, :func:`_feature32_error`) carried through the ratio (:func:`feature32_cka_bound`); a cell whose
  bound exceeds ``CKA_FLOAT32_ATOL`` (1e-3) is recomputed by the float64 form. The bound is a worst
  case (~1e-4 on N = 10,000 synthetic layers of width 768); the measured error there is ~5e-10.
- **blocks** (everything else): row blocks of the kernel rebuilt per call into one reused buffer
  per side (``GRAM_BLOCK_ENTRIES`` per layer), never N x N per layer.

Precision (why float64 throughout while k-NN runs in float32): CKA is a ratio of traces
``<K~, L~>_F = sum_ij K~_ij L~_ij`` over all N^2 entries. In float32 each Gram entry carries a
relative error up to ``γ_d ≈ d·u32`` (768·6e-8 ≈ 4.6e-5, worse after centring a large mean: the
error scales with ``||x||^2`` while the centred entry scales with the spread), and the N^2-term sum
adds up to ``γ_{N^2}`` more (pairwise BLAS sums grow like ``log N`` in practice, but the
rigorous bound for N = 1e4 is already > 1). Unlike a neighbour list, a trace has no discrete
answer a cheap float64 pass could certify, so the only way to an answer good to ~1e-12 is to
form the Gram blocks in float64 (``γ_d(u64) ≈ 8.5e-14``).

Feature form against the Gram form (both float64; Higham 2002, §3.1): each entry of
``C = Xc^T Yc`` is a length-N dot, ``|Ĉ_ab - C_ab| <= γ_N ||xc_a|| ||yc_b||`` (column norms), so
``||Ĉ - C||_F <= γ_N ||Xc||_F ||Yc||_F``; with ``||C||_F <= ||Xc||_F ||Yc||_F`` and
``||Xc^T Xc||_F >= ||Xc||_F^2 / sqrt(p)`` the linear CKA moves by at most about
``γ_N (2 sqrt(p q) + sqrt(p) + sqrt(q))`` (absolute; first order). Centring in float64 adds
``u64·|mean|/spread`` relative per entry, the same for both forms. For N = 1e5, p = q = 768:
≤ 3.5e-8 rigorous, ~1e-12 in practice (rounding errors of a dot grow like sqrt(N), not N); the
Gram form's own error is of the same order. In float32 over all N rows the same bound is > 1 and
the typical error ~1e-2, hence float64 accumulation of short float32 blocks above
(``γ_512(u32)``). Tests hold the two float64 forms to ``rel=1e-9``.

Memory: packed: ``N^2/2`` float64 per layer (4 MiB at N = 1024), no copy of the layer; feature:
the layer as stored (by reference) plus O(N + d) (above ``FEATURE32_CKA_MIN_N``, one tile of
``FEATURE32_TILE²`` float64 ``d × d`` accumulators while a grid is scored); blocks: one float64
copy of each layer plus ``GRAM_BLOCK_ENTRIES`` per layer of block buffer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from analysis.metrics import neighbors
from analysis.metrics.validation import as_matrix, check_paired, check_positive
from analysis.metrics.base import (PairKernel, blas_threads, gram_inner, gram_self, one_blas_thread, thread_map,
                                   tiled_inner_self, tiled_self)

KERNELS = ("linear", "rbf")


#: Largest N whose kernel a prepared layer keeps, packed (4 MiB per layer at N = 1024, the papers' N).
GRAM_CACHE_MAX_N = 1024

#: Above this N, linear CKA runs in feature space (``||Xc^T Yc||_F^2``, no N x N object): for a
#: 24x24 grid at d = 768 the Gram form's ``2·L·N^2·d + L^2·N^2`` flops and the feature form's
#: ``L^2·N·d^2`` cross near N ≈ 9000, and only the feature form stays O(N) in memory and time.
FEATURE_CKA_MIN_N = 8192

#: Rows per float64 chunk of the feature form (25 MiB at d = 768); fixed, so sums add up in one order.
FEATURE_CHUNK_ROWS = 4096

#: Above this N, biased linear CKA's feature form multiplies float32 centred copies (one per layer,
#: made once in ``prepare``) in blocks of ``FEATURE32_ROWS`` rows, each block's ``d × d`` product
#: added into float64: about half the time of the float64 form (sgemm against dgemm). Each cell's
#: error is bounded a posteriori (:func:`feature32_cka_bound`); a cell whose bound exceeds
#: ``CKA_FLOAT32_ATOL`` is recomputed by the float64 form.
FEATURE32_CKA_MIN_N = 8192
#: rows per float32 product: the float32 error bound grows with it (``γ_m``, 3e-5 at 512)
FEATURE32_ROWS = 512
#: largest proven error of a float32 feature-form CKA cell (absolute; typical errors are ~1e-9)
CKA_FLOAT32_ATOL = 1e-3
_U32 = 2.0**-24
_U64 = 2.0**-53

#: Entries of one layer's Gram row block (8 MB): small enough that the per-layer blocks of a
#: whole model stay in a reused buffer instead of N x N per layer.
GRAM_BLOCK_ENTRIES = 1 << 20


@lru_cache(maxsize=4)
def _right_of_diagonal(n: int, b0: int, b1: int) -> np.ndarray:
    """``(b1 - b0, n)`` bool: True where column ``j`` is right of row ``i``'s diagonal (``j > i``,
    rows ``b0..b1`` of an ``n × n`` kernel). Read-only: it is shared by every layer packed."""
    mask = np.arange(n)[None, :] > np.arange(b0, b1)[:, None]
    mask.flags.writeable = False
    return mask


@lru_cache(maxsize=2)
def gram_row_step(n: int) -> int:
    """Rows per Gram block; depends on N only, so grid and one-pair sum in the same order."""
    return max(1, min(neighbors.CHUNK_ENTRIES, GRAM_BLOCK_ENTRIES) // n)


def pairwise_sq_dists(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``(len(A), len(B))`` squared Euclidean distances, clipped at 0 against round-off."""
    d = np.sum(A * A, axis=1)[:, None] + np.sum(B * B, axis=1)[None, :] - 2.0 * (A @ B.T)
    return np.maximum(d, 0.0)


def median_distance(X: np.ndarray, *, max_points: int = 2000) -> float:
    """Median of pairwise Euclidean distances between distinct rows (first ``max_points`` rows)."""
    S = X[:max_points]
    d = pairwise_sq_dists(S, S)[np.triu_indices(len(S), k=1)]
    med = float(np.sqrt(np.median(d)))
    return med if med > 0 else 1.0


@dataclass
class GramState:
    """Per-layer pieces from which the layer's HSIC kernel, or its feature-space form, is used.

    ``mode`` is ``"packed"`` (diagonal and upper triangle of the kernel kept), ``"feature"``
    (linear, large N: the layer as stored plus its column means) or ``"blocks"`` (row blocks
    rebuilt per call from ``X``); see the module docstring.
    """

    n: int
    kernel: str
    debiased: bool
    mode: str = "blocks"
    #: blocks: float64 rows, centred (for linear-biased: exact H K H = Xc Xc^T);
    #: feature: the layer as stored (float32 is not copied); packed: None (not needed any more)
    X: np.ndarray | None = field(default=None, repr=False)
    gamma: float = 0.0  # RBF: exp(-gamma * ||x - y||^2)
    sq_norms: np.ndarray | None = None
    row_mean: np.ndarray | None = None  # biased centring: K 1 / N
    grand_mean: float = 0.0  # biased centring: mean of all entries of K
    total: float = 0.0  # debiased: sum of all entries of K~
    row_sum: np.ndarray | None = None  # debiased: K~ 1
    mean: np.ndarray | None = None  # feature: float64 column means
    diag_k: np.ndarray | None = None  # feature, debiased: k_i = ||x_i - mean||^2
    diag: np.ndarray | None = field(default=None, repr=False)  # packed: diagonal (None: all zero)
    upper: np.ndarray | None = field(default=None, repr=False)  # packed: strict upper triangle
    self_inner: float | None = None  # <K, K>_F (debiased: tr(K~ K~)), computed on first use
    #: feature: True above FEATURE32_CKA_MIN_N (biased): the float32 block route, with ||Xc||_F
    float32: bool = False
    fro: float = 0.0
    self32: tuple[float, float] | None = None  # (||X32ᵀX32||², its error bound), on first use

    def raw_block(self, start: int, stop: int) -> np.ndarray:
        if self.kernel == "linear":
            return self.X[start:stop] @ self.X.T
        d = self.sq_norms[start:stop, None] + self.sq_norms[None, :] - 2.0 * (self.X[start:stop] @ self.X.T)
        r = np.arange(stop - start)
        d[r, r + start] = 0.0  # exact zero self-distance, so k(x, x) = 1 exactly
        return np.exp(-self.gamma * np.maximum(d, 0.0))

    def block_into(self, start: int, stop: int, out: np.ndarray) -> None:
        """Write rows ``start:stop`` of the HSIC kernel into ``out`` ``(stop-start, N)``."""
        if self.kernel == "linear" and not self.debiased:
            # X is centred already, so these are rows of H K H with no cancellation
            np.matmul(self.X[start:stop], self.X.T, out=out)
        else:
            out[...] = self.block(start, stop)

    def block(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of the kernel the HSIC uses: centred (biased) or zero-diagonal."""
        B = self.raw_block(start, stop)
        if self.debiased:
            r = np.arange(stop - start)
            B[r, r + start] = 0.0
        elif self.kernel == "rbf":  # RBF biased: explicit H K H rows
            B = B - self.row_mean[start:stop, None] - self.row_mean[None, :] + self.grand_mean
        return B

    def pack(self) -> None:
        """Keep the kernel as diagonal + strict upper triangle (built with the blocks' row steps)."""
        n = self.n
        step = gram_row_step(n)
        buf = np.empty((min(step, n), n))  # one reused row block (no N x N array)
        upper = np.empty(n * (n - 1) // 2)
        diag = np.empty(n)
        off = 0
        for b0 in range(0, n, step):
            b1 = min(n, b0 + step)
            block = buf[: b1 - b0]
            self.block_into(b0, b1, block)
            # every row's entries right of the diagonal, row-major order: one masked copy per block
            # (a Python loop over rows cost ~2 ms a layer at N = 1024, holding the GIL while
            # layers were prepared on several threads)
            right = block[_right_of_diagonal(n, b0, b1)]
            upper[off:off + right.size] = right
            off += right.size
            diag[b0:b1] = block[np.arange(b1 - b0), np.arange(b0, b1)]
        self.diag = None if self.debiased else diag
        self.upper = upper
        self.mode, self.X = "packed", None

    def centred(self, start: int, stop: int) -> np.ndarray:
        """Feature mode: float64 rows ``start:stop`` minus the column means."""
        return self.X[start:stop].astype(np.float64) - self.mean

    def inner_self(self) -> float:
        """``<K, K>_F`` (debiased: ``tr(K~ K~)``) by the same routine as a cross term; cached."""
        if self.self_inner is None:
            if self.mode == "packed":
                self.self_inner = float(_packed_self([self])[0])
            else:
                self.self_inner = _feature_cross(self, self)
        return self.self_inner


def _packed_self(states) -> np.ndarray:
    """``<K, K>_F`` of each packed state: the diagonal of ``_packed_scores(states, states)`` bit for
    bit, from the diagonal tiles only (:func:`analysis.metrics.base.tiled_self`)."""
    out = 2.0 * tiled_self([s.upper for s in states])
    if states[0].diag is not None:
        out += tiled_self([s.diag for s in states])
    return out


def fill_packed_self(states) -> None:
    """Set ``self_inner`` on every packed state that lacks it, in one tiled call (a 1x1 call pads
    to a full tile): a cell of the tiled product does not depend on its place in the tile (see
    :func:`analysis.metrics.base.tiled_inner`), so each value is the one ``inner_self`` gives."""
    todo = list({id(s): s for s in states if s.mode == "packed" and s.self_inner is None}.values())
    if todo:
        for s, v in zip(todo, _packed_self(todo)):
            s.self_inner = float(v)


def _packed_scores(states_a, states_b) -> np.ndarray:
    """``(La, Lb)`` ``<K_a, K_b>_F = 2 <triu K_a, triu K_b> + <diag K_a, diag K_b>`` of packed states,
    and every state's missing ``self_inner`` from the same pass over the packed vectors
    (:func:`analysis.metrics.base.tiled_inner_self`): the very values of :func:`_packed_self`,
    without a second read of every layer's half Gram."""
    states = list(states_a) + list(states_b)
    selves = any(s.self_inner is None for s in states)
    same = states_b is states_a
    ua = [s.upper for s in states_a]
    cross, self_a, self_b = tiled_inner_self(ua, ua if same else [s.upper for s in states_b], selves=selves)
    out = 2.0 * cross  # exact doubling
    if selves:
        self_a, self_b = 2.0 * self_a, 2.0 * self_b
    if states_a[0].diag is not None:
        da = [s.diag for s in states_a]
        d_cross, d_a, d_b = tiled_inner_self(da, da if same else [s.diag for s in states_b], selves=selves)
        out += d_cross
        if selves:
            self_a, self_b = self_a + d_a, self_b + d_b
    if selves:
        for group, values in ((states_a, self_a), (states_b, self_b)):
            for s, v in zip(group, values):
                if s.self_inner is None:
                    s.self_inner = float(v)
    return out


def _feature_cross(sa: GramState, sb: GramState) -> float:
    """``||Xc_a^T Xc_b||_F^2`` (debiased: minus ``k_a · k_b``), summed over fixed row chunks, each
    product on one BLAS thread (on two, OpenBLAS summed some in another order: a cell then
    depended on the pool; a grid runs several pairs at once instead, :meth:`CkaKernel.score_block`)."""
    C = np.zeros((sa.X.shape[1], sb.X.shape[1]))
    with one_blas_thread():
        for start in range(0, sa.n, FEATURE_CHUNK_ROWS):
            stop = min(sa.n, start + FEATURE_CHUNK_ROWS)
            # two separate centred copies even when sa is sb, so self and cross terms run one gemm kind
            C += sa.centred(start, stop).T @ sb.centred(start, stop)
    out = float(np.sum(C * C))
    if sa.debiased:
        out -= float(np.dot(sa.diag_k, sb.diag_k))
    return out


def _feature32_error(n: int) -> float:
    """``δ`` with ``||C̃ − Xcᵀ Yc||_F <= δ ||Xc||_F ||Yc||_F`` for the float32 block form: rounding
    the centred rows to float32 (``2u₃₂`` on each product), each block's float32 dot of
    ``FEATURE32_ROWS`` terms (``γ_m(u₃₂)``, any order, FMA or not), the float64 sum of the
    ``⌈N/m⌉`` block results (``γ(u₆₄)``); entrywise ``|E_ab| <= δ Σ_i |x_ia||y_ib|``, and the
    Frobenius norm of ``|Xc|ᵀ|Yc|`` is at most ``||Xc||_F ||Yc||_F`` (Cauchy–Schwarz). Higham
    2002 §3.1; the centring itself is float64, as in the float64 form."""
    m = min(n, FEATURE32_ROWS)
    blocks = -(-n // FEATURE32_ROWS)
    return 1.01 * (m * _U32 / (1 - m * _U32) + 2 * _U32) + blocks * _U64 / (1 - blocks * _U64)


def _frob_sq_interval(C: np.ndarray, err: float) -> tuple[float, float]:
    """``(||C̃||_F², bound)``: ``| ||C̃||² − ||C||² | <= e (2 ||C̃|| + e)`` when ``||C̃ − C||_F <= e``,
    plus the float64 sum of squares (``γ_{d²}(u₆₄)`` relative)."""
    v = float(np.sum(C * C))
    return v, err * (2.0 * np.sqrt(v) + err) + C.size * _U64 * v * 1.01


def _centred32(s: GramState, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` centred in float64 (as the float64 form), rounded to float32."""
    return s.centred(start, stop).astype(np.float32)


def _feature32_products(states_a, states_b) -> list[list[np.ndarray]]:
    """``Σ_blocks fl32(Xa_blockᵀ Xb_block)`` accumulated in float64 for every pair, ``(p, q)``
    each; every block of ``FEATURE32_ROWS`` rows is centred once per layer and used for all the
    pairs it is in (the same products in the same order whatever the grid: one pair's value is
    the grid cell's, bit for bit)."""
    n = states_a[0].n
    acc = [[np.zeros((a.X.shape[1], b.X.shape[1])) for b in states_b] for a in states_a]
    for start in range(0, n, FEATURE32_ROWS):
        stop = min(n, start + FEATURE32_ROWS)
        ca = [_centred32(a, start, stop) for a in states_a]
        # a separate copy even for a self-grid: numpy sends ``x.T @ x`` of one buffer to syrk, whose
        # rounding differs from gemm's; one kind of product keeps a cell equal to the one-pair value
        cb = [_centred32(b, start, stop) for b in states_b]
        for i, x in enumerate(ca):
            for j, y in enumerate(cb):
                acc[i][j] += x.T @ y
    return acc


def _feature32_cross(sa: GramState, sb: GramState) -> tuple[float, float]:
    """``(||Xcᵀ Yc||_F², its error bound)`` by the float32 block form."""
    C = _feature32_products([sa], [sb])[0][0]
    return _frob_sq_interval(C, _feature32_error(sa.n) * sa.fro * sb.fro)


def _feature32_self(s: GramState) -> tuple[float, float]:
    if s.self32 is None:
        s.self32 = _feature32_cross(s, s)
    return s.self32


def feature32_cka_bound(cross: float, e_cross: float, sa: float, e_a: float, sb: float, e_b: float) -> float:
    """Largest ``|CKA − cross / sqrt(sa sb)|`` over the intervals ``cross ± e_cross``,
    ``sa ± e_a``, ``sb ± e_b`` (CKA is monotone in each); inf when a self term may be 0."""
    if sa - e_a <= 0 or sb - e_b <= 0:
        return float("inf")
    value = cross / np.sqrt(sa * sb)
    lo = (cross - e_cross) / np.sqrt((sa + e_a) * (sb + e_b)) if cross - e_cross >= 0 else \
        (cross - e_cross) / np.sqrt((sa - e_a) * (sb - e_b))
    hi = (cross + e_cross) / np.sqrt((sa - e_a) * (sb - e_b))
    return float(max(hi - value, value - lo))


#: layers per side of one tile of :func:`_feature32_scores`: ``FEATURE32_TILE²`` float64 ``d × d``
#: accumulators at a time (300 MB at d = 768), each block of rows centred once per tile
FEATURE32_TILE = 8


def _feature32_scores(states_a, states_b) -> np.ndarray:
    """Biased linear CKA of every pair by the float32 block form, tile by tile; each cell whose
    proven error (:func:`feature32_cka_bound`) exceeds ``CKA_FLOAT32_ATOL`` is the float64 form's."""
    out = np.empty((len(states_a), len(states_b)))
    delta = _feature32_error(states_a[0].n)
    t = FEATURE32_TILE
    for i0 in range(0, len(states_a), t):
        for j0 in range(0, len(states_b), t):
            ta, tb = states_a[i0:i0 + t], states_b[j0:j0 + t]
            prods = _feature32_products(ta, tb)
            for i, a in enumerate(ta):
                for j, b in enumerate(tb):
                    cross, e_cross = _frob_sq_interval(prods[i][j], delta * a.fro * b.fro)
                    (s_a, e_a), (s_b, e_b) = _feature32_self(a), _feature32_self(b)
                    if feature32_cka_bound(cross, e_cross, s_a, e_a, s_b, e_b) <= CKA_FLOAT32_ATOL:
                        out[i0 + i, j0 + j] = cross / np.sqrt(s_a * s_b)
                    else:  # not proven (a constant layer, or the bound too wide): the float64 form
                        denom = np.sqrt(a.inner_self() * b.inner_self())
                        out[i0 + i, j0 + j] = _feature_cross(a, b) / denom if denom > 0 else 0.0
    return out


class CkaKernel(PairKernel):
    def prepares_in_threads(self, params, n):
        return True

    def prepare(self, X, **params):
        """Per-layer state of one layer ``X`` ``(N, d)``, float32 or float64 (see the module docstring).

        Its products run on one BLAS thread wherever it is called (:func:`one_blas_thread`): a
        Gram's bits then do not depend on the pool's size, so a grid, a one-pair call and
        ``analyze`` prepare a layer alike; grids prepare several layers at once instead."""
        with one_blas_thread():
            return self._prepare(X, **params)

    def _prepare(self, X, *, kernel="linear", debiased=False, sigma=1.0, **_):
        # X was validated by the caller (the public function or layer_grid)
        if kernel not in KERNELS:
            raise ValueError(f"cka kernel must be one of {KERNELS}, got {kernel!r}")
        n = X.shape[0]
        if debiased and n <= 3:
            raise ValueError(f"debiased CKA needs N > 3 items, got N={n}")
        if kernel == "rbf":
            check_positive(sigma, "sigma")
        if kernel == "linear" and n > FEATURE_CKA_MIN_N:
            return self._prepare_feature(X, debiased)
        # float32 layers of a grid are widened here, one layer at a time, and centred for every
        # kernel and HSIC: H K H = Xc Xc^T (biased linear), unbiased HSIC of a linear kernel and
        # every RBF distance are unchanged when one vector is added to all rows, so centring is
        # exact and avoids the cancellation of a mean that is large against the spread (common in
        # LLM hidden states; raw X X^T lost all digits at an offset of 10^4 x the spread)
        # one float64 copy, centred in place (a second N x d temporary cost more than the subtraction)
        X = np.array(X, dtype=np.float64)
        X -= X.mean(axis=0)
        if kernel == "linear" and not debiased:
            state = GramState(n=n, X=X, kernel=kernel, debiased=False)
        else:
            state = GramState(n=n, X=X, kernel=kernel, debiased=debiased)
            if kernel == "rbf":
                bandwidth = sigma * median_distance(X)
                state.gamma = 1.0 / (2.0 * bandwidth**2)
                state.sq_norms = np.sum(X * X, axis=1)
            if kernel == "linear":  # debiased only here: K~ 1 = X (X^T 1) - diag(K)
                sums = X @ X.sum(axis=0) - np.einsum("ij,ij->i", X, X)
            else:
                step = gram_row_step(n)
                sums = np.empty(n)
                for start in range(0, n, step):
                    stop = min(n, start + step)
                    sums[start:stop] = state.raw_block(start, stop).sum(axis=1)
            if debiased and kernel == "rbf":
                sums = sums - 1.0  # exp(0) on the diagonal
            state.row_sum = sums  # K 1 (RBF biased) or K~ 1 (debiased)
            state.total = float(sums.sum())
            state.row_mean = sums / n
            state.grand_mean = state.total / n**2
        if n <= GRAM_CACHE_MAX_N:
            state.pack()
        return state

    @staticmethod
    def _prepare_feature(X, debiased) -> GramState:
        """Feature mode: column means (and for debiased HSIC ``k_i`` and ``K~1``), chunked float64."""
        n, d = X.shape
        state = GramState(n=n, X=X, kernel="linear", debiased=debiased, mode="feature")
        total = np.zeros(d)
        for start in range(0, n, FEATURE_CHUNK_ROWS):
            total += X[start:start + FEATURE_CHUNK_ROWS].astype(np.float64).sum(axis=0)
        state.mean = total / n
        if not debiased and n > FEATURE32_CKA_MIN_N:
            state.float32 = True
            fro = 0.0
            for start in range(0, n, FEATURE_CHUNK_ROWS):
                C = state.centred(start, min(n, start + FEATURE_CHUNK_ROWS))
                fro += float(np.einsum("ij,ij->", C, C))
            # rounded up by the float64 sum's own bound (γ_{Nd}): an upper bound on ||Xc||_F
            state.fro = float(np.sqrt(fro * (1 + 1.01 * n * d * _U64)))
        if debiased:
            k = np.empty(n)
            col = np.zeros(d)  # Xc^T 1: zero up to rounding, kept so the identity is exact
            for start in range(0, n, FEATURE_CHUNK_ROWS):
                stop = min(n, start + FEATURE_CHUNK_ROWS)
                C = state.centred(start, stop)
                k[start:stop] = np.einsum("ij,ij->i", C, C)
                col += C.sum(axis=0)
            sums = np.empty(n)
            for start in range(0, n, FEATURE_CHUNK_ROWS):
                stop = min(n, start + FEATURE_CHUNK_ROWS)
                sums[start:stop] = state.centred(start, stop) @ col - k[start:stop]
            state.diag_k, state.row_sum, state.total = k, sums, float(sums.sum())
        return state

    def score_block(self, states_a, states_b, **_):
        n = states_a[0].n
        for s in list(states_a) + list(states_b):
            if s.n != n:
                raise ValueError(f"X and Y must have the same number of rows (items): got {n} and {s.n}")
        debiased = states_a[0].debiased
        mode = states_a[0].mode
        if mode == "packed":
            cross = _packed_scores(states_a, states_b)
            self_a = np.array([s.inner_self() for s in states_a])
            self_b = np.array([s.inner_self() for s in states_b])
        elif mode == "feature" and all(s.float32 for s in list(states_a) + list(states_b)):
            return _feature32_scores(states_a, states_b)
        elif mode == "feature":
            # pairs several at once on threads of our own, each product on one BLAS thread
            threads = blas_threads()
            with one_blas_thread():
                pairs = [(a, b) for a in states_a for b in states_b]
                cross = np.array(thread_map(lambda ab: _feature_cross(*ab), pairs, threads))
                cross = cross.reshape(len(states_a), len(states_b))
                thread_map(GramState.inner_self, list({id(s): s for s in list(states_a) + list(states_b)}.values()),
                           threads)
            self_a = np.array([s.inner_self() for s in states_a])
            self_b = np.array([s.inner_self() for s in states_b])
        else:
            cross, self_a, self_b = self._blocks(states_a, states_b)
        if debiased:
            ta = np.array([s.total for s in states_a])
            tb = np.array([s.total for s in states_b])
            ra = np.stack([s.row_sum for s in states_a])
            rb = np.stack([s.row_sum for s in states_b])

            def hsic_u(trace, sa, sb, dot):
                return (trace + sa * sb / ((n - 1) * (n - 2)) - 2.0 * dot / (n - 2)) / (n * (n - 3))

            cross = hsic_u(cross, ta[:, None], tb[None, :], gram_inner(ra, rb))
            self_a = hsic_u(self_a, ta, ta, gram_self(ra))
            self_b = hsic_u(self_b, tb, tb, gram_self(rb))
        denom = np.sqrt(np.outer(self_a, self_b))
        with np.errstate(invalid="ignore", divide="ignore"):
            out = cross / denom
        # a constant representation has zero self-HSIC: CKA is undefined there, report 0
        return np.where(denom > 0, out, 0.0)

    @staticmethod
    def _blocks(states_a, states_b):
        """Cross and self inner products from row blocks rebuilt into one reused buffer per side."""
        n = states_a[0].n
        la, lb = len(states_a), len(states_b)
        cross = np.zeros((la, lb))
        self_a = np.zeros(la)
        self_b = np.zeros(lb)
        step = gram_row_step(n)
        # one reused buffer per side: fresh N x N allocations per layer cost more than the gemms
        buf_a = np.empty((la, step * n))
        # a self-grid (one model against itself) builds each block once
        buf_b = buf_a if states_b is states_a else np.empty((lb, step * n))
        sides = ((states_a, buf_a),) if buf_b is buf_a else ((states_a, buf_a), (states_b, buf_b))
        threads = blas_threads()
        # every product on one BLAS thread, so a cell's bits do not depend on the pool (a grid's
        # cells are analyze's; a 1-D dot on two threads sums in another order), each step's
        # layer blocks several at once on threads of our own
        with one_blas_thread():
            for start in range(0, n, step):
                stop = min(n, start + step)
                width = (stop - start) * n
                thread_map(lambda job: job[0].block_into(start, stop, job[1][:width].reshape(stop - start, n)),
                           [(s, buf[i]) for states, buf in sides for i, s in enumerate(states)], threads)
                Ga, Gb = buf_a[:, :width], buf_b[:, :width]
                cross += gram_inner(Ga, Gb if buf_b is not buf_a else Ga)
                sa = gram_self(Ga)
                self_a += sa
                self_b += sa if buf_b is buf_a else gram_self(Gb)
        return cross, self_a, self_b


_CKA = CkaKernel()


def cka(X, Y, *, kernel: str = "linear", debiased: bool = False, sigma: float = 1.0) -> float:
    """Centred kernel alignment between two representations of the same items.

    Args:
        X: ``(N, p)``; Y: ``(N, q)``; rows are the same items.
        kernel: ``"linear"`` (``K = X X^T``) or ``"rbf"`` (``K = exp(-||x-y||^2 / (2 s^2))`` with
            ``s = sigma * median pairwise distance`` of that space).
        debiased: use the unbiased HSIC of Song et al. (2012) (needs N > 3) instead of the biased
            ``tr(K H L H)``.
    Returns:
        ``HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L))``; biased CKA lies in ``[0, 1]``, debiased can
        dip slightly below 0. Higher is more similar. Linear CKA is invariant to orthogonal maps
        and isotropic scaling of either space.
    Reference: Kornblith et al. (2019), Similarity of Neural Network Representations Revisited.

    >>> import numpy as np; X = np.random.default_rng(0).normal(size=(50, 8))
    >>> Q = np.linalg.qr(np.random.default_rng(1).normal(size=(8, 8)))[0]  # a rotation
    >>> round(cka(X, 3 * X @ Q), 12)  # invariant to rotation and isotropic scaling
    1.0
    """
    # float32 stays float32: each form widens what it needs (no N x d float64 copy at large N)
    X = as_matrix(X, "X", dtype=None)
    Y = as_matrix(Y, "Y", dtype=None)
    check_paired(X, Y)
    return _CKA.one_pair(X, Y, kernel=kernel, debiased=debiased, sigma=sigma)
