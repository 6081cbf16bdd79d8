"""Decoder factory and the offline ``decode_stream`` helper.

Role: pick the decoder for a protocol name, and decode a whole captured body
(network reads as bytes) through ``hopbench.sse.SSEScanner`` in one call, for
tests and offline analysis. The runner uses ``new_decoder`` and drives the
scanner itself so that it can stamp each read.

Invariant: ``decode_stream`` never raises on server bytes; a scanner memory
bound overrun (``SSEError``) ends decoding and is counted as anomaly
``event_too_large`` (outcome then decided as for a body that ended there).
"""

from __future__ import annotations

from collections.abc import Iterable

from .._errors import SSEError, UsageError
from ..sse import DEFAULT_MAX_EVENT_BYTES, SSEScanner
from ._base import Decoder
from ._chat import ChatDecoder
from ._messages import MessagesDecoder
from ._observations import StreamResult
from ._requests import PROTOCOLS
from ._responses import ResponsesDecoder

__all__ = ["new_decoder", "decode_stream"]

_DECODERS: dict[str, type[Decoder]] = {
    "chat": ChatDecoder,
    "responses": ResponsesDecoder,
    "messages": MessagesDecoder,
}


def new_decoder(protocol: str, *, keep_text: bool = True, expect_usage: bool = False) -> Decoder:
    """Create a fresh decoder for one stream of ``protocol``.

    Args:
        protocol: "chat" | "responses" | "messages".
        keep_text: keep output text and tool arguments for the ``StreamResult``
            (False only counts them; see ``Decoder.__init__``).
        expect_usage: the request asked for usage in the stream (chat
            ``stream_options.include_usage``): a chat stream cut after its
            finish chunk without the usage chunk or ``[DONE]`` is then
            "truncated" with detail "usage_missing" (see ``Decoder.__init__``).

    Returns:
        A new ``Decoder``; feed it the scanner's items, then call ``finish()``.

    Raises:
        UsageError: ``protocol`` is not one of ``PROTOCOLS``.
    """
    cls = _DECODERS.get(protocol)
    if cls is None:
        allowed = ", ".join(repr(p) for p in PROTOCOLS)
        raise UsageError(f"unknown protocol {protocol!r}: expected one of {allowed}")
    return cls(keep_text=keep_text, expect_usage=expect_usage)


def decode_stream(
    protocol: str,
    chunks: Iterable[bytes],
    *,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    keep_text: bool = True,
    expect_usage: bool = False,
) -> StreamResult:
    """Decode one whole SSE response body and return the verdict.

    Args:
        protocol: "chat" | "responses" | "messages".
        chunks: the body as the network delivered it (bytes per read, any split).
        max_event_bytes: the scanner's memory bound per line / event, in bytes.
        keep_text, expect_usage: see ``new_decoder``.

    Returns:
        The ``StreamResult`` (a stream cut mid-event counts anomaly
        ``partial_event``).

    Raises:
        UsageError: unknown ``protocol``. Never raises on the body's bytes.
    """
    decoder = new_decoder(protocol, keep_text=keep_text, expect_usage=expect_usage)
    scanner = SSEScanner(max_event_bytes=max_event_bytes)
    feed = decoder.feed
    try:
        for chunk in chunks:
            for item in scanner.feed(chunk):
                feed(item)
    except SSEError:
        decoder._count("event_too_large")
        return decoder.finish()
    return decoder.finish(discarded_partial=scanner.close())
