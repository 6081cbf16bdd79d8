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
    "StopClass",
    "STOP_CLASSES",
    "stop_class",
    "EVENT_CHANNELS",
]

Outcome = Literal["completed", "failed", "truncated"]
ContentKind = Literal["text", "reasoning", "tool", "refusal"]
"""The output channel of a ``ContentDelta``: answer text, reasoning (thinking),
tool-call fragments, or a refusal (chat ``delta.refusal``, Responses
``response.refusal.delta``; kept apart from ``text``)."""

EVENT_CHANNELS: tuple[str, ...] = ("text", "reasoning", "tool", "refusal")
"""The keys of ``StreamResult.events``, in report order."""

StopClass = Literal[
    "stop", "length", "tool_calls", "content_filter", "pause_turn", "abort", "other", "none"
]
"""The protocol-neutral class of a stop reason (see ``stop_class``)."""

STOP_CLASSES: tuple[str, ...] = (
    "stop", "length", "tool_calls", "content_filter", "pause_turn", "abort", "other", "none"
)
"""Every value ``stop_class`` returns, in report order."""

_STOP_CLASS: dict[str, str] = {
    # natural end of the answer
    "stop": "stop",  # chat finish_reason
    "end_turn": "stop",  # messages stop_reason
    "stop_sequence": "stop",  # messages stop_reason
    "completed": "stop",  # responses status
    # output budget exhausted
    "length": "length",  # chat
    "max_tokens": "length",  # messages; responses incomplete_details.reason
    "max_output_tokens": "length",  # responses incomplete_details.reason
    "model_context_window_exceeded": "length",  # messages: the context window cut the output
    # the model called a tool
    "tool_calls": "tool_calls",  # chat
    "tool_use": "tool_calls",  # messages
    "function_call": "tool_calls",  # chat (deprecated functions API)
    # the output was withheld or refused
    "content_filter": "content_filter",  # chat; responses incomplete reason
    "refusal": "content_filter",  # messages (streaming classifiers)
    "pause_turn": "pause_turn",  # messages (server tools paused a long turn)
    "abort": "abort",  # vLLM / SGLang: the engine aborted the request
}


def stop_class(stop_reason: str | None) -> str:
    """Classify a stop reason of any protocol (pure).

    Args:
        stop_reason: ``StreamResult.stop_reason`` (chat ``finish_reason``,
            messages ``stop_reason``, responses status or incomplete reason), or
            None when the stream sent none.

    Returns:
        One of ``STOP_CLASSES``: "stop" (stop, end_turn, stop_sequence,
        completed), "length" (length, max_tokens, max_output_tokens,
        model_context_window_exceeded), "tool_calls" (tool_calls, tool_use, function_call), "content_filter"
        (content_filter, refusal), "pause_turn", "abort" (vLLM's engine abort),
        "none" (None), "other" (any other value, e.g. vLLM's "repetition",
        Anthropic's "compaction", chat "error"). Matching is exact
        (case-sensitive, as the APIs spell them).

    Spec: OpenAI chat completion chunk ``finish_reason``; Anthropic Messages
    ``stop_reason`` (API reference, "Handling stop reasons": end_turn,
    max_tokens, stop_sequence, tool_use, pause_turn, refusal,
    model_context_window_exceeded); OpenAI Responses ``status`` /
    ``incomplete_details.reason``; vLLM ``finish_reason: "abort"``.
    """
    if stop_reason is None:
        return "none"
    return _STOP_CLASS.get(stop_reason, "other")


@dataclass(frozen=True, slots=True)
class FirstToken:
    """Emitted once, just before the stream's first ``ContentDelta`` of any kind."""

    kind: ContentKind


@dataclass(frozen=True, slots=True)
class FirstContentToken:
    """Emitted once, just before the first non-reasoning ``ContentDelta`` (text, tool or refusal)."""

    kind: ContentKind


