"""The metric rules: one stream's stamps in, its frozen record out.

Role: pure and synchronous (STYLE.md §1). :func:`measure` is the single place
that decides, once per finished stream, what counts as TTFT, TPOT, E2E, which
tokens count (usage, else the content events), where the answer ends (its
terminal event), the silences and the burst flags, from the stamps a
``StreamMeter`` (hopbench.measure._meter) kept as the stream arrived; the
:class:`StreamRecord` it returns goes to the recorder (hopbench.measure._sinks)
and to streams.jsonl (hopbench.measure._lines). docs/results/units.md defines
each figure.

Invariants: every time is integer ns on the runner's clock; a figure a stream
never produced is None, never 0; latencies count from ``start_ns`` (the
intended start in an open loop: no coordinated omission).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ._burst import PACED_GAP_MIN_NS
from ._meter import StreamMeter
from .._units import NS_PER_S
from ..protocols import EVENT_CHANNELS, StreamResult, stop_class

__all__ = ["CLIENT_LAG_MIN_NS", "StreamRecord", "measure"]


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
            "rate_limit_error", "429:rate_limit", "malformed_event".
        status: the HTTP status, None when no response head arrived.
        start_ns: when the stream counts as started (intended start, open loop).
        sent_ns: when the request was sent.
        headers_ns, first_token_ns, first_content_ns: stamps or None.
        terminal_ns: the read that carried the protocol's terminal event
            (``[DONE]``, ``response.completed``/``incomplete``/``failed``,
            ``message_stop``, an in-band error), or None.
        answer_end_ns: where the answer ended: ``terminal_ns``; without one, the
            last byte of a completed stream, else ``end_ns``.
        end_ns: the end of the body as the runner saw it (closed, error, timeout).
        ttfb_ns: start to the response head; None without one.
        ttft_ns: start to the first output token of any kind; None without one.
        ttft_from_send_ns: send to the first token, only when start != send.
        ttft_content_ns: start to the first non-reasoning output; None without one.
        queue_delay_ns: start to send, only when they differ (open loop).
        elapsed_ns: start to ``answer_end_ns`` (every stream: streams.jsonl ``e2e_ns``).
        e2e_ns: completed streams only: start to ``answer_end_ns``.
        e2e_from_send_ns: completed streams with start != send: send to ``answer_end_ns``.
        tail_ns: ``terminal_ns`` to ``end_ns`` (the body's rest after the
            answer), for streams whose terminal event arrived.
        tokens_source: where the per-answer token count of tpot / tokens/s
            came from: "usage" (output tokens / choices), "events" (no usage:
            ``output_events``, one token per channel fragment), None (no count).
        answer_tokens: that per-answer token count (a float: usage divided by
            choices), None without one.
        tpot_ns: completed streams with a first token and ``answer_tokens`` > 1:
            (answer end - first token) / (answer_tokens - 1), rounded down.
        output_milli_tokens_per_s: completed streams with ``answer_tokens`` and
            e2e > 0: answer_tokens * 1000 / e2e in s (milli-tokens/s).
        itl_count: gaps between consecutive content events measured (each one
            was recorded as ``itl`` when it happened, through the meter's sink).
        itl_max_ns: the largest of them, 0 when none.
        itl_sum_ns: their sum, ns (the stream's own mean ITL is
            ``itl_sum_ns // itl_count``).
        itl_digest: the meter's digest as sorted ``(bucket ns, count)`` pairs
            (``hopbench.measure._digest``), None when the meter kept none.
        keepalive_gaps: silences the keepalives split (each recorded as
            ``keepalive_interval`` when it ended, through the meter's sink).
        keepalives: keepalive comments received before the terminal event.
        max_silence_ns: longest gap with no bytes, from the headers to the
            terminal event (else to ``end_ns``); None without a response head.
        keepalive_violation: ``max_silence_ns`` > the keepalive budget.
        proxy_buffering_suspected: see :func:`measure` (re-judged after the run
            against the origin's record where one exists: ``hopbench.measure._burst``).
        burst_held_ns: for a ``proxy_buffering_suspected`` stream, how long the
            burst was held before it reached the client's socket, ns (see
            :func:`measure`); None for every other stream.
        client_lagged: the stream arrived as such a burst, but a read that
            carried its content was served late by the client's own event
            loop (see :func:`measure`): not evidence of a buffering proxy.
        client_lag_ns: the largest client loop lag at a read that carried
            content (0 when none, or no content).
        input_tokens, output_tokens, total_tokens: usage as the stream
            reported it (all choices), or None.
        usage_total_mismatch: total_tokens was sent and is not input + output.
        choices: distinct choices (chat ``n``), >= 1.
        events: output events per channel as the decoder counted them
            (``StreamResult.events``), (("text", n), ("reasoning", n), ("tool", n),
            ("refusal", n)); all 0 without a decoded body.
        output_events: output events of every channel (the sum of ``events``).
        content_events: output events that are not reasoning (text, tool and
            refusal): the "content" of ``ttft_content``.
        stop_class: ``protocols.stop_class`` of the stop reason, None without a body.
        refused: the stream carried refusal output (the refusal channel).
        hidden_reasoning: usage reported reasoning tokens but no reasoning arrived.
        no_done: a chat stream completed without ``[DONE]``.
        no_usage: a stream that got a response head and a body (not
            http_error / connect_error / cancelled) and reported no usage at all.
        anomalies: (kind, count) pairs from the decoder, in its order.
        headers: (name, value) of the response headers ``run.record_headers``
            names, as received (values cut to ``HEADER_VALUE_MAX_CHARS``).
        bounds: ``(metric, value_ns, below_ns, above_ns)`` for each of this
            stream's figures above whose stamps are not exact (the true value
            lies in ``[value - below, value + above]``), in record order;
            figures with exact stamps are not listed (docs/results.md, "Times
            from the wire").
        items_exact, items_bounded: the meter's counts of SSE items with an
            exact stamp and with a bounded one.
    """

    outcome: str
    detail: str
    status: int | None
    start_ns: int
    sent_ns: int
    headers_ns: int | None
    first_token_ns: int | None
    first_content_ns: int | None
    terminal_ns: int | None
    answer_end_ns: int
    end_ns: int
    ttfb_ns: int | None
    ttft_ns: int | None
    ttft_from_send_ns: int | None
    ttft_content_ns: int | None
    queue_delay_ns: int | None
    elapsed_ns: int
    e2e_ns: int | None
    e2e_from_send_ns: int | None
    tail_ns: int | None
    tokens_source: str | None
    answer_tokens: float | None
    tpot_ns: int | None
    output_milli_tokens_per_s: int | None
    itl_count: int
    itl_max_ns: int
    itl_sum_ns: int
    itl_digest: tuple[tuple[int, int], ...] | None
    keepalive_gaps: int
    keepalives: int
    max_silence_ns: int | None
    keepalive_violation: bool
    proxy_buffering_suspected: bool
    client_lagged: bool
    client_lag_ns: int
    input_tokens: int | None
    output_tokens: int | None
    total_tokens: int | None
    usage_total_mismatch: bool
    choices: int
    output_events: int
    content_events: int
    events: tuple[tuple[str, int], ...]
    stop_class: str | None
    refused: bool
    hidden_reasoning: bool
    no_done: bool
    no_usage: bool
    anomalies: tuple[tuple[str, int], ...]
    headers: tuple[tuple[str, str], ...] = ()
    #: prompt tokens the server's prompt cache held, as its usage reported
    #: them (``StreamResult.cached_tokens``), None when not reported
    cached_tokens: int | None = None
    burst_held_ns: int | None = None
    bounds: tuple[tuple[str, int, int, int], ...] = ()
    items_exact: int = 0
    items_bounded: int = 0


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

    Rules (docs/results/units.md, "Units and histograms"):
        * Latencies count from ``start_ns`` (intended start in open loop); the
          ``*_from_send`` figures only exist when start and send differ.
        * The answer ends at the terminal event (``[DONE]``,
          ``response.completed``, ``message_stop``, ...), or at the last byte
          of a completed stream without one; e2e, tpot and tokens/s end there,
          and the rest of the body is ``tail``.
        * e2e, tpot and output tokens/s only for completed streams, so a fast
          failure never improves a latency; they are per answer: usage output
          tokens / choices, or without usage the content events.
        * Tokens come from the decoder's result, else from the meter's usage
          observations.
        * A completed stream's burst flags: the rule is :func:`_burst`'s.

    Never raises.
    """
    start, sent = m.start_ns, m.sent_ns
    open_loop = start != sent
    headers, first, first_content = m.headers_ns, m.first_token_ns, m.first_content_ns
    completed = outcome == "completed"
    terminal = m.terminal_ns
    answer_end = _answer_end(m, completed, end_ns)
    d = _Decoded.of(m, result)
    events, inp, out, total, choices = d.events, d.input_tokens, d.output_tokens, d.total_tokens, d.choices
    output_events = sum(n for _, n in events)
    content_events = output_events - dict(events)["reasoning"]
    source, answer_tokens = _answer_tokens(out, choices, output_events)
    e2e = answer_end - start if completed else None
    tpot = rate = None
    buffered = lagged = False
    held: int | None = None
    if e2e is not None:
        tpot, rate = _pace(first, answer_end, e2e, answer_tokens)
        buffered, lagged, held = _burst(m, e2e, output_events)
    # a cut stream, or one that never got a response, had no chance to report usage
    got_body = (outcome not in ("http_error", "connect_error", "cancelled", "client_cancelled")
                and headers is not None)
    bounds = _bounds(m, completed, answer_end, end_ns, e2e, tpot, answer_tokens)
    return StreamRecord(
        outcome=outcome,
        detail=detail,
        status=m.status,
        start_ns=start,
        sent_ns=sent,
        headers_ns=headers,
        first_token_ns=first,
        first_content_ns=first_content,
        terminal_ns=terminal,
        answer_end_ns=answer_end,
        end_ns=end_ns,
        ttfb_ns=None if headers is None else headers - start,
        ttft_ns=None if first is None else first - start,
        ttft_from_send_ns=first - sent if first is not None and open_loop else None,
        ttft_content_ns=None if first_content is None else first_content - start,
        queue_delay_ns=sent - start if open_loop else None,
        elapsed_ns=answer_end - start,
        e2e_ns=e2e,
        e2e_from_send_ns=answer_end - sent if completed and open_loop else None,
        tail_ns=None if terminal is None else max(end_ns - terminal, 0),
        tokens_source=source if completed else None,
        answer_tokens=answer_tokens,
        tpot_ns=tpot,
        output_milli_tokens_per_s=rate,
        itl_count=m.itl_count,
        itl_max_ns=m.itl_max_ns,
        itl_sum_ns=m.itl_sum_ns,
        itl_digest=None if m.itl_digest is None else tuple(sorted(m.itl_digest.items())),
        keepalive_gaps=m.keepalive_gap_count,
        keepalives=m.keepalives,
        # silences are a stream's: an HTTP error's body is no stream (a dead target's
        # instant 501s must not read as "shorter silences" in a compare)
        max_silence_ns=None if headers is None or outcome == "http_error" else m.max_silence_ns,
        keepalive_violation=(headers is not None and outcome != "http_error"
                             and m.max_silence_ns > keepalive_budget_ns),
        proxy_buffering_suspected=buffered,
        client_lagged=lagged,
        client_lag_ns=m.content_read_lag_max_ns,
        input_tokens=inp,
        output_tokens=out,
        total_tokens=total,
        usage_total_mismatch=(total is not None and inp is not None and out is not None
                              and total != inp + out),
        choices=choices,
        output_events=output_events,
        events=events,
        content_events=content_events,
        stop_class=d.stop_class,
        refused=d.refused,
        hidden_reasoning=d.hidden_reasoning,
        no_done=d.no_done,
        no_usage=got_body and inp is None and out is None,
        anomalies=d.anomalies,
        headers=m.headers,
        cached_tokens=None if result is None else result.cached_tokens,
        burst_held_ns=held if buffered else None,
        bounds=bounds,
        items_exact=m.items_exact,
        items_bounded=m.items_bounded,
    )


def _answer_end(m: StreamMeter, completed: bool, end_ns: int) -> int:
    """Where the answer ended (ns): the terminal event, else a completed stream's last
    byte, else the stream's end."""
    if m.terminal_ns is not None:
        return m.terminal_ns
    if completed and m.last_byte_ns is not None:
        return m.last_byte_ns
    return end_ns


