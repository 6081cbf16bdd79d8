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

import time

import trio

from ._units import NS_PER_MS, NS_PER_S, NS_PER_US, ns_to_s, s_to_ns

__all__ = ["now_ns", "monotonic_offset_ns", "ns_to_s", "s_to_ns", "NS_PER_US", "NS_PER_MS", "NS_PER_S"]

_current_time = trio.current_time


def now_ns() -> int:
    """Return the current time of trio's clock in integer nanoseconds.

    Only valid inside ``trio.run``. Raises ``RuntimeError`` outside it.
    """
    return int(_current_time() * NS_PER_S)


def monotonic_offset_ns() -> int:
    """``CLOCK_MONOTONIC`` minus this clock, in ns, read once now.

    The one bridge to another process's stamps: the emulator records its
    request-receipt time as ``time.monotonic_ns()`` (the host's monotonic
    clock), and a stamp of this clock plus the offset is on that clock. Only
    meaningful for processes on the same host; under trio's ``MockClock`` the
    offset is arbitrary (no real process to compare with). The two reads are
    back to back: the offset is good to about a microsecond.

    Raises:
        RuntimeError: outside ``trio.run``.
    """
    return time.monotonic_ns() - now_ns()
