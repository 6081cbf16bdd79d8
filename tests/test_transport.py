"""StreamTransport: h11 over trio sockets behind httpx, one connection per stream."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import h11
import httpx
import pytest
import trio

from hopbench.engine._transport import StreamTransport

from _raw_http import read_request


async def _serve(handler: Callable[[trio.SocketStream], object], nursery: trio.Nursery) -> int:
    listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
    return listeners[0].socket.getsockname()[1]


async def _read_request(stream: trio.SocketStream, conn: h11.Connection) -> bool:
    while True:
        ev = conn.next_event()
        if ev is h11.NEED_DATA:
            data = await stream.receive_some(65536)
            conn.receive_data(data)
            if not data and conn.their_state is h11.IDLE:
                return False
            continue
        if isinstance(ev, h11.EndOfMessage):
            return True
        if isinstance(ev, h11.ConnectionClosed):
            return False


async def test_transport_streams_and_reuses_connections() -> None:
    connections = []

    async def handler(stream: trio.SocketStream) -> None:
        connections.append(stream)
        conn = h11.Connection(h11.SERVER)
        while await _read_request(stream, conn):
            out = conn.send(h11.Response(status_code=200, headers=[("content-type", "text/event-stream"),
                                                                   ("transfer-encoding", "chunked")]))
            await stream.send_all(out)
            for i in range(3):
                await stream.send_all(conn.send(h11.Data(data=f"data: {i}\n\n".encode())))
                await trio.sleep(0.01)
            await stream.send_all(conn.send(h11.EndOfMessage()))
            conn.start_next_cycle()

    async with trio.open_nursery() as nursery:
        port = await _serve(handler, nursery)
        async with httpx.AsyncClient(transport=StreamTransport(), base_url=f"http://127.0.0.1:{port}") as c:
            for _ in range(3):
                async with c.stream("POST", "/x", content=b"{}") as r:
                    chunks = [chunk async for chunk in r.aiter_raw()]
                assert b"".join(chunks) == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
                assert len(chunks) == 3  # one chunk per network read
            assert r.extensions["hopbench.reused"] is True
        assert len(connections) == 1
        nursery.cancel_scope.cancel()


async def test_transport_truncated_body_raises_remote_protocol_error() -> None:
    async def handler(stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        await _read_request(stream, conn)
        await stream.send_all(conn.send(h11.Response(status_code=200, headers=[("content-length", "100")])))
        await stream.send_all(conn.send(h11.Data(data=b"data: x\n\n")))
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        port = await _serve(handler, nursery)
        async with httpx.AsyncClient(transport=StreamTransport(), base_url=f"http://127.0.0.1:{port}") as c:
            got = b""
            with pytest.raises(httpx.RemoteProtocolError):
                async with c.stream("POST", "/x", content=b"{}") as r:
                    async for chunk in r.aiter_raw():
                        got += chunk
            assert got == b"data: x\n\n"
        nursery.cancel_scope.cancel()


async def test_transport_reports_connect_and_send_through_the_trace_extension() -> None:
    """The runner's phases (hopbench.measure._inflight) come from httpcore's trace names:
    a new connection, then the request written; a reused one: only the write;
    an idle one the server closed: a new connection again."""
    async def handler(stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        while await _read_request(stream, conn):
            await stream.send_all(conn.send(h11.Response(status_code=200, headers=[("content-length", "2")])))
            await stream.send_all(conn.send(h11.Data(data=b"ok")) + conn.send(h11.EndOfMessage()))
            conn.start_next_cycle()
            if len(seen) >= 3:
                break  # drops the idle keep-alive connection after the second request

    seen: list[str] = []

    async def trace(name: str, info: dict[str, object]) -> None:
        seen.append(name)

    async with trio.open_nursery() as nursery:
        port = await _serve(handler, nursery)
        async with httpx.AsyncClient(transport=StreamTransport(), base_url=f"http://127.0.0.1:{port}") as c:
            for _ in range(3):
                assert (await c.post("/x", content=b"1", extensions={"trace": trace})).text == "ok"
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    connect, send = "connection.connect_tcp.started", "http11.send_request_headers.started"
    assert seen == [connect, send, send, connect, send]


@pytest.mark.parametrize("size", [2, 128 * 1024], ids=["small", "large-body"])
async def test_transport_stamps_the_write_that_completed_the_request(size: int) -> None:
    """``extensions[SENT_AT]`` (docs/gateway-overhead.md, ``request_sent_ns``): stamps just before
    and just after the write of the request's last bytes: after the connect (the trace's
    ``send_request_headers.started`` comes once it is open), and the "before" stamp before the
    server read the request; a small request's "after" stamp too (one ``os.write``, no await
    between it and the stamp). Ordering only: one clock."""
    from hopbench._clock import now_ns
    from hopbench.engine._transport import SENT_AT

    read_at: list[int] = []

    async def handler(stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        while await _read_request(stream, conn):
            read_at.append(now_ns())
            await stream.send_all(conn.send(h11.Response(status_code=200, headers=[("content-length", "2")])))
            await stream.send_all(conn.send(h11.Data(data=b"ok")) + conn.send(h11.EndOfMessage()))
            conn.start_next_cycle()

    phases: list[tuple[str, int]] = []

    async def trace(name: str, info: dict[str, object]) -> None:
        phases.append((name, now_ns()))

    async with trio.open_nursery() as nursery:
        port = await _serve(handler, nursery)
        async with httpx.AsyncClient(transport=StreamTransport(), base_url=f"http://127.0.0.1:{port}") as c:
            for _ in range(2):  # a new connection, then a reused one
                phases.clear()
                request = c.build_request("POST", "/x", content=b"x" * size, extensions={"trace": trace})
                t_send = now_ns()
                assert (await c.send(request)).text == "ok"
                before, after = request.extensions[SENT_AT]
                written = dict(phases)["http11.send_request_headers.started"]
                assert t_send <= written <= before <= after and before <= read_at[-1]
                if size < 64 * 1024:  # one os.write took it whole (a large body's rest: send_all, which yields)
                    assert after <= read_at[-1]
        nursery.cancel_scope.cancel()
    assert len(read_at) == 2


async def test_transport_retries_a_stale_keepalive_connection_once() -> None:
    served = []

    async def handler(stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        if await _read_request(stream, conn):
            served.append(1)
            await stream.send_all(conn.send(h11.Response(status_code=200, headers=[("content-length", "2")])))
            await stream.send_all(conn.send(h11.Data(data=b"ok")) + conn.send(h11.EndOfMessage()))
        await stream.aclose()  # the server drops the idle keep-alive connection

    async with trio.open_nursery() as nursery:
        port = await _serve(handler, nursery)
        async with httpx.AsyncClient(transport=StreamTransport(), base_url=f"http://127.0.0.1:{port}") as c:
            assert (await c.post("/x", content=b"1")).text == "ok"
            await trio.sleep(0.05)
            assert (await c.post("/x", content=b"2")).text == "ok"
        assert len(served) == 2
        nursery.cancel_scope.cancel()


async def test_transport_connection_refused_is_connect_error() -> None:
    sock = trio.socket.socket()
    await sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    async with httpx.AsyncClient(transport=StreamTransport(), base_url=f"http://127.0.0.1:{port}") as c:
        with pytest.raises(httpx.ConnectError):
            await c.post("/x", content=b"{}")


# -- response framing (httptools) and request writing, with raw server bytes --------------

async def _raw_server(nursery: trio.Nursery, replies: list[bytes], seen: list[bytes],
                      connections: list[int]) -> int:
    """Each connection: read one request head (+ body by content-length), send the
    next canned reply, keep the connection open for further requests until the
    client closes it or a reply ends in b"<close>"."""

    async def handler(stream: trio.SocketStream) -> None:
        connections.append(1)
        buf = b""
        while replies:
            got = await read_request(stream, buf)
            if got is None:
                return
            head, body, buf = got
            seen.append(head + b"\r\n\r\n" + body)
            reply = replies.pop(0)
            try:
                if reply.endswith(b"<close>"):
                    await stream.send_all(reply[:-7])
                    await stream.aclose()
                    return
                await stream.send_all(reply)
            except trio.BrokenResourceError:  # the client gave up on a bad reply
                return

    return await _serve(handler, nursery)


async def _exchange_raw(replies: list[bytes], n: int = 1, **kw: object) -> tuple[list[object], list[bytes], int]:
    seen: list[bytes] = []
    connections: list[int] = []
    results: list[object] = []
    async with trio.open_nursery() as nursery:
        port = await _raw_server(nursery, replies, seen, connections)
        async with httpx.AsyncClient(transport=StreamTransport(), base_url=f"http://127.0.0.1:{port}") as c:
            for _ in range(n):
                try:
                    async with c.stream("POST", "/v1/x?a=1", content=b'{"k":1}', **kw) as r:  # type: ignore[arg-type]
                        body = [chunk async for chunk in r.aiter_raw()]
                    results.append((r.status_code, b"".join(body), r.extensions["reason_phrase"],
                                    r.extensions["http_version"], r.headers.get("x-h")))
                except httpx.HTTPError as exc:
                    results.append(exc)
                await trio.sleep(0.02)
        nursery.cancel_scope.cancel()
    return results, seen, len(connections)


async def test_request_bytes_are_a_plain_http11_request() -> None:
    results, seen, _ = await _exchange_raw([b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"],
                                           headers={"X-Api-Key": "v a\tl"})
    assert results == [(200, b"ok", b"OK", b"HTTP/1.1", None)]
    head, _, body = seen[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/x?a=1 HTTP/1.1"
    fields = {k.lower(): v.strip() for k, _, v in (ln.partition(b":") for ln in lines[1:])}
    assert fields[b"host"].startswith(b"127.0.0.1:")
    assert fields[b"content-length"] == b"7" and fields[b"x-api-key"] == b"v a\tl"
    assert body == b'{"k":1}'


@pytest.mark.parametrize("headers", [{"x-bad": "a\r\nx-injected: 1"}, {"x-bad": "a\x00b"},
                                     {"x bad": "1"}, {"x:bad": "1"}])
async def test_header_injection_is_refused_before_sending(headers: dict[str, str]) -> None:
    results, seen, _ = await _exchange_raw([b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"], headers=headers)
    assert isinstance(results[0], httpx.LocalProtocolError)
    assert seen == []


async def test_chunked_keepalive_response_is_reused() -> None:
    reply = (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nx-h: 1\r\n\r\n"
             b"9\r\ndata: a\n\n\r\n9\r\ndata: b\n\n\r\n0\r\n\r\n")
    results, _, conns = await _exchange_raw([reply, reply], n=2)
    assert results == [(200, b"data: a\n\ndata: b\n\n", b"OK", b"HTTP/1.1", "1")] * 2
    assert conns == 1


async def test_informational_responses_are_skipped() -> None:
    reply = (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n"
             b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\nx-h: final\r\n\r\nabc")
    results, _, _ = await _exchange_raw([reply])
    assert results == [(200, b"abc", b"OK", b"HTTP/1.1", "final")]


async def test_body_delimited_by_close_ends_at_eof_and_is_not_reused() -> None:
    reply = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: 1\n\ndata: 2\n\n<close>"
    results, _, conns = await _exchange_raw([reply, reply], n=2)
    assert results == [(200, b"data: 1\n\ndata: 2\n\n", b"OK", b"HTTP/1.1", None)] * 2
    assert conns == 2


@pytest.mark.parametrize("reply", [
    b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok",
    b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n",  # bytes past the end
])
async def test_connection_not_reused_when_the_response_forbids_it(reply: bytes) -> None:
    results, _, conns = await _exchange_raw([reply, b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"], n=2)
    assert [r[:2] for r in results] == [(200, b"ok"), (200, b"ok")]  # type: ignore[index]
    assert conns == 2


@pytest.mark.parametrize("reply", [
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n9\r\ndata: a\n\n\r\n<close>",  # no last chunk
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",  # bad chunk size
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n9\r\ndata: a\n\nXX",  # no CRLF after the chunk
])
async def test_broken_bodies_raise_remote_protocol_error(reply: bytes) -> None:
    results, _, _ = await _exchange_raw([reply])
    assert isinstance(results[0], httpx.RemoteProtocolError)


@pytest.mark.parametrize("reply", [
    b"NOT HTTP AT ALL\r\n\r\n",
    b"HTTP/1.1 2000 OK\r\n\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n<close>",  # head cut short
])
async def test_broken_heads_raise_remote_protocol_error(reply: bytes) -> None:
    results, _, _ = await _exchange_raw([reply])
    assert isinstance(results[0], httpx.RemoteProtocolError), results


async def test_head_requests_are_refused() -> None:
    async with httpx.AsyncClient(transport=StreamTransport()) as c:
        with pytest.raises(httpx.LocalProtocolError):
            await c.head("http://127.0.0.1:9/")


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1"])
async def test_connects_to_ip_literals_and_names(host: str) -> None:
    async def handler(stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        await _read_request(stream, conn)
        await stream.send_all(conn.send(h11.Response(status_code=200, headers=[("content-length", "2")]))
                              + conn.send(h11.Data(data=b"ok")) + conn.send(h11.EndOfMessage()))

    bind = "::1" if host == "::1" else "127.0.0.1"
    try:
        probe = trio.socket.socket(trio.socket.AF_INET6 if ":" in bind else trio.socket.AF_INET)
        await probe.bind((bind, 0))
        probe.close()
    except OSError:
        pytest.skip(f"no {bind} on this machine")
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host=bind))
        port = listeners[0].socket.getsockname()[1]
        url_host = f"[{host}]" if ":" in host else host
        async with httpx.AsyncClient(transport=StreamTransport()) as c:
            r = await c.post(f"http://{url_host}:{port}/x", content=b"{}")
        assert r.text == "ok"
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("reply", [
    # RFC 9112 section 6.3 rule 3: Transfer-Encoding overrides Content-Length
    b"HTTP/1.1 200 OK\r\ncontent-length: 99\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
    # section 2.2: a recipient may take a bare LF as a line end
    b"HTTP/1.1 200 OK\ncontent-length: 2\n\nok",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1;ext=1\r\no\r\n1\r\nk\r\n0\r\nx-trailer: 1\r\n\r\n",
    b"HTTP/1.1 200\r\nTransfer-Encoding: Chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
])
async def test_tolerated_framing_quirks(reply: bytes) -> None:
    results, _, _ = await _exchange_raw([reply])
    assert [r[:2] for r in results] == [(200, b"ok")], results  # type: ignore[index]


async def test_folded_header_and_bytes_after_a_complete_response() -> None:
    # RFC 9112 section 5.2: a client MUST accept obs-fold in a response
    folded = b"HTTP/1.1 200 OK\r\nx-h: a\r\n b\r\ncontent-length: 2\r\n\r\nok"
    junk = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok\x00\x01junk"
    ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
    results, _, conns = await _exchange_raw([folded, junk, ok], n=3)
    assert [r[:2] for r in results] == [(200, b"ok")] * 3  # type: ignore[index]
    assert conns == 2  # the connection that carried junk was not reused


@pytest.mark.parametrize("reply", [
    b"HTTP/1.1 200 OK\r\n" + b"x-endless: " + b"a" * (2 << 20),  # a head that never ends
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n"
    + b"x-t: 1\r\n" * 300_000,  # trailers that never end
])
async def test_endless_heads_and_trailers_are_malformed_not_memory(reply: bytes) -> None:
    from hopbench.engine._transport import MalformedResponse
    results, _, _ = await _exchange_raw([reply + b"<close>"])
    assert isinstance(results[0], MalformedResponse), results
    assert "1 MiB" in str(results[0])


async def test_body_reads_carry_the_kernels_receive_stamp() -> None:
    """Issue 20: a read served late by a busy loop says how late (``rx_ns``: when the
    bytes reached the socket, by the kernel's stamp, on hopbench's clock)."""
    import time

    from hopbench._clock import now_ns

    from hopbench.emulator._rx_stamp import SO_TIMESTAMPNS as _SO_TIMESTAMPNS

    if _SO_TIMESTAMPNS is None:
        pytest.skip("no kernel receive stamps on this platform")
    go = trio.Event()

    async def handler(stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        await _read_request(stream, conn)
        await stream.send_all(conn.send(h11.Response(status_code=200, headers=[("transfer-encoding", "chunked")])))
        await go.wait()
        await stream.send_all(conn.send(h11.Data(data=b"data: late\n\n")) + conn.send(h11.EndOfMessage()))

    async with trio.open_nursery() as nursery:
        port = await _serve(handler, nursery)
        async with httpx.AsyncClient(transport=StreamTransport(), base_url=f"http://127.0.0.1:{port}") as c:
            async with c.stream("POST", "/x", content=b"{}") as r:
                body = r.extensions["hopbench.body"]
                # the head's read is stamped too; no body read yet
                assert 0 < body.head_rx_ns == body.rx_ns <= now_ns()
                go.set()
                sent = now_ns()
                await trio.sleep(0.01)  # the server writes the chunk (same process, its own task)
                time.sleep(0.05)  # the loop is busy: the bytes wait in the socket
                chunks = [chunk async for chunk in body]
                t = now_ns()
        nursery.cancel_scope.cancel()
    assert chunks[0] == b"data: late\n\n"
    # arrived before the busy 50 ms, read after them. (The kernel's CLOCK_REALTIME stamp is moved
    # to hopbench's clock by an offset read from both clocks back to back; a preemption between
    # the two reads shifts it: seen 0.36 ms on a busy CI machine. TODO: record that offset's
    # measured error in the transport and use it here instead of a 2 ms allowance.)
    assert sent - 2_000_000 <= body.rx_ns <= t - 50_000_000


async def test_body_bytes_that_came_with_the_head_carry_the_heads_receive_stamp() -> None:
    """Issue 20: head and body in one write, read late by a busy loop in one read: the
    body's first chunk (parsed from the head's read) carries that read's kernel stamp
    (``head_rx_ns``), so the runner knows how late it was served."""
    import time

    from hopbench._clock import now_ns

    from hopbench.emulator._rx_stamp import SO_TIMESTAMPNS as _SO_TIMESTAMPNS

    if _SO_TIMESTAMPNS is None:
        pytest.skip("no kernel receive stamps on this platform")

    async def handler(stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        await _read_request(stream, conn)
        await stream.send_all(conn.send(h11.Response(status_code=200, headers=[("transfer-encoding", "chunked")]))
                              + conn.send(h11.Data(data=b"data: early\n\n")) + conn.send(h11.EndOfMessage()))

    async with trio.open_nursery() as nursery:
        port = await _serve(handler, nursery)
        async with httpx.AsyncClient(transport=StreamTransport(), base_url=f"http://127.0.0.1:{port}") as c:
            sent = now_ns()
            async with c.stream("POST", "/x", content=b"{}") as r:
                body = r.extensions["hopbench.body"]
                time.sleep(0.05)  # the loop is busy after the head's read
                chunks = [chunk async for chunk in body]
                t = now_ns()
        nursery.cancel_scope.cancel()
    assert chunks == [b"data: early\n\n"]
    assert sent <= body.head_rx_ns == body.rx_ns <= t - 50_000_000


async def test_transport_request_write_time_shows_a_target_that_reads_bodies_slowly() -> None:
    """A large body is written after the head as it is; ``hopbench.write_ns`` (the
    ``request_write`` metric) lasts until its last byte is in the send buffer, so a
    server that reads 1 MiB every 20 ms holds it (a lower bound only: the kernel's
    buffers take some megabytes at once)."""
    body = b"x" * (24 * 1024 * 1024)
    got: list[int] = []

    async def handler(stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        n = 0
        while True:
            ev = conn.next_event()
            if ev is h11.NEED_DATA:
                await trio.sleep(0.02)
                data = await stream.receive_some(1024 * 1024)
                conn.receive_data(data)
                continue
            if isinstance(ev, h11.Data):
                n += len(ev.data)
            if isinstance(ev, h11.EndOfMessage):
                break
        got.append(n)
        await stream.send_all(conn.send(h11.Response(status_code=200, headers=[("content-length", "0")])))
        await stream.send_all(conn.send(h11.EndOfMessage()))

    import socket

    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        for listener in listeners:  # a fixed receive buffer (no autotuning), inherited by accepted sockets
            listener.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 * 1024)
        nursery.start_soon(trio.serve_listeners, handler, listeners)
        port = listeners[0].socket.getsockname()[1]
        async with httpx.AsyncClient(transport=StreamTransport(), base_url=f"http://127.0.0.1:{port}") as c:
            async with c.stream("POST", "/x", content=body) as r:
                await r.aread()
            write_ns = r.extensions["hopbench.write_ns"]
            async with c.stream("POST", "/x", content=b"{}") as r2:
                await r2.aread()
        nursery.cancel_scope.cancel()
    assert got == [len(body), 2]
    # the server's receive buffer is fixed at 256 KiB (doubled by Linux) and a send buffer
    # holds at most net.core.wmem_max-sized tcp_wmem (4 MiB here; 16 MiB allowed for): at
    # least 8 MiB is read after the write began, 1 MiB per 20 ms
    assert write_ns >= 8 * 20_000_000, write_ns
    assert r2.extensions["hopbench.write_ns"] is None  # a small body fits the buffers: no figure


def test_kernel_stamps_are_on_before_the_first_read() -> None:
    """Linux turns receive stamping on lazily (deferred work) and off when the last
    socket that asked closes: a busy machine left a run's first reads unstamped.
    The transport keeps a stamped socket open and waits until stamps come back."""
    from hopbench.emulator._rx_stamp import SO_TIMESTAMPNS as _SO_TIMESTAMPNS, keep_kernel_stamps

    if _SO_TIMESTAMPNS is None:
        pytest.skip("no kernel receive stamps on this platform")
    assert keep_kernel_stamps() is True
    assert keep_kernel_stamps(tries=1) is True  # kept on: at once the second time


@pytest.mark.parametrize("checkpoint", [True, False], ids=["in-trace", "in-send"])
async def test_transport_cancel_before_the_head_closes_the_connection(checkpoint: bool) -> None:
    """A cancel between the connect and the response head (the scenario's ``after_ms``, the run's
    stop) closes the new connection: it was left to the garbage collector, a ResourceWarning
    ("unclosed socket") under ``-X dev`` (issue 38). The cancel lands in the trace hook
    after the connect, or (no checkpoint there) at the send's first checkpoint."""
    import gc
    import warnings

    async def handler(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        port = await _serve(handler, nursery)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            async with httpx.AsyncClient(transport=StreamTransport(), base_url=f"http://127.0.0.1:{port}") as c:
                with trio.CancelScope() as scope:
                    async def trace(name: str, info: dict[str, object]) -> None:
                        if name == "http11.send_request_headers.started":
                            scope.cancel()
                            if checkpoint:
                                await trio.sleep(0)

                    await c.post("/x", content=b"1", extensions={"trace": trace})
                assert scope.cancelled_caught
            gc.collect()
        nursery.cancel_scope.cancel()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)], [str(w.message) for w in caught]


