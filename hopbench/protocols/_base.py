"""The decoder contract and the state every protocol decoder shares.

Role: a ``Decoder`` turns the items of one SSE stream (``SSEEvent`` /
``SSEComment`` from ``hopbench.sse``) into observations, in stream order, and
at the end of the body into one ``StreamResult``. The three protocol decoders
(``_chat``, ``_responses``, ``_messages``) subclass ``Decoder`` and implement
only ``_on_event``.

Invariants:
- Sans-I/O: no clock, no trio, no httpx. The runner stamps what ``feed``
  returns with the arrival time of the read that completed the event.
- Never raises on server input: malformed JSON, invalid UTF-8, odd shapes,
  unknown event types and events after the end are counted anomalies.
- ``FirstToken`` / ``FirstContentToken`` are emitted at most once each, just
  before the ``ContentDelta`` they precede; only non-empty output counts.
- Once an in-band terminal signal (completed or failed) arrived, every later
  event is ignored and counted as anomaly ``data_after_end``; comments are
  still counted as keepalives.
- Hot path: a stream's repeated plain text delta is matched against the
  byte template learned from its first one (``_template``, proven against
  the full parse; only the text's literal is decoded); any other event is
  one JSON parse (orjson when installed, else the stdlib's C scanner called
  directly, ``_loads``). ``FAST_PATHS`` False turns the templates and the
  protocols' text-delta shortcuts off (the reference in tests). An event
  that yields nothing to report returns a shared empty tuple; once the first tokens are out, a
  content event of fewer than ``_CACHED_CHARS`` characters returns a shared
  pre-built ``(ContentDelta,)`` (``Decoder._emit``): the parsed JSON is its
  only allocation.

Rules shared by the three protocols (issue 13; docs/results/decoder-rules.md "Decoder rules"):
- Generated fragment: an event carries generated output when it holds
  non-empty model-written characters of the measured answer: text, reasoning,
  refusal, tool-call arguments, or a tool call's name (the first fragment of
  a call: chat ``tool_calls[j].function.name``, Responses ``output_item.added``
  of a call item, Messages ``content_block_start`` of a tool-use block). The
  first one of any channel is ``FirstToken`` (TTFT); the first one that is not
  reasoning is ``FirstContentToken`` (content TTFT: text, refusal and tool
  calls all count as visible output). Each is a ``ContentDelta`` and one
  content event of its channel (``StreamResult.events``).
- Real signals: a finish / stop reason, status, error code or error type is a
  signal only when it is a string with a non-whitespace character (stripped;
  error codes may also be ints). ``""``, whitespace, null, booleans, numbers
  and containers only look present (``_signals.real``, ``_signals.reason``).
- Malformed event: an event whose data is not JSON, or whose JSON is not an
  object, is unusable: the stream is "failed" with detail "malformed_event",
  whatever ends it, and decoding goes on (later events still give text, usage,
  stop reason and timings); the anomaly is counted too. Empty or whitespace
  data is only an anomaly (``empty_data``): no content was lost; so is
  ``[DONE]`` in a Responses or Messages stream (``done_sentinel``: some
  gateways append Chat Completions' end marker; the protocol's own terminal
  event still decides the outcome). The official SDKs
  raise on a malformed event (openai-python and anthropic-sdk-python
  ``_streaming.py``: ``sse.json()`` is ``json.loads(data)``).
- Abort: a stream that ends "completed" with stop reason "abort" (vLLM's
  engine abort) is "failed" with detail "abort"; with stop reason "error"
  (vLLM's retryable internal error) "failed" with detail "engine_error".
- Error names: ``error_name`` picks the more specific of an error's code and
  type; ``error_type`` / ``error_wire_code`` keep both as sent.
- Hidden reasoning: usage reports reasoning tokens > 0 (or the protocol
  announced a reasoning block / item) and no reasoning fragment arrived.
"""

from __future__ import annotations

import json
from typing import Any

