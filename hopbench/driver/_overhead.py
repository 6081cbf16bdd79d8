"""Gateway overhead: match client streams with the upstream requests they caused, and subtract.

Role: the pure core of docs/gateway-overhead.md. The client's streams
(streams.jsonl lines, with per-event read stamps) and the emulator's ground
truth (one record per upstream request, with per-event write stamps) come in
as plain records on ONE monotonic clock (CLOCK_MONOTONIC, absolute ns); what
comes out is, per scenario, the values of the overhead metrics (ns, for the
HDR histograms of ``hopbench.measure._metrics.METRICS``) and the JSON-ready
``gateway_overhead`` block of summary.json (docs/results.md). No clock, no
I/O, no trio: every function is a function of its arguments.

Definitions (each value in ns, client stamps minus upstream stamps):

- ``request_delay``: client sent the request -> the upstream received it
  (the stream's *first* upstream attempt). "Sent" is the client's stamp just
  before the write that completed the request (``ClientStream.wire_sent``; the
  write's duration is added to the sample's error bound), else the stream's send
  stamp (a line without the write's stamps: the write came some time before the
  receipt, so the bound takes the whole value), counted in the block's
  ``request_sent_from``. "Received" is when the request's
  bytes reached the emulator's socket (the kernel's stamp, ground truth
  ``t0_wire_mono_ns``), else when its app was called (``t0_mono_ns``: late by
  the emulator's scheduling and parsing, so the sample's error bound is its
  whole value), counted in the block's ``upstream_received``.
- ``first_event_delay``: the upstream wrote its first body bytes -> the client's
  first body read (the *last* attempt: the one whose answer the client got).
- ``added_ttft``: the client's TTFT (sent, as above -> first content event read) minus the
  upstream's own (received, as above -> first content event written).
- ``event_delay``: per upstream content event, its write -> the client read
  that delivered its last character (events aligned by order and content).
- ``added_e2e``: the client's sent (as for ``added_ttft``) -> end minus the upstream's
  received -> last byte written; completed streams only. The client's end is when the
  body's last bytes reached its socket (``body_end_ns``: their kernel stamp,
  exact, where the transport has it; else the loop time the read loop ended,
  bounded back to the latest read's bytes), not its close of the body.
- The upstream's writes: each content event is stamped when it was due and queued,
  and written within 0.1 ms of that, unless the ground truth's ``late_writes`` says
  otherwise (an emulator descheduled in between on a busy machine; events coalesced
  into a later write): such an event's write is stamped at its send()'s start, and the
  send()'s length (the bytes entered the kernel somewhere in it) is added to the
  ``below`` error bound of every figure that ends on it, as the first and final
  writes' lengths (``first_write_end_ns``, ``final_write_end_ns``) are to
  ``first_event_delay``'s and ``added_e2e``'s.
- ``upstream_silence``, ``injected_keepalive_interval``,
  ``client_silence_in_upstream_silence``: the upstream's silences (gaps over
  ``SILENCE_FLOOR_NS`` between its writes), the gateway's keepalive cadence
  inside them and the longest client-side silence inside each (``hopbench.driver._alignment.silences``).

Events are also paired by their text (CRC-32 on both sides): events the gateway
delivered out of the upstream's order are counted ``reordered`` and get no delay.

Matching: an upstream request belongs to the client stream whose id is its
``x-hopbench-request-id`` header, else its body marker (``hopbench.protocols._marker``).
A stream with several upstream requests was retried (or hedged) by the gateway.

Invariants:
- Per-event stamps are held as ``array('q')`` (8 bytes each): the analysis keeps
  both sides' content events of a run in memory, about 16 bytes per event.
- Nothing is dropped silently: unmatched streams, unmatched upstream requests,
  negative differences (a clock problem) and unaligned events are counted.
- Per-event figures are only computed when both sides share a clock (same
  boot id); otherwise ``clock`` says why and only counts are reported.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..workload._cancel import CANCEL_OUTCOME
from ._alignment import (BUFFERING_ADVICE, GENERIC_BUFFERING_ADVICE, SILENCE_FLOOR_NS, ClientStream, UpstreamRequest,
                         align_events, buffering_advice, client_from_line, gateway_kind, silences,
                         upstream_from_record)

__all__ = [
    "ClientStream", "UpstreamRequest", "Overhead", "OVERHEAD_METRICS", "BUFFER_SPAN_NS", "BUFFERED_SHARE",
    "analyse", "client_from_line", "upstream_from_record", "overhead_lines", "BUFFERING_ADVICE",
    "GENERIC_BUFFERING_ADVICE", "buffering_advice", "gateway_kind",
]

#: the histogram metrics this module fills (names of ``hopbench.measure._metrics.METRICS``)
OVERHEAD_METRICS = ("request_delay", "first_event_delay", "added_ttft", "event_delay", "added_e2e",
                    "upstream_silence", "injected_keepalive_interval", "client_silence_in_upstream_silence")
#: a client read that delivers upstream events written further apart than this
#: (and than twice the client's own loop lag) held them back, ns; a stream shows a
#: buffer when at least half of its upstream events came in such reads (one late
#: read on a busy machine does not make a buffer; a buffer holds most of the stream)
BUFFER_SPAN_NS = 10_000_000
#: the run is flagged "buffering" when this share of its multi-event streams shows a buffer:
#: a buffer is a gateway's configuration, so it holds (nearly) every stream; a busy machine
#: stalls a few (measured: 3 of 24 streams through nginx with proxy_buffering off while the
#: test suite loaded both cores; 177 of 178 with proxy_buffering on)
BUFFERED_SHARE = 0.5
#: ``event_delay_over_time`` has at most this many points (the bucket grows from 1 s)
OVER_TIME_POINTS = 600


def _over_time(points: list[tuple[int, int]], origin_ns: int) -> list[dict[str, Any]]:
    """Per-event delay over time: (write stamp, delay) pairs bucketed by write time.

    Returns:
        list of {"t_s": bucket start from ``origin_ns``, s; "events"; "p50_ms"; "p99_ms";
        "max_ms"}, in time order (nearest-rank percentiles), at most OVER_TIME_POINTS.
    """
    if not points:
        return []
    span_ns = max(t for t, _ in points) - origin_ns
    bucket_ns = 1_000_000_000
    while span_ns // bucket_ns >= OVER_TIME_POINTS:
        bucket_ns *= 2
    buckets: dict[int, list[int]] = defaultdict(list)
    for t, d in points:
        buckets[max(0, t - origin_ns) // bucket_ns].append(d)
    out = []
    for k in sorted(buckets):
        ds = sorted(buckets[k])
        n = len(ds)
        out.append({"t_s": k * bucket_ns / 1e9, "events": n, "p50_ms": ds[(n - 1) // 2] / 1e6,
                    "p99_ms": ds[min(n - 1, -(-99 * n // 100) - 1)] / 1e6, "max_ms": ds[-1] / 1e6})
    return out


def _client_end(c: ClientStream) -> tuple[int, int]:
    """The client's end of ``added_e2e`` and its error bound, ns: ``body_end_ns`` with its
    bound; for a line without it, ``end_ns`` (the client's close of the body, a loop
    time) bounded back to the earliest its last content event can have arrived (the
    body's last bytes came after it), or to the send without one."""
    if c.body_end_ns is not None:
        return c.body_end_ns, c.body_end_bound_ns
    floor = c.sent_ns
    if c.content_read_ns and len(c.content_bound_ns) == len(c.content_read_ns):
        floor = c.content_read_ns[-1] - c.content_bound_ns[-1]
    return c.end_ns, max(c.end_ns - floor, 0)


@dataclass(slots=True)
class Overhead:
    """What ``analyse`` found.

    Attributes:
        values: (scope, metric) -> values in ns, measured streams only, for
            ``Recorder.record_many`` (metric: one of OVERHEAD_METRICS).
        bounds: (scope, metric) -> ``(value, below, above)`` of each of those
            values whose client stamp is not exact, ns, for ``Recorder.record_bound``.
        block: the JSON-ready ``gateway_overhead`` block (docs/results.md).
        warnings: what the user must see (no match at all, another host, buffering).
    """

    values: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    bounds: dict[tuple[str, str], list[tuple[int, int, int]]] = field(default_factory=dict)
    block: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _client_result(c: ClientStream) -> str:
    if c.outcome == "completed":
        return "completed"
    return f"{c.outcome} {c.detail}" if c.detail else c.outcome


def analyse(clients: Iterable[ClientStream], upstreams: Iterable[UpstreamRequest], *,
            boot_id: str, source: str = "[upstream]") -> Overhead:
    """Match, subtract and count (see the module docstring for the definitions).

    Args:
        clients: every client stream of the run (warm-up ones too: their
            upstream requests must not count as unmatched).
        upstreams: the upstream requests recorded during the run.
        boot_id: the client host's boot id ("" unknown).
        source: how the profile named the upstream, for messages
            (e.g. ``[upstream].listen = "127.0.0.1:9100"``).

    Returns:
        Overhead. Never raises on odd input: odd records are counted.
    """
    cl = list(clients)
    attempts, join = _join(cl, upstreams)
    same_clock = bool(boot_id) and join.boots <= {boot_id}
    clock = "same host" if same_clock else (
        "unknown: no upstream request was recorded" if not join.boots else
        f"other host: the emulator's boot id {sorted(join.boots)[0] or '(unknown)'} is not this host's "
        f"{boot_id or '(unknown)'}")
    measured = [c for c in cl if c.measured]
    t = _Tally()
    for c in measured:
        ups = sorted(attempts.get(c.id, ()), key=lambda u: u.received_ns)
        if not ups and c.outcome == CANCEL_OUTCOME:  # the client left before its request got through
            t.cancelled_before_upstream += 1
            continue
        if not ups:
            t.unseen += 1
            t.unseen_by[_client_result(c)] += 1
            continue
        t.match(c, ups)
        if same_clock:
            t.subtract(c, ups[0], ups[-1])
    out = Overhead(values=t.values, bounds=t.bounds)
    out.block = _block(t, join, measured, source, clock, same_clock)
    out.warnings = _overhead_warnings(t, len(measured), source, clock, same_clock)
    return out


@dataclass(slots=True)
class _Join:
    """How the upstream requests matched the client streams (:func:`_join`).

    Attributes:
        unmatched: upstream requests of no client stream.
        by_header, by_marker: upstream requests of measured streams, by how they matched.
        boots: the boot ids the upstream requests were recorded on.
    """

    unmatched: int = 0
    by_header: int = 0
    by_marker: int = 0
    boots: set[str] = field(default_factory=set)


def _join(clients: list[ClientStream],
          upstreams: Iterable[UpstreamRequest]) -> tuple[dict[str, list[UpstreamRequest]], _Join]:
    """Each upstream request to its client stream: by the ``x-hopbench-request-id``
    header, else by the body marker (hopbench.protocols._marker).

    Returns:
        (client stream id -> its upstream requests in record order, the join's counts).
    """
    by_id = {c.id: c for c in clients}
    attempts: dict[str, list[UpstreamRequest]] = defaultdict(list)
    join = _Join()
    for u in upstreams:
        join.boots.add(u.boot_id)
        if u.request_id is not None and u.request_id in by_id:
            attempts[u.request_id].append(u)
            join.by_header += by_id[u.request_id].measured
        elif u.marker_id is not None and u.marker_id in by_id:
            attempts[u.marker_id].append(u)
            join.by_marker += by_id[u.marker_id].measured
        else:
            join.unmatched += 1
    return attempts, join


@dataclass(slots=True)
class _Tally:
    """What :func:`analyse` counts over the measured streams (names as in the block).

    ``values``: (scope, metric) -> values in ns for the histograms (:meth:`put`);
    ``timed``: (upstream write stamp, event delay) for the over-time series.
    """

    values: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    bounds: dict[tuple[str, str], list[tuple[int, int, int]]] = field(default_factory=dict)
    matched: int = 0
    unseen: int = 0
    #: streams the client cancelled before the upstream saw them: not the gateway's doing
    cancelled_before_upstream: int = 0
    retried: int = 0
    unseen_by: Counter[str] = field(default_factory=Counter)
    triggers: Counter[str] = field(default_factory=Counter)
    matrix: defaultdict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    negatives: Counter[str] = field(default_factory=Counter)
    merged: int = 0
    split: int = 0
    dropped: int = 0
    added: int = 0
    up_events: int = 0
    #: upstream content events written 0.1 ms or more after they were due (ground truth late_writes)
    written_late: int = 0
    client_reads: int = 0
    buffered: int = 0
    multi: int = 0
    timed: list[tuple[int, int]] = field(default_factory=list)
    ka_injected_streams: int = 0
    ka_injected: int = 0
    n_silences: int = 0
    silent_streams: int = 0
    injected_inside: int = 0
    reordered: int = 0
    reordered_streams: int = 0
    longest_client_silence: int = 0
    usage_same: int = 0
    usage_differs: int = 0
    usage_dropped: int = 0
    #: a stream the client cancelled is never the gateway's loss: what it did not read, apart
    not_seen_after_cancel: int = 0
    #: gateway kind -> matched streams (``gateway_kind``; "" when the headers did not tell)
    kinds: Counter[str] = field(default_factory=Counter)
    usage_not_seen_after_cancel: int = 0
    #: first upstream attempts whose receive came from the kernel's stamp / the app's (a fallback)
    received_wire: int = 0
    received_app: int = 0
    #: streams whose request_delay and added_ttft counted from the request's write stamps,
    #: and those without them (from the stream's send: ``ClientStream.wire_sent``)
    sent_wire: int = 0
    sent_fallback: int = 0

    def put(self, scope: str, metric: str, v: int, below: int = 0, above: int = 0) -> None:
        """One value (ns) of ``metric``; a negative one is counted, not recorded (a clock problem).
        ``below``, ``above``: its error bounds, ns (the true value lies in ``[v - below, v + above]``)."""
        if v < 0:
            self.negatives[metric] += 1
            return
        self.values.setdefault((scope, metric), []).append(v)
        if below > 0 or above > 0:
            self.bounds.setdefault((scope, metric), []).append((v, below, above))

    def match(self, c: ClientStream, ups: list[UpstreamRequest]) -> None:
        """Count a matched stream: retries and their triggers, the fault matrix, usage, keepalives.

        Args:
            c: a measured client stream; ups: its upstream attempts, by receive time (>= 1).
        """
        self.matched += 1
        self.kinds[c.gateway] += 1
        first, last = ups[0], ups[-1]
        if len(ups) > 1:
            self.retried += 1
            for u in ups[:-1]:
                self.triggers[u.what] += 1
        col = _client_result(c)
        if len(ups) > 1:
            col += f" after {len(ups)} upstream requests"
        self.matrix[first.what][col] += 1
        if last.output_tokens is not None:
            if c.output_tokens is None and c.outcome == CANCEL_OUTCOME:  # the client left before it
                self.usage_not_seen_after_cancel += 1
            elif c.output_tokens is None:
                self.usage_dropped += 1
            elif c.output_tokens == last.output_tokens:
                self.usage_same += 1
            else:
                self.usage_differs += 1
        if c.keepalives > last.keepalives:
            self.ka_injected_streams += 1
            self.ka_injected += c.keepalives - last.keepalives

    def subtract(self, c: ClientStream, first: UpstreamRequest, last: UpstreamRequest) -> None:
        """The per-event figures of a matched stream, both sides on one clock (ns): the
        delays, the events' alignment (``_alignment.align_events``), silences, buffering.

        Args:
            c: the client stream; first: its first upstream attempt; last: the one that answered.
        """
        put, s = self.put, c.scenario
        # from the request's write (its last byte left at most ``sb`` after ``sent``), else from the
        # stream's send (the write came some time before the upstream's receipt: up to all of it)
        sent, sb = c.wire_sent
        if c.request_sent_ns is None:
            self.sent_fallback += 1
            sb = max(first.arrived_ns - sent, 0)
        else:
            self.sent_wire += 1
        # the upstream's receive: its wire stamp (exact to its clock move's error), else its
        # app's stamp, late by an unknown share of the time since the send (true value in [0, v])
        if first.wire_received_ns is not None:
            self.received_wire += 1
            put(s, "request_delay", first.wire_received_ns - sent, first.wire_error_ns + sb, first.wire_error_ns)
        else:
            self.received_app += 1
            put(s, "request_delay", first.received_ns - sent, first.received_ns - sent)
        late = last.wire_error_ns if last.wire_received_ns is not None else max(0, last.received_ns - c.sent_ns)
        cb = c.content_bound_ns
        # an upstream write entered the kernel up to its send()'s length after its stamp: the
        # delay from it can be that much shorter (the bound below; ground truth ``late_writes``)
        wb = last.event_write_bound_ns
        if c.first_read_ns is not None and last.first_write_ns is not None:
            put(s, "first_event_delay", c.first_read_ns - last.first_write_ns,
                c.first_read_bound_ns + last.first_write_bound_ns)
        if c.content_read_ns and last.event_write_ns:
            w0 = last.event_write_ns[0]
            put(s, "added_ttft", (c.content_read_ns[0] - sent) - (w0 - last.arrived_ns),
                (cb[0] if cb else 0) + late + sb + wb.get(w0, 0),
                last.wire_error_ns if last.wire_received_ns is not None else 0)
        if c.outcome == "completed" and last.end == "completed":
            end, below = _client_end(c)
            # from the request's write, as added_ttft (it counted from the stream's send: the client's
            # own time before the write, and an open loop's queue, read as the gateway's)
            put(s, "added_e2e", (end - sent) - (last.end_ns - last.arrived_ns), below + late + sb + last.end_bound_ns,
                last.wire_error_ns if last.wire_received_ns is not None else 0)
        al = align_events(last.event_write_ns, last.event_chars, c.content_read_ns, c.content_chars,
                          last.event_crc, c.content_crc)
        for d, w, j in zip(al.delays_ns, al.written_ns, al.client_events):
            put(s, "event_delay", d, (cb[j] if j < len(cb) else 0) + (wb.get(w, 0) if wb else 0))
            self.timed.append((w, d))
        self.merged += al.merged
        self.split += al.split
        if c.outcome == CANCEL_OUTCOME:  # the client left: what it did not read is no gateway loss
            self.not_seen_after_cancel += al.dropped
        else:
            self.dropped += al.dropped
        self.added += al.added
        self.reordered += al.reordered
        self.reordered_streams += al.reordered > 0
        sil = silences(c, last)
        for metric, vals in (("upstream_silence", sil.silences_ns),
                             ("injected_keepalive_interval", sil.intervals_ns),
                             ("client_silence_in_upstream_silence", sil.client_silence_ns)):
            for v in vals:
                put(s, metric, v)
        if sil.silences_ns:
            self.silent_streams += 1
            self.n_silences += len(sil.silences_ns)
            self.injected_inside += sil.injected_in_silences
            self.longest_client_silence = max(self.longest_client_silence, *sil.client_silence_ns)
        self.up_events += len(last.event_write_ns)
        if wb:
            self.written_late += sum(1 for w in last.event_write_ns if w in wb)
        self.client_reads += len(set(c.content_read_ns))
        if len(last.event_write_ns) >= 2:
            self.multi += 1
            limit = max(BUFFER_SPAN_NS, 2 * c.client_lag_ns)
            held = sum(n for span, n in al.reads if span > limit)
            if 2 * held >= len(last.event_write_ns):
                self.buffered += 1

    @property
    def buffering(self) -> bool:
        """The run is flagged "buffering" (``BUFFERED_SHARE`` of its multi-event streams buffered)."""
        return self.multi > 0 and self.buffered >= BUFFERED_SHARE * self.multi


def _block(t: _Tally, join: _Join, measured: list[ClientStream], source: str, clock: str,
           same_clock: bool) -> dict[str, Any]:
    """The JSON-ready ``gateway_overhead`` block (docs/results.md), keys in their order."""
    n, matched, up_events, client_reads = len(measured), t.matched, t.up_events, t.client_reads
    return {
        "upstream": source,
        "clock": clock,
        "per_event": same_clock,
        "streams": n,
        "matched": matched,
        "match_rate": round(matched / n, 4) if n else None,
        "matched_by": {"header": join.by_header, "marker": join.by_marker},
        "upstream_received": {"wire": t.received_wire, "app": t.received_app},
        "request_sent_from": {"write": t.sent_wire, "send": t.sent_fallback},
        "unseen_by_upstream": t.unseen,
        "unseen_outcomes": dict(sorted(t.unseen_by.items())),
        "cancelled_before_upstream": t.cancelled_before_upstream,
        "upstream_requests_unmatched": join.unmatched,
        "retried_streams": t.retried,
        "retry_triggers": dict(sorted(t.triggers.items())),
        "fault_matrix": {k: dict(sorted(v.items())) for k, v in sorted(t.matrix.items())},
        "events": {"upstream": up_events, "client_reads": client_reads,
                   "reads_per_upstream_event": round(client_reads / up_events, 4) if up_events else None,
                   "merged": t.merged, "split": t.split, "dropped": t.dropped, "added": t.added,
                   "reordered": t.reordered, "not_seen_after_cancel": t.not_seen_after_cancel,
                   "written_late": t.written_late},
        "buffering": {"flag": t.buffering, "streams_buffered": t.buffered, "streams_multi_event": t.multi,
                      "span_threshold_ms": BUFFER_SPAN_NS / 1e6},
        "keepalives_injected": {"streams": t.ka_injected_streams, "comments": t.ka_injected},
        "silences": {"floor_ms": SILENCE_FLOOR_NS / 1e6, "upstream_silences": t.n_silences,
                     "streams": t.silent_streams, "injected_keepalives_inside": t.injected_inside,
                     "longest_client_silence_ms": round(t.longest_client_silence / 1e6, 3)},
        "usage": {"same": t.usage_same, "differs": t.usage_differs, "dropped": t.usage_dropped,
                  "not_seen_after_cancel": t.usage_not_seen_after_cancel},
        "negative": dict(sorted(t.negatives.items())),
        # per-event delay by upstream write time, from the first measured send
        "event_delay_over_time": _over_time(t.timed, min((c.sent_ns for c in measured), default=0)),
    }


def _overhead_warnings(t: _Tally, n: int, source: str, clock: str, same_clock: bool) -> list[str]:
    """What the user must see: no match at all, streams the upstream never saw, another
    host's clock, buffering, reordering, upstream receipts without the kernel's stamp, negative
    differences (in that order)."""
    warnings: list[str] = []
    matched, unseen, buffered, multi, reordered = t.matched, t.unseen, t.buffered, t.multi, t.reordered
    if n - t.cancelled_before_upstream and matched == 0:
        warnings.append(
            f"gateway overhead: none of the {n} client streams reached the upstream emulator ({source}): "
            "the gateway routes to something else, or answers by itself; check that its upstream is that address")
    elif unseen:
        warnings.append(f"gateway overhead: {unseen} of {n} client streams never reached the upstream "
                        "(the gateway answered them itself: cache, rejection, another upstream)")
    if matched and not same_clock:
        warnings.append(f"gateway overhead: per-event figures refused ({source}): {clock}; "
                        "timing differences need one monotonic clock (run the emulator on this host)")
    if t.buffering:
        warnings.append(f"gateway overhead: the gateway buffers the stream: in {buffered} of {multi} streams "
                        f"most upstream events reached the client in reads that held events written over "
                        f"{BUFFER_SPAN_NS // 1_000_000} ms apart ({buffering_advice(t.kinds)})")
    if reordered:
        warnings.append(f"gateway overhead: the gateway reordered the stream: {reordered} content events in "
                        f"{t.reordered_streams} streams reached the client in another order than the upstream "
                        "wrote them (no event_delay for them)")
    if t.received_app:
        warnings.append(f"gateway overhead: {t.received_app} of {t.received_app + t.received_wire} upstream requests "
                        "were timed from the emulator's app, not the kernel's receive stamp: their request_delay "
                        "and added_ttft may be lower by up to their whole value (gateway_overhead.upstream_received); "
                        "run the emulator where the kernel stamps what it receives (Linux x86-64/arm64)")
    if t.negatives:
        warnings.append("gateway overhead: negative differences (a clock problem) not counted: "
                        + ", ".join(f"{k} {v}" for k, v in sorted(t.negatives.items())))
    return warnings


def overhead_lines(block: Mapping[str, Any]) -> list[str]:
    """The terminal summary's lines for a ``gateway_overhead`` block (plain text, < 100 columns each).

    Args:
        block: summary.json's ``gateway_overhead`` (as :func:`analyse` made it).

    Returns:
        list of lines: the match, retries, events and buffering, then one line
        per fault matrix row. Never raises on a partial block (absent parts are skipped).
    """
    if not block or "streams" not in block:
        return [f"gateway overhead: {block.get('error', 'not computed')}"] if block else []
    rate = block.get("match_rate")
    by = block.get("matched_by") or {}
    lines = [f"gateway overhead ({block.get('clock')}): matched {block.get('matched')}/{block.get('streams')}"
             + (f" ({rate:.1%})" if isinstance(rate, float) else "")
             + f" · header {by.get('header', 0)} marker {by.get('marker', 0)}"
             + f" · unseen {block.get('unseen_by_upstream')}"
             + f" · retried {block.get('retried_streams')}"]
    rx = block.get("upstream_received") or {}
    if rx.get("app"):
        lines.append(f"  upstream receive: {rx['app']} of {rx['app'] + rx.get('wire', 0)} requests without the "
                     "kernel's stamp (the emulator's app stamp instead: request_delay known only to its value)")
    sent = block.get("request_sent_from") or {}
    if sent.get("send"):
        lines.append(f"  client send: {sent['send']} of {sent['send'] + sent.get('write', 0)} streams without their "
                     "request's write stamps (from the stream's send instead: request_delay known only to its value)")
    trig = block.get("retry_triggers") or {}
    if trig:
        lines.append("  retries triggered by: " + ", ".join(f"{k} {v}" for k, v in trig.items()))
    ev = block.get("events") or {}
    buf = block.get("buffering") or {}
    if ev.get("upstream"):
        lines.append(f"  events: {ev['upstream']} upstream · reads/event {ev.get('reads_per_upstream_event')}"
                     f" · merged {ev.get('merged')} split {ev.get('split')} dropped {ev.get('dropped')}"
                     f" added {ev.get('added')} reordered {ev.get('reordered', 0)} · buffering "
                     + (f"YES ({buf.get('streams_buffered')}/{buf.get('streams_multi_event')} streams)"
                        if buf.get("flag") else "no"))
    sil = block.get("silences") or {}
    if sil.get("upstream_silences"):
        lines.append(f"  upstream silences (> {sil.get('floor_ms'):g} ms): {sil['upstream_silences']} in "
                     f"{sil.get('streams')} streams · gateway keepalives inside {sil.get('injected_keepalives_inside')}"
                     f" · longest client silence {sil.get('longest_client_silence_ms')} ms")
    for fault, row in (block.get("fault_matrix") or {}).items():
        lines.append(f"  upstream {fault} -> " + ", ".join(f"{k} {v}" for k, v in row.items()))
    return lines