@dataclass(frozen=True, slots=True)
class ContentDelta:
    """One event that carried non-empty output.

    Attributes:
        kind: "text", "reasoning" (thinking), "tool" (a tool call's first
            fragment, i.e. its name, or its arguments) or "refusal".
        chars: number of characters (code points) of output in the event
            (a tool call's name fragment counts its name's characters).
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
    """Token usage as the stream itself reported it (None: not reported).

    Attributes:
        input_tokens, output_tokens: prompt / completion tokens (all choices).
        total_tokens: the stream's own total where it sends one, else None.
        reasoning_tokens: reasoning tokens where the protocol reports them
            (chat ``completion_tokens_details.reasoning_tokens``, responses
            ``output_tokens_details.reasoning_tokens``), else None.
        cached_tokens: prompt tokens served from the server's prompt cache
            (chat ``prompt_tokens_details.cached_tokens``, responses
            ``input_tokens_details.cached_tokens``, messages
            ``cache_read_input_tokens``), else None; part of ``input_tokens``.
    """

    input_tokens: int | None
    output_tokens: int | None
    total_tokens: int | None = None
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """The protocol's terminal signal, or an in-band error, arrived.

    Attributes:
        outcome: "completed" or "failed" ("truncated" is only ever decided by
            ``finish()``, when the body ends without a terminal signal).
        error_code: see ``StreamResult.error_code``.
        stop_reason: see ``StreamResult.stop_reason``.
        detail: see ``StreamResult.detail``.
    """

    outcome: Outcome
    error_code: str | None = None
    stop_reason: str | None = None
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class Anomaly:
    """Something off-spec on the wire, counted by kind; never fatal.

    Kinds include "malformed_json", "empty_data", "unknown_event",
    "data_after_end", "invalid_utf8", "unexpected_shape". Some of them also decide the outcome
    (``malformed_json`` fails the stream: ``StreamResult.detail``).
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
        detail: the decoder's own reason for a non-success outcome
            ("malformed_event", "abort", "usage_missing", ...), None otherwise
            (and None when the server's in-band error explains a failure:
            then ``error_code`` names it).
        error_code: the in-band error's most specific name: the ``code``,
            unless it is numeric or generic and a non-generic ``type`` was
            sent (see ``_signals.error_name``); None when no error.
        error_type: the error's ``type`` when the wire sent both a code and a
            type, else None.
        error_wire_code: the error's ``code`` exactly as the wire sent it
            (an int formatted), also when ``error_code`` took the type
            instead; None when the error had no code.
        error_message: the error's message, or None.
        text: the output text of the measured choice, joined (refusals excluded).
        refusal_text: refusal fragments, joined ("" when none).
        reasoning_text: reasoning / thinking text, or "".
        tool_calls: list of {"index", "id", "name", "arguments"} dicts, arguments joined.
        stop_reason: chat ``finish_reason``, messages ``stop_reason``, responses the
            final status or incomplete reason; None when none arrived.
        input_tokens, output_tokens: from the stream's own usage (all choices),
            None when absent.
        total_tokens: usage's own total (chat ``total_tokens``, responses /
            messages where sent), None when absent; never computed.
        reasoning_tokens: usage's reasoning tokens where the protocol reports
            them, None when absent.
        cached_tokens: prompt tokens the server's prompt cache held, where
            usage reports them (``UsageReport.cached_tokens``), None when absent.
        content_events: events that carried non-empty output for the measured
            choice (= ``sum(events.values())``).
        events: content events per channel of the measured choice; keys
            "text", "reasoning", "tool", "refusal", all present.
        choices: distinct choice indexes seen (chat ``n`` > 1), at least 1.
        hidden_reasoning: usage reported reasoning tokens > 0 but no reasoning
            fragment arrived (TTFT then measures the first visible output).
        no_done: chat only: completed by a ``finish_reason`` without ``[DONE]``.
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
    refusal_text: str = ""
    detail: str | None = None
    error_type: str | None = None
    error_wire_code: str | None = None
    total_tokens: int | None = None
    reasoning_tokens: int | None = None
    choices: int = 1
    events: dict[str, int] = field(
        default_factory=lambda: {"text": 0, "reasoning": 0, "tool": 0, "refusal": 0}
    )
    hidden_reasoning: bool = False
    no_done: bool = False
    cached_tokens: int | None = None
