"""A tiny HTTP/1.1 reverse proxy that holds every SSE event for a known delay (tests only).

Run as a process (so that its loop shares nothing with the measuring client)::

    python tests/_delay_proxy.py --port P --upstream 127.0.0.1:9100 --delay-ms 5 --ready FILE --stats FILE

Client connections are kept alive (requests read one after another); each
request gets its own upstream connection (``Connection: close``); with
``--retry`` a 429 or 5xx answer is retried once, behind the client's back; with
``--answer-every N`` every Nth request is answered 503 by the proxy itself. The upstream
body is de-chunked and, for ``text/event-stream``, cut into SSE events at
blank lines: every event is written to the client ``delay-ms`` after it
arrived, in order, as one chunk. Other bodies pass through at once. ``GET
/healthz`` answers 200 without the upstream. With ``--swap-at N`` SSE events N and
N+1 of every response (0-based, counting every event the upstream wrote) reach the client
in swapped order (a gateway that reorders); with ``--keepalive-ms K`` the proxy writes
its own ``: gw-keepalive`` comment whenever the upstream has sent nothing for K ms, every
K ms until it sends again (a gateway that keeps its client's connection alive). With
``--hold`` the SSE events are held until the upstream body ends, then written at once in
one chunk (a buffering gateway: nginx with ``proxy_buffering on``); the response head is
still written at once.

Broken-gateway modes (``hopbench check``'s tests, tests/test_check_proxy.py), each breaking one
promise of a streaming contract: ``--rewrite-at N`` rewrites SSE event N's data (adds a JSON
field); ``--hold-first-ms H`` holds the first SSE event H ms (the rest queue behind it);
``--swallow-errors`` drops in-band error events (chat ``{"error"}``, Responses
``response.failed``, Messages ``event: error``); without ``--keepalive-ms`` it never injects
keepalives; without ``--propagate-cancel`` a client that closes is ignored (the upstream body is
read to its end). The well-behaved modes: ``--propagate-cancel`` closes the upstream connection
when the client closes its own (the proxy then reads nothing more of it: clients here never
pipeline); ``--disconnect-error`` ends a Messages stream whose upstream broke with an Anthropic
``api_error`` event and a clean end of the body (HopBase's rule), instead of breaking the client's;
``--stall-error-ms S`` ends a stream whose upstream sent no byte for S ms with the protocol's error
event and a clean end, and closes the upstream (HopBase: a stuck upstream is errored).

``--precise`` times each held event with a timer thread (``_ThreadTimer``: the kernel's
nanosecond sleep) instead of the loop's: asyncio's epoll rounds a wait up to a whole millisecond
and a busy machine wakes it later still, so a 1.5 ms hold read as +3 ms per event
(benchmarks/bench_gate_gateway.py, the gateway regression of issue 37).

Self-measurement: each event's lateness (actual write minus due time, ns)
and each request's forwarding time (its head read -> written upstream, a new
connection each time) are kept; on SIGTERM the proxy writes
``{"late_ns": [...], "forward_ns": [...], "events": N}`` to the
stats file, so a test derives its tolerance from what this proxy really did.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import heapq
import sys
import threading
import time
from pathlib import Path

_HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"content-length", b"proxy-connection"}


async def _read_head(reader: asyncio.StreamReader) -> tuple[bytes, list[tuple[bytes, bytes]]] | None:
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    lines = raw[:-4].split(b"\r\n")
    headers = []
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers.append((name.strip().lower(), value.strip()))
    return lines[0], headers


def _get(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for k, v in headers:
        if k == name:
            return v
    return None


async def _body_chunks(reader: asyncio.StreamReader, headers: list[tuple[bytes, bytes]]):  # type: ignore[no-untyped-def]
    """The upstream body, de-chunked, as it arrives (raises on a broken body)."""
    if (_get(headers, b"transfer-encoding") or b"").lower() == b"chunked":
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return
            data = await reader.readexactly(size + 2)
            yield data[:-2]
    elif (n := _get(headers, b"content-length")) is not None:
        yield await reader.readexactly(int(n))
    else:
        while data := await reader.read(65536):
            yield data


_ANTHROPIC_ERROR = (b'event: error\ndata: {"type":"error","error":{"type":"api_error",'
                    b'"message":"Response stream interrupted, please retry"}}\n\n')


def _is_error(event: bytes) -> bool:
    """An in-band error event of one of the three protocols."""
    return (event.startswith(b"event: error") or b"\nevent: error" in event or b'data: {"error"' in event
            or b'"type":"response.failed"' in event)


class _ThreadTimer:
    """Futures that a daemon thread resolves at their due time (``time.monotonic_ns``).

    The thread sleeps in ``Condition.wait`` (a futex wait with a nanosecond timeout), so a due
    time is met to the thread's wake-up plus one hand-over to the loop, not to the loop's
    millisecond-rounded poll. A future is never resolved before its due time.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._heap: list[tuple[int, int, asyncio.Future[None]]] = []
        self._cv = threading.Condition()
        self._seq = 0
        threading.Thread(target=self._run, name="delay-proxy-timer", daemon=True).start()

    def until(self, due_ns: int) -> asyncio.Future[None]:
        """A future resolved on the loop once ``time.monotonic_ns() >= due_ns``."""
        fut: asyncio.Future[None] = self._loop.create_future()
        with self._cv:
            heapq.heappush(self._heap, (due_ns, self._seq, fut))
            self._seq += 1
            self._cv.notify()
        return fut

    def _run(self) -> None:
        with self._cv:
            while True:
                if not self._heap:
                    self._cv.wait()
                    continue
                left = self._heap[0][0] - time.monotonic_ns()
                if left > 0:
                    self._cv.wait(left / 1e9)
                    continue
                fut = heapq.heappop(self._heap)[2]
                self._loop.call_soon_threadsafe(_resolve, fut)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class Proxy:
    def __init__(self, upstream: tuple[str, int], delay_ns: int, retry: bool = False,
                 answer_every: int = 0, swap_at: int = -1, keepalive_ns: int = 0,
                 hold: bool = False, rewrite_at: int = -1, hold_first_ns: int = 0, swallow_errors: bool = False,
                 propagate_cancel: bool = False, disconnect_error: bool = False, stall_error_ns: int = 0) -> None:
        self.stall_error_ns = stall_error_ns
        self.hold = hold
        self.rewrite_at = rewrite_at
        self.hold_first_ns = hold_first_ns
        self.swallow_errors = swallow_errors
        self.propagate_cancel = propagate_cancel
        self.disconnect_error = disconnect_error
        self.swap_at = swap_at
        self.keepalive_ns = keepalive_ns
        self.keepalives = 0
        self.upstream = upstream
        self.retry = retry
        self.answer_every = answer_every
        self.requests = 0
        self.delay_ns = delay_ns
        self.late_ns: list[int] = []
        self.timer: _ThreadTimer | None = None  # --precise: set by main() once the loop runs
        self.forward_ns: list[int] = []  # request head read -> request written upstream

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = await _read_head(reader)
        if head is None:
            return False
        line, headers = head
        t_head = time.monotonic_ns()
        if line.startswith(b"GET /healthz"):
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()
            return True
        n = int(_get(headers, b"content-length") or b"0")
        body = await reader.readexactly(n) if n else b""
        self.requests += 1
        if self.answer_every and self.requests % self.answer_every == 0:  # answered here, never upstream
            writer.write(b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                         b"content-length: 2\r\n\r\n{}")
            await writer.drain()
            return True
        for attempt in range(2 if self.retry else 1):
            up_r, up_w = await asyncio.open_connection(*self.upstream)
            out = [line]
            out += [k + b": " + v for k, v in headers if k not in _HOP]
            out += [b"content-length: " + str(len(body)).encode(), b"connection: close"]
            up_w.write(b"\r\n".join(out) + b"\r\n\r\n" + body)
            await up_w.drain()
            if attempt == 0:
                self.forward_ns.append(time.monotonic_ns() - t_head)
            rhead = await _read_head(up_r)
            if rhead is None:
                up_w.close()
                return False
            status, rh = rhead
            code = int(status.split()[1])
            if attempt == 0 and self.retry and (code == 429 or code >= 500):
                up_w.close()  # retried behind the client's back, as gateways do
                continue
            break
        try:
            back = [status] + [k + b": " + v for k, v in rh if k not in _HOP] + [b"transfer-encoding: chunked"]
            writer.write(b"\r\n".join(back) + b"\r\n\r\n")
            sse = (_get(rh, b"content-type") or b"").startswith(b"text/event-stream")
            queue: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue()
            sender = asyncio.create_task(self._send(queue, writer))
            buf = b""
            n_event = 0
            held: bytes | None = None  # --swap-at: the event sent after its successor
            last = [time.monotonic_ns()]  # the upstream's last bytes (or our last keepalive)
            ticker = asyncio.create_task(self._ticker(last, queue)) if sse and self.keepalive_ns else None
            watch = asyncio.create_task(self._watch_client(reader, up_w)) if self.propagate_cancel else None
            last_up = [time.monotonic_ns()]
            stalled: list[bool] = []
            staller = (asyncio.create_task(self._stall(last_up, stalled, queue, up_w, line))
                       if sse and self.stall_error_ns else None)
            try:
                async for data in _body_chunks(up_r, rh):
                    t = last[0] = last_up[0] = time.monotonic_ns()
                    if not sse:
                        queue.put_nowait((t, data))
                        continue
                    buf += data
                    while (i := buf.find(b"\n\n")) >= 0:
                        event, buf = buf[:i + 2], buf[i + 2:]
                        if n_event == self.rewrite_at:  # --rewrite-at: the data changed, the text kept
                            event = event.replace(b"data: {", b'data: {"x_gateway":1,', 1)
                        if self.swallow_errors and _is_error(event):
                            n_event += 1
                            continue
                        if self.hold_first_ns and n_event == 0:
                            queue.put_nowait((t + self.hold_first_ns, event))
                        elif self.hold:  # --hold: all of it at the body's end
                            held = event if held is None else held + event
                        elif n_event == self.swap_at:
                            held = event
                        else:
                            queue.put_nowait((t + self.delay_ns, event))
                            if held is not None:
                                queue.put_nowait((t + self.delay_ns, held))
                                held = None
                        n_event += 1
            except (asyncio.IncompleteReadError, ConnectionError, ValueError):
                if ticker is not None:
                    ticker.cancel()
                if staller is not None:
                    staller.cancel()
                if stalled:  # --stall-error-ms: the error event is queued; end the body cleanly
                    queue.put_nowait(None)
                    await sender
                    writer.write(b"0\r\n\r\n")
                    await writer.drain()
                    return False
                if watch is not None and watch.done():  # the client left: nothing more to say
                    queue.put_nowait(None)
                    await sender
                    writer.close()
                    return False
                if watch is not None:
                    watch.cancel()
                if self.disconnect_error and sse and line.split()[1].startswith(b"/v1/messages"):
                    queue.put_nowait((time.monotonic_ns(), _ANTHROPIC_ERROR))  # HopBase: an error event, a clean end
                    queue.put_nowait(None)
                    await sender
                    writer.write(b"0\r\n\r\n")
                    await writer.drain()
                    return True
                queue.put_nowait(None)
                await sender
                writer.close()  # a broken upstream body: break the client's too
                return False
            if ticker is not None:
                ticker.cancel()
            if watch is not None:
                watch.cancel()
            if staller is not None:
                staller.cancel()
            if held is not None:
                buf = held + buf
            if buf:
                queue.put_nowait((time.monotonic_ns() + self.delay_ns, buf))
            queue.put_nowait(None)
            await sender
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return True
        finally:
            up_w.close()

    @staticmethod
    async def _watch_client(reader: asyncio.StreamReader, up_w: asyncio.StreamWriter) -> None:
        """--propagate-cancel: the client closed its connection -> close the upstream's."""
        try:
            data = await reader.read(1)
        except ConnectionError:
            data = b""
        if not data:
            up_w.close()

    async def _stall(self, last_up: list[int], stalled: list[bool],
                     queue: asyncio.Queue[tuple[int, bytes] | None], up_w: asyncio.StreamWriter, line: bytes) -> None:
        """--stall-error-ms: the upstream silent that long -> the protocol's error event, upstream closed."""
        while (left := last_up[0] + self.stall_error_ns - time.monotonic_ns()) > 0:
            await asyncio.sleep(left / 1e9)
        path = line.split()[1]
        if path.startswith(b"/v1/messages"):
            event = _ANTHROPIC_ERROR
        elif path.startswith(b"/v1/responses"):
            event = (b'event: response.failed\ndata: {"type":"response.failed","response":{"status":"failed",'
                     b'"error":{"code":"server_error","message":"upstream stalled"}}}\n\n')
        else:
            event = b'data: {"error":{"message":"upstream stalled","type":"server_error","code":"server_error"}}\n\n'
        stalled.append(True)
        queue.put_nowait((time.monotonic_ns(), event))
        up_w.close()

    async def _ticker(self, last: list[int], queue: asyncio.Queue[tuple[int, bytes] | None]) -> None:
        """--keepalive-ms: a comment whenever the upstream was silent for keepalive_ns."""
        while True:
            left = last[0] + self.keepalive_ns - time.monotonic_ns()
            if left > 0:
                await asyncio.sleep(left / 1e9)
                continue
            last[0] = now = time.monotonic_ns()
            self.keepalives += 1
            queue.put_nowait((now, b": gw-keepalive\n\n"))

    async def _send(self, queue: asyncio.Queue[tuple[int, bytes] | None], writer: asyncio.StreamWriter) -> None:
        while (item := await queue.get()) is not None:
            due, data = item
            left = due - time.monotonic_ns()
            if left > 0 and self.timer is not None:
                await self.timer.until(due)
            elif left > 0:
                await asyncio.sleep(left / 1e9)
                while (left := due - time.monotonic_ns()) > 0:  # the loop's timers may fire early
                    await asyncio.sleep(left / 1e9)
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.late_ns.append(time.monotonic_ns() - due)
            await writer.drain()


