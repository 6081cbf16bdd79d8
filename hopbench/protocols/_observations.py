"""What a protocol decoder reports, and its verdict on a whole stream.

Observations are small frozen records returned by ``Decoder.feed`` in stream
order. They carry no time: the runner stamps each with the arrival time of the
network read that completed it (see STYLE.md §1). ``StreamResult`` is returned
by ``Decoder.finish`` at the end of the body.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "ContentDelta",
    "FirstToken",
    "FirstContentToken",
    "Keepalive",
    "UsageReport",
    "StreamEnd",
    "Anomaly",
    "Observation",
    "StreamResult",
    "Outcome",
    "ContentKind",
]

Outcome = Literal["completed", "failed", "truncated"]
ContentKind = Literal["text", "reasoning", "tool"]


@dataclass(frozen=True, slots=True)
class FirstToken:
    """Emitted once, just before the stream's first ``ContentDelta`` of any kind."""

    kind: ContentKind


@dataclass(frozen=True, slots=True)
class FirstContentToken:
    """Emitted once, just before the first non-reasoning ``ContentDelta`` (text or tool)."""

    kind: ContentKind


@dataclass(frozen=True, slots=True)
class ContentDelta:
    """One event that carried non-empty output.

    Attributes:
        kind: "text", "reasoning" (thinking) or "tool" (tool-call arguments).
        chars: number of characters (code points) of output in the event.
        tokens: tokens in the event where the protocol states it, else None.
    """

    kind: ContentKind
    chars: int
    tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Keepalive:
    """One SSE comment line (``: hopbase-keepalive``, ``: ping``, ...); ``text`` verbatim."""

    text: bytes


@dataclass(frozen=True, slots=True)
class UsageReport:
    """Token usage as the stream itself reported it (None: not reported)."""

    input_tokens: int | None
    output_tokens: int | None


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """The protocol's terminal signal, or an in-band error, arrived.

    Attributes:
        outcome: "completed" or "failed" ("truncated" is only ever decided by
            ``finish()``, when the body ends without a terminal signal).
        error_code: see ``StreamResult.error_code``.
        stop_reason: see ``StreamResult.stop_reason``.
    """

    outcome: Outcome
    error_code: str | None = None
    stop_reason: str | None = None


@dataclass(frozen=True, slots=True)
class Anomaly:
    """Something off-spec on the wire, counted by kind; never fatal.

    Kinds include "malformed_json", "unknown_event", "data_after_end",
    "invalid_utf8", "unexpected_shape".
    """

    kind: str
    detail: str = ""


Observation = (
    FirstToken | FirstContentToken | ContentDelta | Keepalive | UsageReport | StreamEnd | Anomaly
)


@dataclass(slots=True)
class StreamResult:
    """The decoder's verdict on one whole stream (field names are public API).

    Attributes:
        outcome: "completed" | "failed" | "truncated".
        error_code: responses ``response.error.code``; messages ``error.type``;
            chat ``error.code`` else ``error.type``; None when no error.
        error_message: the error's message, or None.
        text: the output text, joined.
        reasoning_text: reasoning / thinking text, or "".
        tool_calls: list of {"index", "id", "name", "arguments"} dicts, arguments joined.
        stop_reason: chat ``finish_reason``, messages ``stop_reason``, responses the
            final status or incomplete reason; None when none arrived.
        input_tokens, output_tokens: from the stream's own usage, None when absent.
        content_events: events that carried non-empty output (text, reasoning or tool args).
        keepalives: comment lines seen.
        anomalies: anomaly kind -> count.
    """

    outcome: Outcome = "truncated"
    error_code: str | None = None
    error_message: str | None = None
    text: str = ""
    reasoning_text: str = ""
    tool_calls: list[dict[str, object]] = field(default_factory=list)
    stop_reason: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    content_events: int = 0
    keepalives: int = 0
    anomalies: dict[str, int] = field(default_factory=dict)
