"""The one clock hopbench measures with.

Every stamp in hopbench is an ``int`` of nanoseconds from this clock. It is
trio's clock (``trio.current_time()``), so that schedules (``trio.sleep_until``)
and measurements share one time base and tests can swap in trio's
``MockClock(autojump_threshold=0)`` to make timing exact and instant. trio's
clock carries a random offset: stamps are only meaningful as differences.

Never mix this with ``time.perf_counter()`` or ``time.monotonic_ns()``.
Wall-clock times (report headers) come from ``time.time()`` and are never
subtracted from these stamps.
"""

from __future__ import annotations

import trio

__all__ = ["now_ns", "ns_to_s", "s_to_ns", "NS_PER_MS", "NS_PER_S"]

NS_PER_US = 1_000
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000


def now_ns() -> int:
    """Return the current time of trio's clock in integer nanoseconds.

    Only valid inside ``trio.run``. Raises ``RuntimeError`` outside it.
    """
    return int(trio.current_time() * NS_PER_S)


def s_to_ns(seconds: float) -> int:
    """Convert seconds (a profile's human unit) to integer nanoseconds."""
    return int(round(seconds * NS_PER_S))


def ns_to_s(t_ns: int) -> float:
    """Convert integer nanoseconds to float seconds (for trio.sleep_until)."""
    return t_ns / NS_PER_S
