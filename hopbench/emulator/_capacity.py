"""The emulator's upstream capacity: a concurrency limit with a queue and a shared token budget.

Role: make the emulator saturate the way a real model server does, so that SLOs,
goodput and the capacity search (docs/slo.md) can be tested against a known
knee. Two limits, both off by default (top-level keys, docs/emulator.md,
"Capacity limits"):

- ``max_concurrency``: at most this many requests are served at once; the
  others wait in one FIFO queue (``max_queue`` bounds it; a request that finds
  it full gets HTTP 503 at once). A queued request's whole schedule (headers,
  think time, TTFT, tokens) starts when it leaves the queue, so its TTFT as the
  client sees it is queue wait + TTFT.
- ``token_budget_per_s``: the output tokens per second all streams share: each
  gap between two content deltas is at least ``active / token_budget_per_s``
  seconds, ``active`` being the requests served at that moment, so a stream's
  rate is ``min(tokens_per_s, token_budget_per_s / active)``.

``knee`` is pure: it computes, from the configuration alone, the load at which
the emulator starts to degrade (the ground truth the search is tested against);
``CapacityGate`` is the anyio side (the queue and the count of active streams).

Invariants:
- The queue is FIFO (anyio's ``Semaphore`` wakes waiters in arrival order).
- ``active`` counts requests holding a slot, from leaving the queue to their
  last byte (or their cancellation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import anyio

from ._config import Behaviour, EmulatorConfig

__all__ = ["CapacityGate", "Knee", "knee"]


@dataclass(frozen=True, slots=True)
class Knee:
    """Where a configured emulator starts to saturate (its ground truth).

    For the default model behaviour (``EmulatorConfig.default``), with mean
    values (jitter ignored).

    Attributes:
        max_concurrency: the configured slot limit, None when unlimited.
        token_budget_per_s: the configured shared token budget, None when unlimited.
        concurrency: the highest number of requests in service at once at which
            every stream still gets its unloaded schedule: ``min(max_concurrency,
            floor(token_budget_per_s / tokens_per_s))``; past it requests queue
            or streams slow down. None when nothing limits.
        service_s: an unloaded request's service time, s: think time + TTFT +
            (output_tokens - 1) / tokens_per_s.
        rate_rps: the open-loop arrival rate that keeps ``concurrency`` requests
            in service on average (Little's law: concurrency / service_s); past
            it, constant arrivals queue (slot limit) or slow streams (budget).
            None when nothing limits or the service time is 0.
        max_rate_rps: the most requests/s the emulator completes however long
            they wait: ``max_concurrency / service time at that concurrency``,
            or ``token_budget_per_s / (output_tokens - 1)`` with a budget alone;
            None when unbounded.
    """

    max_concurrency: int | None
    token_budget_per_s: float | None
    concurrency: int | None
    service_s: float
    rate_rps: float | None
    max_rate_rps: float | None

    def to_json(self) -> dict[str, Any]:
        """The knee as a JSON-able dict (the ``.knee.json`` beside the ground truth)."""
        return {"max_concurrency": self.max_concurrency,
                "token_budget_per_s": self.token_budget_per_s,
                "knee_concurrency": self.concurrency, "service_s": self.service_s,
                "knee_rate_rps": self.rate_rps, "max_rate_rps": self.max_rate_rps}


def _service_s(b: Behaviour, rate_per_stream: float) -> float:
    """Think time + TTFT + the gaps of ``output_tokens`` at ``rate_per_stream`` tokens/s."""
    gaps = max(0, b.output_tokens - 1)
    tail = 0.0 if rate_per_stream == math.inf or rate_per_stream <= 0 else gaps / rate_per_stream
    return (b.think_time_ms + b.ttft_ms) / 1e3 + tail


def knee(config: EmulatorConfig) -> Knee:
    """The configured knee of ``config`` (pure; see ``Knee``).

    Args:
        config: a validated emulator configuration.

    Returns:
        The knee for the default behaviour. Never raises.
    """
    b = config.default
    c_max = config.max_concurrency or None
    budget = config.token_budget_per_s or None
    tps = b.tokens_per_s if b.tokens_per_s > 0 else math.inf
    limits: list[int] = []
    if c_max is not None:
        limits.append(c_max)
    if budget is not None and tps != math.inf and b.output_tokens > 1:
        limits.append(max(1, math.floor(budget / tps)))
    concurrency = min(limits) if limits else None
    service = _service_s(b, tps)
    rate = concurrency / service if concurrency is not None and service > 0 else None
    max_rate: float | None = None
    if c_max is not None:
        per_stream = tps if budget is None else min(tps, budget / c_max)
        s = _service_s(b, per_stream)
        max_rate = c_max / s if s > 0 else None
    elif budget is not None and b.output_tokens > 1:
        max_rate = budget / (b.output_tokens - 1)
    return Knee(c_max, budget, concurrency, service, rate, max_rate)


class CapacityGate:
    """The slot limit's FIFO queue and the count of requests in service (anyio).

    Args:
        config: the configuration (``max_concurrency``, ``max_queue``,
            ``token_budget_per_s``; 0 = no limit).
    """

    def __init__(self, config: EmulatorConfig) -> None:
        self._slots = anyio.Semaphore(config.max_concurrency) if config.max_concurrency else None
        self._max_queue = config.max_queue
        self._budget = config.token_budget_per_s
        self.queued = 0
        self.active = 0

    def full(self) -> bool:
        """True when a new request would find the queue full (it gets a 503)."""
        return (self._slots is not None and self._max_queue > 0
                and self._slots.value == 0 and self.queued >= self._max_queue)

    async def acquire(self) -> None:
        """Wait in the FIFO queue for a slot (at once when unlimited); counts as active."""
        if self._slots is not None:
            self.queued += 1
            try:
                await self._slots.acquire()
            finally:
                self.queued -= 1
        self.active += 1

    def release(self) -> None:
        """The request's last byte went out (or it was cancelled): free its slot."""
        self.active -= 1
        if self._slots is not None:
            self._slots.release()

    def gap_ns(self, planned_ns: int) -> int:
        """The gap before the next content delta under the shared budget, ns.

        Args:
            planned_ns: the plan's gap (tokens_per_s and its jitter), ns.

        Returns:
            ``max(planned_ns, active * 1e9 / token_budget_per_s)``; ``planned_ns``
            without a budget.
        """
        if not self._budget:
            return planned_ns
        return max(planned_ns, int(self.active * 1e9 / self._budget))
