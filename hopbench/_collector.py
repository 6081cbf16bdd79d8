"""Python's cyclic garbage collector on the run's clock, not on allocation counts.

Role: keep the collector's pauses away from the moments hopbench measures.
CPython collects a generation when the number of live tracked objects has grown
by a threshold (700 / 10 / 10 by default). A load run grows fastest when it
opens streams, since every new stream's objects survive; so the collections
pile up exactly while first tokens arrive. Measured (benchmarks/bench_run.py,
512 paced streams ramped over 0.5 s): 77 young, 7 middle and 1 full collection
during the ramp, pauses up to 16 ms, TTFT p99 20-80 ms over the server's; with
no automatic collection, 6-7 ms.

Invariants:
- Inside ``ScheduledCollector``: start-up objects (modules, classes, the
  profile, the client) are frozen out of every scan (``gc.freeze``), automatic
  collection is off, and ``tick()`` (once per reporting interval, from the
  runner) collects generation 0, every 10th tick generation 1 and every 100th
  the whole heap: CPython's own 1:10:10 ratios on a clock. Cyclic garbage thus
  waits at most one interval in the young generation; reference counting still
  frees everything else at once.
- On exit the process's collector is as it was (enabled or not, nothing frozen
  by us), and a run that raises still restores it.
- Pauses are measured with ``gc.callbacks``: count, total and longest, integer
  ns; the generator section of summary.json reports them.
"""

from __future__ import annotations

import gc
import time
from types import TracebackType
from typing import Any

__all__ = ["ScheduledCollector"]

#: ticks between collections of generation 1 and of generation 2 (CPython's ratios)
_MIDDLE_EVERY = 10
_FULL_EVERY = 100


class ScheduledCollector:
    """Context manager: collections only when ``tick()`` asks for them.

    Attributes:
        collections: collections run while inside (ours or anyone's).
        pause_ns: their total duration, integer ns.
        pause_max_ns: the longest one, integer ns.
    """

    def __init__(self) -> None:
        self.collections = 0
        self.pause_ns = 0
        self.pause_max_ns = 0
        self._ticks = 0
        self._t0 = 0
        self._was_enabled = True
        self._frozen_before = 0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter_ns()
            return
        d = time.perf_counter_ns() - self._t0
        self.collections += 1
        self.pause_ns += d
        if d > self.pause_max_ns:
            self.pause_max_ns = d

    def __enter__(self) -> ScheduledCollector:
        self._was_enabled = gc.isenabled()
        gc.disable()
        gc.collect()  # before freezing: frozen garbage would never be freed
        self._frozen_before = gc.get_freeze_count()
        gc.freeze()
        gc.callbacks.append(self._callback)
        return self

    def tick(self) -> None:
        """Collect what one interval left: generation 0, 1 or 2 (see module doc)."""
        self._ticks += 1
        k = self._ticks
        gc.collect(2 if k % _FULL_EVERY == 0 else 1 if k % _MIDDLE_EVERY == 0 else 0)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            gc.callbacks.remove(self._callback)
        except ValueError:
            pass
        if self._frozen_before == 0:  # nothing was frozen before us: thaw everything
            gc.unfreeze()
        if self._was_enabled:
            gc.enable()