def _answer_tokens(out: int | None, choices: int,
                   output_events: int) -> tuple[str | None, float | None]:
    """(tokens_source, tokens per answer): usage's output tokens over the choices, else,
    when the stream reported no usage, its output events; (None, None) without either."""
    if out:
        return "usage", out / choices
    if out is None and output_events:
        return "events", float(output_events)
    return None, None


def _pace(first: int | None, answer_end: int, e2e: int,
          answer_tokens: float | None) -> tuple[int | None, int | None]:
    """(TPOT ns, output milli-tokens/s) of a completed answer; None where undefined
    (no first token, one token for TPOT, no tokens, zero e2e)."""
    if not answer_tokens or first is None:
        return None, None
    tpot = int((answer_end - first) / (answer_tokens - 1)) if answer_tokens > 1 else None
    rate = int(answer_tokens * 1000 * NS_PER_S / e2e) if e2e > 0 else None
    return tpot, rate


def _bounds(m: StreamMeter, completed: bool, answer_end: int, end_ns: int, e2e: int | None,
            tpot: int | None, answer_tokens: float | None) -> tuple[tuple[str, int, int, int], ...]:
    """The error bounds of one stream's wire-stamped figures (docs/results/units.md,
    "Times from the wire").

    Returns:
        ``(metric, value_ns, above_ns, below_ns)`` per figure whose stamps carry a bound:
        the true value lies in ``[value - below, value + above]``; empty when every
        stamp was exact.
    """
    start, sent, headers = m.start_ns, m.sent_ns, m.headers_ns
    first, first_content, terminal = m.first_token_ns, m.first_content_ns, m.terminal_ns
    open_loop = start != sent
    end_b = m.terminal_bound_ns if terminal is not None else (
        m.last_byte_bound_ns if completed and m.last_byte_ns is not None else 0)
    bounds: list[tuple[str, int, int, int]] = []
    if headers is not None and m.headers_bound_ns:
        bounds.append(("ttfb", headers - start, m.headers_bound_ns, 0))
    fb = m.first_token_bound_ns
    if first is not None and fb:
        bounds.append(("ttft", first - start, fb, 0))
        if open_loop:
            bounds.append(("ttft_from_send", first - sent, fb, 0))
    if first_content is not None and m.first_content_bound_ns:
        bounds.append(("ttft_content", first_content - start, m.first_content_bound_ns, 0))
    if e2e is not None and end_b:
        bounds.append(("e2e", e2e, end_b, 0))
        if open_loop:
            bounds.append(("e2e_from_send", answer_end - sent, end_b, 0))
    if tpot is not None and answer_tokens and (end_b or fb):
        n = answer_tokens - 1  # (> 0: tpot exists)
        bounds.append(("tpot", tpot, int(end_b / n), int(fb / n)))
    if terminal is not None and m.terminal_bound_ns:
        bounds.append(("tail", max(end_ns - terminal, 0), 0, m.terminal_bound_ns))
    return tuple(bounds)


