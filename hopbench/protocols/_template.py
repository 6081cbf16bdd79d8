"""Byte templates: decode a stream's repeated text-delta frame without a full JSON parse.

Role: a streaming server writes each text delta of a stream as the same bytes
around a different string: chat ``{"id":"chatcmpl-1",...,"delta":{"content":
"<TEXT>"},...}``, Messages ``{"type":"content_block_delta","index":0,"delta":
{"type":"text_delta","text":"<TEXT>"}}``. ``learn`` takes one event the
decoder fully parsed and accepted as a plain text delta, and cuts its bytes
into constant segments around *holes*: the text's JSON string literal, and
fields the decoder never reads that change from frame to frame (Responses'
``sequence_number``, the ``obfuscation`` padding of OpenAI's APIs). ``match``
then takes a later event's bytes and returns its text when every constant
segment is byte-identical and every hole holds exactly one JSON token of its
kind; only the text's literal is decoded.

Invariants (correctness first: any doubt returns None, and the decoder takes
its full parse, which decides):
- A matched frame has the JSON meaning of the learned frame with the holes'
  values replaced: the segments are the same bytes, and each hole is checked
  to be one complete token (a string literal decoded by the JSON parser
  itself, ending where the hole ends; an integer of 1-18 ASCII digits without
  a leading zero). So escapes, unicode, extra or reordered keys, another
  choice index, a finish reason, usage, tool calls, a different id or model
  all change a segment, or break a hole, and miss.
- ``learn`` proves its cut before returning it: it re-parses the frame with
  probe values in the holes and requires exactly the original value with the
  probed fields changed (a key that also appears inside a string, or twice,
  fails the proof and gives no template).
- Holes other than the text are only fields the decoder never reads.
- Pure: no clock, no state beyond the returned ``Template``; imports nothing
  from hopbench (the JSON parser is passed in, so tests and benchmarks can
  swap it as they swap ``_base._fast_loads``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["Template", "learn", "match", "TEXT", "INT", "STR"]

TEXT, INT, STR = 0, 1, 2
"""Hole kinds: the text (a string literal, decoded), an ignored integer, an
ignored string literal."""

_scanstring: Any = getattr(json.decoder, "scanstring")  # the C string scanner (strict: no raw control chars)
_WS = b" \t\r\n"
_MAX_INT_DIGITS = 18  # below orjson's 64-bit and the stdlib's int-digits limits alike
_PROBE_TEXT = "hb\u0001probe"  # contains a control char: never a wire text written raw
_PROBE_TEXT_JSON = b'"hb\\u0001probe"'


class Template:
    """The learned cut of one stream's text-delta frame.

    Attributes:
        event: the SSE event name the frame came with (matched exactly).
        head: the bytes before the first hole; the frame starts with them.
        segments: the constant bytes after each hole but the last, in order.
        tail: the bytes after the last hole; the frame ends with them.
        kinds: the kind (``TEXT``, ``INT``, ``STR``) of each hole, in order;
            exactly one is ``TEXT``.
    """

    __slots__ = ("event", "head", "segments", "tail", "kinds", "_fixed", "_single", "_left", "_right",
                 "_head_len", "_tail_len")

    def __init__(self, event: str, head: bytes, segments: tuple[bytes, ...], tail: bytes,
                 kinds: tuple[int, ...]) -> None:
        self.event = event
        self.head = head
        self.segments = segments
        self.tail = tail
        self.kinds = kinds
        self._fixed = len(head) + sum(map(len, segments)) + len(tail)
        self._single = kinds == (TEXT,)
        self._head_len = len(head)
        self._tail_len = len(tail)
        at = kinds.index(TEXT)
        # holes before the text: (token matcher, the segment after the hole, its length)
        self._left = tuple((_TOKENS[kinds[i]], segments[i], len(segments[i])) for i in range(at))
        # holes after the text, last first: (kind, the segment before the hole, its length)
        self._right = tuple((kinds[i], segments[i - 1], len(segments[i - 1]))
                            for i in range(len(kinds) - 1, at, -1))


def _literal(raw: bytes, fast: Any) -> str | None:
    """The string a hole holds when it is exactly one JSON string literal, else None.

    ``fast``: orjson-like ``loads(bytes)`` or None (the stdlib's C scanner).
    Whitespace around the literal is accepted by orjson and is insignificant
    in JSON; the stdlib branch is stricter (a miss only costs a full parse).
    """
    if fast is not None:
        try:
            value = fast(raw)
        except Exception:  # any parser's error: the full parse decides
            return None
        return value if type(value) is str else None
    try:
        text = raw.decode("utf-8")
        if text[:1] != '"':
            return None
        value, end = _scanstring(text, 1)
    except (ValueError, IndexError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None
    return value if end == len(text) else None


def _integer(raw: bytes) -> bool:
    """True when ``raw`` is a JSON integer this module accepts: 1-18 ASCII
    digits, no sign, no leading zero (RFC 8259 §6 forbids them)."""
    return 0 < len(raw) <= _MAX_INT_DIGITS and raw.isdigit() and (raw[0] != 48 or len(raw) == 1)


def _closing_quote(data: bytes, start: int) -> int:
    """The index of the ``"`` that ends the string literal opened at ``start``
    (the first quote not escaped by an odd run of backslashes), or -1."""
    end = data.find(b'"', start + 1)
    while end > 0 and data[end - 1] == 92:
        backslashes = 1
        while data[end - 1 - backslashes] == 92:
            backslashes += 1
        if backslashes % 2 == 0:
            break
        end = data.find(b'"', end + 1)
    return end


# The tokens of the ignored holes. Before the text a token is matched where
# its hole starts and the segment after it is then compared byte for byte (a
# token that runs on cannot match); after the text it is found from the right
# (see ``match``).
# An ignored string: printable ASCII without quote or backslash, so valid JSON
# and valid UTF-8 by construction (OpenAI's obfuscation padding is such); any
# other string misses and the frame is parsed in full.
_STR_PATTERN = re.compile(rb'"[\x20\x21\x23-\x5b\x5d-\x7e]*"')
_STR_TOKEN: Any = _STR_PATTERN.match
_STR_FULL: Any = _STR_PATTERN.fullmatch
# An ignored integer: RFC 8259 §6 without sign, at most _MAX_INT_DIGITS digits.
_INT_TOKEN: Any = re.compile(rb"0|[1-9][0-9]{0,%d}" % (_MAX_INT_DIGITS - 1)).match
_TOKENS = {STR: _STR_TOKEN, INT: _INT_TOKEN}


def match(tpl: Template, data: bytes, fast: Any) -> str | None:
    """The text of ``data`` when it is ``tpl``'s frame with other hole values, else None.

    The holes before the text are matched from the left (each token where
    the hole starts, then the constant segment after it, byte for byte), the
    holes after it from the right (an ignored string back to its opening
    quote, an integer back over its digits, then the segment before it); the
    text's literal is what lies between, and the parser must read it as
    exactly one JSON string.

    Args:
        tpl: a ``Template`` from ``learn`` for this stream.
        data: one event's data bytes (the SSE event name is the caller's check).
        fast: the JSON parser in use (orjson-like ``loads(bytes)``), or None
            for the stdlib.

    Returns:
        The decoded text (possibly "") when every segment matched and every
        hole held one token of its kind; None otherwise (the caller then
        parses the frame in full). Never raises on ``data``.
    """
    # slice comparisons: cheaper than bytes.startswith's argument parsing
    if len(data) < tpl._fixed or data[:tpl._head_len] != tpl.head or data[-tpl._tail_len:] != tpl.tail:
        return None
    lo = tpl._head_len
    hi = len(data) - tpl._tail_len
    if tpl._single:
        if fast is not None:  # _literal inlined: the common case of the hot path
            try:
                text = fast(data[lo:hi])
            except Exception:  # any parser's error: the full parse decides
                return None
            return text if type(text) is str else None
        return _literal(data[lo:hi], None)
    for token, segment, length in tpl._left:
        found = token(data, lo, hi)
        if found is None:
            return None
        end = found.end()
        lo = end + length
        if data[end:lo] != segment:
            return None
    for kind, segment, length in tpl._right:
        if kind == STR:
            start = data.rfind(b'"', lo, hi - 1)
            if start < 0 or _STR_FULL(data, start, hi) is None:
                return None
        else:
            start = hi
            while start > lo and 48 <= data[start - 1] <= 57:
                start -= 1
            if not _integer(data[start:hi]):
                return None
        hi = start - length
        if hi < lo or data[hi:start] != segment:
            return None
    return _literal(data[lo:hi], fast)


def _skip_ws(data: bytes, i: int) -> int:
    while i < len(data) and data[i] in _WS:
        i += 1
    return i


def _value_span(data: bytes, key: bytes, kind: int) -> tuple[int, int] | None:
    """The byte span of the value of the last ``"key":`` in ``data`` (a string
    literal, or the digits of an integer), or None."""
    i = data.rfind(b'"' + key + b'"')
    if i < 0:
        return None
    i = _skip_ws(data, i + len(key) + 2)
    if data[i:i + 1] != b":":
        return None
    start = _skip_ws(data, i + 1)
    if kind == INT:
        end = start
        while end < len(data) and 48 <= data[end] <= 57:
            end += 1
        return (start, end) if end > start else None
    if data[start:start + 1] != b'"':
        return None
    end = _closing_quote(data, start)
    return (start, end + 1) if end > 0 else None


def _get(value: Any, path: Sequence[str | int]) -> Any:
    for step in path:
        value = value[step]
    return value


def _put(value: Any, path: Sequence[str | int], new: Any) -> None:
    _get(value, path[:-1])[path[-1]] = new


def learn(
    event: str,
    data: bytes,
    body: Any,
    text_path: Sequence[str | int],
    ignored: Sequence[tuple[str, int]],
    loads: Callable[[bytes], Any],
) -> Template | None:
    """Cut a fully parsed text-delta frame into a ``Template``, proven on the frame.

    Args:
        event: the frame's SSE event name.
        data: the frame's data bytes, exactly as parsed.
        body: their parsed JSON (a dict; not changed).
        text_path: the keys / indexes from ``body`` to the text (a non-empty
            str), e.g. ``("choices", 0, "delta", "content")``; its last key
            locates the text's literal in the bytes.
        ignored: top-level fields the decoder never reads that may change per
            frame: (key, ``INT`` or ``STR``); one absent from ``body``, or of
            another JSON type, is no hole (it is then matched byte for byte).
        loads: the JSON parser the decoder used for ``body`` (bytes -> value).

    Returns:
        The ``Template``, or None when the frame cannot be cut safely (the
        decoder then keeps parsing in full). Never raises on ``data``.
    """
    try:
        text = _get(body, text_path)
        key = text_path[-1]
        if type(text) is not str or not text or text == _PROBE_TEXT or not isinstance(key, str):
            return None
        span = _value_span(data, key.encode(), TEXT)
        if span is None:
            return None
        holes: list[tuple[int, int, int, bytes]] = [(span[0], span[1], TEXT, _PROBE_TEXT_JSON)]
        probes: list[tuple[Sequence[str | int], Any, Any]] = [(text_path, _PROBE_TEXT, text)]
        for name, kind in ignored:
            value = body.get(name)
            if kind == INT:
                if type(value) is not int or not 0 <= value < 10 ** (_MAX_INT_DIGITS - 1):
                    continue
                probe: Any = value + 1
            elif type(value) is str:
                probe = value + "x"
            else:
                continue
            span = _value_span(data, name.encode(), kind)
            if span is None:
                return None
            holes.append((span[0], span[1], kind, json.dumps(probe).encode()))
            probes.append(((name,), probe, value))
        holes.sort()
        for before, after in zip(holes, holes[1:]):
            if after[0] < before[1]:
                return None
        # the proof: the frame with probe values in the holes parses to the
        # body with exactly the probed fields changed
        pieces: list[bytes] = []
        at = 0
        for start, end, _kind, probe_json in holes:
            pieces += (data[at:start], probe_json)
            at = end
        pieces.append(data[at:])
        probed = loads(b"".join(pieces))
        for path, probe, original in probes:
            got = _get(probed, path)
            if type(got) is not type(probe) or got != probe:
                return None
            _put(probed, path, original)
        if probed != body:
            return None
        segments = tuple(data[holes[i][1]:holes[i + 1][0]] for i in range(len(holes) - 1))
        if not holes[0][0] or holes[-1][1] == len(data):  # a JSON object: never, but match slices on it
            return None
        return Template(event, data[:holes[0][0]], segments, data[holes[-1][1]:],
                        tuple(h[2] for h in holes))
    except Exception:  # any surprise in the proof: no template, the full parse stays
        return None
