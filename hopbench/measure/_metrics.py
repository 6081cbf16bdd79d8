"""The metric registry: every histogram metric hopbench records, and all that is known of it.

Role: one frozen :class:`MetricSpec` per metric in :data:`METRICS`, the single
place a metric's metadata is written (STYLE.md §2, "one place per rule"): its
name (the key in summary.json, intervals.hlog and budgets), its reporting unit
and the integer it is recorded as, its histogram range, which direction is
better, whether its samples are per event, and where it is shown by default.
Every list of metrics elsewhere is read from here: the histograms
(``hopbench.measure._hdr``), the SLO objectives (``hopbench.measure._slo``
``OBJECTIVES``), ``hopbench compare``'s defaults (``hopbench.views._compare``
``DEFAULT_METRICS``), the terminal summary table's rows, the report's spectrum
figures (``hopbench.report``) and the live Prometheus histograms
(``hopbench.observe._live_metrics`` ``HISTOGRAMS``). Pure: stdlib and
``_units`` only.

Invariants:

* The order of :data:`METRICS` is the display order everywhere (the summary
  table's rows, compare's default metrics, the spectrum's panels); a list read
  from the registry keeps it.
* Times are recorded as integer nanoseconds over 1 ns .. 1 h (``divisor``
  1,000,000: reported in ms); rates as integer milli-tokens per second over
  1 .. 10**12 (``divisor`` 1000: reported in tokens/s).
* Every metric may be held to a budget (``hopbench gate``: ``<metric>.<statistic>``
  for any name here); an SLO objective exists for the metrics whose ``slo``
  names one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from .._units import NS_PER_MS, NS_PER_S

__all__ = [
    "METRICS",
    "MetricSpec",
    "UNIT_LABELS",
    "LIVE_BUCKETS_S",
    "log_buckets_s",
    "metrics_where",
]

_ONE_HOUR_NS: Final = 3600 * NS_PER_S

#: the live histograms' bucket steps per decade: (from, to, equal steps in log) for each of the
#: stretches 1-2, 2-5 and 5-10 (times a power of ten); the widest step is 4.78 % (2-5: 2.5 ** (1/20))
_LIVE_STEPS: Final = ((1, 2, 15), (2, 5, 20), (5, 10, 15))


def log_buckets_s(low_s: float, high_s: float) -> tuple[float, ...]:
    """Log-spaced bucket upper bounds for a live Prometheus histogram, seconds.

    50 bounds a decade, exact at 1, 2 and 5 times a power of ten (``le="0.2"``, ``le="1"``
    answer SLO-style queries), each rounded to 4 significant digits; consecutive bounds
    are at most 4.78 % apart, so ``histogram_quantile`` (linear inside a bucket) lands
    within 4.78 % of any quantile whose value lies between ``low_s`` and ``high_s``
    (docs/observability.md, "Buckets").

    Args:
        low_s: the first bound (included when on the grid, else the next one above it).
        high_s: the last bound is the first grid value at or above it.

    Returns:
        tuple of increasing floats (``+Inf`` is added by the endpoint).

    Raises:
        ValueError: ``low_s`` not positive or ``high_s`` below it.
    """
    if not 0 < low_s <= high_s:
        raise ValueError(f"log_buckets_s: expected 0 < low_s <= high_s, got {low_s}, {high_s}")
    out: list[float] = []
    exponent = math.floor(math.log10(low_s))
    while True:
        for start, end, steps in _LIVE_STEPS:
            for i in range(steps):
                bound = float(f"{start * (end / start) ** (i / steps) * 10.0 ** exponent:.4g}")
                if bound < low_s * (1 - 1e-9):
                    continue
                out.append(bound)
                if bound >= high_s * (1 - 1e-9):
                    return tuple(out)
        exponent += 1


#: TTFT, ITL and E2E live bucket upper bounds, seconds: 0.5 ms to 200 s, 281 bounds (+Inf added
#: by the endpoint)
LIVE_BUCKETS_S: Final[tuple[float, ...]] = log_buckets_s(0.0005, 200.0)

#: a reporting unit as a narrow terminal column shows it
UNIT_LABELS: Final[dict[str, str]] = {"ms": "ms", "tokens/s": "tok/s"}


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """How one metric is recorded, judged and shown.

    Attributes:
        name: metric name, e.g. ``"ttft"``; also the key in summary.json.
        unit: reporting unit: ``"ms"`` or ``"tokens/s"``.
        divisor: recorded integer / divisor = value in ``unit``
            (1_000_000 for ns -> ms, 1000 for milli-tokens/s -> tokens/s).
        lowest: lowest distinguishable recorded value (smaller values
            are recorded as this one).
        highest: highest recordable value; above it is out of range.
        description: one line for docs and reports.
        higher_is_better: True when a larger value is the better one
            (``hopbench compare``'s direction); False for every time.
        per_event: many samples per stream (gaps between events): their samples
            are not independent, so compare's tests count streams, not events.
        compared: ``hopbench compare`` compares it by default (the others
            need ``--metric``).
        figure: the report.html spectrum figure it is drawn in: ``"latency"``
            (the percentile spectrum per scenario), ``"keepalive"``,
            ``"overhead"`` (the gateway overhead section), or None.
        slo: the SLO objective that limits it (``[slo]`` key ``<slo>_ms``,
            ``Slo.<slo>_ns``), or None when no objective may use it.
        live_help: the help line of its live Prometheus histogram
            ``hopbench_<name>_seconds`` (``--metrics-port``), or None when it is
            not served live.
        live_buckets_s: that histogram's bucket upper bounds, seconds.
    """

    name: str
    unit: str
    divisor: int
    lowest: int
    highest: int
    description: str
    higher_is_better: bool = False
    per_event: bool = False
    compared: bool = False
    figure: str | None = None
    slo: str | None = None
    live_help: str | None = None
    live_buckets_s: tuple[float, ...] = ()


def _time(name: str, description: str, *, per_event: bool = False, compared: bool = False,
          figure: str | None = None, slo: str | None = None, live_help: str | None = None,
          live_buckets_s: tuple[float, ...] = ()) -> MetricSpec:
    """A time metric: recorded in ns over 1 ns .. 1 h, reported in ms, lower is better."""
    return MetricSpec(name, "ms", NS_PER_MS, 1, _ONE_HOUR_NS, description, per_event=per_event,
                      compared=compared, figure=figure, slo=slo, live_help=live_help,
                      live_buckets_s=live_buckets_s)


METRICS: Final[dict[str, MetricSpec]] = {
    spec.name: spec
    for spec in (
        _time("ttfb", "request start to the response head (status line and headers)", compared=True),
        _time("ttft", "request start to the first output token of any kind (incl. reasoning)",
              compared=True, figure="latency", slo="ttft",
              live_help="Time to first token (from the intended start)", live_buckets_s=LIVE_BUCKETS_S),
        _time("ttft_content", "request start to the first non-reasoning output (text or tool)",
              compared=True, slo="content_ttft"),
        _time("itl", "gap between consecutive content events (0 = same network read)",
              per_event=True, compared=True, figure="latency", slo="itl",
              live_help="Inter-token latency (gaps between content events)", live_buckets_s=LIVE_BUCKETS_S),
        _time("tpot", "per answer: (e2e - ttft) / (output tokens per choice - 1)",
              compared=True, figure="latency", slo="tpot"),
        _time("e2e", "request start to the answer's end (terminal event, else last byte)",
              compared=True, figure="latency", slo="e2e",
              live_help="Request start to the end of the stream", live_buckets_s=LIVE_BUCKETS_S),
        MetricSpec(
            "output_tokens_per_s",
            "tokens/s",
            1000,
            1,
            10**12,
            "per completed answer: output tokens per choice / e2e; recorded in milli-tokens/s",
            higher_is_better=True,
            compared=True,
        ),
        _time("keepalive_interval", "gap between consecutive keepalive comment lines",
              per_event=True, compared=True, figure="keepalive"),
        _time("max_silence", "per stream: longest gap with no bytes received", compared=True, figure="keepalive"),
        _time("queue_delay", "intended start to actual send (open loop: the client's lateness)"),
        _time("schedule_lag", "scheduler wake-up lateness against the intended start"),
        _time("loop_lag", "event-loop responsiveness probe: sleep overshoot"),
        _time("client_read_lag", "per body read: how late the client served it (its bytes' wait in the socket)"),
        _time("ttft_from_send", "open loop: ttft counted from the actual send (uncorrected)", compared=True),
        _time("e2e_from_send", "open loop: e2e counted from the actual send (uncorrected)", compared=True),
        _time("connect_wait", "TCP (+TLS) connect time of streams that opened a new connection"),
        _time("tail", "terminal event to the end of the response body (held after the answer)"),
        _time("cancel_delay", "client cancel (connection closed) to the upstream noticing the close"),
        _time("request_write", "writing the request (head and body) until its last byte is in the send buffer"),
        # gateway overhead (hopbench.driver._overhead, docs/gateway-overhead.md): only runs with
        # [upstream] have them
        _time("request_delay", "gateway overhead: client wrote the request -> the upstream received it",
              compared=True, figure="overhead"),
        _time("first_event_delay", "gateway overhead: the upstream wrote its first event -> the client read it",
              compared=True, figure="overhead"),
        _time("added_ttft", "gateway overhead: client TTFT (from the request's write) minus the upstream's own TTFT",
              compared=True, figure="overhead"),
        _time("event_delay", "gateway overhead: per content event, upstream write -> client read",
              per_event=True, compared=True, figure="overhead"),
        _time("added_e2e", "gateway overhead: client e2e (request written -> body's last bytes) minus the upstream's own duration",
              compared=True, figure="overhead"),
        _time("upstream_silence", "gateway overhead: a gap over 500 ms between two upstream writes",
              per_event=True, figure="overhead"),
        _time("injected_keepalive_interval",
              "gateway overhead: gap between consecutive gateway-injected keepalives in an upstream silence",
              per_event=True, compared=True, figure="overhead"),
        _time("client_silence_in_upstream_silence",
              "gateway overhead: per upstream silence, the longest stretch without a client read",
              per_event=True, compared=True, figure="overhead"),
    )
}
"""Every metric hopbench records, by name, in display order."""


def metrics_where(**fields: object) -> tuple[str, ...]:
    """The names of the metrics whose fields have the given values, in display order.

    Args:
        **fields: :class:`MetricSpec` attribute names and the value each must have,
            e.g. ``compared=True`` or ``figure="latency"``.

    Returns:
        tuple of metric names (possibly empty).

    Raises:
        AttributeError: a name that is not a :class:`MetricSpec` attribute.
    """
    return tuple(name for name, spec in METRICS.items()
                 if all(getattr(spec, k) == v for k, v in fields.items()))
