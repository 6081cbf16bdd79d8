"""Load stages as a profile states them (docs/slo.md).

Role: validate ``[[stage]]`` entries into frozen records before any load is
sent; running them is ``hopbench.driver._stages``. The capacity search's
``[search]`` table is ``_search_spec``'s.

Invariants:
- A stage sets exactly one load (``concurrency`` or ``rate_rps``) and a
  positive ``duration_s``; ``warmup_s`` (default 0) is part of its duration.
- Times in integer ns, converted here once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .._toml import MISSING, RATE_MIN_RPS, Table, closest_key
from .._units import s_to_ns

__all__ = ["Stage", "parse_stages", "stage_label"]


@dataclass(frozen=True, slots=True)
class Stage:
    """One load stage.

    Attributes:
        mode: "concurrency" (closed loop) or "rate" (open loop).
        load: the users (concurrency) or the arrival rate in requests/s.
        duration_ns: the stage's length, warm-up included, ns.
        warmup_ns: its first part, not measured, ns.
        label: its folder name inside the results folder, e.g. "stage-01-c8".
        arrival: a rate stage's arrivals, "constant" or "poisson" (None: ``[load].arrival``
            when that is a rate, else "poisson").
    """

    mode: Literal["concurrency", "rate"]
    load: float
    duration_ns: int
    warmup_ns: int
    label: str
    arrival: str | None = None


def stage_label(index: int, mode: str, load: float) -> str:
    """A stage's folder name: ``stage-<nn>-c<users>`` or ``stage-<nn>-r<rate>``."""
    amount = f"c{int(load)}" if mode == "concurrency" else f"r{load:g}"
    return f"stage-{index + 1:02d}-{amount}"


_STAGE_KEYS = ("concurrency", "rate_rps", "arrival", "duration_s", "warmup_s")
"""Every key a ``[[stage]]`` table may hold."""


def parse_stages(tables: list[Table]) -> tuple[Stage, ...]:
    """Validate ``[[stage]]`` entries (possibly none).

    Raises:
        ProfileError: a stage with no load or two, a load that is not positive, a
            missing or non-positive duration, a warm-up not shorter than the
            duration; naming file, line and key.
    """
    out: list[Stage] = []
    for i, t in enumerate(tables):
        has_c, has_r = t.has("concurrency"), t.has("rate_rps")
        if not has_c and not has_r:  # a misspelt load key: name it, not "got none"
            for k in t.data:
                if k not in _STAGE_KEYS:
                    fix = closest_key(k, set(_STAGE_KEYS) - set(t.data))
                    hint = f"; did you mean {fix!r}?" if fix is not None else ""
                    raise t.error(k, f"unknown key{hint} (expected one of: {', '.join(sorted(_STAGE_KEYS))})")
        if has_c == has_r:
            raise t.error(None, "expected a load: concurrency (users) or rate_rps (requests/s), "
                                "exactly one" + (", got both" if has_c else ", got none"))
        if has_c:
            mode: Literal["concurrency", "rate"] = "concurrency"
            load = float(t.int("concurrency", min=1, max=1_000_000))
        else:
            mode = "rate"
            load = t.number("rate_rps", min=RATE_MIN_RPS)
        arrival = t.str("arrival", None, choices=("constant", "poisson"))
        if arrival is not None and mode != "rate":
            raise t.error("arrival", "only valid with rate_rps (an open-loop stage)")
        duration = t.number("duration_s", MISSING, positive=True)
        warmup = t.number("warmup_s", 0.0, min=0.0)
        if warmup >= duration:
            raise t.error("warmup_s", f"expected less than duration_s ({duration:g}), got {warmup:g}")
        t.done()
        out.append(Stage(mode, load, s_to_ns(duration), s_to_ns(warmup), stage_label(i, mode, load), arrival))
    return tuple(out)
