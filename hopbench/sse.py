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

from ._errors import SSEError, UsageError

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


_BOM = b"\xef\xbb\xbf"
_LF = 10

# Building the frozen records through their slot descriptors skips the frozen
# dataclass ``__init__`` (three ``object.__setattr__`` calls through Python
# code): about 170 ns instead of 280 ns per event, a third of the per-event
# budget. The result is an ordinary instance, equal to ``SSEEvent(e, d, i)``;
# tests/test_sse.py checks that, so a future ``__post_init__`` cannot be skipped
# silently.
_object_new = object.__new__
_set_event = SSEEvent.event.__set__  # type: ignore[attr-defined]
_set_data = SSEEvent.data.__set__  # type: ignore[attr-defined]
_set_id = SSEEvent.id.__set__  # type: ignore[attr-defined]
_set_text = SSEComment.text.__set__  # type: ignore[attr-defined]


def _new_event(event: str, data: bytes, id: str) -> SSEEvent:  # noqa: A002
    """Build ``SSEEvent(event, data, id)`` without the frozen ``__init__``."""
    item: SSEEvent = _object_new(SSEEvent)
    _set_event(item, event)
    _set_data(item, data)
    _set_id(item, id)
    return item


def _new_comment(text: bytes) -> SSEComment:
    """Build ``SSEComment(text)`` without the frozen ``__init__``."""
    item: SSEComment = _object_new(SSEComment)
    _set_text(item, text)
    return item


