"""Python's cyclic garbage collector during a run: start-up objects frozen, pauses measured.

Role: keep the collector's pauses short and visible. A full collection scans
every tracked object in the process; before a run those are mostly start-up
objects (modules, classes, functions, the profile, the client: ~40,000 here)
that live as long as the process. Freezing them (``gc.freeze``) takes them out
of every later scan, so a collection only scans what the run created.

Measured (benchmarks/README.md, "Run engine"): 512 paced streams ramped over
0.5 s triggered 77 young, 7 middle and 1 full collection during the ramp, the
full one 11-16 ms. A first version of this module also moved all collections
to the reporting interval's end; a 125 s run with faults then grew ~1.7 MB/s
of uncollected cycles (broken streams' exceptions and tracebacks) and paused
70-130 ms every 10th interval and 280 ms at the 100th: collections must keep
CPython's own pace (allocation counts), so they stay small.

Invariants:
- Inside ``CollectorWatch``: what was alive on entry is frozen; CPython's
  automatic collection runs as configured (thresholds unchanged).
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

__all__ = ["CollectorWatch"]


class CollectorWatch:
    """Context manager: freeze start-up objects and measure the collector's pauses.

    Attributes:
        collections: collections run while inside (any generation, any thread).
        pause_ns: their total duration, integer ns.
        pause_max_ns: the longest one, integer ns.
    """

    def __init__(self) -> None:
        self.collections = 0
        self.pause_ns = 0
        self.pause_max_ns = 0
        self._t0 = 0
        self._frozen_before = 0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter_ns()
            return
        d = time.perf_counter_ns() - self._t0
        self.collections += 1
        self.pause_ns += d
        self.pause_max_ns = max(self.pause_max_ns, d)

    def __enter__(self) -> CollectorWatch:
        gc.collect()  # before freezing: frozen garbage would never be freed
        self._frozen_before = gc.get_freeze_count()
        gc.freeze()
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            gc.callbacks.remove(self._callback)
        except ValueError:
            pass
        if self._frozen_before == 0:  # nothing was frozen before us: thaw everything
            gc.unfreeze()
