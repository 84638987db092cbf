"""The two-stage shape every pairwise metric shares: per-layer ``prepare``, then ``score_block``.

A layer×layer grid prepares each layer once (neighbour lists, centred Gram pieces) and then
scores all pairs from the prepared states; the one-pair public functions run the very same two
stages on one layer each, so a grid cell equals the one-pair value exactly.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np


class PairKernel:
    """Base class: subclasses implement ``prepare`` and ``score`` (or a faster ``score_block``)."""

    #: whether ``prepare`` needs paired rows (all pairwise metrics do; unpaired ones don't)
    paired: bool = True

    def prepare(self, X: np.ndarray, **params) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def score(self, sa: Any, sb: Any, **params) -> float:  # pragma: no cover - interface
        raise NotImplementedError

    def score_block(self, states_a: Sequence[Any], states_b: Sequence[Any], **params) -> np.ndarray:
        """``(len(states_a), len(states_b))`` scores; the default loops over pairs."""
        out = np.empty((len(states_a), len(states_b)), dtype=np.float64)
        for i, sa in enumerate(states_a):
            for j, sb in enumerate(states_b):
                out[i, j] = self.score(sa, sb, **params)
        return out

    def prepares_in_threads(self, params: dict, n: int) -> bool:
        """Whether ``prepare`` may run for several layers of ``n`` rows at once on threads of our
        own, BLAS held at one thread (:func:`prepare_on_threads`): its work is BLAS products and
        numpy or compiled loops, with no thread pool of its own. Default: no."""
        return False

    def one_pair(self, X: np.ndarray, Y: np.ndarray, **params) -> float:
        sa, sb = prepare_on_threads(self, [X, Y], params)
        return float(self.score_block([sa], [sb], **params)[0, 0])


def prepare_on_threads(kernel: PairKernel, layers, params: dict, before=None) -> list:
    """``[kernel.prepare(before(X), **params) for X in layers]`` (``before``: None, or a per-layer
    transform), several layers at once on threads of our own where the kernel allows it
    (:meth:`PairKernel.prepares_in_threads`) and the BLAS pool has more than one thread: as many
    threads as the pool, BLAS held at one (:func:`one_blas_thread`; one inside ``analyze``, so it
    prepares as before). A layer's preparation at N = 1024 is a BLAS product followed by work BLAS
    does not spread (selections, centring, packing), and a two-thread product of that size gains
    little; two layers at a time on one BLAS thread each kept both cores busy: CKA's 24 layers
    0.91 → 0.46 s, the k-NN search's 0.88 → 0.45 s, quiet, and as much with a spinning process
    beside (2-core VM; ``bench/grid.py`` measures the grids). A state is what a one-thread
    preparation gives (``analyze``'s). Memory: the temporaries of as many layers as threads."""
    layers = list(layers)
    one = (lambda X: kernel.prepare(X, **params)) if before is None else \
        (lambda X: kernel.prepare(before(X), **params))
    threads = blas_threads()
    if threads > 1 and len(layers) > 1 and kernel.prepares_in_threads(params, layers[0].shape[0]):
        with one_blas_thread():
            return thread_map(one, layers, threads)
    return [one(X) for X in layers]


class FunctionKernel(PairKernel):
    """Wraps a plain ``f(X, Y, **params)`` whose only per-layer work is trivial (e.g. normalising)."""

    def __init__(self, fn, *, paired: bool = True):
        self.fn = fn
        self.paired = paired

    def prepare(self, X, **params):
        return X

    def score(self, sa, sb, **params):
        return float(self.fn(sa, sb, **params))


#: Layers per gemm tile. Every contraction runs on tiles of this fixed shape. 32 rows, not 8: an
#: 8×8 tile product does 1 flop per byte it reads, so the grouped CKA calls of ``analyze`` ran at
#: the speed of memory. 117×156 packed Grams of N = 1024 (two rounds): 1.46–1.67 s with 8-row tiles
#: of 8192 columns, 0.78–1.04 s with 32-row tiles of 2048 (the same 512 KB per tile buffer). The
#: price is padding: a lone 13×13 pair 34–40 → 50–60 ms, a 1×1 call 5 → 25–34 ms; 24×24 the same.
TILE = 32

#: Columns per contraction step; fixed, so partial sums always add up in the same order.
K_CHUNK = 1 << 11

_BLAS = None
_BLAS_MODULES = -1


class _Hold:
    """Pools of one scope held at one thread: how many holders, and the limits to undo."""

    __slots__ = ("holders", "paths", "limiters")

    def __init__(self):
        self.holders = 0
        self.paths: set[str] = set()  # libraries held now
        self.limiters: list = []  # threadpoolctl limiters, undone last first


_HOLD = threading.Lock()
_process = _Hold()  # pools of the whole process: OpenBLAS on pthreads (numpy's, scipy's)
_this_thread = threading.local()  # pools each thread sets for itself: OpenMP, OpenBLAS on OpenMP


@contextlib.contextmanager
def one_blas_thread(*, openmp: bool = False):
    """A context holding the BLAS pools to one thread (``openmp=True``: the OpenMP pools too, faiss
    loaded first): around the tile products, each layer's CKA Gram, layers prepared on threads of
    our own (:func:`prepare_on_threads`), a blocked k-NN search's own threads; with ``openmp``, a
    whole ``analyze``, its small layers and its maps and clusterings.

    A ``(TILE, K_CHUNK)`` tile product is ~4 Mflop (a tenth of a millisecond): a second BLAS
    thread saves little on it and must meet the first after every call, which on a machine with
    anything else running means waiting for a descheduled thread each time (the contractions of a
    24x24 packed CKA grid took ten times longer on two threads than on one with other work beside;
    ``bench/grid.py --busy`` measures it). One thread everywhere also makes a product's bits
    independent of the pool's size: OpenBLAS rounds some shapes differently on two threads (a
    32 x 1000 x 32 tile product, the 300 x 300 Gram of 13 features differed in the last bits), so a
    grid computed outside ``analyze`` could differ from ``analyze``'s (one thread) by ~1e-17; now
    every caller gets ``analyze``'s bits. OpenMP pools (scikit-learn's k-means and t-SNE, faiss's
    search) give the same results on one thread, and on small inputs a second one mostly waits.

    Re-entrant and shared by threads, taken on any thread (a Streamlit page runs on a script thread
    of its own). Two kinds of pool: OpenBLAS built on pthreads has one pool for the whole process,
    held by all holders together: the first holder on any thread sets it to one, the last one out
    restores it as it was found, both through :func:`_setting_the_pool` (without which
    threadpoolctl drops a count set from a thread other than the one that set one first). OpenMP
    runtimes, and OpenBLAS built on OpenMP (faiss's), keep a count per calling thread: each thread
    holds its own, first in, last out, so a hold covers the work of the thread that takes it
    (threads started inside get the runtime's default). threadpoolctl's own limits, nested on
    several threads, could restore the pool while another thread still relied on one thread, and
    leave it at one thread after.

    A library loaded while a hold is on (a first k-means loads scikit-learn's OpenMP runtime) is
    held from the next holder's entry on and restored with the rest when the last one leaves;
    ``openmp`` loads faiss first (:func:`load_pooled_libraries`), whose pools a search inside the
    hold would otherwise run on every core. Finding the libraries costs milliseconds, so it is
    done again only when a module was imported since (:func:`_controller`); holding them costs
    microseconds.
    """
    if openmp:
        load_pooled_libraries()
    apis = ("blas", "openmp") if openmp else ("blas",)
    shared, own = _pools(apis)
    mine = getattr(_this_thread, "hold", None)
    if mine is None:
        mine = _this_thread.hold = _Hold()
    with _HOLD:
        _take(_process, shared, _setting_the_pool)
    try:
        _take(mine, own, _call)
    except BaseException:
        with _HOLD:
            _leave(_process, _setting_the_pool)
        raise
    try:
        yield
    finally:
        try:
            _leave(mine, _call)
        finally:
            with _HOLD:
                _leave(_process, _setting_the_pool)


def _take(hold: _Hold, libs, set_pool) -> None:
    """One more holder of ``hold``; the libraries of ``libs`` (``(controller, paths)``) it does
    not hold yet set to one thread."""
    controller, paths = libs
    new = [p for p in paths if p not in hold.paths]
    if new:
        hold.limiters.append(set_pool(lambda: controller.select(filepath=new).limit(limits=1)))
        hold.paths.update(new)
    hold.holders += 1


def _leave(hold: _Hold, set_pool) -> None:
    """One holder fewer; the last one restores every library ``hold`` set, last set first."""
    hold.holders -= 1
    if hold.holders == 0:
        limiters, hold.limiters, hold.paths = hold.limiters, [], set()
        for limiter in reversed(limiters):
            set_pool(limiter.restore_original_limits)


def _call(set_pool):
    return set_pool()


def _per_thread(lib) -> bool:
    """Whether a library's thread count belongs to the calling thread: OpenMP runtimes (libgomp,
    libomp: ``omp_set_num_threads`` sets the caller's own count) and BLAS built on OpenMP."""
    return lib.user_api == "openmp" or getattr(lib, "threading_layer", None) == "openmp"


def _pools(apis):
    """``((controller, process-wide paths), (controller, per-thread paths))`` of the loaded
    libraries of ``apis``."""
    controller = _controller()
    libs = [lib for lib in controller.lib_controllers if lib.user_api in apis]
    return ((controller, [lib.filepath for lib in libs if not _per_thread(lib)]),
            (controller, [lib.filepath for lib in libs if _per_thread(lib)]))


def load_pooled_libraries() -> None:
    """Import the libraries the analysis loads lazily that bring thread pools of their own (faiss:
    its OpenBLAS and OpenMP), so that a limit set now covers them. threadpoolctl limits only the
    libraries loaded when it looks: faiss imported later searched on every core while the analysis
    held one (many small k-NN searches on a busy machine then spend most of their time in OpenMP
    waits; bench/README.md keeps the timings)."""
    from analysis.metrics.neighbors_faiss import faiss_module

    faiss_module()  # None where faiss is not installed: nothing to load


def _setting_the_pool(set_pool):
    """``set_pool()`` with this thread as the one threadpoolctl lets set OpenBLAS's thread count,
    given up after.

    OpenBLAS built on pthreads (numpy's and scipy's wheels) has one pool for the whole process and
    takes a count from any thread; threadpoolctl (3.8) passes one on only from the thread that set
    a count first, until that thread leaves a ``with threadpool_limits`` block or ends, and silently
    drops the others'. A limit set outside such a block (``ThreadpoolController.limit``, a pool
    worker's ``threadpool_limits(1)``) keeps that role on its thread for good: a hold once taken on
    the main thread then did nothing on any other (a Streamlit page's script thread, our own
    threads), whose products ran on the whole pool and rounded as two threads round. Taking the role
    for the call and giving it up after leaves no thread holding it. threadpoolctl before 3.7 has
    no such role: the call alone."""
    try:
        from threadpoolctl import OpenBLASController

        give_up = OpenBLASController.clear_controlling_thread
    except (ImportError, AttributeError):
        return set_pool()
    give_up(force=True)
    try:
        return set_pool()
    finally:
        give_up()  # only if this thread has it: another may have taken it since


def _controller():
    """threadpoolctl's view of the loaded libraries, found again only when a module was imported
    since it was made (a library with a thread pool comes with an import: faiss, scikit-learn's
    OpenMP runtime), as threadpoolctl's own cached controller (3.8) does."""
    global _BLAS, _BLAS_MODULES
    modules = len(sys.modules)
    if _BLAS is None or modules != _BLAS_MODULES:
        from threadpoolctl import ThreadpoolController

        _BLAS, _BLAS_MODULES = ThreadpoolController(), len(sys.modules)
    return _BLAS


def blas_threads() -> int:
    """The BLAS pool's size as it is now: one inside ``analyze`` (which holds one thread) and in
    its workers, the machine's cores elsewhere."""
    counts = [lib["num_threads"] for lib in _controller().select(user_api="blas").info()]
    return max(1, min(counts)) if counts else 1


def thread_map(fn, items, threads: int | None = None) -> list:
    """``[fn(x) for x in items]``, on ``threads`` threads of our own (default :func:`blas_threads`,
    so per-pair work never takes more cores than the products before it). For compiled kernels and
    products that release the GIL; each call computes what it would alone, so results do not depend
    on the thread count. No pool for one thread or one item."""
    items = list(items)
    threads = blas_threads() if threads is None else max(1, int(threads))
    if threads <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(threads, len(items))) as pool:
        return list(pool.map(fn, items))


