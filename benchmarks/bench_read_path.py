"""Where a paced stream's per-read CPU goes: a bare h11 loop against hopbench's
read path, layer by layer (not a timed test).

One process, a socketpair: a server task writes one chunked SSE event per
write and yields, so the reader gets one event per read (as paced LLM streams
arrive). CPU µs per event covers both sides; the server's share is the same
for every row, so the differences between rows are the layers' costs:

    bare        h11 only (the floor of any h11-based client)
    body        hopbench's transport body iterator (_Body: httptools framing)
    stamp       + the clock and StreamMeter.on_read
    scan        + SSEScanner.feed
    decode      + the chat decoder
    meter       + StreamMeter.on_observations (the whole per-read path)

Run:  .venv/bin/python benchmarks/bench_read_path.py [--events 20000]
"""

from __future__ import annotations

import argparse
import time

import h11
import trio

from hopbench._clock import now_ns
from hopbench.measure._meter import StreamMeter
from hopbench.engine._transport import _Body, _Conn
from hopbench.protocols import new_decoder
from hopbench.sse import SSEScanner

EVENT = (b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
         b'"choices":[{"index":0,"delta":{"content":"hello \xe4\xbd\xa0"},"finish_reason":null}]}\n\n')
LEVELS = ("bare", "body", "stamp", "scan", "decode", "meter")


async def _server(stream: trio.SocketStream, events: int) -> None:
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
    conn.next_event()
    conn.next_event()
    await stream.send_all(conn.send(h11.Response(status_code=200, headers=[("transfer-encoding", "chunked")])))
    for _ in range(events):
        await stream.send_all(conn.send(h11.Data(data=EVENT)))
        await trio.sleep(0)  # the reader takes it: one event per read
    await stream.send_all(conn.send(h11.EndOfMessage()))


class _NoPool:
    def _recycle(self, conn: _Conn) -> None:
        pass


async def _reader(stream: trio.SocketStream, level: int) -> int:
    n = 0
    if level == 0:
        hc = h11.Connection(our_role=h11.CLIENT)
        hc.send(h11.Request(method="GET", target="/", headers=[("host", "x")]))
        hc.send(h11.EndOfMessage())
        while True:
            ev = hc.next_event()
            if ev is h11.NEED_DATA:
                hc.receive_data(await stream.receive_some(65536))
            elif type(ev) is h11.Data:
                n += bytes(ev.data).count(b"\n\n")
            elif type(ev) is h11.EndOfMessage:
                return n
    conn = _Conn(stream, (b"http", "x", 80))
    while not conn.response.head_done:  # the response head
        conn.response.parser.feed_data(await stream.receive_some(65536))
    scanner, dec, meter = SSEScanner(), new_decoder("chat", keep_text=False), StreamMeter(0, 0)
    t = 0
    async for chunk in _Body(_NoPool(), conn, None):  # type: ignore[arg-type]
        n += 1
        if level >= 2:
            t = now_ns()
            meter.on_read(t)
        if level >= 3:
            items = scanner.feed(chunk)
            if level >= 4:
                for item in items:
                    obs = dec.feed(item)
                    if level >= 5 and obs:
                        meter.on_observations(t, obs)
    return n


async def _one(level: int, events: int) -> float:
    a, b = trio.socket.socketpair()
    reader, writer = trio.SocketStream(a), trio.SocketStream(b)
    cpu0 = time.process_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_server, writer, events)
        await _reader(reader, level)
    await reader.aclose()
    await writer.aclose()
    return (time.process_time() - cpu0) / events * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=20_000)
    p.add_argument("--repeat", type=int, default=3, help="best of N per row")
    args = p.parse_args()
    prev = None
    print(f"{'layer':8} {'CPU us/event':>13} {'added':>7}")
    for level, name in enumerate(LEVELS):
        us = min(trio.run(_one, level, args.events) for _ in range(args.repeat))
        added = "" if prev is None else f"{us - prev:+.2f}"
        print(f"{name:8} {us:13.2f} {added:>7}")
        prev = us


if __name__ == "__main__":
    main()
