"""StreamTransport: h11 over trio sockets behind httpx, one connection per stream."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import h11
import httpx
import pytest
import trio

from hopbench._transport import StreamTransport


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
