"""Zero-copy Server-Sent Events scanner (sans-I/O).

Role: turn the raw body bytes of an SSE response, in whatever pieces the network
delivers them, into ``SSEEvent`` and ``SSEComment`` items, exactly as the WHATWG
HTML Standard ("Server-sent events", §9.2.6 interpreting an event stream) says.

Invariants:
- No I/O, no clock, no trio, no httpx: the caller stamps time.
- Never raises on wire bytes, except ``SSEError`` when one line or one event
  grows past ``max_event_bytes`` (the memory bound).
- Splitting the input differently never changes the items produced.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._errors import SSEError

__all__ = ["SSEScanner", "SSEEvent", "SSEComment", "SSEError", "SSEItem"]


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event.

    Attributes:
        event: the event type; "message" when the event had no ``event:`` field.
        data: the data lines joined with b"\\n" (UTF-8 not decoded).
        id: the last event ID at dispatch ("" when none; persists across events).
    """

    event: str
    data: bytes
    id: str = ""


@dataclass(frozen=True, slots=True)
class SSEComment:
    """One comment line: the bytes after the leading colon, verbatim.

    ``: hopbase-keepalive`` gives ``b" hopbase-keepalive"``; a bare ``:`` gives ``b""``.
    """

    text: bytes


SSEItem = SSEEvent | SSEComment


class SSEScanner:
    """Placeholder: the real scanner lands with issue 2."""

    def __init__(self, max_event_bytes: int = 4 * 1024 * 1024) -> None:
        raise NotImplementedError
