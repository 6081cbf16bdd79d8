"""An httpx transport for many long streams: one connection per stream.

httpx stays the client API (headers, auth, timeouts, TLS settings), but its
default transport (httpcore's connection pool) does work on every read that
grows with the number of open connections: with a few hundred concurrent
streams it dominates the client's CPU and inflates the TTFT the client sees.
A load tester must not measure itself, so this transport keeps the per-read
cost flat and small:

- one connection per in-flight stream, taken from a per-origin LIFO stack of
  idle keep-alive connections (O(1)) or opened fresh; no pool-wide scans;
- responses are parsed by httptools (llhttp, Node.js's HTTP/1.1 parser, in C:
  ~0.2 µs per chunk where h11 takes ~5 µs, and a paced stream costs one chunk
  per read); requests are written as RFC 9112 section 3 request lines and
  header fields, after the checks h11 would make (field names are tokens,
  values hold no control characters) and with the body framed by
  Content-Length;
- every network read becomes at most one yielded chunk (all body pieces of
  one read are joined), so events that arrived in one read share one stamp
  downstream;
- errors are raised as the httpx exceptions the default transport raises
  (``ConnectError``, ``ConnectTimeout``, ``ReadError``, ``RemoteProtocolError``,
  ``WriteError``, ``LocalProtocolError``), so the runner maps one exception
  family in one place.

HTTP/2 and proxies are not supported here: a profile that needs them uses
``target.transport = "httpx"`` (httpx's own transport).

Each response carries ``extensions["hopbench.connect_ns"]``: the time spent
obtaining the connection (0 for a reused one), integer ns from trio's clock;
``extensions["hopbench.reused"]`` and ``["hopbench.retried"]`` (a stale reused
connection was replaced once: see ``handle_async_request``);
``extensions["hopbench.body"]``: the raw body stream, which the runner iterates
directly (one chunk per network read, no content decoding).
The request's ``extensions[SENT_AT]`` is set to the stamps around the write that
completed it (``_send_last``).

A request's ``extensions["trace"]`` (httpx's request tracing, an async
callable ``(name, info)``) is awaited with two of the event names httpcore
uses, so that the runner tells the phases of a stream apart the same way with
either transport: ``connection.connect_tcp.started`` as a new connection is
opened and ``http11.send_request_headers.started`` just before the request is
written on an open connection (``info`` is an empty dict).
"""

from __future__ import annotations

import re
import socket
import ssl
import time
from typing import Any

import httptools
import httpx
import trio

from .._clock import now_ns
# Kernel receive stamps (Linux SO_TIMESTAMPNS, socket(7)): when a read's latest
# bytes reached the socket, CLOCK_REALTIME; None where the platform has none.
# One place for the emulator's and the client's (the emulator stamps requests).
from ..emulator._rx_stamp import ANC_SIZE as _ANC_SIZE
from ..emulator._rx_stamp import SCM_TIMESTAMPNS as _SCM_TIMESTAMPNS
from ..emulator._rx_stamp import TIMESPEC as _TIMESPEC
from ..emulator._rx_stamp import keep_kernel_stamps
from ._socket_io import _open_tcp, _recv_stamped, _send_last

__all__ = ["MalformedResponse", "StreamTransport", "SENT_AT"]

#: the request extension a write of the request's last bytes sets: ``(before_ns, after_ns)``,
#: ``now_ns`` stamps around the write that completed it (``_send_last``; the open loop's
#: thread, hopbench.engine._dispatch; httpx's trace, hopbench.engine._stream); a retried
#: request's is its last write's
SENT_AT = "hopbench.sent_at"

_READ_SIZE = 64 * 1024
Origin = tuple[bytes, str, int]
#: RFC 9110 section 5.1: a field name is a token.
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
#: RFC 9110 section 5.5: no control characters but HTAB in a field value.
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
#: RFC 9112 section 3.2: the request target holds no whitespace or controls.
_BAD_TARGET = re.compile(rb"[\x00-\x20\x7f]")
_FRAMING = (b"content-length", b"transfer-encoding")
_PARSE_ERRORS = (httptools.HttpParserError, httptools.HttpParserUpgrade)
#: Longest response head, and most bytes of framing (chunk headers, trailers)
#: without a body byte, before a response counts as malformed: a server that
#: never ends its head or its trailers must not eat the client's memory.
#: (h11 allowed 16 KiB; real heads are under 8 KiB.)
_MAX_HEAD = 1 << 20
_MAX_FRAMING = 1 << 20


