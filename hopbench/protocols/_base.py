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
- Hot path: one ``json.loads`` per event, and a shared empty tuple when an
  event yields nothing to report.
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

__all__ = ["Decoder", "Observations", "NOTHING", "ToolCallState"]

Observations = tuple[Observation, ...]
"""What ``Decoder.feed`` returns: observations in stream order, possibly empty."""

NOTHING: Observations = ()
"""The shared empty result of ``feed`` (no allocation on quiet events)."""

_loads = json.loads
try:  # optional (hopbench[fast]): ~4x faster, reads the bytes without a decode step
    import orjson as _orjson

    _fast_loads: Any = _orjson.loads
    _FastError: Any = _orjson.JSONDecodeError
except ImportError:  # pragma: no cover - exercised by test_protocols_json_fallback
    _fast_loads = None
    _FastError = ValueError


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
        "_content_events",
        "_keepalives",
        "_anomalies",
    )

    def __init__(self, *, keep_text: bool = True) -> None:
        """Create a decoder for one stream.

        Args:
            keep_text: keep the output text, reasoning text and tool-call
                arguments for ``StreamResult`` (True), or only count them (False:
                ``text``/``reasoning_text`` stay "" and tool arguments ""), which
                saves memory in long load runs.
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
        self._content_events = 0
        self._keepalives = 0
        self._anomalies: dict[str, int] = {}

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
        if outcome == "truncated" and self._completed_at_eof():
            outcome = "completed"
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
            content_events=self._content_events,
            keepalives=self._keepalives,
            anomalies=dict(self._anomalies),
        )

    # -- for subclasses -----------------------------------------------------

    def _on_event(self, event: SSEEvent) -> Observations:
        """Decode one event of a stream that has not ended (subclass hook)."""
        raise NotImplementedError

    def _completed_at_eof(self) -> bool:
        """Whether a body that ends now, without a terminal event, completed."""
        return False

    def _tool_calls(self) -> list[dict[str, object]]:
        """The joined tool calls, ordered by index (subclass hook)."""
        return []

    def _parse(self, data: bytes) -> tuple[Any, Observations]:
        """Decode the JSON of one event: (value, anomalies), value None on failure.

        Invalid UTF-8 is replaced (U+FFFD) and counted as ``invalid_utf8``;
        unparsable JSON is counted as ``malformed_json`` (RFC 8259).
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
            return None, bad + self._anomaly("malformed_json", text[:80])

    def _typed_body(self, event: SSEEvent) -> tuple[dict[str, Any] | None, str, Observations]:
        """Parse an event whose JSON names its own type (Responses, Messages).

        Returns:
            (body, type, anomalies): body None when the data is unusable (the
            anomalies then say why); type from the JSON ``type`` field, else the
            SSE event name (some gateways drop ``event:`` lines, others ``type``).
        """
        body, bad = self._parse(event.data)
        if type(body) is not dict:
            if body is None:
                return None, "", bad
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

    def _content(self, out: list[Observation], kind: ContentKind, chars: int) -> None:
        """Append FirstToken/FirstContentToken (once) and a ContentDelta to ``out``.

        ``chars`` (code points) must be positive; the caller keeps the text itself
        and counts the content event.
        """
        if not self._first:
            self._first = True
            out.append(FirstToken(kind))
        if kind != "reasoning" and not self._first_content:
            self._first_content = True
            out.append(FirstContentToken(kind))
        out.append(ContentDelta(kind, chars))

    def _end(
        self,
        outcome: str,
        *,
        stop_reason: str | None = None,
        error_code: str | None = None,
        error_message: str | None = None,
    ) -> StreamEnd:
        """Record an in-band terminal signal and return its observation."""
        self.ended = True
        self._outcome = outcome
        if stop_reason is not None:
            self._stop_reason = stop_reason
        if outcome == "failed":
            self._error_code = error_code
            self._error_message = error_message
        return StreamEnd(outcome, error_code, self._stop_reason)  # type: ignore[arg-type]

    def _usage(self, input_tokens: object, output_tokens: object) -> UsageReport | None:
        """Record the stream's own usage (a None or non-int count keeps the old value).

        Returns the ``UsageReport`` to emit, or None when neither count was usable.
        """
        changed = False
        if type(input_tokens) is int:
            self._input_tokens = input_tokens
            changed = True
        if type(output_tokens) is int:
            self._output_tokens = output_tokens
            changed = True
        if not changed:
            return None
        return UsageReport(self._input_tokens, self._output_tokens)


def as_str(value: object) -> str | None:
    """``value`` as an error code / reason string: str kept, int formatted, else None."""
    if type(value) is str:
        return value
    if type(value) is int:
        return str(value)
    return None