@dataclass(frozen=True, slots=True)
class _Decoded:
    """What the decoder's verdict says of one stream (or the meter's usage without one)."""

    events: tuple[tuple[str, int], ...]
    input_tokens: int | None
    output_tokens: int | None
    total_tokens: int | None
    anomalies: tuple[tuple[str, int], ...]
    choices: int
    stop_class: str | None
    refused: bool
    hidden_reasoning: bool
    no_done: bool

    @staticmethod
    def of(m: StreamMeter, result: StreamResult | None) -> _Decoded:
        """Tokens from the decoder's result, else from the meter's usage observations."""
        if result is None:
            return _Decoded(tuple((k, 0) for k in EVENT_CHANNELS), m.input_tokens, m.output_tokens, None,
                            (), 1, None, False, False, False)
        return _Decoded(
            tuple((k, result.events.get(k, 0)) for k in EVENT_CHANNELS),
            result.input_tokens, result.output_tokens, result.total_tokens,
            tuple(result.anomalies.items()), max(result.choices, 1), stop_class(result.stop_reason),
            result.events.get("refusal", 0) > 0 or bool(result.refusal_text),
            result.hidden_reasoning, result.no_done)


def _burst(m: StreamMeter, e2e_ns: int, output_events: int) -> tuple[bool, bool, int | None]:
    """A completed stream's burst verdict.

    A completed stream is a *burst* when its >= 4 output events arrived
    in at most 2 network reads and its TTFT was >= 90 % of its E2E. A
    burst is ``client_lagged`` when the read that carried its content
    latest (by the client's loop lag, given with each read) was served
    at least ``max(CLIENT_LAG_MIN_NS, silence / 10)`` late, where silence
    is the gap that read ended (``StreamMeter.content_read_lag_gap_ns``):
    a lag that long could have piled the events up in the client's own
    socket. A buffering proxy holds the answer for the whole generation,
    a silence far longer than the client's lag. Any other burst is
    ``proxy_buffering_suspected`` when it was held long enough to have
    been generated at a paced rate: from the response head (from the
    send when the head came with the burst, within the client's lag or
    1 ms) to its arrival in the client's socket (its stamp minus that
    lag) at least ``(output events - 1) x PACED_GAP_MIN_NS``. The head
    marks when the server began to answer: time a busy server took to
    get to the request is not a hold. A shorter one is an
    origin that wrote the whole answer at once (a mock, a cache, an
    unpaced emulator), no proxy needed: not flagged. (A client cannot
    tell a buffering proxy from an unpaced origin whose first byte came
    that late; the flag says "suspected". Where the origin's own record
    exists, ``hopbench.measure._burst`` judges each flagged stream again after the
    run: ``origin_burst`` or ``proxy_buffering_confirmed``.)


    Returns:
        (proxy_buffering_suspected, client_lagged, the suspected burst's hold in ns or None).
    """
    first, start = m.first_token_ns, m.start_ns
    burst = (first is not None and m.content_reads <= 2 and output_events >= 4
             and first - start >= 0.9 * e2e_ns)
    lagged = burst and m.content_read_lag_max_ns >= max(CLIENT_LAG_MIN_NS, m.content_read_lag_gap_ns // 10)
    if not burst or lagged:
        return False, lagged, None
    held = _held_ns(m, first, m.sent_ns)
    return held >= (output_events - 1) * PACED_GAP_MIN_NS, False, held


def _held_ns(m: StreamMeter, first_ns: int | None, sent_ns: int) -> int:
    """How long a burst was held before it reached the client's socket, ns: from the
    response head, or from the send when the head came with the burst (within the
    client's lag or 1 ms, as a proxy that holds the whole response sends it), to the
    first token's stamp: its arrival when the kernel stamped it, else its read's
    loop time less the client's lag."""
    if first_ns is None:
        return 0
    lag = m.content_read_lag_max_ns
    head = m.headers_ns
    since = sent_ns if head is None or first_ns - head <= max(CLIENT_LAG_MIN_NS, lag) else head
    return first_ns - since - (lag if m.first_token_late_ns else 0)


CLIENT_LAG_MIN_NS = 1_000_000
"""A read served later than this (and than 10 % of the silence it ended) by the
client's own event loop explains a burst: 1 ms, about a busy loop's p50 lag."""
