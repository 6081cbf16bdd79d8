"""Gateway overhead, per stream: its two records, content events aligned across the gateway, silences.

Role: the per-stream core of docs/gateway-overhead.md, under the join
(``hopbench.driver._overhead.analyse`` matches each client stream with the
upstream attempt that answered it, then calls these). :func:`client_from_line`
and :func:`upstream_from_record` read a streams.jsonl line and an emulator's
ground-truth record into :class:`ClientStream` and :class:`UpstreamRequest`
(absolute stamps; a malformed field reads as missing, never a crash), and
:func:`gateway_kind` tells the gateway from its response headers. :func:`align_events` pairs
the upstream's content events with the client's by character offsets and by
text (CRC-32), and gives each event's delay across the gateway;
:func:`silences` finds the upstream's silences and what the gateway sent the
client during them (its keepalives, the longest stretch without a read).

Invariants:

* Pure: no clock, no I/O; both sides' stamps on ONE monotonic clock, ns.
* Nothing is dropped silently: merged, split, dropped, added and reordered
  events are counted; reordered events get no delay.
* Works on any record with the stamps named by :class:`ClientReads` and
  :class:`UpstreamWrites` (:class:`ClientStream` and :class:`UpstreamRequest`
  here), so that this module does not import the join.
"""

from __future__ import annotations

import bisect
import zlib
from array import array
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["BUFFERING_ADVICE", "ClientReads", "ClientStream", "EventAlignment", "GENERIC_BUFFERING_ADVICE",
           "SILENCE_FLOOR_NS", "Silences", "UpstreamRequest", "UpstreamWrites", "align_events", "buffering_advice",
           "client_from_line", "gateway_kind", "silences", "upstream_from_record"]

#: a gap between two upstream writes (events, its own keepalives, the body's first and
#: final bytes) longer than this is an upstream silence, ns: the emulator's think time
#: (TTFT) or a slow token; a gateway that keeps its client's connection alive fills it
SILENCE_FLOOR_NS = 500_000_000


class ClientReads(Protocol):
    """The client side's read stamps :func:`silences` reads (absolute CLOCK_MONOTONIC, ns)."""

    @property
    def first_read_ns(self) -> int | None: ...
    @property
    def content_read_ns(self) -> Sequence[int]: ...
    @property
    def keepalive_read_ns(self) -> Sequence[int]: ...
    @property
    def quiet_read_ns(self) -> Sequence[int]: ...


class UpstreamWrites(Protocol):
    """The upstream side's write stamps :func:`silences` reads (absolute CLOCK_MONOTONIC, ns)."""

    @property
    def first_write_ns(self) -> int | None: ...
    @property
    def event_write_ns(self) -> Sequence[int]: ...
    @property
    def keepalive_write_ns(self) -> Sequence[int]: ...
    @property
    def end_ns(self) -> int: ...


@dataclass(frozen=True, slots=True)
class EventAlignment:
    """Upstream content events aligned with client content events by order and content.

    Attributes:
        delays_ns: per delivered upstream event (reordered ones excluded): its
            write -> the client read that delivered its last character, ns
            (upstream order).
        written_ns: the write stamp of each of those events (same length).
        reads: per client read (distinct stamp) that completed upstream events:
            (the span of their write times in ns, how many), in read order.
        merged: upstream events that reached the client inside another's event.
        split: upstream events the gateway cut into several client events.
        dropped: upstream events whose characters never fully reached the client.
        added: client events beyond everything the upstream sent.
        reordered: upstream events the client got in another order than the
            upstream wrote them: the fewest events that must move to restore the
            upstream's order (a swap of two neighbours counts 1). No delay is
            reported for them.
        client_events: per delay, the index of the client event that delivered
            it (same length as ``delays_ns``): where its read stamp's error bound is.
    """

    delays_ns: list[int]
    written_ns: list[int]
    reads: list[tuple[int, int]]
    merged: int
    split: int
    dropped: int
    added: int
    reordered: int = 0
    client_events: list[int] = field(default_factory=list)


def _in_order(js: Sequence[int]) -> list[bool]:
    """Which entries of ``js`` form one longest strictly increasing subsequence (O(n log n))."""
    tails: list[int] = []  # the smallest last value of an increasing run of each length
    tail_at: list[int] = []  # ... and its index in js
    prev = [-1] * len(js)
    for i, v in enumerate(js):
        p = bisect.bisect_left(tails, v)
        if p == len(tails):
            tails.append(v)
            tail_at.append(i)
        else:
            tails[p], tail_at[p] = v, i
        prev[i] = tail_at[p - 1] if p else -1
    keep = [False] * len(js)
    i = tail_at[-1] if tail_at else -1
    while i >= 0:
        keep[i] = True
        i = prev[i]
    return keep


