"""An httpx transport for many long streams: one h11 connection per stream.

httpx stays the client API (headers, auth, timeouts, TLS settings), but its
default transport (httpcore's connection pool) does work on every read that
grows with the number of open connections: with a few hundred concurrent
streams it dominates the client's CPU and inflates the TTFT the client sees.
A load tester must not measure itself, so this transport keeps the per-read
cost flat:

- one connection per in-flight stream, taken from a per-origin LIFO stack of
  idle keep-alive connections (O(1)) or opened fresh; no pool-wide scans;
- h11 does the HTTP/1.1 framing (no hand-written HTTP parsing);
- every network read becomes at most one yielded chunk (all h11 ``Data``
  events of one read are joined), so events that arrived in one read share
  one stamp downstream;
- errors are raised as the httpx exceptions the default transport raises
  (``ConnectError``, ``ConnectTimeout``, ``ReadError``, ``RemoteProtocolError``,
  ``WriteError``), so the runner maps one exception family in one place.

HTTP/2 and proxies are not supported here: a profile that needs them uses
``target.transport = "httpx"`` (httpx's own transport).

Each response carries ``extensions["hopbench.connect_ns"]``: the time spent
obtaining the connection (0 for a reused one), integer ns from trio's clock;
``extensions["hopbench.reused"]`` and ``["hopbench.retried"]`` (a stale reused
connection was replaced once: see ``handle_async_request``);
``extensions["hopbench.body"]``: the raw body stream, which the runner iterates
directly (one chunk per network read, no content decoding).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from typing import Any

import h11
import httpx
import trio

from ._clock import now_ns

__all__ = ["StreamTransport"]

_READ_SIZE = 64 * 1024
Origin = tuple[bytes, str, int]


class _StaleConnection(Exception):
    """A reused keep-alive connection gave nothing back (EOF/reset before any byte)."""


class _Conn:
    __slots__ = ("stream", "h11", "origin", "reused")

    def __init__(self, stream: trio.abc.Stream, origin: Origin) -> None:
        self.stream = stream
        self.h11 = h11.Connection(our_role=h11.CLIENT)
        self.origin = origin
        self.reused = False


class StreamTransport(httpx.AsyncBaseTransport):
    """httpx transport over trio sockets and h11, one connection per stream.

    Args:
        verify: True (system CAs), False (no verification) or an SSLContext.
        max_idle_per_origin: idle keep-alive connections kept per origin.

    Raises (from requests): httpx.ConnectError / ConnectTimeout (connect),
    httpx.WriteError (sending), httpx.ReadError / RemoteProtocolError (reading).
    """

    def __init__(self, *, verify: bool | ssl.SSLContext = True, max_idle_per_origin: int = 4096) -> None:
        # Loading the system CAs takes tens of ms: only for the first https origin.
        self._verify = verify
        self._ssl_context: ssl.SSLContext | None = verify if isinstance(verify, ssl.SSLContext) else None
        self._idle: dict[Origin, list[_Conn]] = {}
        self._max_idle = max_idle_per_origin
        self._closed = False

    @property
    def _ssl(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            ctx = ssl.create_default_context()
            if not self._verify:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            self._ssl_context = ctx
        return self._ssl_context

    async def _connect(self, origin: Origin, timeout_s: float | None) -> _Conn:
        scheme, host, port = origin
        try:
            with trio.fail_after(timeout_s if timeout_s is not None else float("inf")):
                stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
                if scheme == b"https":
                    tls = trio.SSLStream(stream, self._ssl, server_hostname=host, https_compatible=True)
                    try:
                        await tls.do_handshake()
                    except BaseException:  # timeout, TLS failure or cancellation: no leaked socket
                        await trio.aclose_forcefully(stream)
                        raise
                    stream = tls
        except trio.TooSlowError:
            raise httpx.ConnectTimeout(f"connect to {host}:{port} timed out") from None
        except (OSError, trio.BrokenResourceError, ssl.SSLError) as exc:
            raise httpx.ConnectError(f"connect to {host}:{port} failed: {_reason(exc)}") from exc
        return _Conn(stream, origin)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` and return once the response head has arrived.

        The body is streamed by the returned response; closing it before the
        end closes the connection, reading it to the end recycles it.
        """
        url = request.url
        scheme = url.raw_scheme
        port = url.port or (443 if scheme == b"https" else 80)
        origin: Origin = (scheme, url.host, port)
        timeouts: dict[str, Any] = request.extensions.get("timeout", {})
        body = b"".join([part async for part in request.stream])  # type: ignore[union-attr]
        h11_request = h11.Request(method=request.method, target=url.raw_path,
                                  headers=request.headers.raw)
        t0 = now_ns()
        conn = await self._idle_conn(origin)
        retried = False
        if conn is not None:
            conn.reused = True
            try:
                return await self._exchange(conn, h11_request, body, request, 0, False)
            except _StaleConnection:
                # The server closed the idle keep-alive connection just as it
                # was reused: nothing came back (EOF or reset before a single
                # response byte). Browsers retry that case once; so do we, on a
                # fresh connection, and the response says so (counted).
                retried = True
        conn = await self._connect(origin, timeouts.get("connect"))
        return await self._exchange(conn, h11_request, body, request, now_ns() - t0, retried)

    async def _idle_conn(self, origin: Origin) -> _Conn | None:
        """The most recently used idle connection that is still open, or None."""
        stack = self._idle.get(origin)
        while stack:
            conn = stack.pop()
            raw = conn.stream.transport_stream if isinstance(conn.stream, trio.SSLStream) else conn.stream
            sock = getattr(raw, "socket", None)
            if sock is not None and sock.is_readable():
                # readable while idle means EOF or junk: the server closed it
                await trio.aclose_forcefully(conn.stream)
                continue
            return conn
        return None

    async def _exchange(self, conn: _Conn, head: h11.Request, body: bytes,
                        request: httpx.Request, connect_ns: int, retried: bool) -> httpx.Response:
        hc = conn.h11
        got_bytes = False
        try:
            data = hc.send(head) or b""
            if body:
                data += hc.send(h11.Data(data=body)) or b""
            data += hc.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError as exc:
            await trio.aclose_forcefully(conn.stream)
            raise httpx.LocalProtocolError(str(exc), request=request) from exc
        try:
            await conn.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            await trio.aclose_forcefully(conn.stream)
            if conn.reused:
                raise _StaleConnection from exc
            raise httpx.WriteError(f"send failed: {exc}", request=request) from exc
        try:
            while True:
                ev = hc.next_event()
                if ev is h11.NEED_DATA:
                    chunk = await conn.stream.receive_some(_READ_SIZE)
                    got_bytes = got_bytes or bool(chunk)
                    hc.receive_data(chunk)
                    continue
                if isinstance(ev, h11.Response):
                    break
                if isinstance(ev, h11.ConnectionClosed):
                    raise httpx.RemoteProtocolError("server closed the connection before responding",
                                                    request=request)
                # InformationalResponse (1xx): keep reading
        except (h11.RemoteProtocolError, httpx.RemoteProtocolError) as exc:
            await trio.aclose_forcefully(conn.stream)
            if conn.reused and not got_bytes:
                raise _StaleConnection from exc
            if isinstance(exc, httpx.RemoteProtocolError):
                raise
            raise httpx.RemoteProtocolError(str(exc), request=request) from exc
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            await trio.aclose_forcefully(conn.stream)
            if conn.reused and not got_bytes:
                raise _StaleConnection from exc
            raise httpx.ReadError(f"read failed: {exc}", request=request) from exc
        except BaseException:
            await trio.aclose_forcefully(conn.stream)
            raise
        body = _Body(self, conn, request)
        return httpx.Response(
            status_code=ev.status_code,
            headers=ev.headers,
            stream=body,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": ev.reason,
                        "hopbench.connect_ns": connect_ns, "hopbench.reused": conn.reused,
                        "hopbench.retried": retried, "hopbench.body": body},
        )

    def _recycle(self, conn: _Conn) -> None:
        hc = conn.h11
        if (not self._closed and hc.our_state is h11.DONE and hc.their_state is h11.DONE):
            hc.start_next_cycle()
            stack = self._idle.setdefault(conn.origin, [])
            if len(stack) < self._max_idle:
                stack.append(conn)
                return
        trio.lowlevel.spawn_system_task(trio.aclose_forcefully, conn.stream)

    async def aclose(self) -> None:
        """Close every idle connection."""
        self._closed = True
        idle, self._idle = self._idle, {}
        for stack in idle.values():
            for conn in stack:
                await trio.aclose_forcefully(conn.stream)


