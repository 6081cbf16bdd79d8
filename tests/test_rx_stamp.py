"""The emulator's request receive stamps from the kernel (hopbench/emulator/_rx_stamp.py).

The emulator's "request received" is when the request's bytes reached its socket, not
when its app ran (docs/gateway-overhead.md, "Times from the wire at the upstream"). These
tests run the real server (uvicorn under asyncio and under uvloop, the seam
``_serve.WireStampedProtocol`` with the installed uvicorn) on 127.0.0.1 and check each
ground-truth line by causality alone: the client's clock read before its write <= the
wire stamp <= the app's stamp (each within the stamp's own recorded error), never by a
wall-clock threshold.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from hopbench.emulator import EmulatorConfig, read_ground_truth
from hopbench.emulator import _rx_stamp
from hopbench.emulator._serve import serve

needs_stamps = pytest.mark.skipif(not _rx_stamp.ANC_SIZE, reason="needs the kernel's receive stamps (Linux)")
FAST = {"ttft_ms": 0, "tokens_per_s": 0, "output_tokens": 3}
LOOPS = ["asyncio", "uvloop"]


def _request(rid: str, content: str = "hi", stream: bool = True) -> bytes:
    body = json.dumps({"model": "m", "stream": stream, "max_tokens": 3,
                       "messages": [{"role": "user", "content": content}]}).encode()
    return (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"x-hopbench-request-id: " + rid.encode() + b"\r\ncontent-length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body)


async def _answer(reader: asyncio.StreamReader) -> bytes:
    """One chunked response, read to its last chunk."""
    data = b""
    while not data.endswith(b"0\r\n\r\n"):
        more = await reader.read(65536)
        assert more, data
        data += more
    return data


def _run(loop: str, main: Callable[[], Awaitable[Any]]) -> Any:
    if loop == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main())
    return asyncio.run(main())


def _serve_and(record: Path, client: Callable[[str, int], Awaitable[dict[str, int]]]) -> Callable[[], Awaitable[dict[str, int]]]:
    async def main() -> dict[str, int]:
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            url = await tg.start(partial(serve, EmulatorConfig.from_mapping(FAST), port=0,
                                         record_path=record, shutdown_trigger=stop.wait))
            host, port = url.removeprefix("http://").rsplit(":", 1)
            try:
                return await client(host, int(port))
            finally:
                stop.set()
        raise AssertionError("unreachable")
    return main


async def _exchanges(host: str, port: int) -> dict[str, int]:
    """Requests as a gateway sends them; returns request id -> CLOCK_MONOTONIC ns before its write."""
    sent: dict[str, int] = {}
    for i in range(3):  # a new connection per request, written at once (data waits before the accept)
        r, w = await asyncio.open_connection(host, port)
        sent[f"new-{i}"] = time.monotonic_ns()
        w.write(_request(f"new-{i}"))
        await _answer(r)
        w.close()
    r, w = await asyncio.open_connection(host, port)  # a connection opened ahead, then kept alive
    await asyncio.sleep(0.05)
    for i in range(3):
        sent[f"kept-{i}"] = time.monotonic_ns()
        w.write(_request(f"kept-{i}"))
        await _answer(r)
        await asyncio.sleep(0.01)
    # a body past uvicorn's flow-control mark (64 KiB): it pauses and resumes the reader
    sent["big"] = time.monotonic_ns()
    w.write(_request("big", "x" * 300_000))
    await _answer(r)
    # two pipelined requests in one write: uvicorn queues the second (and pauses reading)
    sent["pipe-0"] = sent["pipe-1"] = time.monotonic_ns()
    w.write(_request("pipe-0") + _request("pipe-1", stream=False))
    data = await _answer(r)
    while data.count(b"HTTP/1.1 200") < 2:
        data += await r.read(65536)
    w.close()
    return sent


@needs_stamps
@pytest.mark.parametrize("loop", LOOPS)
def test_rx_stamp_every_request_is_stamped_when_its_bytes_reached_the_socket(loop: str, tmp_path: Path) -> None:
    record = tmp_path / "gt.jsonl"
    sent = _run(loop, _serve_and(record, _exchanges))
    lines = {x["request_id"]: x for x in read_ground_truth(record)}
    assert set(lines) == set(sent)
    for rid, before_ns in sent.items():
        x = lines[rid]
        assert x["status"] == 200 and x["end"] == "completed", x
        wire, err, app = x["t0_wire_mono_ns"], x["t0_wire_error_ns"], x["t0_mono_ns"]
        assert isinstance(wire, int) and isinstance(err, int) and err >= 0, (rid, x)
        # causality: sent (read before the write) <= arrived <= the app ran, within the stamp's error
        assert before_ns - err <= wire <= app + err, (rid, before_ns, wire, app, err)


@pytest.mark.parametrize("loop", LOOPS)
def test_rx_stamp_without_kernel_stamps_the_emulator_serves_as_before(
        loop: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No SO_TIMESTAMPNS (TLS, another platform): the transport reads, the request has no wire
    stamp, and gateway overhead counts the fallback (test_overhead.py)."""
    monkeypatch.setattr(_rx_stamp, "ANC_SIZE", 0)
    record = tmp_path / "gt.jsonl"
    sent = _run(loop, _serve_and(record, _exchanges))
    lines = read_ground_truth(record)
    assert len(lines) == len(sent)
    assert all(x["status"] == 200 and x["t0_wire_mono_ns"] is None and x["t0_wire_error_ns"] is None
               for x in lines)