def _content_pairs(up_start: Sequence[int], up_crc: Sequence[int], cl_start: Sequence[int],
                   cl_crc: Sequence[int]) -> dict[int, int]:
    """Upstream event -> the client event carrying the same text (CRC), one to one.

    First the events in place (same text at the same character offset), then the
    rest by text in order of appearance. Events with a CRC < 0 (not comparable)
    are never paired.
    """
    at = {(o, h): j for j, (o, h) in enumerate(zip(cl_start, cl_crc)) if h >= 0}
    pairs: dict[int, int] = {}
    used: set[int] = set()
    for k, (o, h) in enumerate(zip(up_start, up_crc)):
        j = at.get((o, h)) if h >= 0 else None
        if j is not None and j not in used:
            pairs[k] = j
            used.add(j)
    where: dict[int, list[int]] = defaultdict(list)
    for j in range(len(cl_crc) - 1, -1, -1):  # reversed: pop() takes the earliest
        if cl_crc[j] >= 0 and j not in used:
            where[cl_crc[j]].append(j)
    for k, h in enumerate(up_crc):
        if k not in pairs and h >= 0 and where.get(h):
            pairs[k] = where[h].pop()
    return pairs


def align_events(write_ns: Sequence[int], up_chars: Sequence[int], read_ns: Sequence[int],
                 cl_chars: Sequence[int], up_crc: Sequence[int] = (),
                 cl_crc: Sequence[int] = ()) -> EventAlignment:
    """Align one stream's upstream and client content events by order and content.

    Each side is cut into events; the concatenated content is the same text
    (code points) when the gateway passes it through. Upstream event k covers
    characters ``[U(k-1), U(k))`` of it, client event j ``[C(j-1), C(j))``; the
    client had event k once it read the event holding character ``U(k) - 1``.
    When the character lists are missing on either side, events are matched one
    to one by order.

    With each event's text fingerprint on both sides (``up_crc``, ``cl_crc``:
    CRC-32 of its UTF-8, < 0 for an event not compared), events are also paired
    by content (:func:`_content_pairs`): a paired event was read with its own
    client event (wherever the offsets put it), and paired events that the
    client got out of the upstream's order are ``reordered`` (those outside one
    longest in-order run: the fewest that moved); they get no delay. Unpaired
    events (merged, split, dropped) keep the character alignment.

    Args:
        write_ns: upstream write stamps, one per content event, ns.
        up_chars: characters of each upstream event (same length, or empty).
        read_ns: client read stamps, one per content event, ns.
        cl_chars: characters of each client event (same length, or empty).
        up_crc: text fingerprint of each upstream event (same length, or empty).
        cl_crc: text fingerprint of each client event (same length, or empty).

    Returns:
        EventAlignment. Never raises.
    """
    if len(up_chars) != len(write_ns) or len(cl_chars) != len(read_ns):
        up_chars, cl_chars = [1] * len(write_ns), [1] * len(read_ns)
    c_end: list[int] = []
    acc = 0
    for c in cl_chars:
        acc += c
        c_end.append(acc)
    total_client = acc
    u_starts: list[int] = []
    acc = 0
    for c in up_chars:
        u_starts.append(acc)
        acc += max(c, 0)
    total_up = acc
    pairs: dict[int, int] = {}
    reordered: set[int] = set()
    if up_crc and cl_crc and len(up_crc) == len(write_ns) and len(cl_crc) == len(read_ns):
        pairs = _content_pairs(u_starts, up_crc, [e - c for e, c in zip(c_end, cl_chars)], cl_crc)
        ks = sorted(pairs)
        reordered = {k for k, ok in zip(ks, _in_order([pairs[k] for k in ks])) if not ok}
    delays: list[int] = []
    written: list[int] = []
    client_events: list[int] = []
    per_read: dict[int, list[int]] = defaultdict(list)
    per_client_event: Counter[int] = Counter()
    split = dropped = 0
    for k, (w, c) in enumerate(zip(write_ns, up_chars)):
        if c <= 0 or k in reordered:
            continue
        j = pairs.get(k)
        if j is None:
            u_start, u_end = u_starts[k], u_starts[k] + c
            if u_end > total_client:
                dropped += 1
                continue
            j = bisect.bisect_left(c_end, u_end)  # the client event holding char u_end - 1
            if bisect.bisect_right(c_end, u_start) != j:  # ... and char u_start
                split += 1
        per_client_event[j] += 1
        delays.append(read_ns[j] - w)
        written.append(w)
        client_events.append(j)
        per_read[read_ns[j]].append(w)
    merged = sum(n - 1 for n in per_client_event.values() if n > 1)
    added = sum(1 for j, e in enumerate(c_end) if (c_end[j - 1] if j else 0) >= total_up and cl_chars[j] > 0)
    reads = [(max(ws) - min(ws), len(ws)) for ws in per_read.values()]
    return EventAlignment(delays, written, reads, merged, split, dropped, added, len(reordered), client_events)


