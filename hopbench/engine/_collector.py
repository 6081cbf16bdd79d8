"""Python's cyclic garbage collector during a run: thresholds, freezing, pauses measured.

Role: keep the collector's pauses short and visible. A full collection scans
every tracked object in the process; its pause grows with everything alive
(about 70 tracked objects per stream in flight: ~150,000 at 2,000 streams,
100-800 ms per full collection on a shared 2-core machine, benchmarks/bench_gc.py).

What keeps the pauses short (issue 16 item 5; figures in benchmarks/README.md,
"Collector pauses"):

- No cyclic garbage per stream: a finished stream is freed by reference
  counting alone (the runner breaks httpx's response <-> body-stream cycle,
  ``hopbench.measure._hdr`` hdrh's histogram <-> encoder one). Before, every stream left
  ~30 objects only the collector could free, and it did so in full scans.
- Start-up objects frozen on entry (``gc.freeze``): modules, classes, the
  profile, the client (~40,000 here) leave every later scan.
- Long-lived state frozen again once set up (``freeze_now``, called by the
  runner when the ramp-up ends): the users, their connections and the run's
  machinery then leave the scans too. What was frozen and later becomes
  cyclic garbage would only be freed on exit (everything is thawed then): with
  no cycles per stream that is at most the few cycles alive at that moment.
- Thresholds ``THRESHOLDS`` = (700, 10, 100) instead of CPython's (700, 10,
  10): full collections 10 times rarer, on top of CPython's own rule (a full
  collection only when the objects promoted since the last one exceed 25 % of
  those that survived it); with no cyclic garbage per stream, little waits
  for them. Young collections keep their size: a young threshold of 2,000
  made the middle generation's collections 2x longer (p99 31 ms of CPU
  against 14 ms at 2,000 streams, benchmarks/bench_gc.py). A first version of this module moved every collection to the
  interval's end; with faults that let ~1.7 MB/s of uncollected cycles pile up
  and paused 70-280 ms: collections keep CPython's allocation-driven pace.

Invariants:
- Inside ``CollectorWatch``: what was alive on entry is frozen; thresholds as
  configured; CPython's automatic collection runs.
- On exit the process's collector is as it was (thresholds, enabled or not,
  nothing frozen by us), and a run that raises still restores it.
- Pauses are measured with ``gc.callbacks`` (any thread): count, total,
  longest and p99, integer ns; the generator section of summary.json reports
  them (docs/results.md).
"""

from __future__ import annotations

import gc
import time
from array import array
from types import TracebackType
from typing import Any

__all__ = ["CollectorWatch", "THRESHOLDS"]

THRESHOLDS: tuple[int, int, int] = (700, 10, 100)
"""``gc.set_threshold`` values inside a run (CPython's default: 700, 10, 10)."""


class CollectorWatch:
    """Context manager: tune, freeze and measure the cyclic collector for a run.

    Args:
        thresholds: ``gc.set_threshold`` values while inside (None: leave them).

    Attributes:
        collections: collections run while inside (any generation, any thread).
        pause_ns: their total duration, integer ns.
        pause_max_ns: the longest one, integer ns.
        frozen_late: objects frozen by ``freeze_now`` and still frozen (0 until
            it is called; counted when read).
    """

    def __init__(self, thresholds: tuple[int, int, int] | None = THRESHOLDS) -> None:
        self.thresholds = thresholds
        self.collections = 0
        self.pause_ns = 0
        self.pause_max_ns = 0
        self._froze_late = False
        self._frozen_entry: int | None = None  # frozen objects once entered (after its freeze)
        self._pauses = array("q")  # every pause, ns (8 bytes each)
        self._t0 = 0
        self._frozen_before = 0
        self._old_thresholds: tuple[int, ...] = gc.get_threshold()

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter_ns()
            return
        d = time.perf_counter_ns() - self._t0
        self.collections += 1
        self.pause_ns += d
        self._pauses.append(d)
        if d > self.pause_max_ns:
            self.pause_max_ns = d

    def pause_percentile_ns(self, p: float) -> int:
        """The ``p``-th percentile (0-100, nearest rank) of the pauses so far, ns; 0 without any."""
        values = sorted(self._pauses)
        if not values:
            return 0
        rank = max(1, -(-len(values) * p // 100))
        return values[min(int(rank), len(values)) - 1]

    def freeze_now(self) -> None:
        """Freeze everything alive now (the run's long-lived state, once it is set
        up): later collections no longer scan it. Thawed on exit.

        O(1) (CPython moves whole generation lists): called on the event loop.
        It counted the frozen objects before and after (``gc.get_freeze_count``
        walks every frozen object: ~7 ms of GIL here, an open loop's arrivals
        due meanwhile left that late); ``frozen_late`` counts them when read."""
        if self._frozen_entry is None:
            self._frozen_entry = gc.get_freeze_count()  # (not entered: counted now)
        gc.freeze()
        self._froze_late = True

    @property
    def frozen_late(self) -> int:
        """Objects frozen by ``freeze_now`` and still frozen now (0 until it is
        called); counted when read, a walk of every frozen object (ms)."""
        if not self._froze_late or self._frozen_entry is None:
            return 0
        return max(gc.get_freeze_count() - self._frozen_entry, 0)

    def __enter__(self) -> CollectorWatch:
        gc.collect()  # before freezing: frozen garbage would never be freed
        self._frozen_before = gc.get_freeze_count()
        gc.freeze()
        self._frozen_entry = gc.get_freeze_count()  # (before the run: a walk of them all)
        self._old_thresholds = gc.get_threshold()
        if self.thresholds is not None:
            gc.set_threshold(*self.thresholds)
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            gc.callbacks.remove(self._callback)
        except ValueError:
            pass
        gc.set_threshold(*self._old_thresholds)
        if self._frozen_before == 0:  # nothing was frozen before us: thaw everything
            gc.unfreeze()
