"""Centred kernel alignment (CKA), linear or RBF, with biased or unbiased HSIC.

Grids never hold N x N per pair: each layer's (centred or diagonal-free) Gram matrix is produced
in row blocks, flattened, and all layer pairs are contracted at once with one gemm per block.

Precision (why CKA stays float64 while k-NN runs in float32): CKA is a ratio of traces
``<K~, L~>_F = sum_ij K~_ij L~_ij`` over all N^2 entries. In float32 each Gram entry carries a
relative error up to ``γ_d ≈ d·u32`` (768·6e-8 ≈ 4.6e-5, worse after centring a large mean: the
error scales with ``||x||^2`` while the centred entry scales with the spread), and the N^2-term sum
adds up to ``γ_{N^2}`` more (pairwise BLAS sums grow like ``log N`` in practice, but the
rigorous bound for N = 1e4 is already > 1). Unlike a neighbour list, a trace has no discrete
answer a cheap float64 pass could certify, so the only way to an answer good to ~1e-12 is to
form the Gram blocks in float64 (``γ_d(u64) ≈ 8.5e-14``). Memory: one float64 copy of each layer
(``L·N·d·8`` bytes) plus ``GRAM_BLOCK_ENTRIES`` per layer of block buffer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import neighbors
from ..validation import as_matrix, check_paired, check_positive
from .base import PairKernel, gram_inner, gram_self

KERNELS = ("linear", "rbf")


#: Largest N whose whole kernel a prepared layer keeps (8 MB per layer at N = 1024, the papers' N).
GRAM_CACHE_MAX_N = 1024

#: Entries of one layer's Gram row block (8 MB): small enough that the per-layer blocks of a
#: whole model stay in a reused buffer instead of N x N per layer.
GRAM_BLOCK_ENTRIES = 1 << 20


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
    """Per-layer pieces from which any row block of the layer's kernel matrix is rebuilt."""

    X: np.ndarray  # (N, d): centred for linear-biased (exact H K H = Xc Xc^T), raw otherwise
    kernel: str
    debiased: bool
    gamma: float = 0.0  # RBF: exp(-gamma * ||x - y||^2)
    sq_norms: np.ndarray | None = None
    row_mean: np.ndarray | None = None  # biased centring: K 1 / N
    grand_mean: float = 0.0  # biased centring: mean of all entries of K
    total: float = 0.0  # debiased: sum of all entries of K~
    row_sum: np.ndarray | None = None  # debiased: K~ 1
    # the whole HSIC kernel (N, N), kept after its first use when N <= GRAM_CACHE_MAX_N, so a
    # layer scored against many partners (the study engine's grids) builds its Gram matrix once
    cached: np.ndarray | None = field(default=None, repr=False)

    @property
    def n(self) -> int:
        return self.X.shape[0]

    def raw_block(self, start: int, stop: int) -> np.ndarray:
        if self.kernel == "linear":
            return self.X[start:stop] @ self.X.T
        d = self.sq_norms[start:stop, None] + self.sq_norms[None, :] - 2.0 * (self.X[start:stop] @ self.X.T)
        r = np.arange(stop - start)
        d[r, r + start] = 0.0  # exact zero self-distance, so k(x, x) = 1 exactly
        return np.exp(-self.gamma * np.maximum(d, 0.0))

    def block_into(self, start: int, stop: int, out: np.ndarray) -> None:
        """Write rows ``start:stop`` of the HSIC kernel into ``out`` ``(stop-start, N)``.

        Small layers (N <= :data:`GRAM_CACHE_MAX_N`) build the whole kernel once, block by block
        with the very same row steps, and copy from it afterwards: the same numbers, built once."""
        if self.n <= GRAM_CACHE_MAX_N:
            if self.cached is None:
                full = np.empty((self.n, self.n))
                step = gram_row_step(self.n)
                for b0 in range(0, self.n, step):
                    self._compute_into(b0, min(self.n, b0 + step), full[b0:min(self.n, b0 + step)])
                self.cached = full
            out[...] = self.cached[start:stop]
            return
        self._compute_into(start, stop, out)

    def _compute_into(self, start: int, stop: int, out: np.ndarray) -> None:
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


class CkaKernel(PairKernel):
    def prepare(self, X, *, kernel="linear", debiased=False, sigma=1.0, **_):
        """Per-layer state of one layer ``X`` ``(N, d)``; always float64 (see the module docstring)."""
        # X was validated by the caller (the public function or layer_grid); float32 layers of a
        # grid are widened here, one layer at a time
        X = np.asarray(X, dtype=np.float64)
        if kernel not in KERNELS:
            raise ValueError(f"cka kernel must be one of {KERNELS}, got {kernel!r}")
        n = X.shape[0]
        if debiased and n <= 3:
            raise ValueError(f"debiased CKA needs N > 3 items, got N={n}")
        if kernel == "linear" and not debiased:
            # H K H = Xc Xc^T: centring features is exact and avoids float cancellation when the
            # mean is large against the spread (common in LLM hidden states)
            return GramState(X=X - X.mean(axis=0), kernel=kernel, debiased=False)
        state = GramState(X=X, kernel=kernel, debiased=debiased)
        if kernel == "rbf":
            check_positive(sigma, "sigma")
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
        return state

    def score_block(self, states_a, states_b, **_):
        n = states_a[0].n
        for s in list(states_a) + list(states_b):
            if s.n != n:
                raise ValueError(f"X and Y must have the same number of rows (items): got {n} and {s.n}")
        debiased = states_a[0].debiased
        la, lb = len(states_a), len(states_b)
        cross = np.zeros((la, lb))
        self_a = np.zeros(la)
        self_b = np.zeros(lb)
        step = gram_row_step(n)
        # one reused buffer per side: fresh N x N allocations per layer cost more than the gemms
        buf_a = np.empty((la, step * n))
        # a self-grid (one model against itself) builds each block once
        buf_b = buf_a if states_b is states_a else np.empty((lb, step * n))
        for start in range(0, n, step):
            stop = min(n, start + step)
            width = (stop - start) * n
            Ga = buf_a[:, :width]
            for i, s in enumerate(states_a):
                s.block_into(start, stop, Ga[i].reshape(stop - start, n))
            Gb = buf_b[:, :width]
            if buf_b is not buf_a:
                for i, s in enumerate(states_b):
                    s.block_into(start, stop, Gb[i].reshape(stop - start, n))
            cross += gram_inner(Ga, Gb)
            sa = gram_self(Ga)
            self_a += sa
            self_b += sa if buf_b is buf_a else gram_self(Gb)
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
    """
    X = as_matrix(X, "X")
    Y = as_matrix(Y, "Y")
    check_paired(X, Y)
    return _CKA.one_pair(X, Y, kernel=kernel, debiased=debiased, sigma=sigma)