@dataclass(frozen=True, slots=True)
class Silences:
    """One stream's upstream silences and what the client got during them.

    Attributes:
        silences_ns: each upstream silence's length, ns (gaps over the floor
            between consecutive upstream writes).
        injected: keepalive comments the client read that the upstream did not
            write (the gateway's own).
        injected_in_silences: those read inside an upstream silence.
        intervals_ns: the gap between consecutive injected keepalives inside
            one upstream silence, ns (the gateway's keepalive cadence).
        client_silence_ns: per upstream silence, the longest stretch inside it
            without any client read (of any bytes: content, keepalive, other), ns.
    """

    silences_ns: list[int]
    injected: int
    injected_in_silences: int
    intervals_ns: list[int]
    client_silence_ns: list[int]


def silences(c: ClientReads, u: UpstreamWrites, floor_ns: int = SILENCE_FLOOR_NS) -> Silences:
    """The upstream's silences in one stream and the gateway's keepalives during them.

    Both sides on one clock (ns). Upstream writes: its first body bytes, each
    content event, each of its own keepalive comments, its final bytes; a gap
    between consecutive writes over ``floor_ns`` is a silence ``(a, b)``. Each
    upstream keepalive is paired with the first client keepalive read at or
    after it (passed through); the client's other keepalives were injected by
    the gateway. Inside a silence: the gaps between consecutive injected
    keepalives, and the longest stretch of ``[a, b]`` holding no client read
    (measured on the upstream's time line: a gateway that holds the client's
    connection alive keeps it near its keepalive cadence; one that does not
    leaves it near the silence's length).

    Args:
        c: the client stream.
        u: the upstream attempt that answered it (its last).
        floor_ns: the shortest gap that counts as a silence, ns.

    Returns:
        Silences. Never raises.
    """
    writes = sorted([*([] if u.first_write_ns is None else [u.first_write_ns]), *u.event_write_ns,
                     *u.keepalive_write_ns, u.end_ns])
    gaps = [(a, b) for a, b in zip(writes, writes[1:]) if b - a > floor_ns]
    ka = sorted(c.keepalive_read_ns)
    passed = [False] * len(ka)
    i = 0
    for w in sorted(u.keepalive_write_ns):
        while i < len(ka) and ka[i] < w:
            i += 1
        if i < len(ka):
            passed[i] = True
            i += 1
    injected = [t for t, p in zip(ka, passed) if not p]
    reads = sorted([*([] if c.first_read_ns is None else [c.first_read_ns]), *c.content_read_ns, *ka,
                    *c.quiet_read_ns])
    intervals: list[int] = []
    longest: list[int] = []
    inside = 0
    for a, b in gaps:
        mine = injected[bisect.bisect_right(injected, a):bisect.bisect_left(injected, b)]
        inside += len(mine)
        intervals.extend(y - x for x, y in zip(mine, mine[1:]))
        points = [a, *reads[bisect.bisect_right(reads, a):bisect.bisect_left(reads, b)], b]
        longest.append(max(y - x for x, y in zip(points, points[1:])))
    return Silences([b - a for a, b in gaps], len(injected), inside, intervals, longest)


