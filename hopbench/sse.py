"""Server-Sent Events scanner (sans-I/O).

Role: turn the raw body bytes of an SSE response, in whatever pieces the network
delivers them, into ``SSEEvent`` and ``SSEComment`` items, exactly as the WHATWG
HTML Standard ("Server-sent events", §9.2.6 interpreting an event stream) says.

Invariants:
- No I/O, no clock, no trio, no httpx: the caller stamps time.
- Never raises on wire bytes, except ``SSEError`` when one line or one event
  grows past ``max_event_bytes`` (the memory bound).
- Splitting the input differently never changes the items produced, nor which
  read returns each of them (the read that completes it).
- Speed never bends a rule: every shortcut (see ``SSEScanner``) is taken only
  when its input has exactly the shape whose spec result it builds; anything
  else goes through the general per-line code.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import NoReturn

from ._errors import SSEError, UsageError

__all__ = ["DEFAULT_MAX_EVENT_BYTES", "SSEComment", "SSEError", "SSEEvent", "SSEItem", "SSEScanner"]

DEFAULT_MAX_EVENT_BYTES = 4 * 1024 * 1024
"""The scanner's default memory bound, bytes: the longest line, and the largest event
data, a stream may send (``[run].max_event_bytes`` and ``decode_stream`` default to it)."""


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

# Building the frozen records fast. ``SSEEvent(e, d, i)`` runs the frozen
# dataclass ``__init__`` (three ``object.__setattr__`` calls from Python code,
# ~320 ns on the 2-core benchmark machine); ``object.__new__`` plus the three slot
# descriptors' ``__set__`` costs ~170 ns, half the per-event budget. Cheapest of
# all (~90 ns): fill an instance of a private class with the very same slot
# layout through plain attribute stores (specialised to direct slot writes by
# CPython 3.11+), then set its ``__class__`` to the record class. CPython allows
# that assignment only between classes of identical layout (same slots, same
# order, no __dict__), so a change to the records that breaks it raises
# TypeError at import (the probes below), never later. The result is an
# ordinary, frozen record: tests/test_sse.py checks type, equality, hash and
# frozenness, and that the records have no ``__post_init__`` being skipped.


class _EventShape:
    """Mutable twin of ``SSEEvent``'s layout; only ever a record under construction."""

    __slots__ = ("event", "data", "id")  # noqa: RUF023 (the dataclass field order, for the reader; CPython compares layouts sorted)
    event: str
    data: bytes
    id: str


class _CommentShape:
    """Mutable twin of ``SSEComment``'s layout; only ever a record under construction."""

    __slots__ = ("text",)
    text: bytes


def _new_event(event: str, data: bytes, id: str) -> SSEEvent:
    """Build ``SSEEvent(event, data, id)`` without the frozen ``__init__``."""
    item = _EventShape()
    item.event = event
    item.data = data
    item.id = id
    item.__class__ = SSEEvent  # type: ignore[assignment]
    return item  # type: ignore[return-value]


def _new_comment(text: bytes) -> SSEComment:
    """Build ``SSEComment(text)`` without the frozen ``__init__``."""
    item = _CommentShape()
    item.text = text
    item.__class__ = SSEComment  # type: ignore[assignment]
    return item  # type: ignore[return-value]


# Import-time probes: raise TypeError here if the layouts ever diverge.
_new_event("message", b"", "")
_new_comment(b"")


# Decoded event types by their whole line: b"event: X" -> "X" ("message" for an
# empty X). Event types repeat (a dozen names per protocol), so the fast path
# pays a bytes compare with the previous event's line, else one dict lookup,
# instead of a UTF-8 decode. Shared by all scanners (values are immutable str)
# and capped, so a server that invents a new name per event costs a decode per
# event, never unbounded memory.
_EVENT_NAMES: dict[bytes, str] = {}
_EVENT_NAMES_MAX = 1024

# Appended after the complete lines of a read: never equal to a line (a line
# holds no LF) and truthy, so it fails every fast-path test and tells the
# general path where the lines end.
_END = b"\n"
_ENDS = (_END, _END)


