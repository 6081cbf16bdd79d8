"""A pre-rendered SSE responder: the benchmark's server, never the bottleneck.

Role: a benchmark fixture, not product code. It runs in its own process
(``bench_run.py`` pins it to its own core) on plain asyncio sockets and
answers every POST with the same pre-rendered Chat Completions stream
(OpenAI API reference, "The chat completion chunk object"): ``--events``
``chat.completion.chunk`` events of about 300 bytes (the first carries the
role and the first content, the last ``finish_reason: "stop"``), then the
usage chunk (``choices: []``) and ``data: [DONE]``, framed as HTTP/1.1
chunked transfer encoding on a keep-alive connection.

The pacing is chosen by the request path, so one process serves every
configuration::

    POST /s/<gap_ms>/<ttft_ms>/v1/chat/completions

- headers are written at once; the first event ``ttft_ms`` after the request
  arrived (the fixed server-side TTFT);
- ``gap_ms`` 0 (unpaced): every event in one write, as fast as the socket takes it;
- ``gap_ms`` > 0 (paced): one event per write, ``gap_ms`` apart, on an absolute
  schedule (``ttft + k * gap`` from the request's arrival, no drift), with
  TCP_NODELAY, so each event arrives in its own read as real LLM streams do.

``GET /_stats`` returns and resets this process's figures: ``cpu_s`` (process
CPU since the last call), ``requests``, and the server-side TTFT it actually
achieved (request fully received -> first event handed to the kernel) as
``ttft_ms`` {p50, p99, max}. Binds 127.0.0.1 only.

Usage (prints ``PORT <n>`` on stdout once listening)::

    python benchmarks/_sse_responder.py --port 0 --events 200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import time

_CRLF = b"\r\n"
_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
         b"transfer-encoding: chunked\r\n\r\n")
_WORDS = ("Server-sent ", "events ", "stream ", "tokens ", "one ", "by ", "one, ", "and ",
          "hop", "bench ", "measures ", "them. ")


def render_events(n_events: int) -> list[bytes]:
    """The SSE events of one stream, each framed as one HTTP chunk.

    Args:
        n_events: chat.completion.chunk events with content (>= 2); the usage
            chunk and ``[DONE]`` follow.

    Returns:
        ``n_events + 2`` byte strings: ``<hex len>\\r\\n<event>\\r\\n``.
    """
    base = {"id": "chatcmpl-bench0000000000000000000000", "object": "chat.completion.chunk",
            "created": 1700000000, "model": "bench-model", "system_fingerprint": "fp_bench",
            "service_tier": "default"}
    events: list[bytes] = []
    for k in range(n_events):
        delta: dict[str, object] = {}
        finish = None
        if k == 0:
            delta["role"] = "assistant"
        if k == n_events - 1:
            finish = "stop"
        else:
            # pad the content so that each event is about 300 bytes on the wire
            delta["content"] = (_WORDS[k % len(_WORDS)] * 6)[:36]
        chunk = dict(base, choices=[{"index": 0, "delta": delta, "logprobs": None,
                                     "finish_reason": finish}], usage=None)
        events.append(b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n")
    usage = dict(base, choices=[], usage={"prompt_tokens": 12, "completion_tokens": n_events - 1,
                                          "total_tokens": 11 + n_events})
    events.append(b"data: " + json.dumps(usage, separators=(",", ":")).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return [b"%x\r\n%s\r\n" % (len(e), e) for e in events]


class _Stats:
    def __init__(self) -> None:
        self.cpu0 = time.process_time()
        self.requests = 0
        self.ttft_ns: list[int] = []

    def take(self) -> dict[str, object]:
        cpu = time.process_time()
        t = sorted(self.ttft_ns)

        def pct(p: float) -> float | None:
            if not t:
                return None
            return t[min(len(t) - 1, int(p / 100 * len(t)))] / 1e6

        out = {"cpu_s": cpu - self.cpu0, "requests": self.requests,
               "ttft_ms": {"p50": pct(50), "p99": pct(99), "max": t[-1] / 1e6 if t else None}}
        self.cpu0, self.requests, self.ttft_ns = cpu, 0, []
        return out


class _Conn(asyncio.Protocol):
    def __init__(self, server: Responder) -> None:
        self.s = server
        self.buf = b""
        self.tr: asyncio.Transport | None = None
        self.busy = False  # a response is being written: pipelined requests wait
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.tr = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._next()

    def _next(self) -> None:
        if self.busy:
            return
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buf[:end].decode("latin-1")
        lines = head.split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        if len(self.buf) < end + 4 + length:
            return
        self.buf = self.buf[end + 4 + length:]
        t_recv = time.monotonic_ns()
        if method == "GET" and target == "/_stats":
            body = json.dumps(self.s.stats.take()).encode()
            self._write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                        b"content-length: %d\r\n\r\n%s" % (len(body), body))
            self._next()
            return
        parts = target.split("/")
        if method != "POST" or len(parts) < 4 or parts[1] != "s":
            self._write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            self._next()
            return
        gap_ns, ttft_ns = int(parts[2]) * 1_000_000, int(parts[3]) * 1_000_000
        self.s.stats.requests += 1
        self.busy = True
        self._write(_HEAD)
        loop = asyncio.get_running_loop()
        t0 = loop.time()  # loop.time() is monotonic seconds, like the ns stamp above
        if gap_ns == 0:
            loop.call_at(t0 + ttft_ns / 1e9, self._burst, t_recv)
        else:
            loop.call_at(t0 + ttft_ns / 1e9, self._paced, 0, t0, ttft_ns / 1e9, gap_ns / 1e9, t_recv)

    def _write(self, data: bytes) -> None:
        if not self.closed and self.tr is not None:
            self.tr.write(data)

    def _first(self, t_recv: int) -> None:
        self.s.stats.ttft_ns.append(time.monotonic_ns() - t_recv)

    def _burst(self, t_recv: int) -> None:
        self._first(t_recv)
        self._write(self.s.whole)
        self._done()

    def _paced(self, k: int, t0: float, ttft_s: float, gap_s: float, t_recv: int) -> None:
        if self.closed:
            return
        if k == 0:
            self._first(t_recv)
        events = self.s.events
        self._write(events[k])
        if k + 1 < len(events):
            asyncio.get_running_loop().call_at(t0 + ttft_s + (k + 1) * gap_s, self._paced,
                                               k + 1, t0, ttft_s, gap_s, t_recv)
        else:
            self._write(b"0\r\n\r\n")
            self._done()

    def _done(self) -> None:
        self.busy = False
        self._next()


class Responder:
    """Holds the pre-rendered stream and the stats of one responder process."""

    def __init__(self, n_events: int) -> None:
        self.events = render_events(n_events)
        self.whole = b"".join(self.events) + b"0\r\n\r\n"
        self.stats = _Stats()


async def _main(port: int, n_events: int) -> None:
    responder = Responder(n_events)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Conn(responder), "127.0.0.1", port, backlog=4096)
    sock_port = server.sockets[0].getsockname()[1]
    sys.stdout.write(f"PORT {sock_port}\n")
    sys.stdout.flush()
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    """Command line entry point (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--events", type=int, default=200, help="content events per stream (>= 2)")
    args = p.parse_args(argv)
    try:
        asyncio.run(_main(args.port, max(2, args.events)))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
