"""How much one emulator process sustains (tracker issue 4: the emulator must not limit a run).

Starts the emulator as hopbench's embedded target does (a child process, ground
truth recorded), then drives it from this process with a deliberately lean
client: raw trio sockets, keep-alive HTTP/1.1, a pre-built request, the body
read until the chunked terminator. Two measurements:

1. unpaced: zero think time, zero TTFT, no pacing (``tokens_per_s = 0``),
   ``--tokens`` deltas per stream, ``C`` connections each sending requests
   back to back for ``--duration-s``: completed streams/s and SSE events/s.
2. paced: ``tokens_per_s = --rate`` with ``C`` concurrent streams; reports the
   events/s delivered and how late the emulator's own hand-offs were against
   the schedule (p50/p99/max of |gap - 1/rate| from the ground truth). A
   sustainable concurrency keeps p99 within ~1 ms.

Counts come from the ground truth the emulator wrote, not from the client.

Reproduce (2-core machine, nothing else running):

    .venv/bin/python benchmarks/bench_emulator.py
    .venv/bin/python benchmarks/bench_emulator.py --unpaced 16,64,256 --paced 100,300,600
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hopbench.emulator import EmbeddedEmulator, EmulatorConfig, read_ground_truth  # noqa: E402


def _request(port: int) -> bytes:
    body = json.dumps({"model": "bench", "stream": True, "max_tokens": 4096,
                       "messages": [{"role": "user", "content": "benchmark the emulator"}]})
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}"
            ).encode()


async def _connection(port: int, request: bytes, stop_at_s: float, once: bool,
                      counts: list[int]) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        while True:
            await stream.send_all(request)
            tail = b""
            while True:
                data = await stream.receive_some(65536)
                if not data:
                    return
                tail = (tail + data)[-16:]
                if tail.endswith(b"\r\n0\r\n\r\n"):
                    break
            counts[0] += 1
            if once or trio.current_time() >= stop_at_s:
                return


async def _drive(port: int, concurrency: int, duration_s: float, once: bool) -> tuple[int, float]:
    request = _request(port)
    counts = [0]
    t0 = trio.current_time()
    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(_connection, port, request, t0 + duration_s, once, counts)
    return counts[0], trio.current_time() - t0


def _run(config: dict[str, object], concurrency: int, duration_s: float, once: bool
         ) -> tuple[int, float, list[dict[str, object]]]:
    with tempfile.TemporaryDirectory() as tmp:
        record = Path(tmp) / "truth.jsonl"
        with EmbeddedEmulator(EmulatorConfig.from_mapping(config), record_path=record) as emu:
            port = int(emu.base_url.rsplit(":", 1)[1])
            streams, elapsed_s = trio.run(_drive, port, concurrency, duration_s, once)
        return streams, elapsed_s, read_ground_truth(record)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--unpaced", default="16,64,256", help="connection counts, unpaced runs")
    p.add_argument("--paced", default="100,300,600", help="concurrent streams, paced runs")
    p.add_argument("--tokens", type=int, default=64, help="content deltas per stream")
    p.add_argument("--rate", type=float, default=50.0, help="tokens/s per stream, paced runs")
    p.add_argument("--duration-s", type=float, default=5.0, help="length of an unpaced run")
    args = p.parse_args()

    print(f"unpaced: think 0, ttft 0, tokens_per_s 0, {args.tokens} tokens/stream, "
          f"{args.duration_s:g} s per point")
    print(f"{'conns':>6} {'streams/s':>10} {'events/s':>10} {'completed':>10}")
    for c in (int(x) for x in args.unpaced.split(",") if x):
        cfg = {"ttft_ms": 0, "tokens_per_s": 0, "output_tokens": args.tokens}
        streams, elapsed_s, truth = _run(cfg, c, args.duration_s, once=False)
        events = sum(int(t["events"]) for t in truth)  # type: ignore[call-overload]
        done = sum(1 for t in truth if t["end"] == "completed")
        print(f"{c:>6} {streams / elapsed_s:>10.0f} {events / elapsed_s:>10.0f} {done:>10}")

    print(f"\npaced: think 0, ttft spread over one gap, {args.rate:g} tokens/s/stream, {args.tokens} tokens/stream, "
          "one stream per connection")
    print(f"{'streams':>8} {'events/s':>10} {'worst lag per stream, ms: p50':>30} {'p99':>8} "
          f"{'max':>8}")
    for c in (int(x) for x in args.paced.split(",") if x):
        # starts spread over one gap (uniform TTFT), as arrivals would be
        cfg = {"ttft_ms": 500 / args.rate, "ttft_jitter_ms": 500 / args.rate,
               "tokens_per_s": args.rate, "output_tokens": args.tokens,
               "keepalive_interval_s": 0}
        _, elapsed_s, truth = _run(cfg, c, 0, once=True)
        events = sum(int(t["events"]) for t in truth)  # type: ignore[call-overload]
        lags = sorted(int(t["lag_max_ns"]) / 1e6 for t in truth)  # type: ignore[call-overload]
        p99 = lags[int(0.99 * (len(lags) - 1))]
        rate = events / elapsed_s  # delivered, over first connect to last close
        print(f"{c:>8} {rate:>10.0f} {statistics.median(lags):>30.2f} "
              f"{p99:>8.2f} {max(lags):>8.2f}")
    return 0


if __name__ == "__main__":
    start = time.monotonic()
    status = main()
    print(f"\n(total {time.monotonic() - start:.0f} s)")
    raise SystemExit(status)
