"""Per-stream measurement: stamped observations in, a frozen per-stream record out.

Pure and synchronous (STYLE.md §1): no clock, no trio, no sockets. The runner
stamps every network read with one clock reading (integer ns) and hands the
:class:`StreamMeter` the read and the decoder's observations for it; at the end
:func:`measure` applies every metric rule (what counts as TTFT, TPOT, E2E,
which tokens count, silences, flags) and returns a :class:`StreamRecord`,
which :func:`record_stream` puts into the ``Recorder`` and :func:`stream_line`
turns into a streams.jsonl line. Events that arrive in one read share one
stamp, so an inter-token gap of 0 means "same read".

Latencies count from ``start_ns``: the intended start in an open loop (wrk2:
no coordinated omission), the send time in a closed loop. ``sent_ns`` is kept
beside it so the uncorrected figures can be reported too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ._recorder import Recorder
from ._units import NS_PER_S
from .protocols import (
    ContentDelta,
    FirstContentToken,
    FirstToken,
    Keepalive,
    Observation,
    StreamResult,
    UsageReport,
)

__all__ = ["StreamMeter", "StreamRecord", "measure", "outcome_counters", "record_stream", "stream_line"]


class StreamMeter:
    """Collects one stream's stamps.

    Args:
        start_ns: when the stream counts as started (intended start in open loop).
        sent_ns: when the request was actually sent (>= start_ns in open loop).

    All attributes are integer ns from the runner's clock, or None when the
    moment never came.
    """

    __slots__ = (
        "start_ns", "sent_ns", "headers_ns", "status", "last_byte_ns",
        "max_silence_ns", "first_token_ns", "first_content_ns", "last_content_ns",
        "itl_ns", "keepalive_ns", "content_reads", "_last_content_read",
        "input_tokens", "output_tokens", "reads",
    )

    def __init__(self, start_ns: int, sent_ns: int) -> None:
        self.start_ns = start_ns
        self.sent_ns = sent_ns
        self.headers_ns: int | None = None
        self.status: int | None = None  # the response's HTTP status, once its head arrived
        self.last_byte_ns: int | None = None
        self.max_silence_ns = 0
        self.first_token_ns: int | None = None
        self.first_content_ns: int | None = None
        self.last_content_ns: int | None = None
        self.itl_ns: list[int] = []
        self.keepalive_ns: list[int] = []
        self.content_reads = 0
        self._last_content_read: int | None = None
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.reads = 0

    def on_headers(self, t_ns: int) -> None:
        """The response head arrived at ``t_ns``."""
        self.headers_ns = t_ns
        self.last_byte_ns = t_ns

    def on_read(self, t_ns: int) -> None:
        """A body read arrived at ``t_ns`` (before its observations)."""
        last = self.last_byte_ns
        if last is not None and t_ns - last > self.max_silence_ns:
            self.max_silence_ns = t_ns - last
        self.last_byte_ns = t_ns
        self.reads += 1

    def on_observations(self, t_ns: int, observations: Iterable[Observation]) -> None:
        """Apply the observations the decoder produced for the read at ``t_ns``."""
        for ob in observations:
            cls = type(ob)
            if cls is ContentDelta:
                last = self.last_content_ns
                if last is not None:
                    self.itl_ns.append(t_ns - last)
                self.last_content_ns = t_ns
                if self._last_content_read != self.reads:
                    self._last_content_read = self.reads
                    self.content_reads += 1
            elif cls is FirstToken:
                self.first_token_ns = t_ns
            elif cls is FirstContentToken:
                self.first_content_ns = t_ns
            elif cls is Keepalive:
                self.keepalive_ns.append(t_ns)
            elif cls is UsageReport:
                u: UsageReport = ob  # type: ignore[assignment]
                if u.input_tokens is not None:
                    self.input_tokens = u.input_tokens
                if u.output_tokens is not None:
                    self.output_tokens = u.output_tokens

    def close(self, t_ns: int) -> None:
        """The stream ended at ``t_ns``: the final silence counts too (a stall cut
        by the idle timeout is the longest silence of its stream)."""
        last = self.last_byte_ns
        if last is not None and t_ns - last > self.max_silence_ns:
            self.max_silence_ns = t_ns - last

    def keepalive_gaps(self) -> list[int]:
        """Gaps between consecutive keepalive comments, ns."""
        k = self.keepalive_ns
        return [b - a for a, b in zip(k, k[1:])]


@dataclass(frozen=True, slots=True)
class StreamRecord:
    """One finished stream's figures: what the metric rules made of its stamps.

    Built by :func:`measure` (pure); the runner hands it to :func:`record_stream`
    (histograms and counters) and :func:`stream_line` (streams.jsonl). Stamps
    are integer ns of the runner's clock (absolute; ``stream_line`` makes them
    relative to the run start); durations are integer ns; a figure is None when
    the stream does not feed it (see each attribute).

    Attributes:
        outcome: completed | failed | truncated | timeout | connect_error |
            http_error | cancelled.
        detail: the outcome's counter suffix ("" when none), e.g. "idle",
            "rate_limit_error", "429:rate_limit".
        status: the HTTP status, None when no response head arrived.
        start_ns: when the stream counts as started (intended start, open loop).
        sent_ns: when the request was sent.
        headers_ns, first_token_ns, first_content_ns: stamps or None.
        end_ns: the end of the stream as the runner saw it (body closed, error, timeout).
        ttfb_ns: start to the response head; None without one.
        ttft_ns: start to the first output token of any kind; None without one.
        ttft_from_send_ns: send to the first token, only when start != send.
        ttft_content_ns: start to the first non-reasoning output; None without one.
        queue_delay_ns: start to send, only when they differ (open loop).
        elapsed_ns: start to ``end_ns`` (every stream: streams.jsonl ``e2e_ns``).
        e2e_ns: completed streams only: start to ``end_ns``.
        e2e_from_send_ns: completed streams with start != send: send to ``end_ns``.
        tpot_ns: completed streams with a first token and > 1 output token
            (usage): (end - first token) // (output tokens - 1).
        output_milli_tokens_per_s: completed streams with usage output tokens
            and e2e > 0: output tokens * 1000 / e2e in s (milli-tokens/s).
        itl_ns: gaps between consecutive content events, in stream order.
        keepalive_gaps_ns: gaps between consecutive keepalive comments.
        keepalives: keepalive comments received.
        max_silence_ns: longest gap with no bytes (headers to end); None
            without a response head.
        keepalive_violation: ``max_silence_ns`` > the keepalive budget.
        proxy_buffering_suspected: see :func:`measure`.
        input_tokens, output_tokens: usage as the stream reported it, or None.
        content_events: ContentDelta observations (events with output, any kind).
        no_usage: a stream that got a body (not http_error / connect_error /
            cancelled) and reported no usage at all.
        anomalies: (kind, count) pairs from the decoder, in its order.
    """

    outcome: str
    detail: str
    status: int | None
    start_ns: int
    sent_ns: int
    headers_ns: int | None
    first_token_ns: int | None
    first_content_ns: int | None
    end_ns: int
    ttfb_ns: int | None
    ttft_ns: int | None
    ttft_from_send_ns: int | None
    ttft_content_ns: int | None
    queue_delay_ns: int | None
    elapsed_ns: int
    e2e_ns: int | None
    e2e_from_send_ns: int | None
    tpot_ns: int | None
    output_milli_tokens_per_s: int | None
    itl_ns: tuple[int, ...]
    keepalive_gaps_ns: tuple[int, ...]
    keepalives: int
    max_silence_ns: int | None
    keepalive_violation: bool
    proxy_buffering_suspected: bool
    input_tokens: int | None
    output_tokens: int | None
    content_events: int
    no_usage: bool
    anomalies: tuple[tuple[str, int], ...]


def measure(m: StreamMeter, end_ns: int, outcome: str, detail: str,
            result: StreamResult | None, *, keepalive_budget_ns: int) -> StreamRecord:
    """Apply the metric rules to one stream's stamps: the single place they live.

    Args:
        m: the stream's meter (closed at ``end_ns``).
        end_ns: when the stream ended (runner's clock, ns).
        outcome, detail: the stream's outcome and its counter suffix.
        result: the decoder's verdict, None when no body was decoded.
        keepalive_budget_ns: the longest allowed silence (``run.keepalive_budget_s``).

    Returns:
        The frozen StreamRecord.

    Rules (docs/results.md, "Units and histograms"):
        * Latencies count from ``start_ns`` (intended start in open loop); the
          ``*_from_send`` figures only exist when start and send differ.
        * e2e, tpot and output tokens/s only for completed streams, so a fast
          failure never improves a latency.
        * Tokens come from the decoder's result, else from the meter's usage
          observations.
        * proxy buffering is suspected on a completed stream with >= 4 content
          events that arrived in at most 2 network reads, whose TTFT was >=
          90 % of its E2E.

    Never raises.
    """
    start, sent = m.start_ns, m.sent_ns
    open_loop = start != sent
    headers, first, first_content = m.headers_ns, m.first_token_ns, m.first_content_ns
    if result is not None:
        inp, out = result.input_tokens, result.output_tokens
        anomalies = tuple(result.anomalies.items())
    else:
        inp, out = m.input_tokens, m.output_tokens
        anomalies = ()
    completed = outcome == "completed"
    e2e = end_ns - start if completed else None
    tpot = rate = None
    buffered = False
    if e2e is not None:
        if out and first is not None:
            if out > 1:
                tpot = (end_ns - first) // (out - 1)
            if e2e > 0:
                rate = int(out * 1000 * NS_PER_S / e2e)
        buffered = (first is not None and m.content_reads <= 2 and result is not None
                    and result.content_events >= 4 and first - start >= 0.9 * e2e)
    got_body = outcome not in ("http_error", "connect_error", "cancelled")
    k = m.keepalive_ns
    return StreamRecord(
        outcome=outcome,
        detail=detail,
        status=m.status,
        start_ns=start,
        sent_ns=sent,
        headers_ns=headers,
        first_token_ns=first,
        first_content_ns=first_content,
        end_ns=end_ns,
        ttfb_ns=None if headers is None else headers - start,
        ttft_ns=None if first is None else first - start,
        ttft_from_send_ns=first - sent if first is not None and open_loop else None,
        ttft_content_ns=None if first_content is None else first_content - start,
        queue_delay_ns=sent - start if open_loop else None,
        elapsed_ns=end_ns - start,
        e2e_ns=e2e,
        e2e_from_send_ns=end_ns - sent if completed and open_loop else None,
        tpot_ns=tpot,
        output_milli_tokens_per_s=rate,
        itl_ns=tuple(m.itl_ns),
        keepalive_gaps_ns=tuple(b - a for a, b in zip(k, k[1:])),
        keepalives=len(k),
        max_silence_ns=None if headers is None else m.max_silence_ns,
        keepalive_violation=headers is not None and m.max_silence_ns > keepalive_budget_ns,
        proxy_buffering_suspected=buffered,
        input_tokens=inp,
        output_tokens=out,
        content_events=len(m.itl_ns) + (m.last_content_ns is not None),
        no_usage=got_body and inp is None and out is None,
        anomalies=anomalies,
    )


def outcome_counters(outcome: str, detail: str) -> tuple[str, ...]:
    """The counters one stream's outcome increments, each by 1.

    Returns:
        ``(outcome,)`` plus, where it applies, ``http_error.<status>`` and
        ``http_error_code.<code>`` (detail "status[:code]"),
        ``<outcome>.<detail>`` (timeout, connect_error, truncated with a
        detail), ``failed.<code>`` ("unknown" without one).
    """
    if outcome == "http_error":
        st, _, code = detail.partition(":")
        return (outcome, f"http_error.{st}") + ((f"http_error_code.{code}",) if code else ())
    if outcome in ("timeout", "connect_error", "truncated") and detail:
        return (outcome, f"{outcome}.{detail}")
    if outcome == "failed":
        return (outcome, f"failed.{detail or 'unknown'}")
    return (outcome,)


def record_stream(rec: Recorder, scope: str, r: StreamRecord) -> None:
    """Record one stream's figures and counters in ``rec`` under ``scope``.

    Histograms get each figure that is not None (``itl``, ``keepalive_interval``:
    every value); counters: :func:`outcome_counters`, ``keepalive_violations``,
    ``keepalives`` (n), ``anomaly.<kind>`` (n), ``proxy_buffering_suspected``,
    ``no_usage``, and ``tokens.<input|output>.<completed|broken>`` (n) for
    streams that got a body.

    Raises:
        UsageError: ``scope`` is not one of ``rec``'s scenario scopes.
    """
    for name in outcome_counters(r.outcome, r.detail):
        rec.incr(scope, name)
    if r.ttfb_ns is not None:
        rec.record(scope, "ttfb", r.ttfb_ns)
    if r.max_silence_ns is not None:
        rec.record(scope, "max_silence", r.max_silence_ns)
    if r.keepalive_violation:
        rec.incr(scope, "keepalive_violations")
    for metric, value in (("queue_delay", r.queue_delay_ns), ("ttft", r.ttft_ns),
                          ("ttft_from_send", r.ttft_from_send_ns),
                          ("ttft_content", r.ttft_content_ns)):
        if value is not None:
            rec.record(scope, metric, value)
    rec.record_many(scope, "itl", r.itl_ns)
    rec.record_many(scope, "keepalive_interval", r.keepalive_gaps_ns)
    if r.keepalives:
        rec.incr(scope, "keepalives", r.keepalives)
    for kind, n in r.anomalies:
        rec.incr(scope, f"anomaly.{kind}", n)
    for metric, value in (("e2e", r.e2e_ns), ("e2e_from_send", r.e2e_from_send_ns),
                          ("tpot", r.tpot_ns), ("output_tokens_per_s", r.output_milli_tokens_per_s)):
        if value is not None:
            rec.record(scope, metric, value)
    if r.proxy_buffering_suspected:
        rec.incr(scope, "proxy_buffering_suspected")
    if r.outcome in ("http_error", "connect_error"):
        return
    if r.no_usage:
        rec.incr(scope, "no_usage")
    kind = "completed" if r.outcome == "completed" else "broken"
    if r.input_tokens:
        rec.incr(scope, f"tokens.input.{kind}", r.input_tokens)
    if r.output_tokens:
        rec.incr(scope, f"tokens.output.{kind}", r.output_tokens)


def stream_line(r: StreamRecord, request_id: str, scope: str, t0_ns: int) -> dict[str, Any]:
    """One streams.jsonl line (docs/results.md): stamps relative to ``t0_ns``.

    Returns:
        A JSON-ready dict: id, scenario, outcome, detail (None when ""), status,
        start/sent/headers/first_token/end stamps (ns from the run start, None
        when absent), ttft_ns, e2e_ns (start to end, every outcome),
        content_events, input_tokens, output_tokens, max_silence_ns (0 without
        a response head), keepalives.
    """

    def rel(t: int | None) -> int | None:
        return None if t is None else t - t0_ns

    return {
        "id": request_id, "scenario": scope, "outcome": r.outcome, "detail": r.detail or None,
        "status": r.status, "start_ns": rel(r.start_ns), "sent_ns": rel(r.sent_ns),
        "headers_ns": rel(r.headers_ns), "first_token_ns": rel(r.first_token_ns),
        "end_ns": rel(r.end_ns), "ttft_ns": r.ttft_ns, "e2e_ns": r.elapsed_ns,
        "content_events": r.content_events, "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens,
        "max_silence_ns": r.max_silence_ns or 0, "keepalives": r.keepalives,
    }
