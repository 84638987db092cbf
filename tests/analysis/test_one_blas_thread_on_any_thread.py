"""``one_blas_thread`` holds OpenBLAS's pool at one thread whichever thread takes it: Streamlit runs a
page on a script thread of its own, and a grid's layers are prepared on threads of our own.

threadpoolctl (3.8) passes a thread count to a pthreads OpenBLAS (one pool for the whole process)
from one thread at a time only, the first that set one, and silently drops the others' counts. The
products compared are 300 x 13 Grams, a shape OpenBLAS rounds differently on one and two threads
(on the 2-core machine), so a hold that does not take shows in the bits as well as in the pool's
size. Expected values: the same product on the main thread under the hold (``analyze``'s bits)."""

import threading

import numpy as np
from threadpoolctl import threadpool_limits

from analysis.metrics import base


def gram(X):
    return X @ X.T


def held_on_a_thread(X):
    """``(pool size, Gram)`` seen inside a hold taken on a fresh thread."""
    out, failed = {}, []

    def run():
        try:
            with base.one_blas_thread():
                out["pool"] = base.blas_threads()
                out["gram"] = gram(X)
        except Exception as exc:  # reported by the caller's assert
            failed.append(exc)

    worker = threading.Thread(target=run, name="ScriptRunner.scriptThread")
    worker.start()
    worker.join(timeout=60)
    assert not failed, failed
    return out["pool"], out["gram"]


def layer():
    return np.random.default_rng(3).normal(size=(300, 13))


def test_a_hold_on_a_thread_takes_after_the_main_thread_held_one_and_left_it():
    X = layer()
    before = base.blas_threads()
    with base.one_blas_thread():  # the main thread computes a grid first
        want = gram(X)
    assert base.blas_threads() == before
    pool, got = held_on_a_thread(X)
    assert pool == 1
    np.testing.assert_array_equal(got, want)
    assert base.blas_threads() == before  # the thread's hold left the pool as it found it


def test_a_hold_on_a_thread_takes_while_the_main_thread_holds_a_limit_of_its_own():
    X = layer()
    with base.one_blas_thread():
        want = gram(X)
    with threadpool_limits(2, user_api="blas"):  # threadpoolctl's role is the main thread's meanwhile
        before = base.blas_threads()
        pool, got = held_on_a_thread(X)
        assert pool == 1
        np.testing.assert_array_equal(got, want)
        assert base.blas_threads() == before