class MalformedResponse(httpx.RemoteProtocolError):
    """The response is not valid HTTP/1.1 (parse error, an upgrade, no end of
    head or trailers within 1 MiB); the message says what.

    Attributes:
        response_started: True when the response head had been parsed before
            the error (e.g. a bad chunk size in the same read as the head):
            the response started, so the stream is broken, not unreachable.
    """

    response_started: bool = False


class _StaleConnection(Exception):
    """A reused keep-alive connection gave nothing back (EOF/reset before any byte)."""


class _Response:
    """The httptools callbacks of one connection, one response at a time.

    After a feed: ``head_done`` once a final (non-1xx) head has arrived,
    ``parts`` the body bytes of that feed, ``done`` once the message is
    complete; ``framed`` is False for a body delimited by the connection's
    close (RFC 9112 section 6.3, rule 8), which ends at EOF.
    """

    __slots__ = ("parser", "status", "reason", "headers", "head_done", "framed", "parts",
                 "done", "keep_alive", "extra")

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        # As tolerant as h11 (hopbench's parser before) where RFC 9112 lets a
        # recipient be: Transfer-Encoding overrides a Content-Length sent with
        # it (section 6.3, rule 3), and a bare LF ends a line (section 2.2).
        # A folded header line (obs-fold) is one a client MUST accept (section
        # 5.2): lenient_headers. Response smuggling is no concern for a client.
        self.parser.set_dangerous_leniencies(lenient_chunked_length=True,
                                             lenient_optional_cr_before_lf=True,
                                             lenient_headers=True)
        self.reset()

    def reset(self) -> None:
        self.status = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_done = self.framed = self.done = self.keep_alive = self.extra = False
        self.parts: list[bytes] = []

    # -- httptools callbacks ---------------------------------------------------
    def on_message_begin(self) -> None:
        if self.done:  # bytes after the end of the response: never reuse this connection
            self.extra = True
            return
        self.reason = b""
        self.headers = []

    def on_status(self, reason: bytes) -> None:
        if not self.done:
            self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.done:
            self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self.done:
            return
        status = self.parser.get_status_code()
        if status < 200:  # 1xx: informational, the final head follows (101 raises upgrade)
            return
        self.status = status
        self.head_done = True
        self.framed = any(name.lower() in _FRAMING for name, _ in self.headers)

    def on_body(self, body: bytes) -> None:
        if not self.done:
            self.parts.append(body)

    def on_message_complete(self) -> None:
        if self.head_done and not self.done:
            self.done = True
            self.keep_alive = self.parser.should_keep_alive()


class _Conn:
    __slots__ = ("stream", "response", "origin", "reused")

    def __init__(self, stream: trio.abc.Stream, origin: Origin) -> None:
        self.stream = stream
        self.response = _Response()
        self.origin = origin
        self.reused = False


#: bodies at least this large are written after the head, not copied into one buffer with it
_SEPARATE_BODY = 64 * 1024


def _request_bytes(request: httpx.Request, body: bytes) -> bytes:
    """The request on the wire: request line, header fields, Content-Length, body
    (the body only when it is under ``_SEPARATE_BODY``: a large one is written
    after the head as it is, without a copy).

    Raises:
        httpx.LocalProtocolError: a header name that is not a token, a value
            or target with control characters (RFC 9110 sections 5.1, 5.5).
    """
    target = request.url.raw_path
    if _BAD_TARGET.search(target):
        raise httpx.LocalProtocolError(f"invalid request target {target!r}", request=request)
    out = [request.method.encode("ascii"), b" ", target, b" HTTP/1.1\r\n"]
    for name, value in request.headers.raw:
        if name.lower() in _FRAMING:  # the body is sent whole: framed by its length
            continue
        if _TOKEN.match(name) is None:
            raise httpx.LocalProtocolError(f"invalid header name {name!r}", request=request)
        if _BAD_VALUE.search(value):
            raise httpx.LocalProtocolError(f"invalid value for header {name.decode('latin-1')!r}",
                                           request=request)
        out += (name, b": ", value, b"\r\n")
    if body or request.method not in ("GET", "HEAD", "DELETE", "OPTIONS"):
        out.append(b"content-length: %d\r\n" % len(body))
    out.append(b"\r\n")
    if len(body) < _SEPARATE_BODY:
        out.append(body)
    return b"".join(out)