def _reason(exc: BaseException) -> str:
    """The OS's own words for a failed connect: trio wraps the per-address
    errors (e.g. ECONNREFUSED) in a group behind a generic message."""
    inner = exc.__cause__
    if isinstance(inner, BaseExceptionGroup) and inner.exceptions:
        first = inner.exceptions[0]
        if isinstance(first, OSError) and first.strerror:
            return first.strerror
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


class _Body(httpx.AsyncByteStream):
    """A response body: one yielded chunk per network read (h11 framing removed)."""

    def __init__(self, transport: StreamTransport, conn: _Conn, request: httpx.Request) -> None:
        self._transport = transport
        self._conn = conn
        self._request = request
        self._done = False
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        hc = self._conn.h11
        stream = self._conn.stream
        parts: list[bytes] = []
        try:
            while True:
                ev = hc.next_event()
                if ev is h11.NEED_DATA:
                    if parts:
                        yield parts[0] if len(parts) == 1 else b"".join(parts)
                        parts = []
                    hc.receive_data(await stream.receive_some(_READ_SIZE))
                elif type(ev) is h11.Data:
                    parts.append(ev.data)
                elif type(ev) is h11.EndOfMessage:
                    if parts:
                        yield parts[0] if len(parts) == 1 else b"".join(parts)
                    self._done = True
                    return
                else:  # ConnectionClosed before the end of the message
                    raise httpx.RemoteProtocolError("connection closed before the end of the body",
                                                    request=self._request)
        except h11.RemoteProtocolError as exc:
            raise httpx.RemoteProtocolError(str(exc), request=self._request) from exc
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise httpx.ReadError(f"read failed: {exc}", request=self._request) from exc

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._done:
            self._transport._recycle(self._conn)
        else:
            await trio.aclose_forcefully(self._conn.stream)
