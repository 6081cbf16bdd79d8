"""Trace replay schedule lag at a high request rate on one worker (issue 17 item 4).

Writes a synthetic trace (constant gaps of 1000 / --rps ms, --seconds of it;
prompts of 64 tokens of which the first block is shared by every request, 4
output tokens) and a profile replaying it once against the embedded emulator
(unpaced, TTFT 0, no keepalives: the target stays cheap), then runs it with
``hopbench run`` in one process and prints what summary.json says about the
schedule: ``load.schedule_lag_p99_ms`` (how late the client woke for each
scheduled request, p99), the full schedule_lag histogram, requested vs
achieved rate, the client's CPU and loop lag, and whether the run called
itself saturated. Repeat with --repeat to see the spread.

    .venv/bin/python benchmarks/bench_trace.py                  # 1,000 requests/s for 10 s
    .venv/bin/python benchmarks/bench_trace.py --rps 2000 --seconds 5 --repeat 3
    .venv/bin/python benchmarks/bench_trace.py --in-memory      # the client alone (no emulator)
    .venv/bin/python benchmarks/bench_trace.py --in-memory --rate --repeat 3   # and the same open loop

``--in-memory`` runs the replay in this process against an in-memory target
(an httpx transport that answers every request at once with a 4-token chat
stream, reporting the same phases as hopbench's transport): the schedule lag
is then the replay engine's own (scheduling, building each body from the
trace's blocks, the streams' decoding and recording), without an emulator
process competing for the cores.

The emulator runs in its own process on the same machine: on a 2-core
machine it takes most of one core at 1,000 streams/s, so the figures also
show how well two busy processes share two cores.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write_case(folder: Path, rps: float, seconds: float) -> Path:
    """The trace and its profile in ``folder``; returns the profile's path."""
    n = int(rps * seconds)
    with (folder / "trace.jsonl").open("w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({"timestamp_ms": round(i * 1000.0 / rps, 3), "input_tokens": 64,
                                "output_tokens": 4, "hash_ids": [0, 1000 + i]}) + "\n")
    prof = folder / "bench-trace.toml"
    prof.write_text(f"""[run]
name = "bench-trace"
stream_log = false

[load]
mode = "trace"
trace = "trace.jsonl"
block_tokens = 32
max_in_flight = 10000

[target]
embedded = true

[emulator]
ttft_ms = 0
tokens_per_s = 0
output_tokens = 4
keepalive_interval_s = 0

[[scenario]]
protocol = "chat"
model = "m"
extra = {{ ignore_eos = true }}
""", encoding="utf-8")
    return prof


_CHUNK = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":'
          b'[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n')
_LAST = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":'
         b'[{"index":0,"delta":{},"finish_reason":"stop"}],'
         b'"usage":{"prompt_tokens":64,"completion_tokens":4,"total_tokens":68}}\n\ndata: [DONE]\n\n')


def write_rate_case(folder: Path, rps: float, seconds: float) -> Path:
    """The same load as an open loop (``mode = "rate"``, constant arrivals), for comparison."""
    prof = folder / "bench-rate.toml"
    prof.write_text(f"""[run]
name = "bench-rate"
stream_log = false
duration_s = {seconds}

[load]
mode = "rate"
rate_rps = {rps}
arrival = "constant"
max_in_flight = 10000

[target]
embedded = true

[[scenario]]
protocol = "chat"
model = "m"
input_tokens = 64
max_tokens = 4
""", encoding="utf-8")
    return prof


def run_in_memory(prof: Path) -> None:
    """Replay ``prof`` in this process against an instant in-memory target; print the lag."""
    import httpx
    import trio

    from hopbench import _runner
    from hopbench._profile import load_profile
    from hopbench._recorder import ALL, Recorder

    class Body(httpx.AsyncByteStream):
        async def __aiter__(self):  # type: ignore[no-untyped-def]
            for _ in range(4):
                yield _CHUNK
            yield _LAST

        async def aclose(self) -> None:
            pass

    class Instant(httpx.AsyncBaseTransport):
        def __init__(self, **_: object) -> None:
            pass

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            await request.extensions["trace"]("http11.send_request_headers.started", {})
            await trio.lowlevel.checkpoint()
            body = Body()
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=body,
                                  request=request, extensions={"hopbench.body": body})

    _runner.StreamTransport = Instant  # type: ignore[misc]
    text = prof.read_text(encoding="utf-8").replace("embedded = true", 'url = "http://127.0.0.1:9"')
    prof.write_text(text, encoding="utf-8")
    profile = load_profile(prof)
    rec, warm = Recorder(["chat-m"]), Recorder(["chat-m"])
    runner = _runner.LoadRunner(profile, "http://127.0.0.1:9", rec, warm)
    stats = trio.run(runner.run)
    snap = rec.snapshot()
    lag = snap.histogram(ALL, "schedule_lag")
    loop = snap.histogram(ALL, "loop_lag")
    ms = 1e6
    cpu = sum(stats.cpu_fractions) / max(len(stats.cpu_fractions), 1)
    print(f"in memory, {profile.load.mode}: {lag.count} arrivals, {snap.counter('chat-m', 'completed')} completed; schedule lag "
          f"p50 {lag.percentile(50) / ms:.3f} ms, p90 {lag.percentile(90) / ms:.3f} ms, "
          f"p99 {lag.percentile(99) / ms:.3f} ms, p99.9 {lag.percentile(99.9) / ms:.3f} ms, "
          f"max {lag.max / ms:.3f} ms; loop lag p99 {loop.percentile(99) / ms:.3f} ms; client CPU {cpu:.0%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rps", type=float, default=1000.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--in-memory", action="store_true", help="the client alone, against an instant target")
    ap.add_argument("--rate", action="store_true", help="with --in-memory: the same load as mode = \"rate\" too")
    args = ap.parse_args()
    for k in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            prof = write_case(folder, args.rps, args.seconds)
            if args.in_memory:
                run_in_memory(prof)
                if args.rate:
                    run_in_memory(write_rate_case(folder, args.rps, args.seconds))
                continue
            out = folder / "run"
            proc = subprocess.run([sys.executable, "-m", "hopbench", "run", str(prof), "--out", str(out),
                                   "--workers", "1"], cwd=ROOT, capture_output=True, text=True)
            summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
            load = summary["load"]
            lag = summary["scopes"]["all"]["metrics"]["schedule_lag"]
            print(f"run {k + 1}: exit {proc.returncode}; {args.rps:g} requests/s for {args.seconds:g} s: "
                  f"schedule lag p50 {lag['p50']:.3f} ms, p90 {lag['p90']:.3f} ms, p99 {lag['p99']:.3f} ms, "
                  f"p99.9 {lag['p999']:.3f} ms, max {lag['max']:.3f} ms ({lag['count']} arrivals); "
                  f"trace {load['requested_rate_rps']:.1f}/s, sent {load['achieved_rate_rps']:.1f}/s; "
                  f"client CPU {load['cpu_mean']:.0%} of a core, loop lag p99 {load['loop_lag_p99_ms']:.2f} ms; "
                  f"saturated {summary['saturated']}; completed "
                  f"{summary['scopes']['all']['counters'].get('completed', 0)}")


if __name__ == "__main__":
    main()