@dataclass(frozen=True, slots=True)
class ClientStream:
    """One client stream (a streams.jsonl line), stamps absolute on CLOCK_MONOTONIC, ns.

    Attributes:
        id: the request id (header and marker).
        scenario: its scenario (the histograms' scope).
        outcome, detail, status: as in streams.jsonl.
        measured: False for a warm-up stream (matched, not counted).
        sent_ns: the request was sent.
        first_read_ns: the first body read, or None.
        content_read_ns: one read stamp per content event, stream order.
        content_chars: characters of each content event.
        end_ns: the stream ended.
        output_tokens: the usage the client saw, or None.
        keepalives: keepalive comments the client read.
        client_lag_ns: the client's worst loop lag on a content read.
        content_crc: CRC-32 of each content event's text (< 0: not compared), or empty.
        keepalive_read_ns: the read stamp of each keepalive comment, or empty.
        quiet_read_ns: the stamp of each body read that carried no content
            event (keepalives, other events, bytes of an unfinished event), or empty.
        content_bound_ns: the error bound of each content event's stamp (its
            bytes arrived at most that much earlier; docs/results/units.md,
            "Times from the wire"), or empty (a line written without them).
        first_read_bound_ns: the same for the first body read's first bytes.
        body_end_ns: when the body's last bytes reached the client's socket,
            or None (a line without it: ``end_ns`` stands in, bounded back to
            the last content event).
        body_end_bound_ns: its error bound, ns (0: exact).
        gateway: the gateway's kind as its response headers tell (``gateway_kind``), or "".
        request_sent_ns: just after the write that completed the request (its last
            byte reached the kernel at most ``request_sent_bound_ns`` earlier), or
            None (a line without it: ``request_delay`` and ``added_ttft`` then count
            from ``sent_ns``, the stream's send, and the block counts them).
        request_sent_bound_ns: that write's duration, ns (after - before stamp).
    """

    id: str
    scenario: str
    outcome: str
    detail: str | None
    status: int | None
    measured: bool
    sent_ns: int
    first_read_ns: int | None
    content_read_ns: Sequence[int]
    content_chars: Sequence[int]
    end_ns: int
    output_tokens: int | None = None
    keepalives: int = 0
    client_lag_ns: int = 0
    content_crc: Sequence[int] = ()
    keepalive_read_ns: Sequence[int] = ()
    quiet_read_ns: Sequence[int] = ()
    content_bound_ns: Sequence[int] = ()
    first_read_bound_ns: int = 0
    body_end_ns: int | None = None
    body_end_bound_ns: int = 0
    gateway: str = ""
    request_sent_ns: int | None = None
    request_sent_bound_ns: int = 0

    @property
    def wire_sent(self) -> tuple[int, int]:
        """(the earliest moment the request's last byte can have reached the kernel, ns;
        how much later it can have been, ns): the stamp before the write that completed
        it and that write's duration; ``(sent_ns, 0)`` without those stamps."""
        if self.request_sent_ns is None:
            return self.sent_ns, 0
        return self.request_sent_ns - self.request_sent_bound_ns, self.request_sent_bound_ns


#: buffering settings per gateway kind (docs/gateway-overhead.md, "Buffering settings")
BUFFERING_ADVICE: dict[str, str] = {
    "nginx": "nginx: proxy_buffering off (or honour X-Accel-Buffering: no), and no gzip on text/event-stream",
    "caddy": "caddy: flush_interval -1 in reverse_proxy, and no encode on text/event-stream",
    "envoy": "Envoy: no buffer filter on the route, and a compressor that skips text/event-stream",
    "litellm": "LiteLLM: stream=true end to end, and no buffering proxy in front of it",
}
#: when the headers do not tell (haproxy writes no Server header of its own)
GENERIC_BUFFERING_ADVICE = ("turn off the gateway's response buffering for text/event-stream (docs/gateway-overhead.md, "
                            "\"Buffering settings\": nginx, haproxy, caddy, Envoy, LiteLLM)")


def gateway_kind(headers: Mapping[str, Any]) -> str:
    """The gateway's kind from its response headers (names lower-case), or "" when they do not tell.

    LiteLLM by its ``x-litellm-version`` header; nginx (and OpenResty), Caddy, Envoy and haproxy
    by ``server``. haproxy writes no ``server`` of its own, so it is usually "".
    """
    if "x-litellm-version" in headers:
        return "litellm"
    server = str(headers.get("server") or "").lower()
    for kind, marks in (("nginx", ("nginx", "openresty")), ("caddy", ("caddy",)), ("envoy", ("envoy",)),
                        ("haproxy", ("haproxy",))):
        if server.startswith(marks):
            return kind
    return ""


