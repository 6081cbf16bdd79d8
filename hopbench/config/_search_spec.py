"""The capacity search as a profile states it: the ``[search]`` table (docs/slo.md).

Role: validate ``[search]`` into a frozen ``SearchSpec`` before any load is
sent; the search's decisions are ``hopbench.driver._search``, its probes run as
stages (``hopbench.driver._stages``).

Invariants:
- A search's range is ``min < max``, ``growth > 1``, ``resolution`` in (0, 1);
  it needs objectives (``[slo]``) to judge stages by (``_profile`` checks that).
- Times in integer ns, converted here once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .._toml import MISSING, RATE_MIN_RPS, Table
from .._units import s_to_ns

__all__ = ["SearchSpec", "parse_search"]


@dataclass(frozen=True, slots=True)
class SearchSpec:
    """The ``[search]`` table.

    Attributes:
        mode: what is searched: "rate" (open loop, requests/s) or "concurrency".
        min: the lowest load probed (a search whose ``min`` fails reports
            capacity below it); > 0.
        max: the highest load probed; > min.
        start: the first load probed (default ``min``).
        growth: the factor between loads while they pass (> 1).
        resolution: stop bisecting when (lowest failing - highest passing) <=
            resolution x highest passing (concurrency: also when they are 1 apart).
        duration_ns: each probe's length, warm-up included, ns.
        warmup_ns: each probe's unmeasured start, ns.
        max_probes: at most this many probes (a bound on the search's time).
        arrival: the open loop's arrivals ("constant" makes the knee sharpest).
    """

    mode: Literal["concurrency", "rate"]
    min: float
    max: float
    start: float
    growth: float
    resolution: float
    duration_ns: int
    warmup_ns: int
    max_probes: int
    arrival: Literal["constant", "poisson"]


def parse_search(t: Table, default_mode: str) -> SearchSpec:
    """Validate the ``[search]`` table.

    Args:
        t: the table.
        default_mode: ``[load].mode``, the default of ``mode``.

    Raises:
        ProfileError: min >= max, a non-positive min, growth <= 1, resolution
            outside (0, 1), start outside [min, max], a warm-up not shorter than
            the duration; naming file, line and key.
    """
    mode = t.str("mode", default_mode, choices=("concurrency", "rate"))
    lo = t.number("min", MISSING, positive=True) if mode == "concurrency" else t.number("min", MISSING, min=RATE_MIN_RPS)
    hi = t.number("max", MISSING, positive=True)
    if lo >= hi:
        raise t.error("max", f"expected max > min ({lo:g}), got {hi:g}")
    if mode == "concurrency" and (lo != int(lo) or hi != int(hi)):
        raise t.error("min", "a concurrency search needs whole numbers of users for min and max")
    start = t.number("start", lo, positive=True)
    if not lo <= start <= hi:
        raise t.error("start", f"expected a load from min ({lo:g}) to max ({hi:g}), got {start:g}")
    growth = t.number("growth", 2.0)
    if growth <= 1:
        raise t.error("growth", f"expected a factor > 1, got {growth:g}")
    resolution = t.number("resolution", 0.05)
    if not 0 < resolution < 1:
        raise t.error("resolution", f"expected a fraction in (0, 1), got {resolution:g}")
    duration = t.number("duration_s", 10.0, positive=True)
    warmup = t.number("warmup_s", 1.0, min=0.0)
    if warmup >= duration:
        raise t.error("warmup_s", f"expected less than duration_s ({duration:g}), got {warmup:g}")
    max_probes = t.int("max_probes", 20, min=2, max=1000)
    arrival = t.str("arrival", "constant", choices=("constant", "poisson"))
    t.done()
    return SearchSpec(mode, lo, hi, start, growth, resolution, s_to_ns(duration), s_to_ns(warmup),
                      max_probes, arrival)
