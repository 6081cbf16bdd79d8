"""Gateway overhead, per stream: content events aligned across the gateway, and silences.

Role: the per-stream core of docs/gateway-overhead.md, under the join
(``hopbench.driver._overhead.analyse`` matches each client stream with the
upstream attempt that answered it, then calls these). :func:`align_events` pairs
the upstream's content events with the client's by character offsets and by
text (CRC-32), and gives each event's delay across the gateway;
:func:`silences` finds the upstream's silences and what the gateway sent the
client during them (its keepalives, the longest stretch without a read).

Invariants:

* Pure: no clock, no I/O; both sides' stamps on ONE monotonic clock, ns.
* Nothing is dropped silently: merged, split, dropped, added and reordered
  events are counted; reordered events get no delay.
* Works on any record with the stamps named by :class:`ClientReads` and
  :class:`UpstreamWrites` (``hopbench.driver._overhead.ClientStream`` and
  ``UpstreamRequest``), so that this module does not import the join.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["ClientReads", "EventAlignment", "SILENCE_FLOOR_NS", "Silences", "UpstreamWrites", "align_events",
           "silences"]

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
