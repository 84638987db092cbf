"""Selection-aware null of a grid's best cell: the same maximum under shuffled item pairings.

A best cell is the maximum over ``La × Lb`` cells, so even two unrelated models give a best cell
above the analytic chance ``k/(N−1)``; and real items cluster (several clips of one scene, shared
caption templates), so a random model can reach about twice that chance. The null asked here is: what
does the *grid maximum* reach when the pairing of items between the two sides is random? Each
shuffle re-pairs item ``i`` of side A with item ``π(i)`` of side B and recomputes every cell from
the prepared states (k-NN lists relabelled, packed Grams re-indexed; no embedding or neighbour
search is redone), excludes the same invalid cells the best cell excludes, and keeps the maximum.

* ``p = (1 + #{null max >= observed}) / (1 + n_perm)`` (Phipson & Smyth 2010: never 0, exact
  level under the null), the direction flipped for lower-is-better metrics.
* ``q95``: the null maximum's 95th percentile (for a lower-is-better metric, the null minimum's
  5th percentile): the value a best cell must pass to be beyond selection at α = 0.05.

Grouped shuffles (``groups``: an item's source, e.g. the scene several clips are cut from, or the
pair of a paraphrase) come in two kinds, each a different question:

* ``between`` (the default grouped test, :data:`NULL_KINDS`): whole groups are shuffled as
  exchangeable blocks — the items of one group are re-paired with the items of another group of the
  same size (a random cyclic relabelling of the groups of each size, random order inside a block;
  groups whose size no other group has, and lone items, are pooled and shuffled item by item). The
  near-duplicates of one source never pair with each other, so agreement carried by the groups
  alone (a source's clips cluster in both spaces) survives every shuffle, and a small p says the
  sources themselves are arranged alike in both spaces: alignment beyond chance.
* ``within``: items are shuffled *within* their group (items alone in their group among
  themselves). Everything above the group survives, so a small p says the pairing is aligned
  *inside* sources: "fine-grained alignment within sources", a stricter and different claim
  (near-duplicates swapped for each other barely change a score, so this p is often large even
  when the between-group alignment is strong).

Without groups the shuffles are plain (``kind`` ``"plain"``).

Cost (per pair; reasoned, not measured). A shuffle costs one grid scoring from prepared states plus
relabelling the side with fewer layers: at N = 1024, 13 × 13 layers, k = 10 a k-NN shuffle is 13
gathers and row sorts of ``(N, k)`` lists and 169 list intersections (≈ 2M integer steps, the grid's
own scoring cost), so 200 shuffles are about 200 grid scorings, of the order of the best cell's
bootstrap (200 resamples) and far below preparing a run (13 exact searches, ``O(N² d)`` each). A
packed-CKA shuffle re-indexes 13 half Grams (≈ 0.5M entries each) and contracts 169 of them
(≈ 90M multiply-adds): 200 shuffles are 200 CKA grid contractions, several seconds a pair, the most
expensive null; ``--null-perms`` lowers it, and CKA without a packed kernel is not shuffled at all
(:func:`unshufflable`).

References: Westfall & Young (1993), *Resampling-Based Multiple Testing* (the maximum statistic over
many tests, resampled as a whole, controls for the selection of the best); Phipson & Smyth (2010),
"Permutation p-values should never be zero".
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import numpy as np

#: Shuffles per best cell. 200 resolves p down to 1/201 ≈ 0.005 (ten times under α = 0.05) and puts
#: q95 at the 10th largest of 200 null maxima; a p near 0.05 then has a Monte-Carlo standard error of
#: about sqrt(0.05·0.95/200) ≈ 0.015, as tight as the bootstrap interval's own 200 resamples. Cost is
#: ``n_perm`` grid scorings per pair from prepared states (see :func:`null_maxima`).
NULL_PERMUTATIONS = 200

#: the level a best cell's p must reach to be called alignment beyond chance (q95 is its critical value)
NULL_ALPHA = 0.05

#: bytes of relabelled B-side states one scoring call holds (several shuffles are scored in one
#: kernel call: the k-NN kernels fill their layer groups, CKA its fixed tiles)
NULL_CHUNK_BYTES = 64 << 20


#: the grouped nulls, as sentences name them: the default grouped test first
NULL_KINDS = {"plain": "shuffled pairings", "between": "between-group shuffles (whole sources as blocks)",
              "within": "within-group shuffles (fine-grained alignment within sources)"}


def pairing_permutations(n: int, n_perm: int, *, seed: int = 0, groups=None, kind: str = "between") -> np.ndarray:
    """``(n_perm, n)`` random re-pairings: row ``r`` pairs item ``i`` of A with item ``P[r, i]`` of B.

    ``groups``: optional ``(n,)`` labels; ``kind`` ``"between"`` (default) shuffles whole groups as
    blocks among the groups of their size, ``"within"`` shuffles items within their group, the
    items alone in their group among themselves (see the module docstring). Seeded: one seed gives
    the same shuffles to every pair and metric of N items.
    """
    if n < 2 or n_perm < 1:
        raise ValueError(f"pairing_permutations needs n >= 2 items and n_perm >= 1, got n={n}, n_perm={n_perm}")
    if kind not in ("between", "within"):
        raise ValueError(f"kind must be 'between' or 'within', got {kind!r}")
    rng = np.random.default_rng(seed)
    if groups is None:
        return np.argsort(rng.random((n_perm, n)), axis=1)
    groups = np.asarray(groups)
    if groups.shape != (n,):
        raise ValueError(f"groups must hold one label per item ({n}), got shape {groups.shape}")
    if kind == "between":
        return _between_groups(rng, groups, n_perm)
    _, label, size = np.unique(groups, return_inverse=True, return_counts=True)
    label = np.where(size[label] == 1, -1, label)  # the singletons form one pool
    out = np.empty((n_perm, n), dtype=np.int64)
    # sort by (group, random key): each group's positions get its own members in random order
    keys = rng.random((n_perm, n))
    order = np.lexsort((np.broadcast_to(np.arange(n), (n_perm, n)), keys, np.broadcast_to(label, (n_perm, n))),
                       axis=-1)
    home = np.argsort(label, kind="stable")  # the positions of each group, in group order
    out[:, home] = order
    return out


def _between_groups(rng, groups: np.ndarray, n_perm: int) -> np.ndarray:
    """Block shuffles: per size s, the m >= 2 groups of s items are relabelled by a random m-cycle
    (no group keeps its own items), each block's items in random order; the items of groups whose
    size is unique (lone items included) are pooled and shuffled item by item."""
    n = len(groups)
    _, label, size = np.unique(groups, return_inverse=True, return_counts=True)
    order = np.argsort(label, kind="stable")
    members = np.split(order, np.cumsum(size)[:-1])  # each group's item positions, in position order
    by_size: dict[int, list[int]] = {}
    for g, s in enumerate(size):
        by_size.setdefault(int(s), []).append(g)
    blocks = {s: np.stack([members[g] for g in gids]) for s, gids in by_size.items() if len(gids) >= 2}
    pool = np.concatenate([members[g] for s, gids in by_size.items() if len(gids) < 2 for g in gids]
                          or [np.empty(0, dtype=np.int64)])
    out = np.empty((n_perm, n), dtype=np.int64)
    for r in range(n_perm):
        for s, M in blocks.items():
            cycle = rng.permutation(len(M))
            target = M[np.roll(cycle, -1)]  # block cycle[j] takes the items of block cycle[j + 1]
            inside = np.argsort(rng.random(target.shape), axis=1)
            out[r, M[cycle]] = np.take_along_axis(target, inside, axis=1)
        if len(pool):
            out[r, pool] = pool[rng.permutation(len(pool))]
    return out


def has_groups(groups) -> bool:
    """Whether ``groups`` marks any item as sharing its group with another (else shuffles are plain)."""
    if groups is None:
        return False
    _, size = np.unique(np.asarray(groups), return_counts=True)
    return bool(np.any(size > 1))


def permuted_state(state, perm: np.ndarray, *, positions: np.ndarray | None = None):
    """The prepared state of the layer's rows taken in order ``perm`` (``X[perm]``), from ``state``.

    k-NN (:class:`analysis.metrics.knn.KnnState`): item i's list is ``inv[idx[perm[i]]]``, sorted,
    with its cosines (when already computed) in the same order; collapsed and tie-decided layers
    stay so (a relabelling keeps every cosine). SVCCA: the basis rows permuted.
    CKA (:class:`analysis.metrics.kernel.GramState`): the packed triangle re-indexed (``K'[i, j] = K[perm i, perm j]``), per-item vectors permuted;
    self terms are unchanged by a relabelling and kept. Exact ties between neighbours may be
    broken differently than a fresh search of ``X[perm]`` would (ties go to the lower index), which
    does not matter for the null: the shuffle is over pairings, the lists are the same sets.
    ``positions``: :func:`packed_positions` of ``perm`` when the caller relabels several packed
    layers by one shuffle (computed here otherwise).
    """
    from analysis.metrics.cca import SvccaState
    from analysis.metrics.kernel import GramState
    from analysis.metrics.knn import KnnState

    perm = np.asarray(perm)
    if isinstance(state, KnnState):
        inv = np.empty_like(perm)
        inv[perm] = np.arange(len(perm))
        idx = inv[state.idx[perm]]
        order = np.argsort(idx, axis=1, kind="stable")
        idx = np.take_along_axis(idx, order, axis=1)
        sim = None
        if "sim" in state.__dict__:  # CKNNA's cosines, already on the state: carried along
            sim = np.take_along_axis(state.sim[perm], order, axis=1)
        # no rows: a shuffle never searches; CKNNA's cosines come along (null_maxima computes them first)
        out = KnnState(idx, None, state.norms[perm], collapsed=state.collapsed, resolved=state.resolved,
                       method=state.method, recall=state.recall, recall_rows=state.recall_rows, sim=sim,
                       tie_decided=state.tie_decided)
        out.cknna_self = state.cknna_self
        return out
    if isinstance(state, GramState):
        per_item = {f: getattr(state, f)[perm] for f in ("X", "sq_norms", "row_mean", "row_sum", "diag_k", "diag")
                    if getattr(state, f) is not None}
        if state.mode == "packed":
            per_item["upper"] = state.upper[packed_positions(perm) if positions is None else positions]
        return dataclasses.replace(state, **per_item)
    if isinstance(state, SvccaState):  # the basis of X[perm] is the basis's rows permuted
        return SvccaState(basis=state.basis[perm])
    raise TypeError(f"no shuffled-pairing null for prepared states of type {type(state).__name__}")


def unshufflable(state) -> str | None:
    """Why shuffles of this prepared state would cost a full grid computation each, or None.

    k-NN lists, SVCCA bases and packed Grams (CKA at ``N <= GRAM_CACHE_MAX_N``) are relabelled in
    ``O(N k)``, ``O(N r)`` and ``O(N²)`` per layer. CKA above that N keeps no kernel (its blocks are
    rebuilt from the rows on every call, or it runs in feature space), so each of the ``n_perm``
    shuffles would redo the whole grid's ``O(L N² d)`` work: the null is skipped there, and said so.
    """
    from analysis.metrics.kernel import GRAM_CACHE_MAX_N, GramState

    if isinstance(state, GramState) and state.mode != "packed":
        return (f"no shuffled-pairing null: CKA at N = {state.n} > {GRAM_CACHE_MAX_N} keeps no packed kernel, "
                "so every shuffle would recompute the whole grid; the analytic chance level stays")
    return None


def packed_positions(perm: np.ndarray) -> np.ndarray:
    """Positions in a packed strict upper triangle (row-major, as ``GramState.pack``) of the
    entries ``K[perm i, perm j]`` for every ``i < j`` of the re-indexed triangle, ``(N(N−1)/2,)``."""
    i, j = _upper_indices(len(perm))
    a, b = perm[i], perm[j]
    n = len(perm)
    lo, hi = np.minimum(a, b), np.maximum(a, b)  # the kernel is symmetric
    return lo * (2 * n - lo - 1) // 2 + (hi - lo - 1)


@lru_cache(maxsize=2)
def _upper_indices(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Row and column of each packed upper-triangle entry (one N per analysis: built once)."""
    i, j = np.triu_indices(n, k=1)
    i.flags.writeable = j.flags.writeable = False
    return i, j


def null_maxima(kernel, states_a, states_b, perms: np.ndarray, *, invalid=None,
                higher_is_better: bool = True) -> np.ndarray:
    """``(n_perm,)`` best value of the grid under each re-pairing ``perms[r]`` of side B's items.

    The grid is rescored by ``kernel.score_block`` from the prepared states (B's relabelled by
    :func:`permuted_state`), so a shuffled cell is the metric of ``A[a]`` against ``B[b][perm]``.
    Cells excluded from the observed best (``invalid``: degenerate layers, as
    :func:`analysis.grid.best_cell` takes it) and non-finite cells are excluded here too; a shuffle
    with no valid finite cell gives NaN. Cost: ``n_perm`` grid scorings plus relabelling ``Lb``
    states per shuffle (``O(N k log k)`` for lists, ``O(N²)`` for a packed Gram); B's states are
    relabelled in chunks of about ``NULL_CHUNK_BYTES`` and scored in one call per chunk.
    """
    from analysis.metrics.knn import Cknna

    perms = np.atleast_2d(np.asarray(perms))
    la, lb = len(states_a), len(states_b)
    mask = np.zeros((la, lb), dtype=bool) if invalid is None else np.broadcast_to(np.asarray(invalid, bool), (la, lb))
    if la < lb:
        # relabel the side with fewer layers: A[perm⁻¹] against B pairs the items exactly as A
        # against B[perm] does (a cell's value is the same up to how exact ties are broken)
        inverse = np.empty_like(perms)
        np.put_along_axis(inverse, perms, np.arange(perms.shape[1])[None, :].repeat(len(perms), 0), axis=1)
        return null_maxima(_Swapped(kernel), states_b, states_a, inverse, invalid=mask.T,
                           higher_is_better=higher_is_better)
    if isinstance(getattr(kernel, "kernel", kernel), Cknna):
        for s in states_b:
            s.sim  # noqa: B018 -- computed once on the prepared state, then carried by every relabelled copy
    per_perm = max(1, _state_bytes(states_b[0]) * lb)
    chunk = max(1, NULL_CHUNK_BYTES // per_perm)
    out = np.full(len(perms), np.nan)
    for c0 in range(0, len(perms), chunk):
        block = perms[c0:c0 + chunk]
        shuffled = []
        for perm in block:
            # one shuffle re-indexes every packed Gram of B the same way: its positions are found once
            pos = packed_positions(perm) if getattr(states_b[0], "mode", None) == "packed" else None
            shuffled += [permuted_state(s, perm, positions=pos) for s in states_b]
        g = np.asarray(kernel.score_block(states_a, shuffled), dtype=np.float64).reshape(la, len(block), lb)
        g = np.where(mask[:, None, :] | ~np.isfinite(g), np.nan, g)
        valid = ~np.all(np.isnan(g), axis=(0, 2))
        fill = -np.inf if higher_is_better else np.inf  # excluded cells never win
        g = np.where(np.isnan(g), fill, g)
        best = g.max(axis=(0, 2)) if higher_is_better else g.min(axis=(0, 2))
        out[c0:c0 + len(block)] = np.where(valid, best, np.nan)
    return out


class _Swapped:
    """The wrapped kernel with its sides swapped: ``score_block(B, A)`` is its ``(A, B)`` grid
    transposed, so :func:`null_maxima` can relabel A in B's place and score each cell as before."""

    def __init__(self, kernel):
        self.kernel = kernel

    def score_block(self, states_b, states_a, **params):
        return np.asarray(self.kernel.score_block(states_a, states_b, **params)).T


def _state_bytes(state) -> int:
    """Bytes one relabelled copy of ``state`` holds (its per-item arrays)."""
    return sum(v.nbytes for v in vars(state).values() if isinstance(v, np.ndarray))


def null_summary(observed: float, maxima: np.ndarray, *, higher_is_better: bool = True,
                 grouped: bool = False, kind: str | None = None) -> dict:
    """``{"p", "q95", "n_perm", "grouped", "kind"}`` of an observed best value against its null maxima
    (``kind``: ``"plain"``, ``"between"`` or ``"within"``, see :data:`NULL_KINDS`).

    ``p = (1 + #{m >= observed}) / (1 + n_perm)`` (``<=`` when lower is better) over all shuffles;
    a shuffle whose grid had no valid cell (NaN) counts as not reaching the observed value. ``q95``:
    the 95th percentile of the finite maxima (5th of the minima when lower is better), NaN if none.
    """
    m = np.asarray(maxima, dtype=np.float64)
    if m.ndim != 1 or m.size == 0:
        raise ValueError(f"null maxima must be a non-empty 1-D array, got shape {m.shape}")
    if not np.isfinite(observed):
        raise ValueError(f"the observed best value must be finite, got {observed!r}")
    finite = m[np.isfinite(m)]
    reach = (finite >= observed) if higher_is_better else (finite <= observed)
    p = (1 + int(np.count_nonzero(reach))) / (1 + m.size)
    q95 = float(np.quantile(finite, 0.95 if higher_is_better else 0.05)) if finite.size else float("nan")
    kind = kind or ("between" if grouped else "plain")
    return {"p": float(p), "q95": q95, "n_perm": int(m.size), "grouped": bool(grouped), "kind": kind}


def null_kind(null: dict) -> str:
    """The kind of a stored null: ``"plain"``, ``"between"`` or ``"within"`` (a grouped null stored
    before kinds were named was a within-group one)."""
    return null.get("kind") or ("within" if null.get("grouped") else "plain")


def null_label(null: dict) -> str:
    """How a sentence names a stored null (:data:`NULL_KINDS`), e.g. "between-group shuffles (whole
    sources as blocks)"."""
    return NULL_KINDS[null_kind(null)]


def beyond_chance(null: dict) -> bool:
    """Whether a stored null ``{"p", ...}`` calls its best cell alignment beyond chance (p <= NULL_ALPHA)."""
    return float(null["p"]) <= NULL_ALPHA


def selection_null(kernel, states_a, states_b, observed: float, *, invalid=None, higher_is_better: bool = True,
                   n_perm: int = NULL_PERMUTATIONS, seed: int = 0, groups=None, kind: str = "between") -> dict:
    """The shuffled-pairing null of a grid's best value (see the module docstring), as stored with
    the best cell: ``{"p": float, "q95": float, "n_perm": int, "grouped": bool, "kind": str}``.

    Args:
        kernel: the metric's :class:`analysis.metrics.base.PairKernel` (paired metrics only).
        states_a, states_b: the prepared layers of the two runs (``La`` and ``Lb`` states of N items).
        observed: the best cell's value (from :func:`analysis.grid.best_cell` with the same ``invalid``).
        invalid: ``(La, Lb)`` cells excluded from the maximum (degenerate layers).
        groups: ``(N,)`` item groups for grouped shuffles (used when some group has 2+ items).
        kind: with groups, ``"between"`` (whole groups as blocks: the default grouped test) or
            ``"within"`` (fine-grained alignment within sources).
    """
    n = states_a[0].n
    grouped = has_groups(groups)
    perms = pairing_permutations(n, n_perm, seed=seed, groups=groups if grouped else None, kind=kind)
    maxima = null_maxima(kernel, states_a, states_b, perms, invalid=invalid, higher_is_better=higher_is_better)
    return null_summary(observed, maxima, higher_is_better=higher_is_better, grouped=grouped,
                        kind=kind if grouped else "plain")
