"""Per-stream measurement: stamped reads and observations in, the stream's stamps kept.

Pure and synchronous (STYLE.md §1): no clock, no trio, no sockets. The runner
gives every network read its loop time, its client lag and, where the transport
has one, the kernel's receive stamp of its latest bytes (``SO_TIMESTAMPNS``);
:meth:`StreamMeter.on_read` makes of them the read's *wire stamp* (when its
bytes reached the client's socket) and the error bound of each event's stamp,
and the runner hands the meter the decoder's observations with that stamp; at the end
``measure`` (hopbench.measure._rules) applies every metric rule (what counts as TTFT,
TPOT, E2E, which tokens count, silences, flags) and returns a ``StreamRecord``,
which ``record_stream`` (hopbench.measure._sinks) puts into the ``Recorder``
and ``stream_line`` (hopbench.measure._lines) turns into a streams.jsonl line. Events that arrive in one read share one
stamp, so an inter-token gap of 0 means "same read".

Wire stamps and their bounds (docs/results/units.md, "Times from the wire"): a read's
kernel stamp is exact for its latest bytes only (Linux gives a read of several
coalesced segments the latest one's stamp, socket(7)). So an event is stamped
exactly when it is the last SSE item of its read and the read ends at an event
boundary; every other event of the read gets the read's stamp as an upper bound
and ``stamp - previous read's stamp`` as its error bound (its bytes came after
the previous read's), or less where the runner knows a later moment the bytes
came after (``since_ns``: a read that waited for them). Without a kernel stamp (httpx's transport, TLS) the stamp
is the read's loop time and the bound of its last event the read's client lag
(at most the time since the previous read's stamp). A figure's sample is then
an interval ``[value - below, value + above]`` that holds the true value; the
meter hands every sample with a bound to its ``bounds`` sink, and the percentile
error bounds follow from them (``hopbench.measure._error_bound``).

Latencies count from ``start_ns``: the intended start in an open loop (wrk2:
no coordinated omission), the send time in a closed loop. ``sent_ns`` is kept
beside it so the uncorrected figures can be reported too.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable
from typing import Final, Protocol

from ._digest import bucket_of
from ..protocols import ContentDelta, FirstContentToken, FirstToken, Keepalive, Observation, StreamEnd, UsageReport

__all__ = ["StreamMeter", "GapSink", "BoundSink", "BOUND_FLOOR_NS", "LAG_BATCH"]

#: ContentDelta kind -> its list in ``Decoder.kept_fragments()``
_KEPT_INDEX = {"text": 0, "reasoning": 1, "refusal": 2}

BOUND_FLOOR_NS: Final = 100_000
"""A stamp's error bound under this (0.1 ms) counts as exact, ns: a tenth of the
1 ms under which no figure is marked uncertain (``_error_bound.ERROR_MIN_NS``), so
the error bounds read at most 0.1 ms low, and a loop-time stamp on a quiet
machine (a few tens of us of lag) costs no bound record per event."""

LAG_BATCH: Final = 64
"""Reads whose client lags a meter holds before it hands them over (``read_lags``):
at most 64 ints per stream; an interval then shows a stream's read lags up to
64 reads late."""

class GapSink(Protocol):
    """Where a meter puts each gap the moment it is measured: ``sink(metric, value_ns)``
    with metric ``"itl"``, ``"keepalive_interval"`` or ``"client_read_lag"``
    (``_metrics.METRICS``); ``sink("itl", 0, n)`` records ``n`` alike gaps at once (the
    events that shared one read with the content event before them: :meth:`StreamMeter.end_read`)."""

    def __call__(self, metric: str, value: int, n: int = 1, /) -> None: ...

BoundSink = Callable[[str, int, int, int, int], None]
"""Where a meter puts each sample whose stamps are not exact:
``sink(metric, value_ns, below_ns, above_ns, n)``, ``n`` samples alike, each true value
lying in ``[value - below, value + above]`` (``Recorder.bound_sink``). Samples with
exact stamps (both bounds 0) are not handed over: the recorder takes the
reported histogram's count for them. ITL samples come in runs of alike ones (the
events that shared a read), each run when the next unlike one comes and the last at
:meth:`StreamMeter.close`; the gap-0 samples of a read's later events as one run a read
(:meth:`StreamMeter.end_read`)."""


class StreamMeter:
    """Collects one stream's stamps (pure: the runner gives every stamp).

    Args:
        start_ns: when the stream counts as started (intended start in open loop).
        sent_ns: when the request was actually sent (>= start_ns in open loop).
        sink: receives every inter-token gap (``"itl"``) and keepalive gap
            (``"keepalive_interval"``) when it is measured (the runner's
            :func:`recorder_sink`); None: the gaps are only counted.
        itl_digest: also keep a bounded digest of this stream's gaps
            (``hopbench.measure._digest``: at most 0.8 % above each gap), for a
            per-request ITL percentile SLO (docs/slo.md).
        bounds: receives every gap whose stamps are not exact, with its bounds
            (:data:`BoundSink`; the runner's ``Recorder.bound_sink``); None:
            the bounds are not kept. A bound under :data:`BOUND_FLOOR_NS`
            counts as exact.
        read_lags: receives the reads' client lags (``client_read_lag``, ns) as
            ``read_lags(lags, zeros)``: every :data:`LAG_BATCH` reads and at
            :meth:`close`, the lags of at least :data:`BOUND_FLOOR_NS` and the
            count of the others, recorded as 0 (the runner's
            ``Recorder.many_sink``: one call per batch, not per read); None:
            each goes to ``sink`` as it is measured (or nowhere without one).

    Memory is independent of the stream's length (issue 16): the meter keeps
    scalars (counts, the sum and largest gap, the last stamps) and at most a
    digest whose size depends on the gaps' range, never a list of gaps;
    each gap goes to ``sink`` as it is measured.

    All stamp attributes are integer ns from the runner's clock, or None when
    the moment never came; each is a wire stamp (see the module's docstring)
    and ``*_bound_ns`` beside it says how much earlier its bytes can have
    arrived (0: exact). Once the decoder's terminal signal (``StreamEnd``)
    arrived, later reads count neither as silences nor as keepalives (the
    answer has ended; what follows is the body's tail).

    Attributes (beyond the stamps):
        itl_count, itl_max_ns, itl_sum_ns: how many gaps between consecutive
            content events (any channel) were measured, the largest and their
            sum (ns, 0 when none).
        itl_digest: ``{bucket_of(gap): count}``, or None when not asked for.
        keepalives: keepalive comments before the terminal signal.
        keepalive_gap_count: silences the keepalives split (each one went to
            the sink as ``keepalive_interval``): headers (or the last read
            before a keepalive) to the keepalive, keepalive to keepalive, last
            keepalive to the next read that is not a keepalive.
        content_reads: network reads that carried at least one content event.
        content_read_lag_max_ns: the largest client-side loop lag (given by the
            runner with each read) of a read that carried content.
        content_read_lag_gap_ns: the silence that read ended: from the read
            before it (the headers count), or from the send when that read
            too came within the lag.
        items_exact, items_bounded: SSE items (events and comments) whose
            stamp is exact (the last item of a kernel-stamped read that ends
            at an event boundary) and the others (bounded).
        headers_bound_ns, first_token_bound_ns, first_content_bound_ns,
            terminal_bound_ns, last_byte_bound_ns: the error bound of each of
            those stamps, ns (0: exact); the true arrival lies in
            ``[stamp - bound, stamp]``.
        first_token_late_ns: how much later than its stamp the client served
            the first token's read when the stamp is not the kernel's (its
            client lag; 0 with a kernel stamp: the stamp is the arrival).
        body_end_ns, body_end_bound_ns: when the body's last bytes reached the
            socket and that stamp's bound (:meth:`on_body_end`); None and 0
            until the read loop ended.
    """

    __slots__ = (
        "start_ns", "sent_ns", "headers_ns", "status", "last_byte_ns",
        "max_silence_ns", "first_token_ns", "first_content_ns", "last_content_ns",
        "terminal_ns", "itl_count", "itl_max_ns", "itl_sum_ns", "itl_digest", "keepalives", "keepalive_gap_count",
        "content_reads", "_sink",
        "_last_content_read", "input_tokens", "output_tokens", "reads",
        "content_read_lag_max_ns", "headers", "_prev_read_ns",
        "_ka_open_ns", "_ka_closed_read", "_read_lag_ns", "content_read_lag_gap_ns",
        "event_chars", "event_read_ns", "first_read_ns", "event_crc", "_kept_seen", "keepalive_read_ns",
        "quiet_read_ns", "_bounds", "_wire_ns", "_cur_b", "_tail_b", "_last_content_b", "_ka_open_b",
        "items_exact", "items_bounded", "headers_bound_ns", "first_token_bound_ns", "first_content_bound_ns",
        "terminal_bound_ns", "last_byte_bound_ns", "first_token_late_ns", "_late_ns", "event_bound_ns",
        "_lags", "_read_lags", "_lag_n", "first_read_bound_ns", "_head_rx", "body_end_ns", "body_end_bound_ns",
        "_bq", "zero_run",
    )

    def __init__(self, start_ns: int, sent_ns: int, sink: GapSink | None = None,
                 *, itl_digest: bool = False, bounds: BoundSink | None = None,
                 read_lags: Callable[[list[int], int], None] | None = None) -> None:
        self.start_ns = start_ns
        self.sent_ns = sent_ns
        self.headers_ns: int | None = None
        self.status: int | None = None  # the response's HTTP status, once its head arrived
        self.headers: tuple[tuple[str, str], ...] = ()  # recorded response headers (run.record_headers)
        self.last_byte_ns: int | None = None
        self.max_silence_ns = 0
        self.first_token_ns: int | None = None
        self.first_content_ns: int | None = None
        self.last_content_ns: int | None = None
        self.terminal_ns: int | None = None
        self.itl_count = 0
        self.itl_max_ns = 0
        self.itl_sum_ns = 0
        #: {bucket_of(gap): count} when asked for (a per-request ITL percentile SLO), else None
        self.itl_digest: dict[int, int] | None = {} if itl_digest else None
        self.keepalives = 0
        self.keepalive_gap_count = 0
        self._sink = sink
        self.content_reads = 0
        self._last_content_read: int | None = None
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.reads = 0
        self.content_read_lag_max_ns = 0
        self.content_read_lag_gap_ns = 0
        self._prev_read_ns: int | None = None  # the read (or headers) before the current read
        self._ka_open_ns: int | None = None  # the last keepalive, while its silence is open
        self._ka_closed_read = -1  # the read that closed a keepalive silence
        self._read_lag_ns = 0
        #: gateway overhead only (the runner sets both lists): characters and read stamp of
        #: each content event
        self.event_chars: list[int] | None = None
        self.event_read_ns: list[int] | None = None
        self.first_read_ns: int | None = None  # the first body read
        #: gateway overhead only (the runner sets it with the lists above): the CRC-32 of each
        #: content event's text (-1: a tool-call event, not compared), see on_event_texts
        self.event_crc: list[int] | None = None
        self._kept_seen: list[int] | None = None  # fragments of (text, reasoning, refusal) already hashed
        #: gateway overhead only: the read stamp of each keepalive comment, ns
        self.keepalive_read_ns: list[int] | None = None
        #: gateway overhead only: the stamp of each body read that carried no content event, ns
        self.quiet_read_ns: list[int] | None = None
        #: gateway overhead only (made with the first entry of ``event_read_ns``): each content
        #: event's stamp's error bound, ns
        self.event_bound_ns: list[int] | None = None
        self._bounds = bounds
        # the reads' client lags, handed to read_lags LAG_BATCH at a time (and at close)
        self._read_lags = read_lags
        self._lags: list[int] | None = [] if read_lags is not None else None
        self._lag_n = 0  # reads since the last hand-over
        self._wire_ns = sent_ns  # the latest wire stamp: the next read's bytes came after it
        self._cur_b = 0  # the error bound of the events being applied now, ns
        self._tail_b = 0  # the error bound of the current read's last item, ns
        self._late_ns = 0  # the current stamp's lateness when it is the loop time (its client lag)
        self._last_content_b = 0
        self._ka_open_b = 0
        self.items_exact = 0
        self.items_bounded = 0
        self.headers_bound_ns = 0
        self.first_token_bound_ns = 0
        self.first_content_bound_ns = 0
        self.terminal_bound_ns = 0
        self.last_byte_bound_ns = 0
        self.first_token_late_ns = 0
        self.first_read_bound_ns = 0  # the first body read's first bytes: their stamp's bound
        self._head_rx = 0  # the head's kernel stamp, until a body read shows it was not the head's alone
        #: when the body's last bytes reached the socket (:meth:`on_body_end`), or None
        self.body_end_ns: int | None = None
        self.body_end_bound_ns = 0
        #: a run of alike bounded ITL samples not yet handed to ``bounds``: [gap, below, above, n]
        self._bq: list[int] | None = None
        #: content events counted but not yet recorded: the gap-0 ITL samples of events that
        #: shared a read (and its bounds) with the content event before them (:meth:`end_read`)
        self.zero_run = 0

    def _wire(self, t_ns: int, rx_ns: int, lag_ns: int, tail: bool) -> int:
        """The wire stamp of a read served at ``t_ns`` (see :meth:`on_read`); sets the
        bounds of its items (``_tail_b`` for its last one, ``_cur_b`` for the others)."""
        lo = self._wire_ns
        if rx_ns:
            # the kernel's stamp on the runner's clock (converted from CLOCK_REALTIME:
            # microseconds off at worst): kept between the previous stamp and the read
            wire = rx_ns if lo <= rx_ns <= t_ns else (t_ns if rx_ns > t_ns else lo)
            self._late_ns = 0
            tail_b = 0 if tail else wire - lo
        else:
            wire = t_ns
            self._late_ns = lag_ns if lag_ns > 0 else 0
            tail_b = min(self._late_ns, wire - lo) if tail else wire - lo
        self._wire_ns = wire
        self._cur_b = wire - lo if wire - lo >= BOUND_FLOOR_NS else 0
        self._tail_b = tail_b if tail_b >= BOUND_FLOOR_NS else 0
        return wire

    def on_headers(self, t_ns: int, rx_ns: int = 0, lag_ns: int = 0) -> int:
        """The response head was read at ``t_ns``.

        Args:
            t_ns: when the runner read it (its loop time), clock ns.
            rx_ns: the kernel's receive stamp of the head's latest bytes (clock
                ns; 0: none, e.g. httpx's transport or TLS).
            lag_ns: the client lag at that read, ns (the bound of a loop-time stamp).

        Returns:
            The head's wire stamp (``headers_ns``), ns.
        """
        wire = self._wire(t_ns, rx_ns, lag_ns, True)
        self.headers_ns = wire
        self.last_byte_ns = wire
        self.headers_bound_ns = self.last_byte_bound_ns = self._tail_b
        self._head_rx = rx_ns
        return wire

    def on_read(self, t_ns: int, lag_ns: int = 0, rx_ns: int = 0, items: int = 1, tail: bool = True,
                since_ns: int = 0) -> int:
        """A body read arrived (before its observations).

        Args:
            t_ns: when the runner read it (its loop time), clock ns.
            lag_ns: how late the client's event loop served this read: the
                runner's client lag (docs/results/in-flight.md, "Client lag per read"), ns;
                <= 0: on time. Recorded as ``client_read_lag``.
            rx_ns: the kernel's receive stamp of the read's latest bytes (clock
                ns; 0: none).
            items: how many SSE items (events and comments) the read completed.
            tail: the read ends at an event boundary (its last bytes end its
                last item: no part of a later item came with it).
            since_ns: a moment none of the read's bytes arrived before, clock
                ns, when the runner knows one later than the previous read's
                stamp (a read that waited for its bytes: the end of the event
                loop's I/O wait before the one that woke it, docs/results/units.md
                "Times from the wire"); 0: none known.

        Returns:
            The read's wire stamp, ns: ``rx_ns`` (kept between the previous
            read's stamp and ``t_ns``), else ``t_ns``. The runner hands it to
            :meth:`on_observations`. The read's last item is stamped with the
            bound ``_tail_b`` (0 with a kernel stamp and ``tail``), every
            other item with ``stamp - max(previous stamp, since_ns)`` (0 when
            ``since_ns`` is past the stamp: the clocks' microseconds); with
            several items the runner calls :meth:`at_last_item` before the last one.
        """
        if self.zero_run:
            self.end_read()
        last = self.last_byte_ns
        self._prev_read_ns = last
        self.reads += 1
        # (the wire stamp and bounds as _wire makes them, inlined: once per read)
        lo = self._wire_ns
        if rx_ns and rx_ns == self._head_rx:
            # body bytes read with the head (the same recv, its one stamp): that stamp was
            # not the head's own latest bytes. A client that served the recv on time (within
            # BOUND_FLOOR_NS of that stamp, its loop not lagging) was waiting on the socket:
            # the head came with those bytes (a server writes its head with its first chunk),
            # so the stamp holds for both. A late one may have left the head waiting: the head
            # and these came after the send, not after it
            self._head_rx = 0
            if t_ns - rx_ns >= BOUND_FLOOR_NS or lag_ns >= BOUND_FLOOR_NS:
                lo = self.sent_ns
                head = self.headers_ns
                if head is not None and head - lo >= BOUND_FLOOR_NS:
                    self.headers_bound_ns = self.last_byte_bound_ns = head - lo
        if rx_ns:
            w = rx_ns if lo <= rx_ns <= t_ns else (t_ns if rx_ns > t_ns else lo)
            # the read's bytes came after the previous stamp, and after since_ns
            span = w - (since_ns if since_ns > lo else lo)
            self._late_ns = 0
            if tail:
                tail_b = 0
                if items:
                    self.items_exact += 1
                    self.items_bounded += items - 1
            else:
                tail_b = span
                self.items_bounded += items
        else:
            w = t_ns
            span = w - (since_ns if since_ns > lo else lo)
            late = lag_ns if lag_ns > 0 else 0
            self._late_ns = late
            tail_b = (late if late < span else span) if tail else span
            self.items_bounded += items
        self._wire_ns = t_ns = w
        if tail_b < BOUND_FLOOR_NS:
            tail_b = 0
        self._tail_b = tail_b
        if items <= 1:
            self._cur_b = tail_b
        else:
            self._cur_b = span if span >= BOUND_FLOOR_NS else 0
        lags = self._lags
        if lags is not None:
            if lag_ns >= BOUND_FLOOR_NS:
                lags.append(lag_ns)
            n = self._lag_n = self._lag_n + 1
            if n >= LAG_BATCH:
                self._flush_lags()
        elif self._sink is not None:
            self._sink("client_read_lag", lag_ns if lag_ns > 0 else 0)
        quiet = self.quiet_read_ns
        if quiet is not None:  # until a content event of this read takes it back
            quiet.append(t_ns)
        if self.first_read_ns is None:
            self.first_read_ns = t_ns
            self.first_read_bound_ns = self._cur_b
        self._read_lag_ns = lag_ns
        if self.terminal_ns is not None:
            return t_ns  # the body's tail: neither silence nor keepalive cadence
        if last is not None and t_ns - last > self.max_silence_ns:
            self.max_silence_ns = t_ns - last
        self.last_byte_ns = t_ns
        self.last_byte_bound_ns = self._tail_b
        ka = self._ka_open_ns
        if ka is not None:  # this read ends a silence the last keepalive split
            self._keepalive_gap(t_ns - ka, self._cur_b, self._ka_open_b)
            self._ka_open_ns = None
            self._ka_closed_read = self.reads
        return t_ns

    def on_body_end(self, t_ns: int, rx_ns: int = 0) -> int:
        """The body ended (its framing, or the connection's close) and the runner saw it at ``t_ns``.

        Args:
            t_ns: the loop time the read loop ended at, clock ns.
            rx_ns: the kernel's receive stamp of the body's last bytes (the
                transport's ``end_rx_ns``: the read that ended the body's
                framing), clock ns; 0: none (httpx's transport, TLS, a body
                that ended at the connection's close).

        Returns:
            ``body_end_ns``: ``rx_ns`` (exact, ``body_end_bound_ns`` 0; kept
            between the latest read's stamp and ``t_ns``), else ``t_ns``, with
            the bound ``t_ns`` minus the earliest the latest read's last bytes
            can have arrived (its stamp less its last item's bound): the body's
            last bytes came with or after those (docs/gateway-overhead.md, ``added_e2e``).
        """
        lo = self._wire_ns
        if rx_ns:
            end = rx_ns if lo <= rx_ns <= t_ns else (t_ns if rx_ns > t_ns else lo)
            bound = 0
        else:
            end = t_ns
            bound = t_ns - (lo - self._tail_b)
            if bound < BOUND_FLOOR_NS:
                bound = 0
        self.body_end_ns, self.body_end_bound_ns = end, bound
        return end

    def at_last_item(self) -> None:
        """The next observations are the current read's last item's: its stamp's bound
        from here on (exact with a kernel stamp and a read that ends at an event boundary)."""
        self._cur_b = self._tail_b

    def on_observations(self, t_ns: int, observations: Iterable[Observation]) -> None:
        """Apply the observations the decoder produced for one event of the read at ``t_ns``.

        Args:
            t_ns: the read's stamp.
            observations: what ``Decoder.feed`` returned for one SSE item (one
                call per item: the per-event counts rely on it).
        """
        for ob in observations:
            cls = type(ob)
            if cls is ContentDelta:
                last = self.last_content_ns
                b = self._cur_b
                if last == t_ns and b == self._last_content_b:
                    # another event of the read that carried the content event before it:
                    # gap 0, the same bounds. Counted here, recorded once a read
                    # (end_read; benchmarks/bench_bytecodes.py: an unpaced run's events
                    # mostly share reads)
                    self.zero_run += 1
                    self.itl_count += 1
                elif last is not None:
                    if self.zero_run:
                        self.end_read()  # (b changed inside the read: its last item)
                    gap = t_ns - last
                    pb = self._last_content_b
                    if (b or pb) and self._bounds is not None:
                        # a run of alike bounded gaps (the events inside one read: gap 0,
                        # the same bounds) goes to the sink once, with its length, at the
                        # next unlike one or at close (benchmarks/bench_instructions.py:
                        # 6 histogram records an event where every event shares a read)
                        q = self._bq
                        if q is not None and q[0] == gap and q[1] == b and q[2] == pb:
                            q[3] += 1
                        else:
                            if q is not None:
                                self._bounds("itl", q[0], q[1], q[2], q[3])
                            self._bq = [gap, b, pb, 1]
                    self.itl_count += 1
                    self.itl_sum_ns += gap
                    if gap > self.itl_max_ns:
                        self.itl_max_ns = gap
                    digest = self.itl_digest
                    if digest is not None:
                        k = bucket_of(gap)
                        digest[k] = digest.get(k, 0) + 1
                    sink = self._sink
                    if sink is not None:
                        sink("itl", gap)
                self.last_content_ns = t_ns
                self._last_content_b = b
                if self.event_chars is not None and self.event_read_ns is not None:
                    self.event_chars.append(ob.chars)  # type: ignore[union-attr]
                    self.event_read_ns.append(t_ns)
                    bl = self.event_bound_ns
                    if bl is None:  # (kept with the read stamps: every run with gateway overhead)
                        bl = self.event_bound_ns = [0] * (len(self.event_read_ns) - 1)
                    bl.append(b)
                if self._last_content_read != self.reads:
                    self._last_content_read = self.reads
                    quiet = self.quiet_read_ns
                    if quiet and quiet[-1] == t_ns:
                        quiet.pop()
                    self.content_reads += 1
                    lag = self._read_lag_ns
                    if lag > self.content_read_lag_max_ns:
                        self.content_read_lag_max_ns = lag
                        # the silence this late read ended: from the read before it,
                        # or from the send when that read came within the lag too
                        # (headers a gateway held back until the first token)
                        ref = self._prev_read_ns
                        if ref is None or t_ns - ref <= lag:
                            ref = self.sent_ns
                        self.content_read_lag_gap_ns = t_ns - ref
            elif cls is FirstToken:
                self.first_token_ns = t_ns
                self.first_token_bound_ns = self._cur_b
                self.first_token_late_ns = self._late_ns
            elif cls is FirstContentToken:
                self.first_content_ns = t_ns
                self.first_content_bound_ns = self._cur_b
            elif cls is Keepalive:
                if self.terminal_ns is not None:
                    continue
                self.keepalives += 1
                if self.keepalive_read_ns is not None:
                    self.keepalive_read_ns.append(t_ns)
                if self._ka_open_ns is not None:  # a second keepalive in one read
                    self._keepalive_gap(t_ns - self._ka_open_ns, self._cur_b, self._ka_open_b)
                elif self._ka_closed_read != self.reads:
                    # the silence from the read before (or the headers) to this keepalive
                    prev = self._prev_read_ns
                    if prev is not None:
                        self._keepalive_gap(t_ns - prev, self._cur_b, 0)
                self._ka_open_ns = t_ns
                self._ka_open_b = self._cur_b
            elif cls is UsageReport:
                u: UsageReport = ob  # type: ignore[assignment]
                if u.input_tokens is not None:
                    self.input_tokens = u.input_tokens
                if u.output_tokens is not None:
                    self.output_tokens = u.output_tokens
            elif cls is StreamEnd:
                if self.terminal_ns is None:
                    self.terminal_ns = t_ns
                    self.terminal_bound_ns = self._cur_b
                    self._ka_open_ns = None  # closed by this read (on_read) or left open: not a gap

    def on_event_texts(self, observations: Iterable[Observation],
                       kept: tuple[list[str], list[str], list[str]]) -> None:
        """Fingerprint the text of each content event ``on_observations`` just counted
        (gateway overhead: events the gateway reordered, docs/gateway-overhead.md).

        Args:
            observations: the same observations, after ``on_observations``.
            kept: the decoder's kept fragments (``Decoder.kept_fragments()``: its
                text, reasoning and refusal lists; the decoder keeps text).

        Appends to ``event_crc`` (when set) one value per ``ContentDelta``: the
        CRC-32 of the UTF-8 of the fragments of its kind kept since the last call,
        or -1 for a tool-call event (its text is not kept) or none kept.
        """
        crcs = self.event_crc
        if crcs is None:
            return
        seen = self._kept_seen
        if seen is None:
            seen = self._kept_seen = [0, 0, 0]
        for ob in observations:
            if type(ob) is ContentDelta:
                i = _KEPT_INDEX.get(ob.kind)
                if i is None:
                    crcs.append(-1)
                    continue
                frags = kept[i]
                n, start = len(frags), seen[i]
                seen[i] = n
                if n == start + 1:  # the usual case: one fragment per event
                    crcs.append(zlib.crc32(frags[start].encode("utf-8")))
                else:
                    crcs.append(zlib.crc32("".join(frags[start:]).encode("utf-8")) if n > start else -1)

    def end_read(self) -> None:
        """Record the gap-0 ITL samples :meth:`on_observations` counted in ``zero_run``
        (the events that shared a read with the content event before them): one
        ``sink("itl", 0, n)``, one bounds run ``(0, b, b, n)`` with the read's bound ``b``,
        and the digest's bucket of 0. The runner calls it after a read's items when
        ``zero_run`` is set (so the samples land in the interval their read came in);
        :meth:`on_read` and :meth:`close` call it for a caller that did not."""
        n = self.zero_run
        if not n:
            return
        self.zero_run = 0
        sink = self._sink
        if sink is not None:
            sink("itl", 0, n)
        b = self._last_content_b
        if b and self._bounds is not None:
            self._bounds("itl", 0, b, b, n)
        digest = self.itl_digest
        if digest is not None:
            k = bucket_of(0)
            digest[k] = digest.get(k, 0) + n

    def _flush_lags(self) -> None:
        lags, read_lags, n = self._lags, self._read_lags, self._lag_n
        if n and lags is not None and read_lags is not None:
            read_lags(lags, n - len(lags))  # the on-time reads (under BOUND_FLOOR_NS) as 0
            self._lags = []
            self._lag_n = 0

    def close(self, t_ns: int) -> None:
        """The stream ended at ``t_ns``: the final silence counts too (a stall cut
        by the idle timeout is the longest silence of its stream), unless the
        terminal signal arrived (silence checks end there). The reads' client lags
        still held are handed to ``read_lags``, and the last run of bounded ITL
        samples to ``bounds``."""
        self._flush_lags()
        if self.zero_run:
            self.end_read()
        q = self._bq
        if q is not None and self._bounds is not None:
            self._bq = None
            self._bounds("itl", q[0], q[1], q[2], q[3])
        last = self.last_byte_ns
        if self.terminal_ns is None and last is not None and t_ns - last > self.max_silence_ns:
            self.max_silence_ns = t_ns - last

    def _keepalive_gap(self, gap_ns: int, below_ns: int, above_ns: int) -> None:
        self.keepalive_gap_count += 1
        if self._sink is not None:
            self._sink("keepalive_interval", gap_ns)
        if (below_ns or above_ns) and self._bounds is not None:
            self._bounds("keepalive_interval", gap_ns, below_ns, above_ns, 1)
