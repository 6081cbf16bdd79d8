"""Time units: hopbench keeps every time as integer nanoseconds (STYLE.md §3).

Profiles take human units in named keys (``duration_s``) and convert once at
load with ``s_to_ns``; reports convert to milliseconds in one place. Pure: no
clock here (see ``_clock``).
"""

from __future__ import annotations

__all__ = ["NS_PER_US", "NS_PER_MS", "NS_PER_S", "s_to_ns", "ns_to_s"]

NS_PER_US = 1_000
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000


def s_to_ns(seconds: float) -> int:
    """Convert seconds (a profile's human unit) to integer nanoseconds."""
    return int(round(seconds * NS_PER_S))


def ns_to_s(t_ns: int) -> float:
    """Convert integer nanoseconds to float seconds (for trio.sleep_until)."""
    return t_ns / NS_PER_S
