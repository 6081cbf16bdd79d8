"""Stream decoders for the three protocols hopbench measures (sans-I/O).

Role: turn the SSE items of one streamed response into timestamp-free
observations (first token, content, keepalives, usage, end, anomalies) and a
final ``StreamResult`` verdict (completed / failed / truncated)::

    dec = new_decoder("chat")            # "chat" | "responses" | "messages"
    observations = dec.feed(item)        # item: SSEEvent | SSEComment
    result = dec.finish()                # at end of body, after scanner.close()

    result = decode_stream("messages", chunks)   # offline: bytes in, verdict out
    stop_class(result.stop_reason)       # "stop" | "length" | "tool_calls" | ...

``new_decoder(protocol, keep_text=True, expect_usage=False)``: ``expect_usage``
says the request asked for usage in the stream (chat
``stream_options.include_usage``). The rules every decoder follows (generated
fragments and TTFT, refusal channel, real signals, malformed events, abort,
error names, several choices, hidden reasoning) are in ``_base``'s docstring
and docs/results/decoder-rules.md "Decoder rules".

Invariants: no clock, no trio, no httpx; never raises on server input.
"""

from __future__ import annotations

from ._base import Decoder
from ._chat import ChatDecoder
from ._decode import decode_stream, new_decoder
from ._requests import PROTOCOLS
from ._messages import MessagesDecoder
from ._observations import (
    EVENT_CHANNELS,
    STOP_CLASSES,
    Anomaly,
    ContentDelta,
    ContentKind,
    FirstContentToken,
    FirstToken,
    Keepalive,
    Observation,
    Outcome,
    StopClass,
    StreamEnd,
    StreamResult,
    UsageReport,
    stop_class,
)
from ._responses import ResponsesDecoder

__all__ = [
    "PROTOCOLS",
    "new_decoder",
    "decode_stream",
    "Decoder",
    "ChatDecoder",
    "ResponsesDecoder",
    "MessagesDecoder",
    "StreamResult",
    "Observation",
    "FirstToken",
    "FirstContentToken",
    "ContentDelta",
    "Keepalive",
    "UsageReport",
    "StreamEnd",
    "Anomaly",
    "Outcome",
    "ContentKind",
    "stop_class",
    "StopClass",
    "STOP_CLASSES",
    "EVENT_CHANNELS",
]