def _event_name(line: bytes) -> str | None:
    """The event type a complete ``event: X`` line sets, or None for any other line.

    ``line`` is one whole line without its line end (so it holds no LF or CR).
    WHATWG HTML §9.2.6: the field name ends at the first colon ("event"), one
    space after it is dropped and the rest of the line is the value; an empty
    event type dispatches as "message". The value is decoded as UTF-8 with
    ``errors="replace"``.
    """
    if line[:7] != b"event: ":
        return None
    name = line[7:].decode("utf-8", "replace") or "message"
    if len(_EVENT_NAMES) < _EVENT_NAMES_MAX:
        _EVENT_NAMES[line] = name
    return name


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

    How it is fast (pure Python; every Python-level loop below runs per read,
    per event or per unusual line, never per byte):

    - A read with no CR or LF (most reads of a few bytes) costs two ``in``
      tests with an int operand, one ``bytearray`` extend and one length test.
      (``10 in chunk`` is a memchr; ``b"\\n" in chunk`` first tries and fails
      to read its operand as an int, raising and clearing a TypeError inside
      CPython: several times slower.)
    - A read holding a CR is normalised to LF once (C-speed ``bytes.replace``).
    - Otherwise the unfinished line kept from earlier reads is joined to the
      read once and the whole is split into lines by one C-level
      ``split(b"\\n")``. After a blank line the event buffers are empty
      (dispatch clears them), so from there the lines are taken in threes
      (``event: X``, ``data: Y``, blank: Responses and Anthropic streams) or
      in twos (``data: Y``, blank: Chat Completions), as the first line
      suggests, by ``zip`` over one iterator; a group of that exact shape is
      one event, built directly. Any other line (comments, ``id``, ``retry``,
      several data lines, a group out of step) goes through the general
      per-line code until the buffers are empty again.
    - A complete ``event:`` line that ends a read's lines is held back
      unprocessed, with the partial line after it, so that with small reads
      its event still arrives as one group. Holding it changes nothing
      observable: an event type has no effect before a blank line, and
      ``close`` reports a held line as discarded exactly as it reports a set
      event type.

    Attributes:
        retry_ms: the last valid ``retry:`` value in milliseconds, or None.
    """

    __slots__ = (
        "_bom_head",
        "_cap",
        "_closed",
        "_data",
        "_data_len",
        "_etype",
        "_held",
        "_last_id",
        "_limit",
        "_pending",
        "_skip_lf",
        "_special",
        "retry_ms",
    )

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        """Create a scanner for one stream.

        Args:
            max_event_bytes: the memory bound in bytes, at least 1: the longest
                line, and the largest event data, the scanner accepts.

        Raises:
            UsageError: max_event_bytes is not a positive integer.
        """
        if isinstance(max_event_bytes, bool) or not isinstance(max_event_bytes, int) or max_event_bytes < 1:
            raise UsageError(f"max_event_bytes: expected a positive integer, got {max_event_bytes!r}")
        self._limit: int = max_event_bytes
        self.retry_ms: int | None = None
        # Bytes not yet scanned: ``_held`` bytes of one complete "event: X\n"
        # line held back (or none), then the unfinished line (no CR or LF).
        self._pending = bytearray()
        self._held = 0
        # Longest ``_pending`` allowed: the bound on the unfinished line plus ``_held``.
        self._cap = max_event_bytes
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

    @property
    def max_event_bytes(self) -> int:
        """The memory bound in bytes: on one line (without its terminator) and on one event's data."""
        return self._limit

    def feed(self, chunk: bytes | bytearray | memoryview) -> list[SSEItem]:
        """Scan the next piece of the body.

        Args:
            chunk: the next bytes of the body, any size, possibly empty. A
                bytearray or memoryview is copied once (the caller may reuse it).

        Returns:
            list of SSEEvent | SSEComment completed by this chunk, in stream
            order, possibly empty. Always a new list: the caller may keep or
            change it.

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
        # 10 is LF, 13 is CR: an int operand makes ``in`` a plain memchr.
        if 10 not in chunk:
            if 13 not in chunk:
                # No line end (most small reads): amortised O(1) append.
                pending = self._pending
                pending += chunk
                if len(pending) > self._cap:
                    self._too_big("line", len(pending) - self._held)
                return []
            chunk = self._normalise_cr(chunk)
        elif 13 in chunk:
            chunk = self._normalise_cr(chunk)
        pending = self._pending
        if pending:
            chunk = b"".join((pending, chunk))
            pending.clear()
            if self._held:
                self._held = 0
                self._cap = self._limit
        return self._scan(chunk)

    def _prelude(self, chunk: bytes | bytearray | memoryview) -> bytes:
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

    def _normalise_cr(self, chunk: bytes) -> bytes:
        """Turn CRLF and lone CR into LF; remember a CR that ends the read.

        A CR at the very end may be the first half of a CRLF split over reads:
        ``_prelude`` then drops a LF that starts the next read.
        """
        if chunk[-1] == 13:
            self._skip_lf = self._special = True
        return chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")

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
        self._held = 0
        self._cap = self._limit
        self._bom_head = None
        self._data = []
        self._data_len = 0
        self._etype = None
        self._skip_lf = False
        self._closed = self._special = True
        return discarded

    def _too_big(self, what: str, seen: int) -> NoReturn:
        raise SSEError(
            f"SSE {what} exceeds max_event_bytes={self._limit}: saw {seen} bytes "
            "(a broken or hostile stream; raise max_event_bytes if this is legitimate)"
        )

    def _scan(self, data: bytes) -> list[SSEItem]:
        """Process the complete lines of ``data``; keep the rest pending.

        ``data`` starts at the beginning of a line, holds at least one LF and
        no CR; ``_pending`` is empty.
        """
        limit = self._limit
        lines = data.split(b"\n")
        tail = lines.pop()  # the unfinished line after the last LF, maybe b""
        if len(tail) > limit:
            self._too_big("line", len(tail))
        out: list[SSEItem] = []
        held = lines[-1]
        if held[:7] == b"event: " and len(held) <= limit:
            # Hold the last complete line back (see the class docstring).
            lines.pop()
        else:
            held = b""
        it = iter(lines)
        first = 0
        if self._data or self._etype is not None:
            # An event is in progress: finish it line by line, up to its blank line.
            line_ = self._line
            for line in it:
                first += 1
                line_(line, out)
                if not line:
                    break
        if first < len(lines):
            # The event buffers are empty at lines[first]. Take the lines in
            # groups of an event's shape; _END (twice, so that zip never drops
            # a real line) marks where they end.
            lines += _ENDS
            last_id = self._last_id
            # One test for the whole read instead of one per line: no line in
            # it can be longer than the read.
            small = len(data) <= limit
            if lines[first][:7] == b"event: ":
                # "event: X", "data: Y", blank: one event (§9.2.6: type X, or
                # "message" when X is empty; data Y; the last event ID).
                names_get = _EVENT_NAMES.get
                prev_line = _END
                prev_name: str | None = None
                for event_line, data_line, blank in zip(it, it, it):
                    if event_line == prev_line:
                        name = prev_name
                    else:
                        name = names_get(event_line)
                        if name is None:
                            name = _event_name(event_line)
                        prev_line = event_line
                        prev_name = name
                    if (
                        name is not None
                        and not blank
                        and data_line[:6] == b"data: "
                        and (small or (len(event_line) <= limit and len(data_line) <= limit))
                    ):
                        # _new_event inlined: this runs once per event.
                        item = _EventShape()
                        item.event = name
                        item.data = data_line[6:]
                        item.id = last_id
                        item.__class__ = SSEEvent  # type: ignore[assignment]
                        out.append(item)  # type: ignore[arg-type]
                        continue
                    if event_line is _END or self._resync((event_line, data_line, blank), it, out):
                        break
                    last_id = self._last_id
            else:
                # "data: Y", blank: one event ("message", data Y, the last event ID).
                for data_line, blank in zip(it, it):
                    if not blank and data_line[:6] == b"data: " and (small or len(data_line) <= limit):
                        item = _EventShape()
                        item.event = "message"
                        item.data = data_line[6:]
                        item.id = last_id
                        item.__class__ = SSEEvent  # type: ignore[assignment]
                        out.append(item)  # type: ignore[arg-type]
                        continue
                    if data_line is _END or self._resync((data_line, blank), it, out):
                        break
                    last_id = self._last_id
        pending = self._pending
        if held:
            pending += held
            pending += b"\n"
            self._held = len(pending)
            self._cap = len(pending) + limit
        pending += tail
        return out

    def _resync(self, group: tuple[bytes, ...], it: Iterator[bytes], out: list[SSEItem]) -> bool:
        """Process a group that is not one plain event, then lines up to empty buffers.

        Returns:
            True when the lines ran out (``_END`` reached), False when the event
            buffers are empty again and grouping may resume at ``next(it)``.
        """
        line_ = self._line
        for line in group:
            if line is _END:
                return True
            line_(line, out)
        while self._data or self._etype is not None:
            line = next(it)
            if line is _END:
                return True
            line_(line, out)
        return False

    def _line(self, line: bytes, out: list[SSEItem]) -> None:
        """The general rule for one complete line (without its LF), WHATWG HTML §9.2.6."""
        if not line:
            # Blank line: dispatch the event.
            if self._data:
                lines = self._data
                payload = lines[0] if len(lines) == 1 else b"\n".join(lines)
                etype = self._etype
                name = "message" if not etype else etype.decode("utf-8", "replace")
                out.append(_new_event(name, payload, self._last_id))
                self._data = []
                self._data_len = 0
            self._etype = None
            return
        if len(line) > self._limit:
            self._too_big("line", len(line))
        colon = line.find(b":")
        if colon == 0:
            out.append(_new_comment(line[1:]))
            return
        if colon < 0:
            field = line
            value = b""
        else:
            field = line[:colon]
            value = line[colon + 2 :] if line[colon + 1 : colon + 2] == b" " else line[colon + 1 :]
        if field == b"data":
            data_len = self._data_len + len(value) + (1 if self._data else 0)
            if data_len > self._limit:
                self._too_big("event data", data_len)
            self._data.append(value)
            self._data_len = data_len
        elif field == b"event":
            self._etype = value
        elif field == b"id":
            if 0 not in value:
                self._last_id = value.decode("utf-8", "replace")
        elif field == b"retry":
            if value.isdigit():
                try:
                    self.retry_ms = int(value)
                except ValueError:
                    # Past sys.get_int_max_str_digits(): no sane delay; ignored.
                    pass