async def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--delay-ms", type=float, default=0.0)
    ap.add_argument("--ready", type=Path, required=True)
    ap.add_argument("--stats", type=Path, required=True)
    ap.add_argument("--retry", action="store_true", help="retry once on 429 and 5xx")
    ap.add_argument("--answer-every", type=int, default=0, help="answer every Nth request 503 itself")
    ap.add_argument("--swap-at", type=int, default=-1, help="swap SSE events N and N+1 of every response")
    ap.add_argument("--keepalive-ms", type=float, default=0.0,
                    help="write a keepalive comment after this long without upstream bytes, and every as long")
    ap.add_argument("--hold", action="store_true",
                    help="hold the SSE events until the upstream body ends, then write them at once")
    ap.add_argument("--rewrite-at", type=int, default=-1, help="rewrite SSE event N's data")
    ap.add_argument("--hold-first-ms", type=float, default=0.0, help="hold the first SSE event this long")
    ap.add_argument("--swallow-errors", action="store_true", help="drop in-band error events")
    ap.add_argument("--precise", action="store_true",
                    help="time the held events with a timer thread (nanosecond sleep), not the loop's poll")
    ap.add_argument("--propagate-cancel", action="store_true", help="close the upstream when the client closes")
    ap.add_argument("--disconnect-error", action="store_true",
                    help="end a Messages stream whose upstream broke with an Anthropic error event")
    ap.add_argument("--stall-error-ms", type=float, default=0.0,
                    help="end a stream with an error event after this long without upstream bytes")
    a = ap.parse_args(argv)
    host, _, port = a.upstream.rpartition(":")
    proxy = Proxy((host, int(port)), int(a.delay_ms * 1e6), a.retry, a.answer_every, a.swap_at,
                  int(a.keepalive_ms * 1e6), a.hold, a.rewrite_at, int(a.hold_first_ms * 1e6), a.swallow_errors,
                  a.propagate_cancel, a.disconnect_error, int(a.stall_error_ms * 1e6))
    if a.precise:
        proxy.timer = _ThreadTimer(asyncio.get_running_loop())
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", a.port, backlog=1024)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    a.ready.write_text("ready")
    async with server:
        await stop.wait()
    a.stats.write_text(json.dumps({"late_ns": proxy.late_ns, "events": len(proxy.late_ns),
                                   "forward_ns": proxy.forward_ns, "keepalives": proxy.keepalives}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
