"""Streams as timelines: SSE events and comments, each with the stamp of the read that completed it.

Role: turn one side's stamped chunks (the upstream's writes, the client's reads)
into what the checks compare: the data events in order, the comments with
where they fell (between events, or inside one), and the body's verdict by
hopbench's own decoders. Pure: no clock, no I/O.

Invariants:
- An item gets the stamp of the chunk that completed it (the scanner dispatches
  it on that chunk): for the client, when it could first act on it.
- Events are compared as (event type, data bytes) after SSE parsing (WHATWG
  HTML, "Interpreting an event stream"): a gateway that re-frames (CRLF for LF,
  ``event: message`` written out, events regrouped into other reads) changes no
  event; a gateway that rewrites a byte of a data line does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..protocols import StreamResult, decode_stream
from ..sse import SSEComment, SSEEvent, SSEScanner

__all__ = ["Timeline", "timeline", "decode", "short"]


@dataclass(frozen=True, slots=True)
class Timeline:
    """One side of a stream.

    Attributes:
        events: (stamp ns, event type, data bytes) per SSE event with data, in order.
        comments: (stamp ns, comment bytes after the colon) per comment line, in order.
        comments_inside_events: comment lines that came between two field lines of
            one event (SSE allows it; a contract that says "only between events" does not).
        chunk_stamps: the stamp of every chunk, in order.
    """

    events: tuple[tuple[int, str, bytes], ...]
    comments: tuple[tuple[int, bytes], ...]
    comments_inside_events: int
    chunk_stamps: tuple[int, ...]

    @property
    def data(self) -> list[tuple[str, bytes]]:
        """(event type, data) per event, without stamps."""
        return [(e, d) for _, e, d in self.events]


def _inside(body: bytes) -> int:
    """Comment lines that interrupt an event (a field line before them, no blank line between)."""
    n, open_event = 0, False
    for line in body.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n"):
        if not line:
            open_event = False
        elif line.startswith(b":"):
            n += open_event
        else:
            open_event = True
    return n


def timeline(chunks: Sequence[tuple[int, bytes]]) -> Timeline:
    """Parse stamped chunks into a ``Timeline``.

    Args:
        chunks: (stamp ns, bytes) in arrival order, possibly empty.

    Returns:
        The timeline. Never raises on the bytes (an event cut by the body's end is not
        in ``events``: the SSE rule drops an undispatched event at end of stream).
    """
    scanner = SSEScanner()
    events: list[tuple[int, str, bytes]] = []
    comments: list[tuple[int, bytes]] = []
    for t, data in chunks:
        for item in scanner.feed(data):
            if isinstance(item, SSEEvent):
                events.append((t, item.event, item.data))
            elif isinstance(item, SSEComment):
                comments.append((t, item.text))
    return Timeline(tuple(events), tuple(comments), _inside(b"".join(d for _, d in chunks)),
                    tuple(t for t, _ in chunks))


def decode(protocol: str, chunks: Sequence[tuple[int, bytes]], *, expect_usage: bool = False) -> StreamResult:
    """hopbench's own verdict on a body (``hopbench.protocols.decode_stream``)."""
    return decode_stream(protocol, [d for _, d in chunks], expect_usage=expect_usage)


def short(data: bytes | str, limit: int = 240) -> str:
    """Evidence text: decoded, cut to ``limit`` characters with an ellipsis."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return text if len(text) <= limit else text[:limit] + "…"