def buffering_advice(kinds: Mapping[str, int]) -> str:
    """The buffering warning's advice: the setting of the gateway most streams named, else generic."""
    named = [k for k, _ in sorted(kinds.items(), key=lambda kv: -kv[1]) if k in BUFFERING_ADVICE]
    return BUFFERING_ADVICE[named[0]] if named else GENERIC_BUFFERING_ADVICE


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    """One upstream request (a ground-truth record), stamps absolute on CLOCK_MONOTONIC, ns.

    Attributes:
        request_id: the header id, or None.
        marker_id: the body marker's id, or None.
        boot_id: the emulator host's boot id ("" unknown).
        received_ns: the emulator's app was called for the request.
        first_write_ns: the first body bytes were written, or None.
        event_write_ns: one write stamp per content event.
        event_chars: characters of each content event.
        end_ns: the final body bytes were handed to the socket (else the
            record's end).
        status, end, fault, error_code: as in the ground truth.
        output_tokens: the usage the upstream reported, or None.
        keepalives: keepalive comments the upstream wrote.
        event_crc: CRC-32 of each content event's text (< 0: not compared), or empty.
        keepalive_write_ns: the write stamp of each keepalive comment, or empty
            (an older emulator).
        wire_received_ns: the request's bytes reached the emulator's socket (the
            kernel's stamp, at or before ``received_ns``), or None where there is none.
        wire_error_ns: that stamp's error (its move to CLOCK_MONOTONIC), ns.
        first_write_bound_ns / end_bound_ns: how long the send() of the first / final body
            bytes took, ns (the bytes entered the kernel in ``[stamp, stamp + bound]``; 0:
            an older emulator).
        event_write_bound_ns: {an event's write stamp: how long its send() took, ns} for the
            events whose write ended 0.1 ms or more after they were due (the ground truth's
            ``late_writes``: their stamp is that send()'s start); the others were written within
            0.1 ms of their stamp.
    """

    request_id: str | None
    marker_id: str | None
    boot_id: str
    received_ns: int
    first_write_ns: int | None
    event_write_ns: Sequence[int]
    event_chars: Sequence[int]
    end_ns: int
    status: int
    end: str
    fault: str | None = None
    error_code: str | None = None
    output_tokens: int | None = None
    keepalives: int = 0
    event_crc: Sequence[int] = ()
    keepalive_write_ns: Sequence[int] = ()
    wire_received_ns: int | None = None
    wire_error_ns: int = 0
    first_write_bound_ns: int = 0
    end_bound_ns: int = 0
    event_write_bound_ns: Mapping[int, int] = field(default_factory=dict)

    @property
    def arrived_ns(self) -> int:
        """When the request arrived: the wire stamp where there is one, else the app's."""
        return self.received_ns if self.wire_received_ns is None else self.wire_received_ns

    @property
    def what(self) -> str:
        """What this attempt did, for the fault matrix and retry triggers:
        the injected fault ("http_429", "disconnect", ...), an HTTP error
        the emulator answered without a fault ("http_401"), else "none"."""
        if self.fault is not None:
            return self.fault
        return f"http_{self.status}" if self.end == "http_error" else "none"


def client_from_line(line: Mapping[str, Any], t0_mono_ns: int, warmup_ns: int = 0) -> ClientStream | None:
    """A streams.jsonl line (docs/results.md) as a ClientStream; None without a send stamp.

    Args:
        line: the parsed line (its stamps are ns from the run start).
        t0_mono_ns: the run start on CLOCK_MONOTONIC, ns.
        warmup_ns: streams that started before this offset are warm-up streams.
    """
    sent = line.get("sent_ns")
    if not isinstance(sent, int):
        return None

    def ab(v: Any) -> int | None:
        return v + t0_mono_ns if isinstance(v, int) else None

    start = line.get("start_ns")
    end = ab(line.get("end_ns"))
    return ClientStream(
        id=str(line.get("id")), scenario=str(line.get("scenario")), outcome=str(line.get("outcome")),
        detail=line.get("detail"), status=line.get("status"),
        measured=not (isinstance(start, int) and start < warmup_ns),
        sent_ns=sent + t0_mono_ns, first_read_ns=ab(line.get("first_read_ns")),
        content_read_ns=array("q", (t + t0_mono_ns for t in line.get("content_read_ns") or ())),
        content_chars=array("q", line.get("content_chars") or ()),
        end_ns=end if end is not None else sent + t0_mono_ns,
        output_tokens=line.get("output_tokens"), keepalives=int(line.get("keepalives") or 0),
        client_lag_ns=int(line.get("client_lag_ns") or 0),
        content_crc=array("q", line.get("content_crc") or ()),
        keepalive_read_ns=array("q", (t + t0_mono_ns for t in line.get("keepalive_read_ns") or ())),
        quiet_read_ns=array("q", (t + t0_mono_ns for t in line.get("quiet_read_ns") or ())),
        content_bound_ns=array("q", line.get("content_bound_ns") or ()),
        first_read_bound_ns=int(line.get("first_read_bound_ns") or 0),
        body_end_ns=ab(line.get("body_end_ns")), body_end_bound_ns=int(line.get("body_end_bound_ns") or 0),
        request_sent_ns=ab(line.get("request_sent_ns")),
        request_sent_bound_ns=int(line.get("request_sent_bound_ns") or 0),
        gateway=gateway_kind(headers) if isinstance(headers := line.get("headers"), Mapping) else "")