def tiled_inner(vecs_a: Sequence[np.ndarray], vecs_b: Sequence[np.ndarray]) -> np.ndarray:
    """``(len(vecs_a), len(vecs_b))`` inner products ``<a, b>`` of equal-length 1-D float64 vectors.

    BLAS picks its kernel and summation order from the operand shapes (a 1-row operand goes to
    dot/gemv, small products to a "small matrix" kernel), so the same cell can differ in the last
    bits between a 1x1 and a 24x24 call. Every product here runs on zero-padded ``(TILE, K_CHUNK)``
    tiles, accumulated chunk by chunk in a fixed order, so a cell depends only on its two vectors
    and one-pair calls and grid cells agree exactly.

    Speed: each column chunk of every vector is copied once per call into small reused tile
    buffers that stay in cache (no stacked or padded copy of the whole vectors); a self-product
    (``vecs_b is vecs_a``) reuses the same buffers. Cost ``2·ceil(La/32)·ceil(Lb/32)·1024·M`` flops and
    one read of every vector. Measured with N = 1024 packed Gram vectors (524,800 entries): 117×156
    layers 0.78–1.04 s, 24×24 ~0.1 s, 13×13 50–60 ms, 1×1 25–34 ms (one padded tile).
    """
    return tiled_inner_self(vecs_a, vecs_b, selves=False)[0]


