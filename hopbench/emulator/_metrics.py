"""The emulator's own ``/metrics`` (Prometheus text format 0.0.4 / OpenMetrics 1.0).

Role: a gateway exposes its own figures beside the load; the emulator does too,
so that hopbench's ``[[scrape]]`` is testable without a real gateway.

Invariants:
- The hot path only bumps plain ints and dict entries in-process
  (:class:`EmulatorMetrics`); nothing is formatted until a scrape asks.
- Rendering uses ``prometheus_client``'s exposition with a registry of its own
  (never the process-global default), imported when the first scrape comes.

Series (all counters are totals since the emulator started):
- ``hopbench_emulator_streams_in_flight`` (gauge): streaming responses being written.
- ``hopbench_emulator_requests_total{status}``: answered requests by HTTP status.
- ``hopbench_emulator_events_sent_total``: SSE events written (keepalives excluded).
- ``hopbench_emulator_output_tokens_sent_total``: content deltas written.
- ``hopbench_emulator_faults_injected_total{fault}``: injected faults by name.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["EmulatorMetrics"]


class EmulatorMetrics:
    """In-process counters of one emulator app (single-threaded: the event loop's)."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.events = 0
        self.tokens = 0
        self.by_status: dict[int, int] = {}
        self.faults: dict[str, int] = {}
        self._registry: Any = None
        # imported at start-up, not on the first scrape: an import inside the event
        # loop mid-run would stall every stream for its ~50-100 ms
        import prometheus_client.exposition  # noqa: F401

    def request_done(self, status: int, fault: str | None, events: int, tokens: int) -> None:
        """Count one answered request (O(1))."""
        self.by_status[status] = self.by_status.get(status, 0) + 1
        self.events += events
        self.tokens += tokens
        if fault is not None:
            self.faults[fault] = self.faults.get(fault, 0) + 1

    def render(self, accept: str | None) -> tuple[bytes, str]:
        """The exposition body and its content type, chosen from ``accept``
        (OpenMetrics when asked for, else the Prometheus text format)."""
        from prometheus_client import CollectorRegistry, exposition

        if self._registry is None:
            self._registry = CollectorRegistry(auto_describe=False)
            self._registry.register(_Collector(self))
        encoder, content_type = exposition.choose_encoder(accept or "")
        return encoder(self._registry), content_type


class _Collector:
    def __init__(self, m: EmulatorMetrics) -> None:
        self.m = m

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        m = self.m
        yield GaugeMetricFamily("hopbench_emulator_streams_in_flight",
                                "Streaming responses being written", value=m.in_flight)
        req = CounterMetricFamily("hopbench_emulator_requests", "Answered requests by HTTP status",
                                  labels=["status"])
        for status, n in sorted(m.by_status.items()):
            req.add_metric([str(status)], n)
        yield req
        yield CounterMetricFamily("hopbench_emulator_events_sent", "SSE events written (keepalives excluded)",
                                  value=m.events)
        yield CounterMetricFamily("hopbench_emulator_output_tokens_sent", "Content deltas written",
                                  value=m.tokens)
        faults = CounterMetricFamily("hopbench_emulator_faults_injected", "Injected faults by name",
                                     labels=["fault"])
        for name, n in sorted(m.faults.items()):
            faults.add_metric([name], n)
        yield faults
