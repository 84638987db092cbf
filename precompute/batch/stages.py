"""Wall time per named stage of a long command (the demo prints where its time went).

Stages are timed with :func:`time.perf_counter`; a stage entered twice adds up, and a stage entered
inside another counts for itself only (the outer one's time excludes it), so the stages never
overlap and their seconds plus ``other`` (the rest: imports, store checks) add up to the total.
``table()`` lists them in the order first entered, with each one's share of the total.
``cpu_seconds`` counts this process's CPU time (every thread, :func:`time.process_time`) the same
way, so stages compare on a machine that other work slows (child processes are not in it).
"""

from __future__ import annotations

import time
from contextlib import contextmanager


class StageTimer:
    """``with timer.stage("precompute test_of_time"): ...``; ``timer.seconds`` maps stage -> s."""

    def __init__(self, clock=time.perf_counter, cpu_clock=time.process_time):
        self.clock, self.cpu_clock = clock, cpu_clock
        self.t0 = clock()
        self.seconds: dict[str, float] = {}
        self.cpu_seconds: dict[str, float] = {}
        self._inner: list[list[float]] = []  # per open stage: [wall, CPU] seconds of the stages nested in it

    @contextmanager
    def stage(self, name: str):
        self.seconds.setdefault(name, 0.0)
        self.cpu_seconds.setdefault(name, 0.0)
        start, cpu_start = self.clock(), self.cpu_clock()
        self._inner.append([0.0, 0.0])
        try:
            yield
        finally:
            took, cpu = self.clock() - start, self.cpu_clock() - cpu_start
            inner = self._inner.pop()
            self.seconds[name] += took - inner[0]
            self.cpu_seconds[name] += cpu - inner[1]
            if self._inner:
                self._inner[-1][0] += took
                self._inner[-1][1] += cpu

    def total(self) -> float:
        """Wall seconds since the timer started."""
        return self.clock() - self.t0

    def rows(self) -> list[tuple[str, float, float]]:
        """``(stage, seconds, share of the total)`` per stage, then ``other`` (the rest, >= 0)."""
        total = self.total()
        rest = max(0.0, total - sum(self.seconds.values()))
        share = (lambda s: s / total) if total > 0 else (lambda s: 0.0)
        return [(name, s, share(s)) for name, s in [*self.seconds.items(), ("other", rest)]]

    def table(self) -> str:
        """A plain-text table: stage, seconds, % of the total, and a total line."""
        rows = self.rows()
        width = max(len("total"), *(len(name) for name, _, _ in rows))
        lines = [f"{'stage':<{width}}  {'seconds':>8}  {'share':>6}"]
        lines += [f"{name:<{width}}  {s:8.1f}  {100 * p:5.1f}%" for name, s, p in rows]
        lines.append(f"{'total':<{width}}  {self.total():8.1f}  {100.0:5.1f}%")
        return "\n".join(lines)
