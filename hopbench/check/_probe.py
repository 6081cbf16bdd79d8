"""The check's client: one streamed request through the gateway, every read stamped.

Role: ``send_probe`` sends one request (synchronously: the check sends one at a
time) and keeps everything a check compares: the status, the headers, each body
read with the moment it arrived, how the body ended, and, for a cancel, the
moment the client closed. It is not the load generator's runner: the check needs
the raw bytes (``events_unchanged`` compares them with what the upstream wrote),
which the runner does not keep.

Invariants:
- Stamps are ``time.monotonic_ns()``, the clock of the scripted upstream
  (``_upstream``): one clock, one process.
- A transport failure is data (``error``), never an exception: a gateway that
  cuts a stream is what some checks look for.
- Only 127.0.0.1-style targets are the caller's business; no proxy from the
  environment is used (``trust_env=False``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import httpx

from ..sse import SSEEvent, SSEScanner

__all__ = ["Probe", "send_probe"]


@dataclass(slots=True)
class Probe:
    """One request as the client saw it.

    Attributes:
        request_id: the id sent (header and body marker).
        protocol: "chat", "responses" or "messages".
        sent_ns: when the request was handed to httpx (monotonic ns).
        status: the response status, None when no response came.
        headers: the response headers (lower-case names).
        reads: (monotonic ns, bytes) per body read, decoded of any content encoding.
        closed_ns: when the client closed a stream on purpose (a cancel), else None.
        ended_ns: when the body ended (or broke), else None.
        error: the transport error that ended the body ("RemoteProtocolError: ..."),
            None when it ended cleanly or the client closed it.
    """

    request_id: str
    protocol: str
    sent_ns: int
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    reads: list[tuple[int, bytes]] = field(default_factory=list)
    closed_ns: int | None = None
    ended_ns: int | None = None
    error: str | None = None

    @property
    def body(self) -> bytes:
        """The whole body read, bytes."""
        return b"".join(b for _, b in self.reads)


def send_probe(client: httpx.Client, url: str, headers: dict[str, str], body: bytes, *,
               request_id: str, protocol: str, close_after_events: int | None = None,
               timeout_s: float = 60.0) -> Probe:
    """Send one streamed request and read its answer to the end (or close it early).

    Args:
        client: the httpx client (its pool is reused between probes).
        url: the gateway's endpoint for the protocol.
        headers: the request headers (they may hold secrets: never recorded).
        body: the JSON request body.
        request_id: the id the body's marker and the header carry.
        protocol: the scenario's protocol, recorded.
        close_after_events: close the connection once this many SSE events
            carrying data have been read (a client cancel), or None.
        timeout_s: the longest wait for any read, s (then the probe ends with ``error``).

    Returns:
        The ``Probe``. Never raises on the gateway's behaviour.
    """
    p = Probe(request_id, protocol, time.monotonic_ns())
    scanner = SSEScanner() if close_after_events is not None else None
    seen = 0
    try:
        with client.stream("POST", url, headers={**headers, "x-hopbench-request-id": request_id},
                           content=body, timeout=httpx.Timeout(timeout_s, connect=10.0)) as r:
            p.status = r.status_code
            p.headers = {k.lower(): v for k, v in r.headers.items()}
            for data in r.iter_bytes():
                p.reads.append((time.monotonic_ns(), data))
                if scanner is not None and close_after_events is not None:
                    seen += sum(1 for item in scanner.feed(data) if isinstance(item, SSEEvent))
                    if seen >= close_after_events:
                        p.closed_ns = time.monotonic_ns()
                        break
        # leaving the block closes the response; unread, its connection is closed, not pooled
        p.ended_ns = time.monotonic_ns()
    except httpx.HTTPError as exc:
        p.ended_ns = time.monotonic_ns()
        p.error = f"{type(exc).__name__}: {exc}"[:300]
    return p
