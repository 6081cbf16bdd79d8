"""The one place where foreign exceptions become stream outcomes.

Role: the engine's per-stream boundary (``LoadRunner._stream``) hands every
exception a stream raised to :func:`classify_exception`, and a stream whose body
was read to :func:`_detail`; an HTTP error body's code comes from
:func:`_http_error_code`; :func:`wire_detail` bounds a detail's wire error code and
keeps the first error texts per kind. Pure and synchronous: no clock, no I/O.

Invariants: an outcome is one of "connect_error", "timeout", "truncated" (here)
or the decoder's own; a detail is a short machine-readable counter suffix; an
exception that is neither httpx's, trio's, the OS's nor an SSE error is raised
again (a bug in hopbench), never mapped; ``trio.Cancelled`` never reaches here.
"""

from __future__ import annotations

import errno
import json
import ssl

import httpx
import trio

from .._errors import SSEError
from ..measure._wire_text import CodeNames, ErrorSamples, Scrubber, exception_chain
from ..protocols import StreamResult
from ..workload._cancel import CANCEL_OUTCOME
from ._transport import MalformedResponse

__all__ = ["classify_exception", "wire_detail"]


def classify_exception(exc: BaseException, phase: str) -> tuple[str, str]:
    """Map a foreign exception raised during a stream to (outcome, detail).

    The one place where httpx / trio / OS errors become outcomes (STYLE.md §4).

    Args:
        exc: what was raised.
        phase: "headers" (before the response head arrived) or "body".

    Returns:
        (outcome, detail): outcome one of "connect_error", "timeout",
        "truncated"; detail a short machine-readable reason (counter suffix).

    The whole ``__cause__`` / ``__context__`` chain is looked at: a file
    descriptor limit (EMFILE/ENFILE) anywhere in it is "connect_error" /
    "fd_limit" (hopbench's own limit, not the target's), a TLS error inside a
    ConnectError is "connect_error" / "tls", and a malformed response whose
    head had already arrived (``response_started``) is "truncated" /
    "malformed" whatever the phase.

    Raises:
        exc itself when it is neither an httpx, trio, OS nor SSE error: that is
        a bug in hopbench, and the run stops with partial results (crash).
    """
    chain = exception_chain(exc)
    # the reason may sit anywhere in the chain (httpx wraps OSError and
    # ssl errors; trio groups the per-address connect errors)
    if any(isinstance(e, OSError) and e.errno in (errno.EMFILE, errno.ENFILE) for e in chain):
        return "connect_error", "fd_limit"  # this process, not the target
    if isinstance(exc, MalformedResponse) and getattr(exc, "response_started", False):
        return "truncated", "malformed"  # a response that started is a broken stream
    if isinstance(exc, httpx.ConnectError) and any(isinstance(e, ssl.SSLError) for e in chain):
        return "connect_error", "tls"
    if isinstance(exc, httpx.ConnectTimeout):
        return "timeout", "connect"
    if isinstance(exc, httpx.PoolTimeout):
        return "timeout", "pool"
    if isinstance(exc, httpx.TimeoutException):
        return "timeout", "first_byte" if phase != "body" else "idle"
    if isinstance(exc, httpx.ConnectError):
        return "connect_error", "refused" if "refused" in str(exc).lower() else "connect"
    if isinstance(exc, SSEError):
        return "truncated", "oversize_event"
    if isinstance(exc, MalformedResponse):  # not HTTP/1.1: no usable response
        return ("truncated", "malformed") if phase == "body" else ("connect_error", "malformed_response")
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError,
                        trio.BrokenResourceError, OSError)):
        if phase == "body":
            return "truncated", "closed" if isinstance(exc, httpx.RemoteProtocolError) else "reset"
        return "connect_error", "closed_before_response"
    if isinstance(exc, httpx.HTTPError):  # e.g. DecodingError of a compressed body
        return ("truncated" if phase == "body" else "connect_error"), type(exc).__name__
    raise exc


def _detail(result: StreamResult) -> str:
    """The counter detail of a stream whose body was read: the decoder's own
    reason when it gave one ("malformed_event", "abort", "usage_missing"),
    else failed by its in-band error code, truncated "closed" (the body ended
    without a terminal signal)."""
    if result.detail:
        return result.detail
    if result.outcome == "failed":
        return result.error_code or "unknown"
    return "closed" if result.outcome == "truncated" else ""


def _http_error_code(body: bytes) -> str | None:
    """The error code of an HTTP error body (OpenAI: error.code or error.type;
    Anthropic: error.type), or None."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict):
            for k in ("code", "type"):
                v = err.get(k)
                if isinstance(v, str) and v:
                    return v
    return None


def wire_detail(codes: CodeNames, scrubber: Scrubber, samples: ErrorSamples, outcome: str, detail: str,
                result: StreamResult | None, text: str | None, head_note: str | None = None) -> str:
    """A stream's detail with its wire error code bounded (``codes``: the first codes
    by name, the rest "other"; hopbench.measure._wire_text), keeping the first error
    texts of each kind in ``samples`` (``RunStats.error_samples``).

    Args:
        outcome, detail: the stream's, as classified ("failed" details carry the
            error event's code; "http_error" ones ``status:code``).
        result: the decoder's result (its ``error_message`` is the text of a
            "failed" stream), or None.
        text: the error text the read kept (already scrubbed), or None.
        head_note: what was wrong with a 2xx head, the text when the stream has
            none of its own, so a broken stream is never sampled empty.

    Returns:
        The detail to count (``outcome.detail``).
    """
    if outcome == "failed":
        detail = codes.name(detail)
        if text is None and result is not None:
            text = result.error_message
    if text is None and head_note is not None:
        text = scrubber.scrub(head_note)
    elif outcome == "http_error" and ":" in detail:
        status, _, code = detail.partition(":")
        detail = f"{status}:{codes.name(code)}"
    if text and outcome not in ("completed", "cancelled", CANCEL_OUTCOME):
        kind = f"{outcome}.{detail.partition(':')[0]}" if detail else outcome
        samples.add(kind, text)
    return detail
