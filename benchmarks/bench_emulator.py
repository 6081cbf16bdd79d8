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
   the schedule, from the ground truth: each stream's worst lateness
   (``lag_max_ns``; p50/p99/max over streams) and every content delta's
   lateness (p50/p99 over all of them). With no token jitter a delta's
   lateness is exact: ``lag_max_ns - max(rel) + rel[i]``, where ``rel[i]`` is
   the sum of the first i gaps minus i periods. The streams' connections all
   open at once unless ``--ramp-s`` spreads them: a start-up burst makes the
   first deltas late, which the worst-per-stream figure shows and the
   per-delta one mostly does not.

Both report the emulator process's CPU (user + system, from /proc; Linux
only) over the drive, as a share of one core and, paced, per SSE event; paced
runs also report this client's CPU (it shares the machine with the emulator).
Counts come from the ground truth the emulator wrote, not from the client.

Reproduce (2-core machine, nothing else running):

    .venv/bin/python benchmarks/bench_emulator.py
    .venv/bin/python benchmarks/bench_emulator.py --unpaced 16,64,256 --paced 100,300,600
    .venv/bin/python benchmarks/bench_emulator.py --unpaced "" --paced 300,600 --tokens 300 --ramp-s 1
"""

from __future__ import annotations

import argparse
import json
import os
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


def _cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (None without /proc)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _connection(port: int, request: bytes, stop_at_s: float, once: bool,
                      counts: list[int], delay_s: float) -> None:
    await trio.sleep(delay_s)
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


async def _drive(port: int, concurrency: int, duration_s: float, once: bool,
                 ramp_s: float) -> tuple[int, float]:
    request = _request(port)
    counts = [0]
    t0 = trio.current_time()
    async with trio.open_nursery() as nursery:
        for k in range(concurrency):
            nursery.start_soon(_connection, port, request, t0 + duration_s, once, counts,
                               ramp_s * k / concurrency)
    return counts[0], trio.current_time() - t0


def _run(config: dict[str, object], concurrency: int, duration_s: float, once: bool,
         ramp_s: float = 0.0
         ) -> tuple[int, float, float | None, float, list[dict[str, object]]]:
    """One emulator, one drive.

    Returns:
        (streams, elapsed s, emulator CPU s or None, this client's CPU s, ground truth).
    """
    with tempfile.TemporaryDirectory() as tmp:
        record = Path(tmp) / "truth.jsonl"
        with EmbeddedEmulator(EmulatorConfig.from_mapping(config), record_path=record) as emu:
            port = int(emu.base_url.rsplit(":", 1)[1])
            cpu0_s, client0_s = _cpu_s(emu.pid), time.process_time()
            streams, elapsed_s = trio.run(_drive, port, concurrency, duration_s, once, ramp_s)
            cpu1_s, client_s = _cpu_s(emu.pid), time.process_time() - client0_s
        cpu_s = None if cpu0_s is None or cpu1_s is None else cpu1_s - cpu0_s
        return streams, elapsed_s, cpu_s, client_s, read_ground_truth(record)


def _delta_lateness_ms(truth: list[dict[str, object]], period_ns: int) -> list[float]:
    """Every content delta's lateness against its deadline, ms (exact without token jitter)."""
    out: list[float] = []
    for t in truth:
        rel, cum = [0], 0
        gaps_ns: list[int] = t["gaps_ns"]  # type: ignore[assignment]
        for i, gap in enumerate(gaps_ns, 1):
            cum += gap
            rel.append(cum - i * period_ns)
        first = int(t["lag_max_ns"]) - max(rel)  # type: ignore[call-overload]
        out.extend((first + r) / 1e6 for r in rel)
    return sorted(out)


def _pct(sorted_values: list[float], q: float) -> float:
    return sorted_values[int(q * (len(sorted_values) - 1))]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--unpaced", default="16,64,256", help="connection counts, unpaced runs")
    p.add_argument("--paced", default="100,300,600", help="concurrent streams, paced runs")
    p.add_argument("--tokens", type=int, default=64, help="content deltas per stream")
    p.add_argument("--rate", type=float, default=50.0, help="tokens/s per stream, paced runs")
    p.add_argument("--duration-s", type=float, default=5.0, help="length of an unpaced run")
    p.add_argument("--ramp-s", type=float, default=0.0,
                   help="paced runs: open the streams' connections evenly over this many seconds "
                        "(default 0: all at once)")
    args = p.parse_args()

    def cpu(cpu_s: float | None, elapsed_s: float) -> str:
        return "n/a" if cpu_s is None else f"{100 * cpu_s / elapsed_s:.0f} %"

    print(f"unpaced: think 0, ttft 0, tokens_per_s 0, {args.tokens} tokens/stream, "
          f"{args.duration_s:g} s per point")
    print(f"{'conns':>6} {'streams/s':>10} {'events/s':>10} {'completed':>10} {'emu CPU':>8}")
    for c in (int(x) for x in args.unpaced.split(",") if x):
        cfg = {"ttft_ms": 0, "tokens_per_s": 0, "output_tokens": args.tokens}
        streams, elapsed_s, cpu_s, _, truth = _run(cfg, c, args.duration_s, once=False)
        events = sum(int(t["events"]) for t in truth)  # type: ignore[call-overload]
        done = sum(1 for t in truth if t["end"] == "completed")
        print(f"{c:>6} {streams / elapsed_s:>10.0f} {events / elapsed_s:>10.0f} {done:>10} "
              f"{cpu(cpu_s, elapsed_s):>8}")

    print(f"\npaced: think 0, ttft spread over one gap, {args.rate:g} tokens/s/stream, "
          f"{args.tokens} tokens/stream, one stream per connection, connections opened over "
          f"{args.ramp_s:g} s")
    print("lateness in ms: 'delta' over every content delta, 'worst' over each stream's worst delta")
    print(f"{'streams':>8} {'events/s':>9} {'emu CPU':>8} {'us/event':>9} {'client CPU':>10} "
          f"{'delta p50':>10} {'delta p99':>10} {'worst p50':>10} {'worst p99':>10} "
          f"{'worst max':>10}")
    period_ns = round(1e9 / args.rate)
    for c in (int(x) for x in args.paced.split(",") if x):
        # starts spread over one gap (uniform TTFT), as arrivals would be
        cfg = {"ttft_ms": 500 / args.rate, "ttft_jitter_ms": 500 / args.rate,
               "tokens_per_s": args.rate, "output_tokens": args.tokens,
               "keepalive_interval_s": 0}
        _, elapsed_s, cpu_s, client_s, truth = _run(cfg, c, 0, once=True, ramp_s=args.ramp_s)
        events = sum(int(t["events"]) for t in truth)  # type: ignore[call-overload]
        lags = sorted(int(t["lag_max_ns"]) / 1e6 for t in truth)  # type: ignore[call-overload]
        deltas = _delta_lateness_ms(truth, period_ns)
        rate = events / elapsed_s  # delivered, over first connect to last close
        per_event = "n/a" if cpu_s is None else f"{1e6 * cpu_s / events:.1f}"
        print(f"{c:>8} {rate:>9.0f} {cpu(cpu_s, elapsed_s):>8} {per_event:>9} "
              f"{cpu(client_s, elapsed_s):>10} {_pct(deltas, 0.5):>10.2f} {_pct(deltas, 0.99):>10.2f} "
              f"{statistics.median(lags):>10.2f} {_pct(lags, 0.99):>10.2f} {max(lags):>10.2f}")
    return 0


if __name__ == "__main__":
    start = time.monotonic()
    status = main()
    print(f"\n(total {time.monotonic() - start:.0f} s)")
    raise SystemExit(status)