async def test_body_read_tells_a_read_that_waited_for_its_bytes_and_keeps_the_bodys_end_stamp() -> None:
    """Issue 36: a read that waited for its bytes (the socket was empty, the loop's I/O wait
    woke it) got none from before the loop's previous turn, and so did a read right after it
    (same turn); a read that found its bytes waiting after one that did too may have them from
    a turn earlier (``_Body.after_turn``, the runner's floor of a read's earlier events). A body
    ended by its framing (the chunked terminator, its own later write) keeps that last read's
    kernel stamp (``end_rx_ns``): the client's end on the wire."""
    from trio.testing import wait_all_tasks_blocked

    from hopbench.emulator._rx_stamp import SO_TIMESTAMPNS as _SO_TIMESTAMPNS

    if _SO_TIMESTAMPNS is None:
        pytest.skip("no kernel receive stamps on this platform")
    sends = (b"data: one\n\n", b"data: two\n\n", b"data: three\n\n", None)
    go = [trio.Event() for _ in sends]
    written = [trio.Event() for _ in sends]

    async def handler(stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        await _read_request(stream, conn)
        await stream.send_all(conn.send(h11.Response(status_code=200, headers=[("transfer-encoding", "chunked")])))
        for i, data in enumerate(sends):
            await go[i].wait()
            await stream.send_all(conn.send(h11.EndOfMessage() if data is None else h11.Data(data=data)))
            written[i].set()

    async def release(i: int) -> None:
        await wait_all_tasks_blocked()  # the reader is parked on its socket
        go[i].set()

    async with trio.open_nursery() as nursery:
        port = await _serve(handler, nursery)
        async with httpx.AsyncClient(transport=StreamTransport(), base_url=f"http://127.0.0.1:{port}") as c:
            async with c.stream("POST", "/x", content=b"{}") as r:
                body = r.extensions["hopbench.body"]
                it = body.__aiter__()
                assert body.after_turn is False
                got = []
                for i, data in enumerate(sends):
                    if i in (0, 3):  # the reader waits for these
                        nursery.start_soon(release, i)
                    else:  # these are in the socket before the read
                        go[i].set()
                        await written[i].wait()
                    if data is None:
                        with pytest.raises(StopAsyncIteration):
                            await it.__anext__()
                    else:
                        assert await it.__anext__() == data
                        got.append((body.after_turn, body.rx_ns))
                        assert body.end_rx_ns == 0
        nursery.cancel_scope.cancel()
    # waited; right after a read that waited; found waiting after a read that did too
    assert [a for a, _ in got] == [True, True, False] and got[0][1] > 0
    # the terminator's own read: its stamp, after the last data's
    assert body.end_rx_ns == body.rx_ns > got[-1][1]
