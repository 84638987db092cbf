"""SIGTERM as an exception: a long command (``layerscope analyze``) that is sent SIGTERM (the
dashboard's Cancel, :func:`analysis.jobs.cancel`; ``kill PID``; a job scheduler) unwinds as it does on
Ctrl-C, records how it ended and exits with :data:`Terminated.EXIT_CODE`, instead of dying where it
stands with its record saying it is still running.

Only the standard library: the command line imports it before any store is opened.
"""

from __future__ import annotations

import contextlib
import signal
import threading


class Terminated(BaseException):
    """SIGTERM stopped the command (the dashboard's Cancel, :func:`analysis.jobs.cancel`; ``kill PID``; a
    job scheduler), raised by :func:`sigterm_raises`. A ``BaseException``, as ``KeyboardInterrupt`` is:
    no ``except Exception`` swallows it. A command it ends exits with :data:`EXIT_CODE`."""

    #: the shells' code for a command ended by SIGTERM, 128 + 15
    EXIT_CODE = 128 + signal.SIGTERM


class SigtermState:
    """What :func:`sigterm_raises` yields: ``received`` turns true when SIGTERM has come."""

    received = False


@contextlib.contextmanager
def sigterm_raises():
    """Within the block, SIGTERM raises :class:`Terminated` in the main thread, as SIGINT raises
    ``KeyboardInterrupt``: transactions roll back and the command can record how it ended, instead of
    dying where it stands. Yields a :class:`SigtermState`.

    - DuckDB runs Python's signal handlers during a query and then reports the query as interrupted
      (``RuntimeError("Query interrupted")``) in place of the handler's exception: whatever leaves the
      block after a SIGTERM is raised again as :class:`Terminated` (from it).
    - A second SIGTERM while the first unwinds is ignored: the command is writing its end (a sender
      that must stop it at once sends SIGKILL).
    - Outside the main thread, or where SIGTERM already has a handler of its own or is ignored,
      nothing changes. The handler before the block is restored after it.
    """
    state = SigtermState()
    previous = None
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        def on_sigterm(signum, frame):
            if state.received:
                return
            state.received = True
            raise Terminated()

        previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield state
    except Terminated:
        raise
    except BaseException as exc:
        if state.received:
            raise Terminated() from exc
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