class SSEScanner:
    """Incremental, sans-I/O parser of one ``text/event-stream`` body.

    Feed it the body bytes as they arrive, in pieces of any size; it returns the
    events and comments each piece completes. Follows WHATWG HTML, "Server-sent
    events", §9.2.6 interpreting an event stream:

    - Lines end in LF, CRLF or a lone CR, also when the CR ends one read and the
      LF starts the next. U+2028, U+2029 and U+0085 are not line ends.
    - One leading UTF-8 BOM (EF BB BF) is dropped, even when split over reads.
    - A line starting with ``:`` is a comment, returned as ``SSEComment``.
    - Otherwise the field name is what precedes the first colon (the whole line
      when there is none, with an empty value) and one space after the colon is
      dropped. ``data`` appends the value and a LF to the data buffer; ``event``
      sets the event type; ``id`` sets the last event ID unless the value holds
      NUL; ``retry`` sets ``retry_ms`` when the value is all ASCII digits;
      other fields are ignored.
    - A blank line dispatches: with an empty data buffer nothing is dispatched
      and the event type is cleared; otherwise an ``SSEEvent`` is returned with
      the buffer minus its final LF, the type (``"message"`` when none or
      empty) and the last event ID (which persists across events). Both
      buffers are then cleared.
    - At the end of the body (``close``) a partial line or event is discarded.

    The event type and ID are decoded as UTF-8 with ``errors="replace"``; data
    stays bytes. Invalid UTF-8 never raises.

    Zero-copy: each read is searched with ``bytes.find`` (memchr) in place;
    only the payload handed out is sliced (copied). A partial line left at the
    end of a read is kept in a ``bytearray`` and joined with the next reads
    once, so tiny reads cost amortised O(1) per byte. The common case, an
    event that is one ``data: `` line followed by a blank line, takes a fast
    path of one search, one prefix test and one slice. Reads holding a CR are
    normalised to LF once per read (C-speed ``bytes.replace``) and then take
    the same path.

    Attributes:
        max_event_bytes: bound in bytes on one line (without its terminator)
            and on one event's data (data lines joined with LF).
        retry_ms: the last valid ``retry:`` value in milliseconds, or None.
    """

    __slots__ = (
        "max_event_bytes",
        "retry_ms",
        "_pending",
        "_bom_head",
        "_skip_lf",
        "_data",
        "_data_len",
        "_etype",
        "_last_id",
        "_closed",
        "_special",
    )

    def __init__(self, max_event_bytes: int = 4 * 1024 * 1024) -> None:
        """Create a scanner for one stream.

        Args:
            max_event_bytes: the memory bound in bytes, at least 1: the longest
                line, and the largest event data, the scanner accepts.

        Raises:
            UsageError: max_event_bytes is not a positive integer.
        """
        if isinstance(max_event_bytes, bool) or not isinstance(max_event_bytes, int) or max_event_bytes < 1:
            raise UsageError(f"max_event_bytes: expected a positive integer, got {max_event_bytes!r}")
        self.max_event_bytes: int = max_event_bytes
        self.retry_ms: int | None = None
        # Bytes of an unfinished line (no terminator seen yet); never holds CR or LF.
        self._pending = bytearray()
        # The first bytes of the stream while they may still be a split BOM; None once decided.
        self._bom_head: bytes | None = b""
        # The previous read ended in CR: a LF that starts the next read is its CRLF tail.
        self._skip_lf = False
        # Data lines of the event being built (values without their LF) and their joined length.
        self._data: list[bytes] = []
        self._data_len = 0
        # Raw event type of the event being built; None when no `event` field was seen.
        self._etype: bytes | None = None
        self._last_id = ""
        self._closed = False
        # Any of the rare states above holds (BOM undecided, CR pending, closed).
        self._special = True

    def feed(self, chunk: bytes | bytearray | memoryview) -> list[SSEItem]:
        """Scan the next piece of the body.

        Args:
            chunk: the next bytes of the body, any size, possibly empty. A
                bytearray or memoryview is copied once (the caller may reuse it).

        Returns:
            list of SSEEvent | SSEComment completed by this chunk, in stream
            order, possibly empty.

        Raises:
            SSEError: a line, or an event's data, grew past ``max_event_bytes``.
                Never raises on anything else the server sends.
            UsageError: called after ``close()``.
        """
        if self._special or type(chunk) is not bytes:
            # Rare: a bytearray or memoryview (copied once), the stream's first
            # bytes (BOM undecided), a CR that ended the previous read, or a
            # closed scanner. Keeps the common path to one test.
            chunk = self._prelude(chunk)
        if b"\r" in chunk:
            # Rare: normalise CRLF and lone CR to LF once for the whole read. A CR
            # at the very end may be the first half of a CRLF split over reads.
            if chunk[-1] == 13:
                self._skip_lf = self._special = True
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        pending = self._pending
        if b"\n" not in chunk:
            # No line ends yet (often: small reads): amortised O(1) append.
            pending += chunk
            if len(pending) > self.max_event_bytes:
                self._too_big("line", len(pending))
            return []
        last = chunk.rfind(b"\n")
        if pending:
            last += len(pending)
            data = b"".join((pending, chunk))
            pending.clear()
        else:
            data = chunk
        if last + 1 < len(data):
            pending += data[last + 1 :]
            if len(pending) > self.max_event_bytes:
                self._too_big("line", len(pending))
        if data[last - 1] == _LF and data.find(b"\n") == last - 1 and data.startswith(b"data: ") and not self._data and self._etype is None:
            # Fast path for small reads: exactly one whole "data: ...\n\n" completed.
            if last - 1 > self.max_event_bytes:
                self._too_big("line", last - 1)
            return [_new_event("message", data[6 : last - 1], self._last_id)]
        return self._scan(data, last)

    def _prelude(self, chunk: bytes) -> bytes:
        """Handle the rare states before the common path; returns the bytes left to scan."""
        if type(chunk) is not bytes:
            chunk = bytes(chunk)
        if not self._special or not chunk:
            return chunk
        if self._closed:
            raise UsageError("SSEScanner.feed() called after close()")
        if self._bom_head is not None:
            head = self._bom_head + chunk
            if len(head) < 3 and _BOM.startswith(head):
                self._bom_head = head
                return b""
            self._bom_head = None
            chunk = head[3:] if head.startswith(_BOM) else head
            if not chunk:
                self._special = self._skip_lf
                return chunk
        if self._skip_lf:
            self._skip_lf = False
            if chunk[0] == _LF:
                chunk = chunk[1:]
        self._special = False
        return chunk

    def close(self) -> bool:
        """End the body: discard what is left of a partial line or event.

        Per WHATWG HTML §9.2.6, an event not ended by a blank line before the
        end of the stream is never dispatched. Calling ``close`` twice is
        harmless; ``feed`` after ``close`` is a usage error.

        Returns:
            True when an unfinished line, or data or event fields not yet
            dispatched, were discarded; False when the body ended cleanly.
        """
        discarded = bool(self._pending) or bool(self._bom_head) or bool(self._data) or self._etype is not None
        self._pending.clear()
        self._bom_head = None
        self._data = []
        self._data_len = 0
        self._etype = None
        self._skip_lf = False
        self._closed = self._special = True
        return discarded

    def _too_big(self, what: str, seen: int) -> None:
        raise SSEError(
            f"SSE {what} exceeds max_event_bytes={self.max_event_bytes}: saw {seen} bytes "
            "(a broken or hostile stream; raise max_event_bytes if this is legitimate)"
        )

    def _scan(self, data: bytes, last: int) -> list[SSEItem]:
        """Process the complete LF-terminated lines in ``data[: last + 1]``.

        ``data`` starts at the beginning of a line and holds no CR.
        """
        out: list[SSEItem] = []
        append = out.append
        find = data.find
        startswith = data.startswith
        limit = self.max_event_bytes
        lines = self._data
        data_len = self._data_len
        etype = self._etype
        last_id = self._last_id
        pos = 0
        try:
            while pos <= last:
                nl = find(b"\n", pos)
                if nl == pos:
                    # Blank line: dispatch (§9.2.6 "dispatch the event").
                    pos = nl + 1
                    if lines:
                        payload = lines[0] if len(lines) == 1 else b"\n".join(lines)
                        name = "message" if not etype else etype.decode("utf-8", "replace")
                        append(_new_event(name, payload, last_id))
                        lines = []
                        data_len = 0
                    etype = None
                    continue
                if nl - pos > limit:
                    self._too_big("line", nl - pos)
                if not lines and etype is None and nl < last and data[nl + 1] == _LF and startswith(b"data: ", pos):
                    # Fast path: a whole one-line event "data: ...\n\n".
                    # _new_event inlined: this line runs once per event.
                    item = _object_new(SSEEvent)
                    _set_event(item, "message")
                    _set_data(item, data[pos + 6 : nl])
                    _set_id(item, last_id)
                    append(item)
                    pos = nl + 2
                    continue
                if not lines and etype is None and nl < last and startswith(b"event: ", pos):
                    # Fast path: a whole "event: x\ndata: ...\n\n" (Responses, Anthropic).
                    nl2 = find(b"\n", nl + 1)
                    if nl2 < last and data[nl2 + 1] == _LF and startswith(b"data: ", nl + 1):
                        if nl2 - nl - 1 > limit:
                            self._too_big("line", nl2 - nl - 1)
                        name = data[pos + 7 : nl].decode("utf-8", "replace") or "message"
                        append(_new_event(name, data[nl + 7 : nl2], last_id))
                        pos = nl2 + 2
                        continue
                colon = find(b":", pos, nl)
                if colon == pos:
                    append(_new_comment(data[pos + 1 : nl]))
                    pos = nl + 1
                    continue
                if colon < 0:
                    name_b = data[pos:nl]
                    value_at = nl
                else:
                    name_b = data[pos:colon]
                    value_at = colon + 1
                    if value_at < nl and data[value_at] == 32:
                        value_at += 1
                pos = nl + 1
                if name_b == b"data":
                    value = data[value_at:nl]
                    data_len += len(value) + (1 if lines else 0)
                    if data_len > limit:
                        self._too_big("event data", data_len)
                    lines.append(value)
                elif name_b == b"event":
                    etype = data[value_at:nl]
                elif name_b == b"id":
                    value = data[value_at:nl]
                    if b"\0" not in value:
                        last_id = value.decode("utf-8", "replace")
                elif name_b == b"retry":
                    value = data[value_at:nl]
                    if value.isdigit():
                        try:
                            self.retry_ms = int(value)
                        except ValueError:
                            # Past sys.get_int_max_str_digits(): no sane delay; ignored.
                            pass
        finally:
            self._data = lines
            self._data_len = data_len
            self._etype = etype
            self._last_id = last_id
        return out