@needs_stamps
@pytest.mark.parametrize("loop", LOOPS)
def test_rx_stamp_a_client_that_leaves_mid_stream_is_noticed(loop: str, tmp_path: Path) -> None:
    """The reader, not the transport, sees the client's end of stream: it must close the
    connection as the transport would, so the app hears http.disconnect."""
    record = tmp_path / "gt.jsonl"
    slow = {"ttft_ms": 0, "tokens_per_s": 20, "output_tokens": 200}

    async def main() -> None:
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            url = await tg.start(partial(serve, EmulatorConfig.from_mapping(slow), port=0,
                                         record_path=record, shutdown_trigger=stop.wait))
            host, port = url.removeprefix("http://").rsplit(":", 1)
            r, w = await asyncio.open_connection(host, int(port))
            w.write(_request("gone"))
            assert (await r.read(65536)).startswith(b"HTTP/1.1 200")
            w.close()
            await w.wait_closed()
            for _ in range(500):  # until the emulator wrote its line (it stops the stream at once)
                if record.exists() and record.read_text():
                    break
                await asyncio.sleep(0.01)
            stop.set()

    _run(loop, main)
    (x,) = read_ground_truth(record)
    assert x["end"] == "client_closed" and x["output_tokens_sent"] < 200
    assert isinstance(x["t0_wire_mono_ns"], int)


def test_rx_stamp_realtime_moves_to_monotonic_within_its_error() -> None:
    before = time.monotonic_ns()
    mono, err = _rx_stamp.realtime_to_monotonic(time.time_ns())
    after = time.monotonic_ns()
    assert err >= 0
    assert before - err <= mono <= after + err


def test_rx_stamp_stamp_of_reads_the_timespec_or_none() -> None:
    if _rx_stamp.SCM_TIMESTAMPNS is None:
        pytest.skip("no SO_TIMESTAMPNS here")
    import socket

    raw = _rx_stamp.TIMESPEC.pack(12, 345)
    assert _rx_stamp.stamp_of([(socket.SOL_SOCKET, _rx_stamp.SCM_TIMESTAMPNS, raw)]) == 12_000_000_345
    assert _rx_stamp.stamp_of([]) is None
    assert _rx_stamp.stamp_of([(socket.SOL_SOCKET, _rx_stamp.SCM_TIMESTAMPNS, b"\0" * 8)]) is None
