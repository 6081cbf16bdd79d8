"""The runner hands the meter what it needs: request usage flag, response headers,
terminal stamps (in-process trio servers on 127.0.0.1; no wall-clock thresholds:
every bound below is one the server itself guarantees by sleeping)."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing

from hopbench.config._profile import parse_profile
from hopbench.measure._recorder import ALL, Recorder, Snapshot
from hopbench._clock import monotonic_offset_ns
from hopbench.engine._runner import LoadRunner
from hopbench.engine._transport import _ANC_SIZE

_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _chat(delta: str, finish: str | None = None) -> bytes:
    f = "null" if finish is None else f'"{finish}"'
    return (f'data: {{"id":"c","object":"chat.completion.chunk","choices":[{{"index":0,"delta":{delta},'
            f'"finish_reason":{f}}}]}}\n\n').encode()


Body = Callable[[trio.SocketStream], Awaitable[None]]


async def _run(body: Body, *, requests: int = 2, concurrency: int = 1, extra_run: str = "",
               scenario: str = "", during: Callable[[LoadRunner], Awaitable[None]] | None = None,
               target: str = "") -> tuple[Snapshot, list[dict[str, Any]]]:
    """Serve every request with ``body`` (after reading the request) and run the profile
    (``during``: a task beside the run, given its runner; ``target``: more ``[target]`` keys)."""

    async def handler(stream: trio.SocketStream) -> None:
        try:
            await stream.receive_some(65536)
            await body(stream)
        except trio.BrokenResourceError:
            pass
        finally:
            await stream.aclose()

    lines: list[dict[str, Any]] = []
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
        url = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        profile = parse_profile(
            f'[run]\nrequests = {requests}\n{extra_run}\n[run.timeouts]\nidle_s = 20\n'
            f'[load]\nconcurrency = {concurrency}\n[target]\nurl = "{url}"\n{target}\n'
            f'[[scenario]]\nprotocol = "chat"\nmodel = "m"\n{scenario}\n', "p.toml", env={})
        rec = Recorder(["chat-m"])
        runner = LoadRunner(profile, url, rec, Recorder(["chat-m"]), on_stream=lines.append)
        if during is not None:
            nursery.start_soon(during, runner)
        with trio.fail_after(30):
            await runner.run()
        nursery.cancel_scope.cancel()
    return rec.snapshot(), lines


async def _cut_after_finish(stream: trio.SocketStream) -> None:
    await stream.send_all(_HEAD + b"\r\n" + _chunk(_chat('{"content":"hi"}', "stop")) + b"0\r\n\r\n")


async def test_runner_usage_requested_by_the_body_makes_a_cut_after_finish_truncated() -> None:
    snap, lines = await _run(_cut_after_finish)  # include_usage defaults to true for chat
    assert snap.counter(ALL, "truncated.usage_missing") == 2
    assert {x["detail"] for x in lines} == {"usage_missing"}


async def test_runner_without_a_usage_request_a_cut_after_finish_completes_counted_no_done() -> None:
    snap, lines = await _run(_cut_after_finish, scenario="include_usage = false")
    assert (snap.counter(ALL, "completed"), snap.counter(ALL, "no_done")) == (2, 2)
    assert snap.counter(ALL, "tokens_source.events") == 2 and lines[0]["tokens_source"] == "events"


async def test_runner_records_the_named_response_headers_never_others() -> None:
    async def body(stream: trio.SocketStream) -> None:
        head = _HEAD + b"x-litellm-attempted-retries: 1\r\nx-other: secret-ish\r\n\r\n"
        await stream.send_all(head + _chunk(_chat('{"content":"hi"}', "stop") + b"data: [DONE]\n\n")
                              + b"0\r\n\r\n")

    snap, lines = await _run(body, extra_run='record_headers = ["X-LiteLLM-Attempted-Retries"]')
    assert snap.counter(ALL, "header.x-litellm-attempted-retries=1") == 2
    assert [x["headers"] for x in lines] == [{"x-litellm-attempted-retries": "1"}] * 2
    assert not any(k.startswith("header.x-other") for k in snap.scopes[ALL].counters)


async def test_runner_e2e_ends_at_the_terminal_event_and_the_rest_is_tail() -> None:
    hold_s = 0.3

    async def body(stream: trio.SocketStream) -> None:
        await stream.send_all(_HEAD + b"\r\n" + _chunk(_chat('{"content":"hi"}', "stop") + b"data: [DONE]\n\n"))
        await trio.sleep(hold_s)  # a gateway holding the connection after the answer
        await stream.send_all(b"0\r\n\r\n")

    snap, lines = await _run(body)
    for x in lines:
        assert x["outcome"] == "completed" and x["terminal_ns"] is not None
        # the hold is all tail, less how late a busy loop read the terminal event
        # (a few ms on a loaded machine): half of it is far above an e2e to the body's end
        assert x["tail_ns"] == x["end_ns"] - x["terminal_ns"] >= hold_s * 1e9 / 2
        assert x["e2e_ns"] == x["terminal_ns"] - x["start_ns"]  # not the body's end
    assert snap.histogram(ALL, "tail").count == 2 and snap.histogram(ALL, "e2e").count == 2
    assert snap.histogram(ALL, "e2e").max < snap.histogram(ALL, "tail").min


async def test_runner_sixteen_queued_streams_with_one_ping_each_record_keepalive_intervals() -> None:
    async def body(stream: trio.SocketStream) -> None:
        await stream.send_all(_HEAD + b"\r\n")
        await trio.sleep(0.05)  # waiting in a queue
        await stream.send_all(_chunk(b": ping\n\n"))
        await trio.sleep(0.05)
        await stream.send_all(_chunk(_chat('{"content":"hi"}', "stop") + b"data: [DONE]\n\n") + b"0\r\n\r\n")

    snap, _ = await _run(body, requests=16, concurrency=16)
    assert snap.counter(ALL, "keepalives") == 16
    # headers -> ping and ping -> the next event, per stream (before: no interval at all)
    assert snap.histogram(ALL, "keepalive_interval").count == 32


class _FastHandler(socketserver.BaseRequestHandler):
    """A server thread (not the client's loop, which the test blocks): headers,
    20 ms, then 8 events 3 ms apart, each its own write, then [DONE]. A client
    that keeps up reads them one by one; one whose loop is blocked finds them
    piled up in its socket and reads them at once.

    ``overshoots`` gets, per stream, this thread's own worst lateness (ns) against
    its schedule: on a busy machine the server too is descheduled, and events it
    wrote late arrive bunched as from a buffering proxy (no client can tell)."""

    overshoots: list[int] = []

    def handle(self) -> None:
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.request.recv(65536)
        self.request.sendall(_HEAD + b"\r\n")
        due = time.monotonic_ns() + 20_000_000
        worst = 0
        time.sleep(0.02)
        for _ in range(8):
            worst = max(worst, time.monotonic_ns() - due)
            self.request.sendall(_chunk(_chat('{"content":"x"}')))
            due += 3_000_000
            time.sleep(0.003)
        self.request.sendall(_chunk(_chat("{}", "stop") + b"data: [DONE]\n\n") + b"0\r\n\r\n")
        self.overshoots.append(worst)


def _server_thread(handler: type[socketserver.BaseRequestHandler]) -> socketserver.ThreadingTCPServer:
    """``handler`` served by threads on 127.0.0.1 (not the client's loop, which a test may block)."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _threaded_profile(server: socketserver.ThreadingTCPServer, *, requests: int,
                      concurrency: int) -> tuple[Any, Recorder, list[dict[str, Any]]]:
    """A chat profile against ``server`` (no usage asked), its recorder and a list for its lines."""
    url = f"http://127.0.0.1:{server.server_address[1]}"
    profile = parse_profile(f'[run]\nrequests = {requests}\n[load]\nconcurrency = {concurrency}\n[target]\n'
                            f'url = "{url}"\n[[scenario]]\nprotocol = "chat"\nmodel = "m"\ninclude_usage = false\n',
                            "p.toml", env={})
    return profile, Recorder(["chat-m"]), []


async def test_runner_burst_behind_a_lagging_client_loop_is_not_proxy_buffering() -> None:
    _FastHandler.overshoots = []
    server = _server_thread(_FastHandler)
    try:
        profile, rec, lines = _threaded_profile(server, requests=8, concurrency=2)
        url = profile.target.url

        async def hog() -> None:  # a client whose loop is blocked 60 ms at a time
            while True:
                time.sleep(0.06)
                await trio.sleep(0)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(hog)
            with trio.fail_after(60):
                await LoadRunner(profile, url, rec, Recorder(["chat-m"]), on_stream=lines.append).run()
            nursery.cancel_scope.cancel()
    finally:
        server.shutdown()
        server.server_close()
    snap = rec.snapshot()
    assert snap.counter(ALL, "completed") == 8
    # no proxy: no flag, but on a stream the server itself wrote late (descheduled >= 10 ms
    # on a busy machine: its events arrive bunched as from a buffering proxy, which no
    # client can tell apart). The client's own lateness never makes one: a read's client
    # lag is the largest of its kernel stamp's lateness, the loop-lag probe's and the loop
    # thread's run-queue wait (docs/results/in-flight.md, "Client lag per read").
    held_by_the_server = sum(o >= 10_000_000 for o in _FastHandler.overshoots)
    flagged = snap.counter(ALL, "proxy_buffering_suspected")
    print(f"flagged {flagged}, client_lagged {snap.counter(ALL, 'client_lagged')}, "
          f"held by the server {held_by_the_server}")
    assert flagged <= held_by_the_server, (flagged, _FastHandler.overshoots)
    assert snap.counter(ALL, "client_lagged") >= 1  # the bursts were seen, and blamed on the client
    assert max(x["client_lag_ns"] for x in lines) > 0


# -- the runner hands the meter the wire stamps (hopbench's transport, kernel stamps) -----------------

class _PacedHandler(socketserver.BaseRequestHandler):
    """A server thread (not the client's loop, which the test blocks): the head, then 6
    events 15 ms apart, each its own write, then [DONE]. ``done`` gets, per stream, the
    host's monotonic clock just before and just after it handed [DONE] to the kernel (ns):
    on loopback its bytes reach the client's socket in between."""

    done: list[tuple[int, int]] = []

    def handle(self) -> None:
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.request.recv(65536)
        self.request.sendall(_HEAD + b"\r\n")
        for _ in range(6):
            time.sleep(0.015)
            self.request.sendall(_chunk(_chat('{"content":"x"}')))
        before = time.monotonic_ns()
        self.request.sendall(_chunk(b"data: [DONE]\n\n"))
        self.done.append((before, time.monotonic_ns()))
        self.request.sendall(b"0\r\n\r\n")


async def test_runner_stamps_events_when_they_reached_the_socket_not_when_a_late_loop_read_them() -> None:
    """The client's loop is blocked 40 ms at a time: it reads the events late and several at
    once. The answer's end is [DONE]'s kernel receive stamp: on the host's monotonic clock it
    lies between the server's stamps around its write (2 ms allowed for the two clocks'
    conversion), while the read of [DONE] came up to 40 ms later; earlier events of a read
    are counted bounded, the client's lateness is client_read_lag (docs/results/units.md,
    "Times from the wire")."""
    _PacedHandler.done = []
    server = _server_thread(_PacedHandler)
    try:
        profile, rec, lines = _threaded_profile(server, requests=6, concurrency=1)
        url = profile.target.url

        async def hog() -> None:
            while True:
                time.sleep(0.04)
                await trio.sleep(0.001)

        runner = LoadRunner(profile, url, rec, Recorder(["chat-m"]), on_stream=lines.append)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(hog)
            with trio.fail_after(60):
                await runner.run()
            nursery.cancel_scope.cancel()
            to_monotonic = monotonic_offset_ns() + runner._t0
    finally:
        server.shutdown()
        server.server_close()
    snap = rec.snapshot()
    assert snap.counter(ALL, "completed") == 6 and len(_PacedHandler.done) == 6
    if not _ANC_SIZE:
        pytest.skip("no kernel receive stamps on this platform: nothing to check against the wire")
    assert snap.counter(ALL, "wire.items_exact") > 0
    ends = [x["start_ns"] + x["e2e_ns"] + to_monotonic for x in sorted(lines, key=lambda x: x["start_ns"])]
    off = [(end - before) / 1e6 if end < before else max(end - after, 0) / 1e6
           for end, (before, after) in zip(ends, _PacedHandler.done)]
    late = [(x["end_ns"] - x["start_ns"] - x["e2e_ns"]) / 1e6 for x in lines]  # the client's close
    print("answer end outside the server's write (ms):", off, "the close came later by (ms):", late)
    # (2 ms: the transport moves a kernel stamp to its clock with two clock reads, and a preemption
    # between them shifts it, as in test_transport: 1.21 ms seen beside a packet capture.
    # TODO: record that move's measured error in the transport and allow exactly it.)
    assert all(abs(o) <= 2.0 for o in off), off
    assert snap.counter(ALL, "wire.items_bounded") > 0  # reads that carried several events
    assert snap.histogram(ALL, "client_read_lag").max >= 20_000_000


# -- a stream the run cancels mid-body keeps what it decoded -----------------------------------------

async def test_runner_stream_cancelled_mid_body_keeps_its_decoded_events() -> None:
    """The run's stop cancels a stream after 3 content events (``run.grace_s = 0``: the path
    of a second SIGINT and of an expired grace period): its record keeps the 3 events the
    decoder made of the body, not 0 (issue 39's follow-up: a broken stream's output read 0)."""
    sent = trio.Event()

    async def body(stream: trio.SocketStream) -> None:
        await stream.send_all(_HEAD + b"\r\n" + b"".join(_chunk(_chat('{"content":"x"}')) for _ in range(3)))
        sent.set()
        await trio.sleep_forever()

    async def stop_when_read(runner: LoadRunner) -> None:
        await sent.wait()
        # every task blocked (after trio's own poll of the sockets): the client has read them
        await trio.testing.wait_all_tasks_blocked()
        runner.request_stop("SIGINT")

    _, lines = await _run(body, requests=1, extra_run="grace_s = 0", during=stop_when_read)
    [line] = lines
    assert line["outcome"] == "cancelled"
    assert line["first_token_ns"] is not None
    assert (line["content_events"], line["output_events"]) == (3, 3)


async def test_runner_stream_lines_mark_the_warmup_streams() -> None:
    """streams.jsonl's ``warmup``: true for a stream that started in ``run.warmup_s`` (the
    warm-up recorder's), false after it; export carries it (issue 39 follow-up)."""
    _, warm = await _run(_cut_after_finish, extra_run="warmup_s = 3600")
    _, measured = await _run(_cut_after_finish)
    assert [x["warmup"] for x in warm] == [True, True]
    assert [x["warmup"] for x in measured] == [False, False]


class _OneWriteHandler(socketserver.BaseRequestHandler):
    """``tokens_per_s = 0``: the head, 250 ms of silence, then the whole answer (4 events and
    [DONE]) in one write. ``wrote`` gets, per stream, the host's monotonic clock just before
    and just after that write (ns): on loopback its bytes reach the client's socket in between."""

    wrote: list[tuple[int, int]] = []

    def handle(self) -> None:
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.request.recv(65536)
        self.request.sendall(_HEAD + b"\r\n")
        time.sleep(0.25)
        answer = b"".join(_chat('{"content":"x"}') for _ in range(4)) + _chat("{}", "stop") + b"data: [DONE]\n\n"
        before = time.monotonic_ns()
        self.request.sendall(_chunk(answer) + b"0\r\n\r\n")
        self.wrote.append((before, time.monotonic_ns()))


class _BoundLog(Recorder):
    """A recorder that also keeps every bounded sample it is given: (metric, value, below)."""

    def __init__(self, scopes: list[str]) -> None:
        super().__init__(scopes)
        self.got: list[tuple[str, int, int]] = []

    def record_bound(self, scope: str, metric: str, value: int, below: int, above: int) -> None:
        self.got.append((metric, value, below))
        super().record_bound(scope, metric, value, below, above)


async def test_runner_a_read_that_waited_bounds_its_earlier_events_by_the_loop_turn() -> None:
    """Issue 36: the whole answer in one write, 250 ms after the head. Its first token is not
    the read's last bytes, so it is bounded; the read waited for the answer, so its bytes
    arrived after the loop turn before the one that woke it, not merely after the head's stamp:
    the bound is far under the 250 ms silence (the loop turns every 10 ms at most: the lag
    probe; a loop turn of a loaded machine was seen at 75 ms) and still true: the lower end lies before the server's write ended (1 ms allowed for
    the two clocks' conversion, as above), never before the head's stamp."""
    _OneWriteHandler.wrote = []
    server = _server_thread(_OneWriteHandler)
    try:
        profile, _, lines = _threaded_profile(server, requests=3, concurrency=1)
        rec = _BoundLog(["chat-m"])
        runner = LoadRunner(profile, profile.target.url, rec, Recorder(["chat-m"]), on_stream=lines.append)
        with trio.fail_after(60):
            await runner.run()
        to_monotonic = monotonic_offset_ns() + runner._t0
    finally:
        server.shutdown()
        server.server_close()
    assert rec.snapshot().counter(ALL, "completed") == 3 and len(_OneWriteHandler.wrote) == 3
    if not _ANC_SIZE:
        pytest.skip("no kernel receive stamps on this platform: nothing to check against the wire")
    below = {value: b for metric, value, b in rec.got if metric == "ttft"}
    shrunk = 0
    for x, (_, after) in zip(sorted(lines, key=lambda x: x["start_ns"]), _OneWriteHandler.wrote):
        b = below.get(x["ttft_ns"], 0)
        stamp, head = x["first_token_ns"] + to_monotonic, x["headers_ns"] + to_monotonic
        assert stamp - b <= after + 1_000_000, (stamp - b - after, b)  # a true bound
        assert stamp - b >= head  # never wider than the old one
        shrunk += b < (stamp - head) // 2
    assert shrunk >= 1  # (before: every bound was the whole silence since the head)


@pytest.mark.parametrize("transport", ["hopbench", "httpx"])
async def test_runner_writes_when_each_requests_last_byte_went_out(transport: str) -> None:
    """streams.jsonl's ``request_sent_ns`` / ``request_sent_bound_ns`` (docs/results/files.md):
    stamps around the write that completed the request, with either transport (httpx's: its
    trace's ``send_request_body`` events): after the stream's send stamp (a connect and the
    request's build come between), before the response head and, on hopbench's transport (one
    write), before the server read the request (the "before" stamp). TTFT still counts from
    ``sent_ns``."""
    from hopbench._clock import now_ns

    read_at: list[int] = []
    runners: list[LoadRunner] = []

    async def body(stream: trio.SocketStream) -> None:  # (called once the request was read)
        read_at.append(now_ns())
        await stream.send_all(_HEAD + b"\r\n" + _chunk(_chat('{"content":"hi"}', "stop"))
                              + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")

    async def during(runner: LoadRunner) -> None:
        runners.append(runner)

    _, lines = await _run(body, requests=3, scenario="include_usage = false", during=during,
                          target=f'transport = "{transport}"')
    t0 = runners[0]._t0
    assert len(lines) == 3 and len(read_at) == 3
    for x, read in zip(lines, read_at):
        assert x["outcome"] == "completed", x
        bound = x["request_sent_bound_ns"]
        assert bound >= 0 and x["sent_ns"] <= x["request_sent_ns"] - bound <= x["request_sent_ns"]
        assert x["request_sent_ns"] <= x["headers_ns"]
        if transport == "hopbench":  # head and body in one write (httpx's body follows its head:
            assert x["request_sent_ns"] - bound <= read - t0  # the server's one read may hold the head only)
        assert x["ttft_ns"] == x["first_token_ns"] - x["start_ns"]  # TTFT's start is not moved
