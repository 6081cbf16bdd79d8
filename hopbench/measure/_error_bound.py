"""The client-side error bound of a figure's percentiles, and when it is too wide.

Role: pure (no clock, no file). Every time figure's samples are stamped from the
wire (``hopbench.measure._meter``, docs/results/units.md "Times from the wire"): a
sample whose stamps are exact is exact; any other lies in ``[value - below,
value + above]``, and the recorder keeps, per metric, three histograms of those
samples alone (``hopbench.measure._recorder``: ``~x`` their reported values,
``~lo`` and ``~hi`` their bounds). Replacing each bounded sample by its lower
(upper) bound gives a histogram whose every value is at or below (above) the
true one; order statistics are monotone, so the true p-th percentile lies
between those two histograms' p-th percentiles. :func:`error_bounds` gives, per
percentile, how far the reported value can be from the true one: the larger of
the two distances.

:func:`uncertain` is the one rule for "this figure's tail is not to be trusted"
(the run's warning, the terminal table's and report.html's mark): a bound over
:data:`ERROR_SHARE` of the value *and* over :data:`ERROR_MIN_NS`.

Invariants: the same percentile rule as ``Histogram.percentile`` (hdrh's: the
highest equivalent value of the bucket holding the ``round(p% x count)``-th
value); all three histograms share the metric's layout, so buckets are matched
by their highest equivalent value. Times are integer ns inside, ms in the
returned dicts (the metric's divisor).
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from collections.abc import Mapping
from typing import Any, Final

from .._advice import ADVICE
from .._format import fmt_cell
from ._hdr import Histogram
from ._metrics import METRICS

__all__ = ["UNCERTAIN_MARK", "uncertain_note", "uncertain_note_lines", "NOTE_COLUMNS", "UNBOUNDED_METRICS", "ERROR_MIN_NS", "ERROR_SHARE", "ERROR_PERCENTILES", "error_bounds", "uncertain", "error_bound_warnings",
           "scope_error_bounds"]

UNBOUNDED_METRICS: Final = frozenset({
    "queue_delay", "schedule_lag", "loop_lag", "client_read_lag", "connect_wait", "request_write",
    "max_silence", "cancel_delay",
    "upstream_silence",
    "injected_keepalive_interval", "client_silence_in_upstream_silence",
})
"""Time metrics whose samples' error bounds are not kept: the client's own figures
(its send, loop and schedule lateness, connect and write times, ``client_read_lag``
itself), ``max_silence`` and ``cancel_delay``, and the gateway-overhead figures
but ``request_delay``, ``first_event_delay``, ``added_ttft``, ``event_delay`` and
``added_e2e`` (whose client stamps' bounds streams.jsonl carries, the end of
``added_e2e`` being when the body's last bytes arrived, ``body_end_ns``, and whose
upstream receive stamp's bound the ground truth carries: ``hopbench.driver._overhead``):
the silence figures. summary.json gives them no ``error_bound_ms``: absent means
unknown, never exact."""

ERROR_PERCENTILES: Final = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p999", 99.9))
"""The percentiles summary.json gives an ``error_bound_ms`` (the keys of ``Histogram.stats``)."""

ERROR_SHARE: Final = 0.10
"""A percentile is uncertain when its error bound is over this share of its value
(10 %: a gateway's added latency read at 10 % is still the right order of size)..."""

ERROR_MIN_NS: Final = 1_000_000
"""...and over this, ns (1 ms: below it the bound is within the run-to-run noise of
a loopback path, and a 0.3 ms bound on a 0.5 ms gap says nothing a reader acts on)."""


UNCERTAIN_MARK: Final = "~"
"""What the terminal table and report.html put after an uncertain percentile."""


#: the widest line a note under the terminal table may print: an 80-column terminal's
NOTE_COLUMNS: Final = 80


def uncertain_note_lines() -> tuple[str, str]:
    """The key to :data:`UNCERTAIN_MARK` under a table that shows it, as the terminal prints it:
    two lines of at most :data:`NOTE_COLUMNS` columns, cut between phrases (one line of 150
    wrapped mid-phrase on an 80-column terminal). No cure of its own (a saturated run's is its
    verdict's; the warnings give it once)."""
    return (f"{UNCERTAIN_MARK} error bound over {ERROR_SHARE * 100:g} % of the value and over "
            f"{ERROR_MIN_NS / 1e6:g} ms (summary.json error_bound_ms)",
            "  as the client read late (see client_read_lag); the warnings give the cure")


def uncertain_note() -> str:
    """:func:`uncertain_note_lines` as one line (report.html's note, where the page wraps it)."""
    return " ".join(line.strip() for line in uncertain_note_lines())


def _percentiles(buckets: Mapping[int, int], total: int) -> dict[str, int]:
    keys = sorted(k for k, n in buckets.items() if n > 0)
    cum = list(itertools.accumulate(buckets[k] for k in keys))
    out: dict[str, int] = {}
    for name, p in ERROR_PERCENTILES:
        target = max(int(p * total / 100 + 0.5), 1)
        i = bisect.bisect_left(cum, target)
        out[name] = keys[min(i, len(keys) - 1)] if keys else 0
    return out


def error_bounds(metric: str, reported: Histogram, bounds: Mapping[str, str]) -> dict[str, float]:
    """The error bound of each percentile of one scope's metric, in its reporting unit.

    Args:
        metric: a time metric of ``METRICS``.
        reported: the scope's histogram of the metric (every sample).
        bounds: the scope's bound histograms (``ScopeSnapshot.bounds``: name ->
            encoding); those of ``metric`` are used, the others ignored.

    Returns:
        ``{"p50": x, "p90": x, "p99": x, "p999": x}``, each the largest distance
        (ms) between the reported percentile and the true one's possible range;
        all 0.0 when no sample of the metric was bounded. An empty dict for an
        empty histogram.

    Raises:
        ResultsError: a bound histogram is not a valid encoding of the metric's layout.
    """
    total = reported.count
    if not total:
        return {}
    d = METRICS[metric].divisor
    texts = [bounds.get(metric + s) for s in ("~x", "~lo", "~hi")]
    if any(t is None for t in texts):
        return {k: 0.0 for k, _ in ERROR_PERCENTILES}
    x, lo, hi = (Histogram.decode(metric, t) for t in texts if t is not None)
    base: Counter[int] = Counter(dict(reported.buckets()))
    base.subtract(dict(x.buckets()))
    lows, highs = Counter(base), Counter(base)
    lows.update(dict(lo.buckets()))
    highs.update(dict(hi.buckets()))
    p_rep = _percentiles(dict(reported.buckets()), total)
    p_lo = _percentiles(lows, total)
    p_hi = _percentiles(highs, total)
    return {k: max(p_rep[k] - p_lo[k], p_hi[k] - p_rep[k], 0) / d for k, _ in ERROR_PERCENTILES}


def scope_error_bounds(histograms: Mapping[str, str], bounds: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Every time metric of one scope with its percentiles and their error bounds.

    Args:
        histograms: the scope's encoded histograms (``ScopeSnapshot.histograms``).
        bounds: its bound histograms (``ScopeSnapshot.bounds``).

    Returns:
        ``{metric: {"p50", "p90", "p99", "p999": ms, "error_bound_ms": {...}}}``
        for each time metric (unit ms) with samples, in ``METRICS`` order: what
        :func:`uncertain` and :func:`error_bound_warnings` read (summary.json's
        entries hold the same keys).

    Raises:
        ResultsError: an encoding is not valid for its metric.
    """
    out: dict[str, dict[str, Any]] = {}
    for metric, spec in METRICS.items():
        text = histograms.get(metric)
        if text is None or spec.unit != "ms" or metric in UNBOUNDED_METRICS:
            continue
        h = Histogram.decode(metric, text)
        if not h.count:
            continue
        entry: dict[str, Any] = {k: h.percentile(p) / spec.divisor for k, p in ERROR_PERCENTILES}
        entry["error_bound_ms"] = error_bounds(metric, h, bounds)
        out[metric] = entry
    return out


def uncertain(stats: Mapping[str, Any]) -> list[tuple[str, float, float]]:
    """The percentiles of one figure whose error bound is too wide to read.

    Args:
        stats: the figure's summary.json entry (``p50`` .. ``p999`` and
            ``error_bound_ms``, ms).

    Returns:
        ``[(percentile key, value ms, bound ms)]`` for each percentile whose
        bound is over :data:`ERROR_SHARE` of its value and over
        :data:`ERROR_MIN_NS`, in percentile order; [] when none (or no bounds).
    """
    eb = stats.get("error_bound_ms")
    if not isinstance(eb, Mapping):
        return []
    out: list[tuple[str, float, float]] = []
    for key, _ in ERROR_PERCENTILES:
        v, b = stats.get(key), eb.get(key)
        if isinstance(v, (int, float)) and isinstance(b, (int, float)) and not isinstance(b, bool):
            if b * 1_000_000 > ERROR_MIN_NS and b > ERROR_SHARE * abs(v):
                out.append((key, float(v), float(b)))
    return out


def error_bound_warnings(metrics: Mapping[str, Mapping[str, Any]], *, scope: str = "all",
                         cure: str = ADVICE["client_read_late"].cure) -> list[str]:
    """The run's warnings for figures whose tail is uncertain (docs/results.md, "Warnings").

    Args:
        metrics: one scope's summary.json ``metrics`` (name -> entry).
        scope: the scope's name, for the message.
        cure: what to do about it, a clause: a cure of :data:`hopbench._advice.ADVICE` (the
            saturation verdict's own when the run was saturated: one cause, one cure).

    Returns:
        One warning per uncertain figure, naming it, its worst percentile (the
        highest one marked), the value, the bound and the cure, e.g. "error bound:
        all event_delay p99 25.500 ms is known only to +-21.800 ms (over 10 % and
        1 ms; the client read late: client_read_lag); cure: ...". A bound over
        the value reads ``-value/+bound`` (e.g. ``-41.200/+192.000 ms``): the true
        value is at least 0. Possibly none.
    """
    out: list[str] = []
    for name, stats in metrics.items():
        marked = uncertain(stats)
        if not marked:
            continue
        key, v, b = marked[-1]
        also = ", ".join(k for k, _, _ in marked[:-1])
        shown = f"{v:.3f}" if v >= 0.001 else fmt_cell(v)  # a gap of events that shared a read: <0.001
        why, fix = _CAUSES.get(name, (_CLIENT_LATE, None))
        fix = fix or cure
        # the bound is the larger of the two distances, and the lower one is at most the value
        # (no time is negative): a bound over the value is the upper one
        spread = f"+-{b:.3f}" if b <= v else f"-{shown}/+{b:.3f}"
        out.append(f"error bound: {scope} {name} {key} {shown} ms is known only to {spread} ms "
                   f"(over {ERROR_SHARE * 100:g} % of the value and {ERROR_MIN_NS / 1e6:g} ms"
                   + (f"; also {also}" if also else "")
                   + f"): its stamps were not exact ({why}); cure: {fix}")
    return out


_CLIENT_LATE: Final = "the client read late: see client_read_lag"
_WRITE_LATE: Final = ("the client read late or the upstream emulator wrote late: see client_read_lag and "
                      "gateway_overhead.events.written_late")
#: figures whose wide bound has another cause than the client's lateness alone, and its cure
#: (None: the run's): request_delay's ends are the client's write and the upstream's receive; the
#: figures that end on an upstream write also
#: carry that write's length when the emulator wrote late (hopbench.driver._overhead,
#: docs/gateway-overhead.md)
_CAUSES: Final[dict[str, tuple[str, str | None]]] = {
    # its bound is the client's write of the request and the upstream's receive stamp (exact to
    # microseconds from the kernel, its whole value from the app): the block counts which, and the
    # gateway overhead's own warning gives the upstream's cure when any came from the app
    "request_delay": ("the client's write of the request took long, or the upstream's receive was its app's "
                      "stamp: see gateway_overhead.request_sent_from and upstream_received", None),
    **{name: (_WRITE_LATE, None) for name in ("first_event_delay", "added_ttft", "event_delay", "added_e2e")},
}