from .._errors import UsageError
from ..sse import SSEComment, SSEEvent
from ._observations import (
    Anomaly,
    ContentDelta,
    ContentKind,
    FirstContentToken,
    FirstToken,
    Keepalive,
    Observation,
    StreamEnd,
    StreamResult,
    UsageReport,
)
from ._signals import error_name, real
from ._template import STR, Template, learn

FAST_PATHS = True
"""Decoders created while this is True take the fast paths (the byte template
of ``_template``, and each protocol's text-delta shortcut); False makes them
parse and decode every event in full: the reference the fast paths are tested
against (``tests/test_decode_fast_path.py``). Read at ``Decoder.__init__``."""

_LEARN_TRIES = 3
"""Template proofs per stream (``Decoder._learn``): a stream whose frames keep
changing around the text costs at most this many extra parses."""

__all__ = ["Decoder", "Observations", "NOTHING", "UNPARSED", "ToolCallState"]

Observations = tuple[Observation, ...]
"""What ``Decoder.feed`` returns: observations in stream order, possibly empty."""

NOTHING: Observations = ()
"""The shared empty result of ``feed`` (no allocation on quiet events)."""

UNPARSED: Any = object()
"""``Decoder._parse``'s value for data that is not JSON (JSON ``null`` is None)."""

_std_decoder: Any = json.JSONDecoder()
_scan_once: Any = _std_decoder.scan_once  # the C scanner behind json.loads


def _loads(text: str) -> Any:
    """``json.loads(text)``, without its per-call overhead for a plain value.

    The stdlib's C scanner is called directly (``json.loads`` adds two
    whitespace regex matches and a method layer: ~600 ns of a ~2 us chat
    chunk); a value that does not start at offset 0 or does not end the text
    (whitespace around it, or garbage) goes through ``json.loads`` itself, so
    results and errors are exactly the stdlib's.

    Raises:
        ValueError: not JSON (``json.JSONDecodeError``, or the int-digits limit).
        RecursionError: a hostile nesting depth.
    """
    try:
        value, end = _scan_once(text, 0)
    except StopIteration:
        return json.loads(text)
    if end != len(text):
        return json.loads(text)
    return value


def _bytes_loads(data: bytes) -> Any:
    """``_loads`` of UTF-8 bytes (the stdlib path of ``Decoder._learn``)."""
    return _loads(data.decode("utf-8"))


try:  # optional (hopbench[fast]): ~4x faster, reads the bytes without a decode step
    import orjson as _orjson

    _fast_loads: Any = _orjson.loads
    _FastError: Any = _orjson.JSONDecodeError
except ImportError:  # pragma: no cover - exercised by test_protocols_json_fallback
    _fast_loads = None
    _FastError = ValueError


_INTERRUPTED: dict[str, str] = {
    "abort": "abort",  # vLLM / SGLang: the engine aborted the request
    "error": "engine_error",  # vLLM FinishReason.ERROR: a retryable request-level internal error
}
"""Stop reasons that end a stream "failed" although its terminal signal came
(stop reason -> ``StreamResult.detail``): the engine broke the answer off.
Source: vLLM ``vllm/v1/engine/__init__.py``, ``FINISH_REASON_STRINGS`` and
``FinishReason`` ("abort", "error")."""

_CACHED_CHARS = 256
_KINDS: tuple[ContentKind, ...] = ("text", "reasoning", "tool", "refusal")
"""ContentDeltas of fewer characters than this are pre-built and shared."""

_DELTA_TUPLES: dict[str, tuple[Observations, ...]] = {
    kind: tuple((ContentDelta(kind, n),) for n in range(_CACHED_CHARS))
    for kind in _KINDS
}
"""kind -> chars -> the one-observation tuple ``(ContentDelta(kind, chars),)``."""


class ToolCallState:
    """One tool call being assembled from its argument fragments (all protocols)."""

    __slots__ = ("index", "id", "name", "arguments", "final")

    def __init__(self, index: int) -> None:
        self.index = index
        self.id: str | None = None
        self.name: str | None = None
        self.arguments: list[str] = []
        self.final: str | None = None  # responses: the whole arguments of a .done event

    def as_dict(self) -> dict[str, object]:
        """The ``StreamResult.tool_calls`` entry: index, id, name, arguments (joined)."""
        return {"index": self.index, "id": self.id, "name": self.name,
                "arguments": "".join(self.arguments)}