def upstream_from_record(rec: Mapping[str, Any]) -> UpstreamRequest | None:
    """A ground-truth record (hopbench.emulator.GroundTruth as JSON) as an
    UpstreamRequest; None for a record without the absolute stamp (an older emulator)."""
    t0 = rec.get("t0_mono_ns")
    if not isinstance(t0, int) or t0 <= 0:
        return None
    ttft = rec.get("ttft_ns")
    writes = array("q")
    if isinstance(ttft, int):
        t = t0 + ttft
        writes.append(t)
        for gap in rec.get("gaps_ns") or ():
            t += gap
            writes.append(t)
    bounds = _late_writes(rec.get("late_writes"), writes, t0)
    fw = rec.get("first_write_ns")
    lw = rec.get("final_write_ns")
    wire = rec.get("t0_wire_mono_ns")
    wire_err = rec.get("t0_wire_error_ns")
    chars = array("q", rec.get("event_chars") or ())
    return UpstreamRequest(
        request_id=rec.get("request_id"), marker_id=rec.get("marker_id"), boot_id=str(rec.get("boot_id") or ""),
        received_ns=t0, first_write_ns=t0 + fw if isinstance(fw, int) else None,
        event_write_ns=writes, event_chars=chars, event_crc=_event_crcs(rec, chars),
        keepalive_write_ns=array("q", (t0 + t for t in rec.get("keepalive_write_ns") or ())),
        end_ns=t0 + (lw if isinstance(lw, int) else int(rec.get("duration_ns") or 0)), status=int(rec.get("status") or 0),
        end=str(rec.get("end")), fault=rec.get("fault"), error_code=rec.get("error_code"),
        output_tokens=rec.get("output_tokens"), keepalives=int(rec.get("keepalives") or 0),
        wire_received_ns=wire if isinstance(wire, int) and wire > 0 else None,
        wire_error_ns=wire_err if isinstance(wire_err, int) and wire_err > 0 else 0,
        first_write_bound_ns=_took(fw, rec.get("first_write_end_ns")),
        end_bound_ns=_took(lw, rec.get("final_write_end_ns")), event_write_bound_ns=bounds)


def _took(start: Any, end: Any) -> int:
    """How long a write took, ns, from its two stamps; 0 when either is missing."""
    return max(end - start, 0) if isinstance(start, int) and isinstance(end, int) else 0


def _late_writes(late: Any, writes: array[int], t0: int) -> dict[int, int]:
    """Move each late-written event's stamp in ``writes`` (absolute ns, in place) to its
    send()'s start, and return {that stamp: the send()'s length, ns} (the ground truth's
    ``late_writes``: ``[i, j, start_ns, end_ns]`` from request received; a malformed
    entry is skipped: a record of another emulator is no crash)."""
    out: dict[int, int] = {}
    if not isinstance(late, list):
        return out
    for entry in late:
        if not (isinstance(entry, list) and len(entry) == 4 and all(isinstance(x, int) for x in entry)):
            continue
        i, j, start, end = entry
        for k in range(max(i, 0), min(j, len(writes))):
            writes[k] = max(writes[k], t0 + start)
            out[writes[k]] = max(end - start, 0)
    return out


def _event_crcs(rec: Mapping[str, Any], chars: Sequence[int]) -> array[int]:
    """CRC-32 of each upstream content event's text, from a ground-truth record.

    The emulator sends reasoning, then text, then tool-argument events;
    ``event_chars`` cuts ``reasoning_text + text`` (then the tool arguments, not
    compared: -1) into its events. Empty when the record has no texts.
    """
    reasoning, text = rec.get("reasoning_text"), rec.get("text")
    if not isinstance(reasoning, str) or not isinstance(text, str):
        return array("q")
    joined = reasoning + text
    out = array("q")
    pos = 0
    for c in chars:
        out.append(zlib.crc32(joined[pos:pos + c].encode("utf-8")) if pos + c <= len(joined) else -1)
        pos += c
    return out