def tiled_inner_self(vecs_a: Sequence[np.ndarray], vecs_b: Sequence[np.ndarray], *, selves: bool = True):
    """``(tiled_inner(vecs_a, vecs_b), tiled_self(vecs_a), tiled_self(vecs_b))`` bit for bit, in
    one pass over the vectors (``selves=False``: the self terms are None).

    The contraction reads every vector once per call; at 24x24 packed Grams of N = 1024 that read
    (192 MB), not the flops, sets its time, and the self terms' own pass read it all again. Here each
    chunk, once in the tile buffers, also feeds the diagonal tile products of :func:`tiled_self`
    (each tile times its twin): a cell does not depend on its place in the tile, so the values are
    those of the separate calls. A self-product (``vecs_b is vecs_a``) takes its self terms from the
    diagonal of the cross product, which is :func:`tiled_self` bit for bit.
    """
    la, lb = len(vecs_a), len(vecs_b)
    ta, tb = -(-la // TILE), -(-lb // TILE)
    same = vecs_b is vecs_a
    own = selves and not same  # self tiles beside the cross tiles
    groups = [vecs_a] if same else [vecs_a, vecs_b]
    cross_pairs = [(0, i, 0 if same else 1, j) for i in range(ta) for j in range(tb)]
    self_pairs = [(0, i, 0, i) for i in range(ta)] + [(1, j, 1, j) for j in range(tb)] if own else []
    sums = _chunked_tile_sums(groups, cross_pairs + self_pairs)
    cross = np.zeros((ta * TILE, tb * TILE))
    for (_, i, _, j), tile in zip(cross_pairs, sums):
        cross[i * TILE : (i + 1) * TILE, j * TILE : (j + 1) * TILE] = tile
    cross = cross[:la, :lb]
    if not selves:
        return cross, None, None
    if same:
        diag = np.diag(cross).copy()
        return cross, diag, diag
    own_sums = sums[len(cross_pairs):]
    return (cross, np.concatenate([np.diag(t) for t in own_sums[:ta]])[:la],
            np.concatenate([np.diag(t) for t in own_sums[ta:]])[:lb])


#: Bytes of per-chunk tile products held between the threads that compute them and the ordered
#: sum (:func:`_chunked_tile_sums`): 4 MiB is ~170 chunks of a 24x24 grid's three tile products
ROUND_BYTES = 1 << 22


def _chunked_tile_sums(groups: Sequence[Sequence[np.ndarray]], pairs: Sequence[tuple]) -> np.ndarray:
    """``(len(pairs), TILE, TILE)``: for each ``(g, i, h, j)``, the product of tile ``i`` of
    ``groups[g]`` (rows ``i·TILE`` to ``(i+1)·TILE`` of its equal-length 1-D float64 vectors,
    zero-padded) with tile ``j`` of ``groups[h]``, transposed, summed over ``K_CHUNK``-column chunks.

    Summation order: each chunk's product is one ``(TILE, K_CHUNK) @ (K_CHUNK, TILE)`` gemm, and the
    chunks' products are added in column order to a running sum that starts at zero, so a cell
    depends only on its two vectors (not on the other rows of its tiles, nor on how many tiles
    there are) and one-pair calls and grid cells agree. A tile times itself (``g == h, i == j``)
    is multiplied by a copy (:func:`_twin`) so it runs the same ``gemm``.

    Speed: the chunks' products, with the copies of each chunk into small reused buffers that stay
    in cache, run on threads of our own (as many as the BLAS pool holds, each product on one BLAS
    thread) in rounds of ``ROUND_BYTES`` of products; the running sum then adds them in order, so
    the bits do not depend on the thread count. A 24x24 packed CKA grid's pass (N = 1024) is
    memory-bound, and on one thread it ran after the layers' preparation had used both cores."""
    threads = blas_threads()
    m = len(groups[0][0]) if groups and len(groups[0]) else 0
    starts = list(range(0, m, K_CHUNK))
    total = np.zeros((len(pairs), TILE, TILE))
    if not pairs or not starts:
        return total
    local = threading.local()
    tiles = [-(-len(g) // TILE) for g in groups]

    def chunk(c: int) -> np.ndarray:
        if not hasattr(local, "bufs"):  # this thread's buffers, zero rows past each group's end
            local.bufs = [np.zeros((t, TILE, K_CHUNK)) for t in tiles]
            local.twin = np.zeros((TILE, K_CHUNK))
        w = min(K_CHUNK, m - c)
        for buf, vecs in zip(local.bufs, groups):
            for r, v in enumerate(vecs):
                buf[r // TILE, r % TILE, :w] = v[c : c + w]
        out = np.empty((len(pairs), TILE, TILE))
        for p, (g, i, h, j) in enumerate(pairs):
            part = local.bufs[g][i, :, :w]
            other = _twin(local.twin, part) if (g, i) == (h, j) else local.bufs[h][j, :, :w]
            np.matmul(part, other.T, out=out[p])
        return out

    per_round = max(threads, ROUND_BYTES // total.nbytes)
    with one_blas_thread():
        for r in range(0, len(starts), per_round):
            for products in thread_map(chunk, starts[r : r + per_round], threads):
                total += products
    return total


def _twin(twin: np.ndarray, part: np.ndarray) -> np.ndarray:
    """A copy of the tile ``part`` in another buffer, laid out as ``part`` is.

    numpy sends ``P @ P.T`` of one buffer to BLAS ``syrk``, every other product to ``gemm``, and
    on some CPUs (measured: OpenBLAS on AMD EPYC) the two round differently in the last bit. A
    diagonal tile multiplied by its own copy runs the same ``gemm`` as every other tile, so a
    self-grid equals the grid of the layers against a copy of themselves bit for bit.
    """
    out = twin[:, : part.shape[1]]
    out[...] = part
    return out


def tiled_self(vecs: Sequence[np.ndarray]) -> np.ndarray:
    """``(len(vecs),)`` self inner products ``<v, v>``: the diagonal of ``tiled_inner(vecs, vecs)``
    bit for bit (the same diagonal tiles, the same chunk order: :func:`_chunked_tile_sums`),
    without its off-diagonal tiles: ``ceil(L/32)`` tile products per chunk instead of
    ``ceil(L/32)²``."""
    la = len(vecs)
    if not la:
        return np.zeros(0)
    sums = _chunked_tile_sums([vecs], [(0, i, 0, i) for i in range(-(-la // TILE))])
    return np.concatenate([np.diag(t) for t in sums])[:la]


def gram_inner(Ga: np.ndarray, Gb: np.ndarray) -> np.ndarray:
    """``Ga @ Gb.T`` for flattened per-layer blocks (rows), computed by :func:`tiled_inner`."""
    rows_a = list(Ga)
    return tiled_inner(rows_a, rows_a if Gb is Ga else list(Gb))


def gram_self(G: np.ndarray) -> np.ndarray:
    """``diag(G @ G.T)``: one 1-D dot per row, a routine that does not depend on how many rows there are."""
    return np.array([np.dot(row, row) for row in G], dtype=G.dtype)