class StreamTransport(httpx.AsyncBaseTransport):
    """httpx transport over trio sockets and httptools, one connection per stream.

    Args:
        verify: True (system CAs), False (no verification) or an SSLContext.
        max_idle_per_origin: idle keep-alive connections kept per origin.

    Raises (from requests): httpx.ConnectError / ConnectTimeout (connect),
    httpx.LocalProtocolError (a header or target that cannot be sent),
    httpx.WriteError (sending), httpx.ReadError / RemoteProtocolError (reading).
    HEAD requests are refused (LocalProtocolError): a load tester never sends
    them, and their responses announce a body that never comes.
    """

    def __init__(self, *, verify: bool | ssl.SSLContext = True, max_idle_per_origin: int = 4096) -> None:
        # Loading the system CAs takes tens of ms: only for the first https origin.
        self._verify = verify
        self._ssl_context: ssl.SSLContext | None = verify if isinstance(verify, ssl.SSLContext) else None
        self._idle: dict[Origin, list[_Conn]] = {}
        self._max_idle = max_idle_per_origin
        self._closed = False
        keep_kernel_stamps()  # every read stamped from the first one (see there)

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
                stream: trio.abc.Stream = await _open_tcp(host, port)
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
        end closes the connection, reading it to the end recycles it (when the
        response allows keep-alive).
        """
        if request.method == "HEAD":
            raise httpx.LocalProtocolError("HEAD is not supported by StreamTransport", request=request)
        url = request.url
        scheme = url.raw_scheme
        port = url.port or (443 if scheme == b"https" else 80)
        origin: Origin = (scheme, url.host, port)
        timeouts: dict[str, Any] = request.extensions.get("timeout", {})
        trace = request.extensions.get("trace")
        t0 = now_ns()
        retried = False
        pre = request.extensions.get("hopbench.presend")
        data: bytes | tuple[bytes, bytes]
        first: bytes | tuple[bytes, bytes]
        if pre is not None:  # written, all or in part, by hopbench.engine._dispatch's thread
            conn, nsent, whole = pre
            data, first = whole, whole[nsent:]
            # (the trace hears of the write only when the loop writes some of it)
            first_trace = trace if first else None
        else:
            # one part (a bytes body, httpx's ByteStream): join() hands back that object, no copy
            body = b"".join([part async for part in request.stream])  # type: ignore[union-attr]
            head = _request_bytes(request, body)
            # a large body is written after the head as it is (no copy into one buffer)
            data = first = (head, body) if len(body) >= _SEPARATE_BODY else head
            first_trace = trace
            conn = await self._idle_conn(origin)
        if conn is not None:
            conn.reused = True
            try:
                return await self._exchange(conn, first, request, 0, False, first_trace)
            except _StaleConnection:
                # The server closed the idle keep-alive connection just as it
                # was reused: nothing came back (EOF or reset before a single
                # response byte). Browsers retry that case once; so do we, on a
                # fresh connection (the whole request again), and the response
                # says so (counted).
                retried = True
        if trace is not None:
            await trace("connection.connect_tcp.started", {})
        conn = await self._connect(origin, timeouts.get("connect"))
        return await self._exchange(conn, data, request, now_ns() - t0, retried, trace)

    @staticmethod
    def origin_of(request: httpx.Request) -> Origin:
        """The key of ``request``'s target among the idle connections."""
        url = request.url
        scheme = url.raw_scheme
        return (scheme, url.host, url.port or (443 if scheme == b"https" else 80))

    @staticmethod
    def wire(request: httpx.Request) -> bytes | None:
        """``request`` as the bytes this transport writes for it, or None when it
        is not written in one piece (a body of ``_SEPARATE_BODY`` or more, a
        streamed body, HEAD).

        Raises:
            httpx.LocalProtocolError: as ``handle_async_request`` would.
        """
        if request.method == "HEAD" or not isinstance(request.stream, httpx.ByteStream):
            return None
        body = request.content
        if len(body) >= _SEPARATE_BODY:
            return None
        return _request_bytes(request, body)

    def take_idle_fd(self, origin: Origin) -> tuple[_Conn, int] | None:
        """Pop the most recently used idle plain-TCP connection of ``origin``:
        (connection, its socket's descriptor), or None (none idle, or the next
        one is TLS). Unchecked: the caller tells a closed one (readable) and
        hands it to ``put_back``. Safe from another thread: one list pop."""
        stack = self._idle.get(origin)
        try:
            conn = stack.pop() if stack else None
        except IndexError:  # emptied by the loop meanwhile
            return None
        if conn is None:
            return None
        if type(conn.stream) is not trio.SocketStream:
            stack.append(conn)  # type: ignore[union-attr]
            return None
        return conn, conn.stream.socket.fileno()

    def idle_count(self, origin: Origin) -> int:
        """Idle keep-alive connections of ``origin`` (some may have been closed by
        the server since: they are told apart when taken)."""
        stack = self._idle.get(origin)
        return len(stack) if stack else 0

    async def open_spare(self, origin: Origin, timeout_s: float | None) -> bool:
        """Open a keep-alive connection to ``origin`` ahead of need and leave it
        idle, below the recently used ones (hopbench.engine._dispatch's thread takes
        the most recently used first). Its connect delayed no request: the
        request that first uses it reports no ``connect_wait`` (it is reused).

        Returns:
            Whether a connection was added (False: the connect failed or timed
            out, the transport is closed, or ``max_idle_per_origin`` are idle).
            Never raises for the target's behaviour: the requests that would
            have used it meet the same failure and report it.
        """
        try:
            conn = await self._connect(origin, timeout_s)
        except (httpx.ConnectError, httpx.ConnectTimeout):
            return False
        stack = self._idle.setdefault(origin, [])
        if self._closed or len(stack) >= self._max_idle:
            await trio.aclose_forcefully(conn.stream)
            return False
        conn.reused = True
        stack.insert(0, conn)  # one list operation: safe beside take_idle_fd's pop
        return True

    def put_back(self, conn: _Conn) -> None:
        """Close ``conn``, taken by ``take_idle_fd`` and found closed by the
        server (on the event loop's thread)."""
        trio.lowlevel.spawn_system_task(trio.aclose_forcefully, conn.stream)

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

    async def _exchange(self, conn: _Conn, data: bytes | tuple[bytes, bytes], request: httpx.Request,
                        connect_ns: int, retried: bool, trace: Any = None) -> httpx.Response:
        resp = conn.response
        resp.reset()
        got_bytes = False
        write_ns: int | None = None
        try:
            if trace is not None:
                await trace("http11.send_request_headers.started", {})
            if not data:  # written already (hopbench.engine._dispatch)
                pass
            elif isinstance(data, tuple):  # a large body: written as it is, after the head
                # written once its last byte is in the kernel's send buffer: a target
                # that reads bodies slowly keeps that buffer full. (send_all yields to
                # the event loop once at its end: up to one loop lag is included.) A
                # body under _SEPARATE_BODY fits the socket buffers: its write time
                # would be the client's own scheduling, so none is reported.
                t_write = now_ns()
                await conn.stream.send_all(data[0])
                sent_at = await _send_last(conn.stream, data[1])
                request.extensions[SENT_AT] = sent_at
                write_ns = sent_at[1] - t_write
            else:
                request.extensions[SENT_AT] = await _send_last(conn.stream, data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            await trio.aclose_forcefully(conn.stream)
            if conn.reused:
                raise _StaleConnection from exc
            raise httpx.WriteError(f"send failed: {exc}", request=request) from exc
        except BaseException:  # a cancel (the scenario's after_ms, the stop) before the head: no leaked socket
            await trio.aclose_forcefully(conn.stream)
            raise
        head_bytes = 0
        # the head's reads are stamped too: body bytes that came with the head are
        # read with its last read (their client lag, docs/results.md)
        stamped = _ANC_SIZE and type(conn.stream) is trio.SocketStream
        head_rx_ns = 0
        chunk: bytes | bytearray
        try:
            while not resp.head_done:
                if stamped:
                    chunk, rx, _ = await _recv_stamped(conn.stream, _READ_SIZE)  # type: ignore[arg-type]
                    head_rx_ns = rx or head_rx_ns
                else:
                    chunk = await conn.stream.receive_some(_READ_SIZE)
                if not chunk:
                    raise httpx.RemoteProtocolError("server closed the connection before responding",
                                                    request=request)
                got_bytes = True
                head_bytes += len(chunk)
                if head_bytes > _MAX_HEAD:
                    raise MalformedResponse("response head not ended within 1 MiB", request=request)
                _feed(resp, chunk)
        except (*_PARSE_ERRORS, httpx.RemoteProtocolError) as exc:
            await trio.aclose_forcefully(conn.stream)
            if conn.reused and not got_bytes:
                raise _StaleConnection from exc
            if isinstance(exc, httpx.RemoteProtocolError):
                raise
            malformed = MalformedResponse(_parse_error(exc), request=request)
            malformed.response_started = resp.head_done
            raise malformed from exc
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            await trio.aclose_forcefully(conn.stream)
            if conn.reused and not got_bytes:
                raise _StaleConnection from exc
            raise httpx.ReadError(f"read failed: {exc}", request=request) from exc
        except BaseException:
            await trio.aclose_forcefully(conn.stream)
            raise
        body = _Body(self, conn, request, head_rx_ns)
        return httpx.Response(
            status_code=resp.status,
            headers=resp.headers,
            stream=body,
            extensions={"http_version": b"HTTP/" + resp.parser.get_http_version().encode("ascii"),
                        "reason_phrase": resp.reason,
                        "hopbench.connect_ns": connect_ns, "hopbench.reused": conn.reused,
                        "hopbench.retried": retried, "hopbench.body": body,
                        "hopbench.write_ns": write_ns},
        )

    def _recycle(self, conn: _Conn) -> None:
        resp = conn.response
        if not self._closed and resp.done and resp.keep_alive and not resp.extra:
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


def _feed(resp: _Response, data: bytes | bytearray) -> None:
    """Parse ``data``; bytes that do not parse after a complete response only
    cost the connection (never reused), not the response: nothing was asked
    for them (h11, hopbench's parser before, stopped reading there too).

    Raises:
        httptools.HttpParserError / HttpParserUpgrade: the response itself is malformed.
    """
    try:
        resp.parser.feed_data(data)
    except _PARSE_ERRORS:
        if not resp.done:
            raise
        resp.extra = True


def _parse_error(exc: BaseException) -> str:
    if isinstance(exc, httptools.HttpParserUpgrade):
        return "the server switched protocols (101/upgrade), which a stream cannot follow"
    return f"malformed HTTP response: {exc}"


class _BodyReader:
    """``_Body``'s iterator: one yielded chunk per network read (framing removed).

    Every call of ``__anext__`` keeps its state in ``resp`` (parsed parts, done)
    and ``framing``; a ``trio.Cancelled`` raised by a read's checkpoint consumes
    no bytes, so the next call goes on where this one stopped.

    Raises (from ``__anext__``):
        httpx.RemoteProtocolError: a framed body cut by the connection's close.
        MalformedResponse: unparseable framing, or over 1 MiB of framing with no body byte.
        httpx.ReadError: the connection broke.
    """

    __slots__ = ("_body", "_receive", "_framing")

    def __init__(self, body: "_Body") -> None:
        self._body = body
        stream = body._conn.stream
        stamped = _ANC_SIZE and type(stream) is trio.SocketStream
        self._receive = body._receive_stamped if stamped else stream.receive_some
        self._framing = 0  # bytes read since the last body byte

    def __aiter__(self) -> "_BodyReader":
        return self

    async def __anext__(self) -> bytes:
        body = self._body
        resp = body._conn.response
        try:
            if resp.parts:  # body bytes that came with the head, or a read's rest
                body.after_turn = False  # (read before, with the head: no floor known)
                parts, resp.parts = resp.parts, []
                return parts[0] if len(parts) == 1 else b"".join(parts)
            while not resp.done:
                data = await self._receive(_READ_SIZE)
                if not data:
                    if resp.framed:
                        raise httpx.RemoteProtocolError(
                            "connection closed before the end of the body", request=body._request)
                    resp.done = True  # a body delimited by the close ends here
                    resp.keep_alive = False
                    break
                _feed(resp, data)
                parts = resp.parts
                if parts:
                    self._framing = 0
                    resp.parts = []
                    return parts[0] if len(parts) == 1 else b"".join(parts)
                self._framing += len(data)
                if self._framing > _MAX_FRAMING:
                    raise MalformedResponse("over 1 MiB of chunk framing or trailers without "
                                            "a body byte", request=body._request)
        except _PARSE_ERRORS as exc:
            raise MalformedResponse(_parse_error(exc), request=body._request) from exc
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise httpx.ReadError(f"read failed: {exc}", request=body._request) from exc
        body._done = True
        if resp.framed:  # its framing ended it: the last bytes read were the body's last
            body.end_rx_ns = body.rx_ns
        raise StopAsyncIteration

    async def aclose(self) -> None:
        """Nothing to release here (``_Body.aclose`` closes or recycles the connection)."""


class _Body(httpx.AsyncByteStream):
    """A response body: one yielded chunk per network read (framing removed).

    Attributes:
        rx_ns: when the bytes of the last chunk reached the socket, by the
            kernel's receive stamp (SO_TIMESTAMPNS, Linux), on hopbench's clock
            (``now_ns``), integer ns; 0 when unknown (TLS, no kernel stamps).
            Body bytes that came in the same read as the response head carry
            the head's stamp (``head_rx_ns``). Linux gives a read of several
            coalesced segments the latest one's stamp: the runner's stamp of a
            chunk minus ``rx_ns`` is a lower bound of how late its event loop
            served that read (docs/results/in-flight.md, "Client lag per read").
        head_rx_ns: the kernel's receive stamp of the read that completed the
            response head, clock ns; 0 when unknown.
        after_turn: the last chunk's bytes arrived after the start of the event
            loop's turn before the one the runner reads the chunk in
            (hopbench.engine._runqueue ``turn_from_ns``, read right after the
            chunk): its read waited for them (``_recv_stamped``: the loop's I/O
            wait woke the reader, so they came after the end of the I/O wait
            before that one), or the read before it on this body did (then this
            read's system call ran in the same turn, right after that one's: no
            yield between, so its bytes came after that turn began). False
            otherwise: a read that found its bytes waiting after a read that did
            too (they may have come a whole turn earlier), after a read that
            raised (a cancelled wait), body bytes that came with the head, no
            kernel stamps.
        end_rx_ns: once the body ended by its framing (the chunked terminator,
            or the Content-Length reached): the kernel's receive stamp of that
            last read, whose latest bytes are the body's last, so exact, clock
            ns; 0 before, for a body that ends at the connection's close (a FIN
            carries no stamp) and without kernel stamps.
    """

    def __init__(self, transport: StreamTransport, conn: _Conn, request: httpx.Request,
                 head_rx_ns: int = 0) -> None:
        self._transport = transport
        self._conn = conn
        self._request = request
        self._done = False
        self._closed = False
        self.head_rx_ns = self.rx_ns = head_rx_ns
        self.after_turn = False
        self._last_waited = False  # the body's latest recv waited for its bytes
        self.end_rx_ns = 0

    async def _receive_stamped(self, n: int) -> bytes:
        """``receive_some(n)`` through ``recvmsg``, keeping the kernel's receive stamp
        and whether the bytes came after the loop's previous turn began (``after_turn``)."""
        last, self._last_waited = self._last_waited, False  # (a read that raises breaks the chain)
        data, rx, waited = await _recv_stamped(self._conn.stream, n)  # type: ignore[arg-type]
        self._last_waited = waited
        self.after_turn = waited or last
        if rx:
            self.rx_ns = rx
        return data

    def __aiter__(self) -> "_BodyReader":
        """One chunk per network read. The iterator is an object, not a generator:
        a cancellation that lands in a read (a checkpoint before the system call)
        leaves it able to go on, so the runner can take back an idle timeout that
        its own lateness caused (``waiting_rx_ns``)."""
        return _BodyReader(self)

    def waiting_rx_ns(self) -> int | None:
        """When the bytes already waiting in the socket arrived, without reading them.

        A non-blocking ``recvmsg(MSG_PEEK)``: the kernel's receive stamp of the
        waiting bytes (SO_TIMESTAMPNS; with several segments waiting, Linux gives
        the last one's), on hopbench's clock in ns. None when nothing is waiting,
        the connection is closed or gone, or the transport has no kernel stamps
        (TLS, another platform): then nothing can be said.
        """
        stream = self._conn.stream
        if not _ANC_SIZE or type(stream) is not trio.SocketStream or self._closed:
            return None
        try:
            raw_sock = getattr(stream.socket, "_sock", None)  # trio's wrapped stdlib socket
            if raw_sock is None:
                return None
            data, anc, _, _ = raw_sock.recvmsg(1, _ANC_SIZE, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError, OSError):
            return None
        if not data:
            return None
        for level, kind, raw in anc:
            if kind == _SCM_TIMESTAMPNS and level == socket.SOL_SOCKET and len(raw) >= 16:
                sec, nsec = _TIMESPEC.unpack_from(raw)
                return int(sec * 1_000_000_000 + nsec - time.time_ns() + now_ns())
        return None

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._done:
            self._transport._recycle(self._conn)
        else:
            await trio.aclose_forcefully(self._conn.stream)