class Decoder:
    """Base class of the protocol decoders: feed SSE items, then finish.

    Subclasses implement ``_on_event`` and report through the ``_content``,
    ``_end``, ``_usage`` and ``_anomaly`` helpers, which keep the shared
    ``StreamResult`` bookkeeping in one place.

    Attributes:
        protocol: "chat", "responses" or "messages".
        ended: True once an in-band terminal signal (``StreamEnd``) was emitted.
            When ``finish()`` decides the outcome on its own (truncated, or a chat
            stream completed by ``finish_reason`` without ``[DONE]``) no
            ``StreamEnd`` observation exists: the runner stamps the end of the
            body itself.
    """

    protocol: str = ""

    __slots__ = (
        "ended",
        "_keep_text",
        "_finished",
        "_first",
        "_first_content",
        "_outcome",
        "_error_code",
        "_error_message",
        "_text",
        "_reasoning",
        "_stop_reason",
        "_input_tokens",
        "_output_tokens",
        "_keepalives",
        "_anomalies",
        "_expect_usage",
        "_refusal",
        "_detail",
        "_error_type",
        "_error_wire_code",
        "_total_tokens",
        "_reasoning_tokens",
        "_events",
        "_malformed",
        "_reasoning_items",
        "_cached_tokens",
        "_fast",
        "_tpl",
        "_tries",
    )

    def __init__(self, *, keep_text: bool = True, expect_usage: bool = False) -> None:
        """Create a decoder for one stream.

        Args:
            keep_text: keep the output text, reasoning text and tool-call
                arguments for ``StreamResult`` (True), or only count them (False:
                ``text``/``reasoning_text`` stay "" and tool arguments ""), which
                saves memory in long load runs.
            expect_usage: the request asked for usage in the stream (chat
                ``stream_options.include_usage``). Chat then needs the usage
                chunk or ``[DONE]`` after the finish chunk to call the stream
                completed; the other protocols always send usage in their
                terminal events and ignore the flag.
        """
        self.ended = False
        self._keep_text = keep_text
        self._finished = False
        self._first = False
        self._first_content = False
        self._outcome: str = "truncated"
        self._error_code: str | None = None
        self._error_message: str | None = None
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._stop_reason: str | None = None
        self._input_tokens: int | None = None
        self._output_tokens: int | None = None
        self._keepalives = 0
        self._anomalies: dict[str, int] = {}
        self._expect_usage = expect_usage
        self._refusal: list[str] = []
        self._detail: str | None = None
        self._error_type: str | None = None
        self._error_wire_code: str | None = None
        self._total_tokens: int | None = None
        self._reasoning_tokens: int | None = None
        self._events: dict[str, int] = {"text": 0, "reasoning": 0, "tool": 0, "refusal": 0}
        self._malformed = False  # an event's data was unusable: the stream failed
        self._reasoning_items = 0  # reasoning blocks / items announced (messages, responses)
        self._cached_tokens: int | None = None
        self._fast = FAST_PATHS
        self._tpl: Template | None = None  # the stream's learned text-delta frame
        self._tries = _LEARN_TRIES if FAST_PATHS else 0

    # -- public API ---------------------------------------------------------

    def feed(self, item: SSEEvent | SSEComment) -> Observations:
        """Decode one SSE item.

        Args:
            item: the next ``SSEEvent`` or ``SSEComment`` from the scanner.

        Returns:
            Tuple of observations in stream order, possibly empty (then the
            shared ``NOTHING``).

        Raises:
            UsageError: when called after ``finish()``. Never raises on server
                input.
        """
        if self._finished:
            raise UsageError("Decoder.feed() called after finish()")
        if type(item) is SSEComment:
            self._keepalives += 1
            return (Keepalive(item.text),)
        if self.ended:
            return self._anomaly("data_after_end", item.event)  # type: ignore[union-attr]
        return self._on_event(item)  # type: ignore[arg-type]

    def kept_fragments(self) -> tuple[list[str], list[str], list[str]]:
        """The output fragments kept so far: (text, reasoning, refusal), one entry per
        fragment, in stream order; the decoder's own lists (they grow as it feeds: read,
        never change them). Empty without ``keep_text``. Tool-call arguments are not
        among them. Gateway overhead reads each content event's text from them
        (``hopbench.measure._meter.StreamMeter.on_event_texts``)."""
        return self._text, self._reasoning, self._refusal

    def finish(self, *, discarded_partial: bool = False) -> StreamResult:
        """Close the stream at the end of the body and return the verdict.

        Args:
            discarded_partial: the scanner's ``close()`` result: True when the
                body ended inside an event (counted as anomaly ``partial_event``).

        Returns:
            The ``StreamResult``; outcome "truncated" unless a terminal signal
            arrived (or the protocol's end-of-body rule says completed).
            Calling it again returns an equal result.
        """
        if discarded_partial and not self._finished:
            self._count("partial_event")
        self._finished = True
        outcome = self._outcome
        detail = self._detail
        if outcome == "truncated":
            eof = self._completed_at_eof()
            if eof is True:
                outcome, detail = self._verdict("completed")
            elif eof:
                detail = eof  # truncated, with the protocol's own reason
        if self._malformed and outcome == "truncated":
            outcome, detail = "failed", "malformed_event"
        events = dict(self._events)
        reasoning_tokens = self._reasoning_tokens
        hidden = not events["reasoning"] and (
            bool(self._reasoning_items) or (reasoning_tokens is not None and reasoning_tokens > 0)
        )
        return StreamResult(
            outcome=outcome,  # type: ignore[arg-type]
            error_code=self._error_code,
            error_message=self._error_message,
            text="".join(self._text),
            reasoning_text="".join(self._reasoning),
            tool_calls=self._tool_calls(),
            stop_reason=self._stop_reason,
            input_tokens=self._input_tokens,
            output_tokens=self._output_tokens,
            content_events=sum(events.values()),
            keepalives=self._keepalives,
            anomalies=dict(self._anomalies),
            refusal_text="".join(self._refusal),
            detail=detail,
            error_type=self._error_type,
            error_wire_code=self._error_wire_code,
            total_tokens=self._total_tokens,
            reasoning_tokens=reasoning_tokens,
            choices=self._choice_count(),
            events=events,
            hidden_reasoning=hidden,
            no_done=self._no_done(outcome),
            cached_tokens=self._cached_tokens,
        )

    # -- for subclasses -----------------------------------------------------

    def _on_event(self, event: SSEEvent) -> Observations:
        """Decode one event of a stream that has not ended (subclass hook)."""
        raise NotImplementedError

    def _completed_at_eof(self) -> bool | str:
        """Whether a body that ends now, without a terminal event, completed.

        Returns True (completed), False (truncated) or a non-empty string
        (truncated, with that string as ``StreamResult.detail``).
        """
        return False

    def _choice_count(self) -> int:
        """Distinct choice indexes seen (subclass hook; 1 unless chat ``n`` > 1)."""
        return 1

    def _no_done(self, outcome: str) -> bool:
        """Whether the stream completed without its in-band end (subclass hook)."""
        return False

    def _verdict(self, outcome: str) -> tuple[str, str | None]:
        """The final (outcome, detail) of a stream that reached ``outcome``.

        A "completed" stream fails when one of its events was unusable
        (detail "malformed_event") or when its stop reason says the engine
        broke it off (``_INTERRUPTED``: "abort" gives detail "abort", "error"
        detail "engine_error"); a "failed" one keeps the malformed detail.
        """
        if self._malformed:
            return "failed", "malformed_event"
        if outcome == "completed":
            interrupted = _INTERRUPTED.get(self._stop_reason)  # type: ignore[arg-type]
            if interrupted is not None:
                return "failed", interrupted
        return outcome, self._detail

    def _tool_calls(self) -> list[dict[str, object]]:
        """The joined tool calls, ordered by index (subclass hook)."""
        return []

    def _parse(self, data: bytes) -> tuple[Any, Observations]:
        """Decode the JSON of one event: (value, anomalies), value ``UNPARSED``
        on failure.

        Invalid UTF-8 is replaced (U+FFFD) and counted as ``invalid_utf8``;
        unparsable JSON is counted as ``malformed_json`` (RFC 8259) and marks
        the stream malformed (it will fail with detail "malformed_event");
        data that is empty or whitespace is only counted (``empty_data``), and
        so is ``[DONE]`` (``done_sentinel``: chat's end marker, which the
        chat decoder handles before parsing).
        """
        if _fast_loads is not None:
            try:
                return _fast_loads(data), NOTHING
            except (_FastError, RecursionError):
                # orjson is stricter than json (invalid UTF-8, NaN, huge ints,
                # lone surrogates): the stdlib path below decides, so results
                # never depend on whether orjson is installed.
                pass
        try:
            text = data.decode("utf-8")
            bad: Observations = NOTHING
        except UnicodeDecodeError:
            text = data.decode("utf-8", errors="replace")
            bad = self._anomaly("invalid_utf8")
        try:
            return _loads(text), bad
        except (ValueError, RecursionError):
            # ValueError covers JSONDecodeError and the int-digits limit;
            # RecursionError a hostile nesting depth.
            stripped = text.strip()
            if not stripped:
                # ``data:`` with nothing (a heartbeat of some servers): no
                # content was lost, so it does not break the stream.
                return UNPARSED, bad + self._anomaly("empty_data")
            if stripped == "[DONE]":
                # Chat Completions' end sentinel in a Responses or Messages
                # stream (gateways that append it): no content was lost; the
                # protocol's own terminal event decides the outcome.
                # openai-python stops reading at it on every stream,
                # anthropic-sdk-python skips it (it dispatches by event name).
                return UNPARSED, bad + self._anomaly("done_sentinel")
            self._malformed = True
            return UNPARSED, bad + self._anomaly("malformed_json", text[:80])

    def _learn(self, event: SSEEvent, body: dict[str, Any], text_path: tuple[str | int, ...],
               ignored: tuple[tuple[str, int], ...] = ()) -> None:
        """Learn the stream's text-delta template from ``event``, an event this
        decoder just parsed in full (``body``, no anomaly) and decoded as a
        plain text delta whose observations depend on nothing but the text at
        ``text_path``; ``ignored`` names the top-level fields it never reads
        (see ``_template.learn``). Costs one more parse; at most
        ``_LEARN_TRIES`` per stream; a new template replaces the old one."""
        if self._tries == _LEARN_TRIES:
            # the first try cuts only the fields that change in every frame
            # (kind ``INT``, a counter); strings such as OpenAI's obfuscation
            # padding stay constant bytes, the cheapest match, unless a later
            # frame shows they change (a miss, then this second try)
            ignored = tuple(hole for hole in ignored if hole[1] != STR)
        self._tries -= 1
        fast = _fast_loads
        tpl = learn(event.event, event.data, body, text_path, ignored,
                    fast if fast is not None else _bytes_loads)
        if tpl is not None:
            self._tpl = tpl

    def _typed_body(self, event: SSEEvent) -> tuple[dict[str, Any] | None, str, Observations]:
        """Parse an event whose JSON names its own type (Responses, Messages).

        Returns:
            (body, type, anomalies): body None when the data is unusable (the
            anomalies then say why, and the stream is marked malformed); type
            from the JSON ``type`` field, else the SSE event name (some gateways
            drop ``event:`` lines, others ``type``).
        """
        body, bad = self._parse(event.data)
        if type(body) is not dict:
            if body is UNPARSED:
                return None, "", bad
            self._malformed = True
            return None, "", bad + self._anomaly("unexpected_shape", "event data is not an object")
        kind = body.get("type")
        return body, kind if type(kind) is str else event.event, bad

    def _anomaly(self, kind: str, detail: str = "") -> Observations:
        """Count one anomaly and return it as a one-observation tuple."""
        self._count(kind)
        return (Anomaly(kind, detail),)

    def _count(self, kind: str) -> None:
        anomalies = self._anomalies
        anomalies[kind] = anomalies.get(kind, 0) + 1

    def _emit(self, kind: ContentKind, chars: int, bad: Observations = NOTHING) -> Observations:
        """Count one content event of ``kind``; return ``bad`` + its observations.

        The hot path of every decoder: once the first token (and, for a
        non-reasoning kind, the first content token) was emitted, an event of
        up to ``_CACHED_CHARS`` characters returns a shared, pre-built
        one-``ContentDelta`` tuple (observations are frozen, so sharing is
        safe): no list, record or tuple is allocated per event. Otherwise as
        ``_content``.
        """
        if not bad and self._first and (self._first_content or kind == "reasoning"):
            self._events[kind] += 1
            if chars < _CACHED_CHARS:
                return _DELTA_TUPLES[kind][chars]
            return (ContentDelta(kind, chars),)
        out: list[Observation] = list(bad)
        self._content(out, kind, chars)
        return tuple(out)

    def _content(self, out: list[Observation], kind: ContentKind, chars: int) -> None:
        """Count one content event of ``kind`` and append FirstToken /
        FirstContentToken (once each) and a ContentDelta to ``out``.

        ``chars`` (code points) must be positive; the caller keeps the text
        itself. Only the measured choice's output comes here.
        """
        self._events[kind] += 1
        if not self._first:
            self._first = True
            out.append(FirstToken(kind))
        if kind != "reasoning" and not self._first_content:
            self._first_content = True
            out.append(FirstContentToken(kind))
        out.append(_DELTA_TUPLES[kind][chars][0] if chars < _CACHED_CHARS else ContentDelta(kind, chars))

    def _end(
        self,
        outcome: str,
        *,
        stop_reason: str | None = None,
        error_code: str | None = None,
        error_message: str | None = None,
    ) -> StreamEnd:
        """Record an in-band terminal signal and return its observation.

        The outcome passes through ``_verdict``: an aborted or malformed
        stream that ends "completed" is reported "failed" with its detail.
        """
        self.ended = True
        if stop_reason is not None:
            self._stop_reason = stop_reason
        if outcome == "failed" and (error_code is not None or error_message is not None):
            self._error_code = error_code
            self._error_message = error_message
        outcome, self._detail = self._verdict(outcome)
        self._outcome = outcome
        return StreamEnd(
            outcome, self._error_code, self._stop_reason, self._detail  # type: ignore[arg-type]
        )

    def _error(self, error: dict[str, Any], *, typed: bool = True) -> tuple[str | None, str | None]:
        """Record an error object's code and type; return (error_code, message).

        ``error_code`` follows ``error_name``; ``error_type`` is set when the
        object carried both a real code and a real type; ``error_wire_code``
        keeps the code as sent. ``typed=False``: the object's ``type`` is the
        event's own type (Responses' flat ``error`` event), not the error's.
        """
        code = real(error.get("code"))
        etype = real(error.get("type")) if typed else None
        self._error_wire_code = code
        if code is not None and etype is not None:
            self._error_type = etype
        message = error.get("message")
        return error_name(code, etype), message if type(message) is str else None

    def _usage(
        self,
        input_tokens: object,
        output_tokens: object,
        total_tokens: object = None,
        reasoning_tokens: object = None,
        cached_tokens: object = None,
    ) -> UsageReport | None:
        """Record the stream's own usage (a None or non-int count keeps the old value).

        Returns the ``UsageReport`` to emit, or None when no count was usable.
        """
        changed = False
        if type(input_tokens) is int:
            self._input_tokens = input_tokens
            changed = True
        if type(output_tokens) is int:
            self._output_tokens = output_tokens
            changed = True
        if type(total_tokens) is int:
            self._total_tokens = total_tokens
            changed = True
        if type(reasoning_tokens) is int:
            self._reasoning_tokens = reasoning_tokens
            changed = True
        if type(cached_tokens) is int:
            self._cached_tokens = cached_tokens
            changed = True
        if not changed:
            return None
        return UsageReport(
            self._input_tokens, self._output_tokens, self._total_tokens, self._reasoning_tokens,
            self._cached_tokens,
        )
